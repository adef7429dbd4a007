//! The configuration file: a product's API as tools through configuration alone (the desk
//! fixture), the person's token at the API and nowhere else, and every kind of mistake refused
//! naming its key.

use crate::support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use agent_worker::hosts::WorkerSettings;
use agent_worker::hosts::config::{Configured, Loader};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker::sinks::DynamoEventLog;
use agent_worker_testkit::{BedrockStandIn, DeskApi, Reply, moto};
use support::config_files::*;
use support::{LogCapture, MODEL_ID};

#[tokio::test]
async fn the_desk_is_the_agents_tools_by_configuration_alone_and_the_token_reaches_it_only() {
    let logs = LogCapture::default();
    let _guard = tracing::subscriber::set_default(logs.subscriber(tracing::Level::TRACE));
    let desk = DeskApi::start().await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let folder = Folder::new();
    let path = desk_config(&folder, &desk);
    let configured = Configured::load(&path, &Loader::default()).await.unwrap();
    let names: Vec<&str> = configured.origins.iter().map(|o| o.name.as_str()).collect();
    assert!(
        names.contains(&"listTickets") && names.contains(&"refundTicket"),
        "{names:?}"
    );
    let delete = configured
        .origins
        .iter()
        .find(|o| o.name == "deleteTicket")
        .unwrap();
    assert!(delete.approval.starts_with("denied"), "{delete:?}");

    let table = format!("config-{}", uuid::Uuid::new_v4().simple());
    DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap())
        .create_table()
        .await
        .unwrap();
    let values = HashMap::from([
        ("TABLE_NAME", table.clone()),
        ("MODEL_ID", MODEL_ID.to_owned()),
        ("EVENT_SINKS", "dynamo".to_owned()),
        ("RETRIES", "0".to_owned()),
    ]);
    let settings = WorkerSettings::from_lookup(|name| values.get(name).cloned()).unwrap();
    let (agent, sinks) = settings
        .build(bedrock.client(), moto().dynamodb(), None, &configured)
        .unwrap();
    let handler = TurnHandler::new(agent, sinks);
    let deadline = Some(SystemTime::now() + Duration::from_secs(600));
    let token = DeskApi::token_of("ana");

    bedrock.push(Reply::tool_call("c1", "listTickets", "{}"));
    bedrock.push(Reply::text("Two tickets are open."));
    let answered = handler
        .handle_batch(turn("t1", Some(&token)), deadline)
        .await
        .unwrap();
    assert!(answered.batch_item_failures.is_empty());
    let calls = desk.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        calls[0].authorization.as_deref(),
        Some(format!("Bearer {token}").as_str())
    );
    assert_eq!(
        (calls[0].user.as_deref(), calls[0].account.as_deref()),
        (Some("ana"), Some("acme")),
        "the desk knew the person by the token"
    );
    let requests = bedrock.requests();
    assert!(
        requests[1].body.to_string().contains("Charged twice"),
        "the result reached the model"
    );
    assert!(
        requests[0].body["system"]
            .to_string()
            .contains("help desk's assistant"),
        "the persona is the system prompt"
    );

    // A turn without the person's token sends nothing, and the model is told why.
    bedrock.push(Reply::tool_call("c2", "listTickets", "{}"));
    bedrock.push(Reply::text("I cannot reach the desk."));
    handler.handle_batch(turn("t2", None), deadline).await.unwrap();
    assert_eq!(desk.calls().len(), 1, "nothing was sent without the token");
    assert!(bedrock.requests()[3].body.to_string().contains("userToken"));

    // The token is at the API and nowhere else.
    let events = DynamoEventLog::new(DynamoStore::new(
        moto().dynamodb(),
        DynamoConfig::new(&table).unwrap(),
    ));
    let logged = format!("{:?}", events.read("c-t1", "t1", None).await.unwrap());
    assert!(logged.contains("listTickets"), "the event log has the turn");
    for (place, text) in [
        ("the logs", logs.text()),
        ("the events", logged),
        ("the table", table_text(&table).await),
        ("what the model saw", format!("{:?}", bedrock.requests())),
    ] {
        assert!(!text.contains(&token), "the token is in {place}");
    }
}

/// The problems `yaml` is refused with.
async fn refused(folder: &Folder, yaml: &str) -> Vec<String> {
    let path = folder.write("bad.yaml", yaml);
    Configured::load(&path, &Loader::default())
        .await
        .unwrap_err()
        .problems
}

#[tokio::test]
async fn each_kind_of_mistake_is_refused_naming_its_key() {
    let folder = Folder::new();
    folder.write(
        "desk.openapi.json",
        &serde_json::to_string(&DeskApi::document()).unwrap(),
    );
    let mut broken = DeskApi::document();
    broken["paths"]["/tickets"]["get"]["x-agent"]["effect"] = "selection".into();
    folder.write("broken.json", &broken.to_string());
    let act_as = "actAs: { userIdHeader: x-desk-user }";
    let cases: Vec<(String, &str)> = vec![
        ("tool: [current_time]".into(), "unknown field `tool`"),
        (
            format!("openapi:\n  - document: desk.openapi.json\n    baseurl: http://x\n    {act_as}"),
            "baseurl",
        ),
        (
            "persona: A\nsystemPrompt: B".into(),
            "persona, systemPrompt, systemPromptFile",
        ),
        (
            "systemPromptFile: missing.md".into(),
            "systemPromptFile: missing.md",
        ),
        ("tools: [current_time, rm]".into(), "tools[1]"),
        ("policy:\n  - decision: deny".into(), "policy[0]"),
        ("policy:\n  - tools: x\n    decision: maybe".into(), "decision"),
        (
            "policy:\n  - effect: selection\n    decision: deny".into(),
            "effect",
        ),
        (
            format!("openapi:\n  - document: nowhere.json\n    baseUrl: http://x\n    {act_as}"),
            "openapi[0]: document: nowhere.json",
        ),
        (
            format!("openapi:\n  - document: desk.openapi.json\n    baseUrl: ftp://x\n    {act_as}"),
            "openapi[0]: baseUrl",
        ),
        (
            "openapi:\n  - document: desk.openapi.json\n    baseUrl: http://x\n    actAs: {}".into(),
            "openapi[0]: actAs",
        ),
        (
            format!("openapi:\n  - document: broken.json\n    baseUrl: http://x\n    {act_as}"),
            "openapi[0]: document: operation listTickets",
        ),
        (
            format!(
                "openapi:\n  - document: https://example.com/d.json\n    baseUrl: http://x\n    {act_as}"
            ),
            "openapi[0]: document",
        ),
        ("admit: [everything]".into(), "admit"),
    ];
    for (yaml, named) in cases {
        let problems = refused(&folder, &yaml).await;
        assert!(
            problems.iter().any(|p| p.contains(named)),
            "{yaml:?} should name {named:?}: {problems:?}"
        );
    }
    // Every problem at once, not the first alone.
    let problems = refused(
        &folder,
        "persona: A\nsystemPrompt: B\ntools: [rm]\npolicy:\n  - decision: deny",
    )
    .await;
    assert_eq!(problems.len(), 3, "{problems:?}");
}

#[tokio::test]
async fn the_example_configuration_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config/agent-worker.yaml");
    let configured = Configured::load(&path, &Loader::default())
        .await
        .expect("the README's example loads");
    let approval = |name: &str| {
        configured
            .origins
            .iter()
            .find(|o| o.name == name)
            .map(|o| o.approval.clone())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(approval("current_time"), "no");
    assert_eq!(approval("listTickets"), "no");
    assert_eq!(approval("refundTicket"), "always (declared)");
    assert!(approval("deleteTicket").starts_with("denied"));
    assert!(
        configured
            .system_prompt
            .unwrap()
            .starts_with("You are the help desk's assistant.")
    );
}

#[tokio::test]
async fn the_tools_command_prints_what_a_configuration_yields_or_every_problem() {
    let run = |config: PathBuf| async move {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
            .args(["tools", "--region", "us-east-1", "--config"])
            .arg(config)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output()
            .await
            .expect("the binary runs")
    };
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config/agent-worker.yaml");
    let output = run(example).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let refund = lines.iter().find(|l| l["name"] == "refundTicket").unwrap();
    assert_eq!(refund["source"], "desk.openapi.json");
    assert_eq!(refund["effect"], "transaction");

    let folder = Folder::new();
    let output = run(folder.write("bad.yaml", "tools: [current_time]\npolicy:\n  - decision: deny\n")).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("policy[0]"), "{stderr}");
}

#[tokio::test]
async fn a_configuration_that_gives_no_prompt_is_refused_at_start_unless_one_is_set_beside_it() {
    let folder = Folder::new();
    let build = |yaml: &str, system_prompt: Option<&str>| {
        let path = folder.write("prompted.yaml", yaml);
        let mut values = HashMap::from([
            ("TABLE_NAME", "prompted".to_owned()),
            ("MODEL_ID", MODEL_ID.to_owned()),
        ]);
        if let Some(prompt) = system_prompt {
            values.insert("SYSTEM_PROMPT", prompt.to_owned());
        }
        async move {
            let configured = Configured::load(&path, &Loader::default()).await.unwrap();
            let settings = WorkerSettings::from_lookup(|name| values.get(name).cloned()).unwrap();
            let bedrock = agent_worker_testkit::bedrock_stand_in::client_for("http://127.0.0.1:9");
            settings
                .build(bedrock, moto().dynamodb(), None, &configured)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    let no_prompt = "tools: [current_time]\n";
    let error = build(no_prompt, None).await.unwrap_err();
    assert!(
        error.contains("SYSTEM_PROMPT") && error.contains("persona, systemPrompt or systemPromptFile"),
        "{error}"
    );
    build(no_prompt, Some("You are terse.")).await.unwrap();
    build("persona: You are terse.\n", None).await.unwrap();
    let every_turn =
        "turnPolicy:\n  - when: { accountId: acme }\n    persona: Acme's.\n  - persona: Everyone's.\n";
    build(every_turn, None).await.unwrap();
    let some_turns =
        "turnPolicy:\n  - when: { accountId: acme }\n    persona: Acme's.\n  - tools: [current_time]\n";
    assert!(
        build(some_turns, None).await.is_err(),
        "a turn of another account has no prompt"
    );

    // Issue 53: without a configuration file the same holds (the template's generic default
    // went): no SYSTEM_PROMPT is refused at start, naming both settings.
    let bare = |system_prompt: Option<&str>| {
        let mut values = HashMap::from([
            ("TABLE_NAME", "prompted".to_owned()),
            ("MODEL_ID", MODEL_ID.to_owned()),
        ]);
        if let Some(prompt) = system_prompt {
            values.insert("SYSTEM_PROMPT", prompt.to_owned());
        }
        let settings = WorkerSettings::from_lookup(|name| values.get(name).cloned()).unwrap();
        let bedrock = agent_worker_testkit::bedrock_stand_in::client_for("http://127.0.0.1:9");
        settings
            .build(bedrock, moto().dynamodb(), None, &Configured::default())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let error = bare(None).unwrap_err();
    assert!(
        error.contains("SYSTEM_PROMPT") && error.contains("AGENT_WORKER_CONFIG"),
        "{error}"
    );
    bare(Some("You are terse.")).unwrap();
}

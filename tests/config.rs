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
use agent_worker_testkit::{BedrockStandIn, DeskApi, Reply, moto, sid, tid};
use serde_json::json;
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
async fn a_job_reported_from_another_process_settles_the_call_waiting_for_it() {
    use agent_worker::engine::{BedrockModel, Engine};
    use agent_worker::hosts::config::Loader;
    use agent_worker::protocol::{Agent as _, AgentEvent, Prompt, Scope};
    use agent_worker::session::dynamo::DynamoJobEvents;
    use futures_util::StreamExt as _;

    let desk = DeskApi::start().await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let folder = Folder::new();
    let path = desk_config(&folder, &desk);
    let table = format!("jobs-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let loader = Loader {
        waiter: Some(std::sync::Arc::new(
            DynamoJobEvents::new(store.clone()).poll_every(Duration::from_millis(50)),
        )),
        ..Loader::default()
    };
    let configured = Configured::load(&path, &loader).await.unwrap();
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store.clone())
        .tools(configured.tools.clone())
        .config(support::config())
        .build()
        .unwrap();
    bedrock.push(Reply::tool_call("c1", "exportReport", r#"{"month":"2026-11"}"#));
    bedrock.push(Reply::text("Your report is ready."));
    let scope = Scope::new("c-job".parse().unwrap())
        .with_turn_id(tid("t1"))
        .with("userId", "ana")
        .with("accountId", "acme")
        .with_user_token(agent_worker::protocol::UserToken::new(DeskApi::token_of("ana")));
    let turn = tokio::spawn(async move {
        engine
            .invoke(scope, Prompt::text("Export November's report."))
            .collect::<Vec<AgentEvent>>()
            .await
    });
    let report = desk.next_queued_report().await.unwrap();

    // Another process reports it: `agent-worker report-event`, against the same table.
    let run = |event: &str, payload: serde_json::Value| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"));
        command
            .args([
                "report-event",
                "--event",
                event,
                "--payload",
                &payload.to_string(),
                "--conversation",
                "c-job",
                "--config",
            ])
            .arg(&path)
            .args(["--table", &table, "--region", "us-east-1"])
            .env("AWS_ENDPOINT_URL_DYNAMODB", moto().endpoint())
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_EC2_METADATA_DISABLED", "true");
        command.output()
    };
    let refused = run("ticket:updated", json!({ "ticketId": "T-1" })).await.unwrap();
    assert!(!refused.status.success(), "an event that ends no job is refused");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("ends no job"));
    // Sent again while the call has not begun to wait (a report is taken only once it has).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let reported = run(
            "report:ready",
            json!({ "reportId": report, "url": "https://desk.example/r/1" }),
        )
        .await
        .unwrap();
        if reported.status.success() {
            break;
        }
        let said = String::from_utf8_lossy(&reported.stderr).into_owned();
        assert!(said.contains("is waiting"), "{said}");
        assert!(tokio::time::Instant::now() < deadline, "{said}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let events = tokio::time::timeout(Duration::from_secs(60), turn)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    let result = bedrock.requests()[1].body.to_string();
    assert!(
        result.contains("https://desk.example/r/1"),
        "the call saw the job settle: {result}"
    );
    assert!(result.contains("complete"), "{result}");
}

#[tokio::test]
async fn the_container_takes_a_jobs_event_of_a_waiting_call_and_refuses_one_that_settles_none() {
    use agent_worker::engine::tools::openapi::{EventWaiter as _, JobWait, Settled};
    use agent_worker::hosts::container::ContainerConfig;

    let key = "jobs-test-key-0123456789";
    let declarations = json!({
        "report:ready": { "kind": "completion", "correlation": "reportId" },
        "ticket:updated": { "kind": "other", "correlation": "ticketId" }
    });
    let (table, events, url, stop, served) =
        jobs_host("jobs-http", ContainerConfig::new(key).unwrap(), declarations).await;
    let client = reqwest::Client::new();
    let post = |body: serde_json::Value| client.post(&url).header("x-api-key", key).json(&body).send();
    let ready = |conversation: &str, url: &str| json!({ "event": "report:ready", "conversationId": conversation, "payload": { "reportId": "RP-9", "url": url } });

    // Before any call waits for RP-9, a report of it is refused and kept nowhere (issue 52: a
    // report sent before the job existed settled the job begun later).
    let before = agent_worker_testkit::session_audit::every_item(&table)
        .await
        .unwrap();
    let early = post(ready("conv-ada", "early")).await.unwrap();
    assert_eq!(early.status(), 404);
    assert_eq!(
        agent_worker_testkit::session_audit::every_item(&table)
            .await
            .unwrap(),
        before
    );

    let job = JobWait {
        conversation: sid("conv-ada"),
        completion: "report:ready".into(),
        failure: None,
        correlation: "reportId".into(),
        id: "RP-9".into(),
        timeout: Duration::from_secs(10),
    };
    let waiting = events.wait(&job);
    let reporting = async {
        // The same job id of another conversation is another job, which no call waits for.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let taken = post(ready("conv-ada", "u")).await.unwrap();
            if taken.status() == 202 {
                break;
            }
            assert_eq!(taken.status(), 404, "until the call waits, then 202");
            assert!(
                tokio::time::Instant::now() < deadline,
                "the call never began to wait"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(post(ready("conv-eve", "eve's")).await.unwrap().status(), 404);
    };
    let (settled, ()) = tokio::join!(waiting, reporting);
    assert_eq!(
        settled,
        Settled::Completed(json!({ "reportId": "RP-9", "url": "u" })),
        "a waiting call sees its own conversation's report"
    );
    // Settled, the job is waited for no more: a later report of it settles nothing.
    assert_eq!(post(ready("conv-ada", "again")).await.unwrap().status(), 404);
    for (body, status, why) in [
        (
            json!({ "event": "report:gone", "conversationId": "conv-ada", "payload": { "reportId": "RP-1" } }),
            400,
            "not a declared event",
        ),
        (
            json!({ "event": "ticket:updated", "conversationId": "conv-ada", "payload": { "ticketId": "T-1" } }),
            400,
            "ends no job",
        ),
        (
            json!({ "event": "report:ready", "conversationId": "conv-ada", "payload": { "id": "RP-1" } }),
            400,
            "reportId",
        ),
        (
            json!({ "event": "report:ready", "payload": { "reportId": "RP-1" } }),
            400,
            "conversationId",
        ),
        (
            json!({ "event": "report:ready", "conversationId": "conv-ada",
                    "payload": { "reportId": "RP-9", "blob": "x".repeat(600 * 1024) } }),
            413,
            "at most",
        ),
    ] {
        let refused = post(body).await.unwrap();
        assert_eq!(refused.status(), status, "{why}");
        assert!(refused.text().await.unwrap().contains(why), "{why}");
    }
    let _ = stop.send(());
    served.await.unwrap().unwrap();
}

/// Seed 004: persona or systemPrompt, exactly one. A deployment with a configuration file starts
/// only when a prompt comes from somewhere: the file (its own, or a `turnPolicy` rule for every
/// turn) or `SYSTEM_PROMPT` beside it.
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

/// Issue 52: with people's own tokens, eve's token reported `report:ready` for ada's export and
/// ada's call took eve's payload as its result. Only the backend's credential reports a job's
/// event: a person's token is 403 and the waiting job hears nothing of it; the backend's own
/// token (a configured client id) reports it.
#[tokio::test]
async fn a_persons_token_reports_no_jobs_event() {
    use agent_worker::engine::tools::openapi::{EventWaiter as _, JobWait, Settled};
    use agent_worker::hosts::container::ContainerConfig;
    use agent_worker::hosts::jwt::{AccountFrom, JwtConfig, JwtVerifier};
    use agent_worker_testkit::{JwksStandIn, SigningKey};

    let key = SigningKey::rs256("k-1");
    let issuer = JwksStandIn::start(&[&key]).await.unwrap();
    let mut config = JwtConfig::new(
        issuer.issuer(),
        "app",
        Some(issuer.jwks_url()),
        AccountFrom::Fixed("acme".into()),
    )
    .unwrap();
    config.backend.client_ids = vec!["desk-backend".into()];
    let verifier = JwtVerifier::new(config, reqwest::Client::new());
    let declarations = json!({
        "report:ready": { "kind": "completion", "correlation": "reportId", "failure": "report:failed" },
        "report:failed": { "kind": "failure", "correlation": "reportId" }
    });
    let (table, events, url, stop, served) = jobs_host(
        "jobs-people",
        ContainerConfig::people_by_tokens(std::sync::Arc::new(verifier)),
        declarations,
    )
    .await;
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let eve = key.token(&json!({ "iss": issuer.issuer(), "aud": "app", "sub": "eve", "exp": now + 3600 }));
    // The product's backend, by its own client-credentials token.
    let backend = key.token(&json!({
        "iss": issuer.issuer(), "aud": "app", "sub": "desk-backend@clients", "client_id": "desk-backend",
        "exp": now + 3600,
    }));

    // Ada's call waits for rep-1 (the table holds the job once it does).
    let job = JobWait {
        conversation: sid("conv-ada"),
        completion: "report:ready".into(),
        failure: Some("report:failed".into()),
        correlation: "reportId".into(),
        id: "rep-1".into(),
        timeout: Duration::from_secs(10),
    };
    let waiting = events.wait(&job);
    // A second call waits for rep-2: the report the Cognito token sends settles it (each
    // accepted token settles a job of its own, so no answer depends on when the other settled).
    let job2 = JobWait {
        id: "rep-2".into(),
        ..job.clone()
    };
    let waiting2 = events.wait(&job2);
    let eve_reports = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let holds_job =
            |items: &[std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>]| {
                ["job#rep-1", "job#rep-2"].iter().all(|job| {
                    items
                        .iter()
                        .any(|item| item.get("sk").and_then(|sk| sk.as_s().ok()) == Some(&(*job).to_owned()))
                })
            };
        while !holds_job(
            &agent_worker_testkit::session_audit::every_item(&table)
                .await
                .unwrap(),
        ) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the call never began to wait"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let before = agent_worker_testkit::session_audit::every_item(&table)
            .await
            .unwrap();
        for event in ["report:ready", "report:failed"] {
            let refused = reqwest::Client::new()
                .post(&url)
                .bearer_auth(&eve)
                .json(&json!({ "event": event, "conversationId": "conv-ada",
                               "payload": { "reportId": "rep-1", "url": "https://eve.example" } }))
                .send()
                .await
                .unwrap();
            assert_eq!(refused.status(), 403, "{event}");
        }
        assert_eq!(
            agent_worker_testkit::session_audit::every_item(&table)
                .await
                .unwrap(),
            before
        );
        let taken = reqwest::Client::new()
            .post(&url)
            .bearer_auth(&backend)
            .json(&json!({ "event": "report:ready", "conversationId": "conv-ada",
                           "payload": { "reportId": "rep-1", "url": "https://desk.example/r/1" } }))
            .send()
            .await
            .unwrap();
        assert_eq!(taken.status(), 202, "the backend's token reports");
        // A Cognito client-credentials token names its client and carries no audience.
        let cognito = key.token(&json!({
            "iss": issuer.issuer(), "sub": "desk-backend", "client_id": "desk-backend",
            "token_use": "access", "exp": now + 3600,
        }));
        let eve_without_audience = key.token(
            &json!({ "iss": issuer.issuer(), "sub": "eve", "client_id": "eve-app", "exp": now + 3600 }),
        );
        for (token, status) in [(&eve_without_audience, 401), (&cognito, 202)] {
            let answered = reqwest::Client::new()
                .post(&url)
                .bearer_auth(token)
                .json(&json!({ "event": "report:ready", "conversationId": "conv-ada",
                               "payload": { "reportId": "rep-2", "url": "https://desk.example/r/2" } }))
                .send()
                .await
                .unwrap();
            assert_eq!(answered.status(), status);
        }
    };
    let (settled, settled2, ()) = tokio::join!(waiting, waiting2, eve_reports);
    assert_eq!(
        settled,
        Settled::Completed(json!({ "reportId": "rep-1", "url": "https://desk.example/r/1" })),
        "eve's reports settled nothing; the backend's did"
    );
    assert_eq!(
        settled2,
        Settled::Completed(json!({ "reportId": "rep-2", "url": "https://desk.example/r/2" })),
        "the Cognito client's token reported"
    );
    let _ = stop.send(());
    served.await.unwrap().unwrap();
}

/// A container on a table of its own (named from `prefix`) taking reports of the events
/// `declarations` declares, authenticated as `config` says: the table, the job events (looked
/// for every 50 ms), the reports' URL, and the server with its stop.
async fn jobs_host(
    prefix: &str,
    config: agent_worker::hosts::container::ContainerConfig,
    declarations: serde_json::Value,
) -> (
    String,
    agent_worker::session::dynamo::DynamoJobEvents,
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    use agent_worker::engine::{BedrockModel, Engine};
    use agent_worker::hosts::container::{ContainerHost, serve};
    use agent_worker::hosts::jobs::JobReports;
    use agent_worker::session::dynamo::DynamoJobEvents;

    let table = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store.clone())
        .build()
        .unwrap();
    let events = DynamoJobEvents::new(store.clone()).poll_every(Duration::from_millis(50));
    let host = ContainerHost::builder(
        TurnHandler::new(engine, agent_worker::sinks::Sinks::new()),
        std::sync::Arc::new(store),
        None,
        MODEL_ID,
        config,
    )
    .job_reports(JobReports::new(
        serde_json::from_value(declarations).unwrap(),
        events.clone(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jobs/events", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(serve(listener, host.build(), async move {
        let _ = stopped.await;
    }));
    (table, events, url, stop, served)
}

//! The configuration file: a product's API as tools through configuration alone (the desk
//! fixture), the person's token at the API and nowhere else, and every kind of mistake refused
//! naming its key.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use agent_worker::hosts::WorkerSettings;
use agent_worker::hosts::config::{Configured, Loader};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker::sinks::DynamoEventLog;
use agent_worker_testkit::{BedrockStandIn, DeskApi, Reply, moto};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use serde_json::json;
use support::{LogCapture, MODEL_ID};

/// A folder of its own, removed when dropped.
struct Folder(PathBuf);

impl Folder {
    fn new() -> Self {
        let path =
            std::env::temp_dir().join(format!("agent-worker-config-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The desk's document beside a configuration that makes it the agent's tools.
fn desk_config(folder: &Folder, desk: &DeskApi) -> PathBuf {
    folder.write(
        "desk.openapi.json",
        &serde_json::to_string_pretty(&DeskApi::document()).unwrap(),
    );
    folder.write(
        "agent-worker.yaml",
        &format!(
            "persona: You are the help desk's assistant.\n\
             openapi:\n\
             \x20 - document: desk.openapi.json\n\
             \x20   baseUrl: {}\n\
             \x20   actAs:\n\
             \x20     token: {{ header: Authorization, prefix: 'Bearer ' }}\n\
             \x20     accountIdHeader: x-desk-account\n\
             \x20   events: {}\n\
             policy:\n\
             \x20 - tools: 'delete*'\n\
             \x20   decision: deny\n\
             \x20   reason: Tickets are deleted in the desk itself.\n",
            desk.url(),
            json!({
                "report:ready": { "kind": "completion", "correlation": "reportId", "failure": "report:failed" },
                "report:failed": { "kind": "failure", "correlation": "reportId" },
                "ticket:updated": { "kind": "other", "correlation": "ticketId" }
            })
        ),
    )
}

fn turn(turn_id: &str, user_token: Option<&str>) -> SqsEvent {
    let mut body = json!({
        "turnId": turn_id, "conversationId": format!("c-{turn_id}"), "userId": "ana", "accountId": "acme",
        "content": "Which tickets are open?"
    });
    if let Some(token) = user_token {
        body["userToken"] = token.into();
    }
    let mut record = SqsMessage::default();
    record.message_id = Some(format!("m-{turn_id}"));
    record.body = Some(body.to_string());
    record.event_source_arn = Some("arn:aws:sqs:us-east-1:000000000000:turns".into());
    let mut event = SqsEvent::default();
    event.records = vec![record];
    event
}

/// Every item of `table`, as text.
async fn table_text(table: &str) -> String {
    let scan = moto().dynamodb().scan().table_name(table).send().await.unwrap();
    format!("{:?}", scan.items())
}

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
    let scope = Scope::new("c-job")
        .with_turn_id("t1")
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
    let reported = run(
        "report:ready",
        json!({ "reportId": report, "url": "https://desk.example/r/1" }),
    )
    .await
    .unwrap();
    assert!(
        reported.status.success(),
        "{}",
        String::from_utf8_lossy(&reported.stderr)
    );

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
async fn the_container_takes_a_jobs_event_and_refuses_one_that_settles_none() {
    use agent_worker::engine::tools::openapi::{EventWaiter as _, JobWait, Settled};
    use agent_worker::engine::{BedrockModel, Engine};
    use agent_worker::hosts::container::{ContainerConfig, ContainerHost, serve};
    use agent_worker::hosts::jobs::JobReports;
    use agent_worker::session::dynamo::DynamoJobEvents;

    let table = format!("jobs-http-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store.clone())
        .build()
        .unwrap();
    let declarations = serde_json::from_value(json!({
        "report:ready": { "kind": "completion", "correlation": "reportId" },
        "ticket:updated": { "kind": "other", "correlation": "ticketId" }
    }))
    .unwrap();
    let events = DynamoJobEvents::new(store.clone());
    let key = "jobs-test-key-0123456789";
    let host = ContainerHost::new(
        TurnHandler::new(engine, agent_worker::sinks::Sinks::new()),
        std::sync::Arc::new(store.clone()),
        None,
        MODEL_ID,
        ContainerConfig::new(key).unwrap(),
    )
    .job_reports(JobReports::new(declarations, events.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jobs/events", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(serve(listener, host, async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let post = |body: serde_json::Value| client.post(&url).header("x-api-key", key).json(&body).send();

    let taken = post(json!({ "event": "report:ready", "payload": { "reportId": "RP-9", "url": "u" } }))
        .await
        .unwrap();
    assert_eq!(taken.status(), 202);
    let job = JobWait {
        completion: "report:ready".into(),
        failure: None,
        correlation: "reportId".into(),
        id: "RP-9".into(),
        timeout: Duration::from_secs(5),
    };
    assert_eq!(
        events.wait(&job).await,
        Settled::Completed(json!({ "reportId": "RP-9", "url": "u" })),
        "a waiting call sees it"
    );
    for (body, why) in [
        (
            json!({ "event": "report:gone", "payload": { "reportId": "RP-1" } }),
            "not a declared event",
        ),
        (
            json!({ "event": "ticket:updated", "payload": { "ticketId": "T-1" } }),
            "ends no job",
        ),
        (
            json!({ "event": "report:ready", "payload": { "id": "RP-1" } }),
            "reportId",
        ),
    ] {
        let refused = post(body).await.unwrap();
        assert_eq!(refused.status(), 400);
        assert!(refused.text().await.unwrap().contains(why), "{why}");
    }
    let _ = stop.send(());
    served.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_signed_assertion_of_the_person_reaches_the_api_and_checks_with_the_key() {
    use agent_worker::engine::tools::ToolContext;
    use agent_worker::hosts::config::{Loader, verify_assertion};
    use agent_worker::hosts::secrets::AwsSecrets;

    let desk = DeskApi::start().await.unwrap();
    let secrets = moto().secrets_manager();
    let name = format!("desk-assertion-{}", uuid::Uuid::new_v4().simple());
    let key = "a shared key of at least thirty-two bytes";
    secrets
        .create_secret()
        .name(&name)
        .secret_string(key)
        .send()
        .await
        .unwrap();
    let short = format!("{name}-short");
    secrets
        .create_secret()
        .name(&short)
        .secret_string("too short")
        .send()
        .await
        .unwrap();
    let folder = Folder::new();
    folder.write(
        "desk.openapi.json",
        &serde_json::to_string(&DeskApi::document()).unwrap(),
    );
    let config = |secret: &str| {
        format!(
            "openapi:\n  - document: desk.openapi.json\n    baseUrl: {}\n    actAs:\n      userIdHeader: x-desk-user\n      assertion: {{ header: x-agent-assertion, keySecret: {secret}, ttlSeconds: 60 }}\n    events: {{ \"report:ready\": {{ kind: completion, correlation: reportId }} }}\n",
            desk.url()
        )
    };
    let loader = Loader {
        secrets: Some(std::sync::Arc::new(AwsSecrets::from_clients(
            secrets.clone(),
            moto().ssm(),
        ))),
        ..Loader::default()
    };
    let path = folder.write("asserting.yaml", &config(&name));
    let list = list_tickets(&path, &loader).await;
    let ctx = ctx_of_ana("t-42");
    list.call(json!({}), ctx.clone()).await.unwrap();
    let sent = desk.calls()[0].assertion.clone().expect("the assertion was sent");
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = verify_assertion(key.as_bytes(), &sent, now).unwrap();
    assert_eq!(
        (claims.sub.as_str(), claims.acc.as_str(), claims.turn.as_str()),
        ("ana", "acme", "t-42")
    );
    assert!(claims.exp <= now + 60);
    assert!(verify_assertion(b"another key, also thirty-two bytes long", &sent, now).is_err());

    // A turn that names no account cannot be asserted: nothing is sent, and the model reads why.
    let anonymous = ToolContext {
        account_id: None,
        ..ctx
    };
    let refused = list.call(json!({}), anonymous).await.unwrap_err();
    assert!(
        refused.message.contains("cannot be asserted"),
        "{}",
        refused.message
    );
    assert_eq!(desk.calls().len(), 1);

    // A key too short, or one that cannot be read, stops the start-up naming it.
    let path = folder.write("short.yaml", &config(&short));
    let problems = Configured::load(&path, &loader).await.unwrap_err().problems;
    assert!(
        problems[0].contains("actAs: assertion.keySecret") && problems[0].contains("32"),
        "{problems:?}"
    );
    let path = folder.write("missing.yaml", &config("no-such-secret"));
    let problems = Configured::load(&path, &Loader::default())
        .await
        .unwrap_err()
        .problems;
    assert!(problems[0].contains("assertion.keySecret"), "{problems:?}");

    // The key may be an SSM parameter instead (a SecureString, read decrypted).
    let parameter = format!("/desk/{name}");
    let ssm_key = "another shared key, kept in SSM this time";
    moto()
        .ssm()
        .put_parameter()
        .name(&parameter)
        .value(ssm_key)
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .send()
        .await
        .unwrap();
    let path = folder.write("ssm.yaml", &config(&format!("ssm:{parameter}")));
    let list = list_tickets(&path, &loader).await;
    list.call(json!({}), ctx_of_ana("t-43")).await.unwrap();
    let sent = desk.calls().last().unwrap().assertion.clone().unwrap();
    let claims = verify_assertion(ssm_key.as_bytes(), &sent, now).unwrap();
    assert_eq!(claims.turn, "t-43");
    let path = folder.write("ssm-missing.yaml", &config("ssm:/desk/no-such-parameter"));
    let problems = Configured::load(&path, &loader).await.unwrap_err().problems;
    assert!(
        problems[0].contains("ssm:/desk/no-such-parameter") && problems[0].contains("ParameterNotFound"),
        "{problems:?}"
    );
}

/// The `listTickets` tool of the configuration at `path`.
async fn list_tickets(path: &Path, loader: &Loader) -> std::sync::Arc<dyn agent_worker::engine::Tool> {
    let configured = Configured::load(path, loader).await.unwrap();
    configured
        .tools
        .into_iter()
        .find(|t| t.spec().name == "listTickets")
        .unwrap()
}

fn ctx_of_ana(turn: &str) -> agent_worker::engine::tools::ToolContext {
    agent_worker::engine::tools::ToolContext {
        session: "s".into(),
        turn_id: turn.into(),
        call_id: "c".into(),
        user_id: Some("ana".into()),
        account_id: Some("acme".into()),
        user_token: None,
    }
}

#[tokio::test]
async fn a_configuration_kept_in_ssm_or_s3_loads_with_documents_from_s3_and_names_no_file() {
    use agent_worker::hosts::config::Remote;
    use agent_worker::hosts::secrets::AwsSecrets;

    let desk = DeskApi::start().await.unwrap();
    let (s3, ssm) = (moto().s3(), moto().ssm());
    let bucket = format!("config-{}", uuid::Uuid::new_v4().simple());
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let put = |key: &str, body: String| {
        s3.put_object()
            .bucket(&bucket)
            .key(key)
            .body(body.into_bytes().into())
            .send()
    };
    put("desk.openapi.json", DeskApi::document().to_string())
        .await
        .unwrap();
    let yaml = format!(
        "persona: You are the desk's assistant.\nopenapi:\n  - document: s3://{bucket}/desk.openapi.json\n    baseUrl: {}\n    actAs: {{ userIdHeader: x-desk-user }}\n    events: {{ \"report:ready\": {{ kind: completion, correlation: reportId }} }}\n",
        desk.url()
    );
    let parameter = format!("/agent/{bucket}");
    ssm.put_parameter()
        .name(&parameter)
        .value(&yaml)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .unwrap();
    put("agent-worker.yaml", yaml.clone()).await.unwrap();
    let loader = Loader {
        fetch: Some(std::sync::Arc::new(Remote::new(
            reqwest::Client::new(),
            Some(s3.clone()),
        ))),
        secrets: Some(std::sync::Arc::new(AwsSecrets::from_clients(
            moto().secrets_manager(),
            ssm.clone(),
        ))),
        ..Loader::default()
    };
    for location in [
        format!("ssm:{parameter}"),
        format!("s3://{bucket}/agent-worker.yaml"),
    ] {
        let configured = Configured::load(&location, &loader)
            .await
            .unwrap_or_else(|e| panic!("{location}: {e}"));
        let names: Vec<&str> = configured.origins.iter().map(|o| o.name.as_str()).collect();
        assert!(names.contains(&"listTickets"), "{location}: {names:?}");
        assert!(
            configured
                .system_prompt
                .unwrap()
                .starts_with("You are the desk's assistant.")
        );
        assert_eq!(
            configured.reads,
            [format!("arn:aws:s3:::{bucket}/desk.openapi.json")],
            "what the deployer grants"
        );
    }

    // One read from afar names no file beside it: there is none.
    let local = yaml.replace(&format!("s3://{bucket}/"), "") + "systemPromptFile: prompt.md\n";
    put("local.yaml", local).await.unwrap();
    let error = Configured::load(format!("s3://{bucket}/local.yaml"), &loader)
        .await
        .unwrap_err();
    assert_eq!(error.problems.len(), 2, "{error}");
    assert!(error.problems[0].starts_with("systemPromptFile:"), "{error}");
    assert!(
        error.problems[1].starts_with("openapi[0].document: desk.openapi.json is a file"),
        "{error}"
    );
    let missing = Configured::load("ssm:/agent/no-such-parameter", &loader)
        .await
        .unwrap_err();
    assert!(missing.to_string().contains("ParameterNotFound"), "{missing}");
}

#[tokio::test]
async fn a_secret_store_that_never_answers_fails_the_read_instead_of_holding_start_up() {
    use agent_worker::hosts::headers::SecretSource as _;
    use agent_worker::hosts::secrets::{AwsSecrets, secrets_manager_client, ssm_client};
    use aws_sdk_secretsmanager::config::{Credentials, Region, SharedCredentialsProvider};

    // A server that takes each connection and never says a word.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let aws = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(format!("http://{address}"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "silent", "silent", None, None, "test",
        )))
        .build();
    let wait = std::time::Duration::from_millis(300);
    let secrets = AwsSecrets::from_clients(secrets_manager_client(&aws, wait), ssm_client(&aws, wait));
    for id in ["desk-assertion-key", "ssm:/desk/key"] {
        let error = tokio::time::timeout(std::time::Duration::from_secs(20), secrets.secret(id))
            .await
            .expect("the read ended by its own timeout")
            .unwrap_err()
            .to_string();
        assert!(
            error.to_lowercase().contains("timeout") || error.contains("timed out"),
            "{id}: {error}"
        );
    }
    held.abort();
}

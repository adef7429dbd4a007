//! Jobs by configuration: a job's event reported from another process (or over the container's
//! HTTP route) settles the call waiting for it, and only the product's backend may report one.

use crate::support;

use agent_worker::hosts::config::Configured;
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::session::{DynamoConfig, DynamoStore};
use std::time::{Duration, SystemTime};

use agent_worker_testkit::{BedrockStandIn, DeskApi, Reply, moto, sid, tid};
use serde_json::json;
use support::MODEL_ID;
use support::config_files::*;

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
/// Issue 52: with people's own tokens, eve's token reported `report:ready` for ada's export and
/// ada's call took eve's payload as its result. Only the backend's credential reports a job's
/// event: a person's token is 403 and the waiting job hears nothing of it; the backend's own
/// token (a configured client id) reports it.
#[tokio::test]
async fn a_persons_token_reports_no_jobs_event() {
    use agent_worker::engine::tools::openapi::{EventWaiter as _, JobWait, Settled};
    use agent_worker::hosts::container::ContainerConfig;
    use agent_worker::hosts::jwt::JwtVerifier;
    use support::container::token_issuer;

    let (key, issuer, mut config) = token_issuer("k-1", "app", "acme").await;
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
    use agent_worker::hosts::container::ContainerHost;
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
    let served = tokio::spawn(crate::support::openapi::serve_checked(
        listener,
        host.build(),
        async move {
            let _ = stopped.await;
        },
    ));
    (table, events, url, stop, served)
}

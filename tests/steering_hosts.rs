//! Steering a running turn through the hosts: a command on the queue (the Lambda handler), the
//! command line as another process, and the container host's HTTP routes; on moto and the
//! Bedrock stand-in.

use crate::support;
use agent_worker::session::{HistoryStore as _, SignalStore as _};

use agent_worker_testkit::{sid, tid};
use std::sync::Arc;
use std::time::Duration;

use agent_worker::engine::EngineConfig;
use agent_worker::protocol::AgentEvent;
use agent_worker::protocol::control::refusals;
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::{Reply, moto};
use serde_json::{Value, json};
use support::steering::*;

/// An SQS record of `body`, as Lambda hands it over.
fn record(id: &str, body: Value) -> aws_lambda_events::event::sqs::SqsMessage {
    let mut record = aws_lambda_events::event::sqs::SqsMessage::default();
    record.message_id = Some(id.into());
    record.body = Some(body.to_string());
    record.event_source_arn = Some("arn:aws:sqs:us-east-1:000000000000:turns.fifo".into());
    record
}

/// Runs one batch of `records` through `handler`; the ids of the records it returned.
async fn batch(
    handler: &agent_worker::hosts::lambda::TurnHandler,
    records: Vec<aws_lambda_events::event::sqs::SqsMessage>,
) -> Vec<String> {
    let deadline = std::time::SystemTime::now() + Duration::from_secs(600);
    support::run_batch(handler, records, Some(deadline)).await
}

#[tokio::test]
async fn a_command_on_the_queue_reaches_the_running_turn_and_one_that_finds_none_runs_as_a_turn() {
    use agent_worker::engine::StoreControl;
    use agent_worker::hosts::lambda::TurnHandler;
    use agent_worker::sinks::Sinks;
    let d = deployment(usize::MAX, ONLY_AT_BOUNDARIES).await;
    d.bedrock.push(Reply::tool_call("c1", "wait_for_go", "{}"));
    d.bedrock.push(Reply::text("In metric."));
    let turn = d.start("s-sqs", "t1", "How far?");
    d.tool_started.notified().await;
    // Another instance's handler, reading the queue.
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(d.table.clone()).unwrap());
    let handler =
        TurnHandler::new(d.sender.clone(), Sinks::new()).control(StoreControl::new(Arc::new(store.clone())));
    let message = |turn_id: &str, user: &str, content: &str, command: &str| {
        json!({"turnId": turn_id, "conversationId": "s-sqs", "userId": user, "accountId": "a",
            "content": content, "command": command})
    };
    let returned = batch(
        &handler,
        vec![
            record("m1", message("c-1", "u", "Use metric.", "steer")),
            record("m2", message("c-2", "mallory", "", "abort")),
        ],
    )
    .await;
    assert_eq!(
        returned,
        ["m2"],
        "another person's abort is not taken, and goes on to the DLQ"
    );
    // Before the turn goes on, the table holds the steer and no stop.
    let signals = store.turn_signals(&sid("s-sqs"), &tid("t1")).await.unwrap();
    assert_eq!((signals.stop, signals.commands.len()), (None, 1));
    d.go.notify_one();
    let events = turn.await.unwrap();
    assert_eq!(delivered(&events), [("steer".to_owned(), 0)]);
    assert_eq!(last_message_texts(&d.bedrock.requests()[1].body), ["Use metric."]);

    // No turn runs now: a follow-up runs as a turn of its own, an abort has nothing to do.
    d.bedrock.push(Reply::text("In miles, too."));
    let returned = batch(
        &handler,
        vec![
            record("m3", message("c-3", "u", "And in miles?", "follow_up")),
            record("m4", message("c-4", "u", "", "abort")),
        ],
    )
    .await;
    assert!(returned.is_empty(), "{returned:?}");
    assert_eq!(d.bedrock.requests().len(), 3);
    let history = d.store.load_history(&sid("s-sqs")).await.unwrap();
    assert_eq!(history.len(), 6, "{history:?}");
}

/// `agent-worker steer|follow-up|abort|state` on the table, as another process.
async fn cli(table: &str, args: &[&str]) -> (bool, Value) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
        .args(args)
        .args(["--table", table, "--region", "us-east-1"])
        .env("AWS_ENDPOINT_URL_DYNAMODB", moto().endpoint())
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let answer = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|_| panic!("{stdout}{}", String::from_utf8_lossy(&output.stderr)));
    (output.status.success(), answer)
}

#[tokio::test]
async fn the_command_line_steers_and_aborts_a_turn_another_process_runs() {
    let d = deployment(usize::MAX, Duration::from_millis(20)).await;
    d.bedrock.push(Reply::tool_call("c1", "wait_for_go", "{}"));
    d.bedrock.push(Reply::text("Fine."));
    let turn = d.start("s-cli", "t1", "Go?");
    d.tool_started.notified().await;
    let (ok, state) = cli(&d.table, &["state", "--session", "s-cli"]).await;
    assert!(ok);
    assert_eq!(
        (&state["status"], &state["activeRunId"]),
        (&json!("running"), &json!("t1"))
    );
    let (ok, answer) = cli(&d.table, &["steer", "--session", "s-cli", "--text", "Hurry."]).await;
    assert!(ok, "{answer}");
    assert_eq!(answer, json!({"ok": true, "runId": "t1"}));
    let (ok, answer) = cli(&d.table, &["abort", "--session", "s-cli"]).await;
    assert!(ok, "{answer}");
    d.go.notify_one();
    let events = turn.await.unwrap();
    assert_eq!(terminals(&events), 1);
    match events.last() {
        Some(AgentEvent::Completed { data: Some(data) }) => assert_eq!(data["stopReason"], "user_stop"),
        other => panic!("{other:?}"),
    }
    let (ok, answer) = cli(&d.table, &["follow-up", "--session", "s-cli", "--text", "More?"]).await;
    assert!(!ok, "refused, and the exit code says so");
    assert_eq!(answer["error"]["code"], refusals::NO_ACTIVE_RUN);
}

/// The container host's control plane over HTTP, on moto and the stand-in.
mod over_http {
    use super::*;
    use agent_worker_testkit::StreamScript;
    use support::container::{KEY, events, post, server, turn};

    async fn get_state(url: &str, query: &str) -> (u16, Value) {
        let response = reqwest::Client::new()
            .get(format!("{url}/sessions/conv-1/state?{query}"))
            .header("x-api-key", KEY)
            .send()
            .await
            .unwrap();
        (
            response.status().as_u16(),
            response.json().await.unwrap_or(Value::Null),
        )
    }

    #[tokio::test]
    async fn commands_reach_the_running_turn_behind_the_key_and_the_owner_check() {
        let quick = EngineConfig {
            stop_poll_interval: Duration::from_millis(20),
            stop_poll_idle: Duration::from_millis(20),
            stop_grace: Duration::from_millis(50),
            ..support::config()
        };
        let server = server(4, quick, Duration::from_secs(5)).await;
        // An answer that starts and then waits: the turn stays running.
        server
            .bedrock
            .push(StreamScript::new().open_text("Thinking").hang().into_reply());
        let (status, _) = post(
            &format!("{}/turns", server.url),
            Some(KEY),
            &turn("t1", "conv-1").to_string(),
        )
        .await;
        assert_eq!(status, 202);
        let commands = format!("{}/sessions/conv-1/commands?userId=u&accountId=a", server.url);

        // The turn runs once its model has been asked: the state is what a client reads.
        tokio::time::timeout(Duration::from_secs(20), server.bedrock.requested(1))
            .await
            .expect("the turn started");
        let (status, state) = get_state(&server.url, "userId=u&accountId=a").await;
        assert_eq!(status, 200, "{state}");
        assert_eq!(
            (&state["status"], &state["activeRunId"]),
            (&json!("running"), &json!("t1"))
        );
        let (status, answer) = post(&commands, Some(KEY), r#"{"type": "steer", "prompt": "Shorter."}"#).await;
        assert_eq!((status, &answer), (202, &json!({"ok": true, "runId": "t1"})));
        let (_, state) = get_state(&server.url, "userId=u&accountId=a").await;
        assert_eq!(state["commands"], json!({"steering": 1, "followUp": 0}));

        // Someone else's conversation is not there; a command without the key is not heard.
        let (status, _) = post(
            &format!(
                "{}/sessions/conv-1/commands?userId=mallory&accountId=a",
                server.url
            ),
            Some(KEY),
            r#"{"type": "abort"}"#,
        )
        .await;
        assert_eq!(status, 404);
        assert_eq!(post(&commands, None, r#"{"type": "abort"}"#).await.0, 401);
        // Neither was kept: the turn has its one steer and no stop.
        let signals = server
            .store
            .turn_signals(&sid("conv-1"), &tid("t1"))
            .await
            .unwrap();
        assert_eq!((signals.stop, signals.commands.len()), (None, 1));
        let (status, answer) = post(&commands, Some(KEY), r#"{"type": "steer"}"#).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (400, &json!("invalid_command"))
        );

        let (status, answer) = post(&commands, Some(KEY), r#"{"type": "abort"}"#).await;
        assert_eq!((status, &answer["ok"]), (202, &json!(true)));
        let all = events(&server, "t1", None).await;
        let last = &all.last().unwrap().1;
        assert_eq!(
            (&last["type"], &last["data"]["stopReason"]),
            (&json!("completed"), &json!("user_stop")),
            "{all:?}"
        );
        // The durable history, from a cursor.
        let entries: Value = reqwest::Client::new()
            .get(format!(
                "{}/sessions/conv-1/entries?since=0&limit=1&userId=u&accountId=a",
                server.url
            ))
            .header("x-api-key", KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(entries["next"], 1, "{entries}");
        assert_eq!(entries["entries"][0]["seq"], 0);
        assert_eq!(entries["entries"][0]["turnId"], "t1");
        assert_eq!(entries["entries"][0]["message"]["role"], "user");
        let (status, answer) = post(
            &commands,
            Some(KEY),
            r#"{"type": "follow_up", "prompt": "More?"}"#,
        )
        .await;
        assert_eq!(status, 409, "{answer}");
        assert_eq!(
            answer,
            json!({"ok": false, "error": {"code": "no_active_run", "message": "session conv-1 has no running turn to take the command; send a turn instead", "retryable": true}})
        );
    }
}

#[tokio::test]
async fn send_puts_a_command_in_the_conversations_control_group_so_its_running_turn_does_not_hold_it() {
    let sqs = moto().sqs();
    let name = format!("commands-{}.fifo", uuid::Uuid::new_v4().simple());
    let queue = sqs
        .create_queue()
        .queue_name(&name)
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
        .args([
            "send",
            "--queue-url",
            &queue,
            "--session",
            "s-q",
            "--text",
            "Shorter.",
        ])
        .args(["--command", "steer", "--region", "us-east-1"])
        .env("AWS_ENDPOINT_URL_SQS", moto().endpoint())
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let received = sqs
        .receive_message()
        .queue_url(&queue)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId)
        .send()
        .await
        .unwrap();
    let message = &received.messages()[0];
    let group = message
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId))
        .cloned();
    assert_eq!(group.as_deref(), Some("s-q#control"));
    let body: Value = serde_json::from_str(message.body().unwrap()).unwrap();
    assert_eq!(
        (&body["command"], &body["content"]),
        (&json!("steer"), &json!("Shorter."))
    );
}

//! The serverless path on real wire APIs for what a turn names: the Standard Agent it asks for, a
//! conversation that belongs to another person (on the function and the poller), and one its person
//! deleted.

use crate::support;
use agent_worker::session::{HistoryStore as _, TurnLedger as _};

use agent_worker_testkit::{sid, tid};
use std::collections::HashMap;
use std::time::Duration;

use agent_worker::hosts::lambda::{RedriveBackoff, Requeue, TurnHandler};
use agent_worker::hosts::sqs_poller::{PollOptions, poll_queue};
use agent_worker::protocol::AgentEvent;
use agent_worker::session::{Claim, Lease};
use agent_worker::sinks::DynamoEventLog;
use agent_worker_testkit::{Reply, moto};
use serde_json::json;
use support::lambda_batch::*;

/// Settings as the function reads them, with `AGENTS_DIR` holding the approval gate.
fn agent_settings(world: &World, folder: &std::path::Path) -> agent_worker::hosts::WorkerSettings {
    let values: HashMap<&str, String> = HashMap::from([
        ("TABLE_NAME", world.table.clone()),
        ("MODEL_ID", MODEL_ID.to_owned()),
        ("AGENTS_DIR", folder.display().to_string()),
        ("EVENT_SINKS", "dynamo".to_owned()),
        ("RETRIES", "0".to_owned()),
    ]);
    agent_worker::hosts::WorkerSettings::from_lookup(|name| values.get(name).cloned()).unwrap()
}
use support::MODEL_ID;

#[tokio::test]
async fn the_function_runs_the_standard_agent_a_turn_names_and_resumes_it_on_another_worker() {
    let world = World::new().await;
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents");
    let folder = std::env::temp_dir().join(format!("gate-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(folder.join("agents")).unwrap();
    std::fs::create_dir_all(folder.join("prompts")).unwrap();
    for file in ["agents/approval_gate.json", "prompts/approval_presenter.yaml"] {
        std::fs::copy(examples.join(file), folder.join(file)).unwrap();
    }
    let worker = || async {
        let (agent, sinks) = agent_settings(&world, &folder)
            .build(
                world.bedrock.client(),
                moto().dynamodb(),
                None,
                &agent_worker::hosts::config::Configured::default(),
            )
            .unwrap();
        TurnHandler::new(agent, sinks)
    };
    let with_agent = |turn: &str, text: &str, agent: &str| {
        let mut payload: serde_json::Value = serde_json::from_str(&body(turn, "gate-7", text)).unwrap();
        payload["agent"] = agent.into();
        payload.to_string()
    };
    let log = DynamoEventLog::new(world.store());
    let terminal = |events: Vec<agent_worker::sinks::LoggedEvent>| events.last().unwrap().event.clone();

    world.bedrock.push(Reply::text("Approve deleting the bucket?"));
    let first = worker().await;
    let response = first
        .handle_batch(
            batch(vec![record(
                "m-1",
                &with_agent("turn-1", "Delete the bucket.", "approval_gate"),
            )]),
            None,
        )
        .await
        .unwrap();
    assert!(
        response.batch_item_failures.is_empty(),
        "{:?}",
        log.read("gate-7", "turn-1", None).await.unwrap()
    );
    match terminal(log.read("gate-7", "turn-1", None).await.unwrap()) {
        AgentEvent::Completed { data: Some(data) } => assert_eq!(data["sessionStatus"], "awaiting_human"),
        other => panic!("{other:?}"),
    }

    world.bedrock.push(Reply::tool_call(
        "c1",
        "record_decision",
        r#"{"decision":"approved"}"#,
    ));
    let second = worker().await;
    let response = second
        .handle_batch(
            batch(vec![record(
                "m-2",
                &with_agent("turn-2", "Yes, go ahead.", "approval_gate"),
            )]),
            None,
        )
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    match terminal(log.read("gate-7", "turn-2", None).await.unwrap()) {
        AgentEvent::Completed { data: Some(data) } => {
            assert_eq!(data["sessionStatus"], "completed");
            assert_eq!(data["end"]["message"], "approved");
        }
        other => panic!("{other:?}"),
    }

    // A turn naming an agent the folder does not define is bad input: the client is told, and
    // the message goes back to the queue, to end in its dead-letter queue.
    let response = second
        .handle_batch(
            batch(vec![record("m-3", &with_agent("turn-3", "Hi", "nobody"))]),
            None,
        )
        .await
        .unwrap();
    assert_eq!(response.batch_item_failures.len(), 1);
    assert_eq!(response.batch_item_failures[0].item_identifier, "m-3");
    match terminal(log.read("gate-7", "turn-3", None).await.unwrap()) {
        AgentEvent::Failed {
            code: Some(code),
            retryable: false,
            ..
        } => assert_eq!(code, "invalid_prompt"),
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&folder);
}

fn turn_of(turn_id: &str, session: &str, user: &str, account: &str, text: &str) -> String {
    json!({"turnId": turn_id, "conversationId": session, "userId": user, "accountId": account, "content": text})
        .to_string()
}

#[tokio::test]
async fn a_turn_of_another_persons_conversation_runs_nothing_and_goes_towards_the_dlq() {
    let world = World::new().await;
    let handler = world.handler();
    world.bedrock.push(Reply::text("Hello Ada."));
    let first = handler
        .handle_batch(
            batch(vec![record("m1", &turn_of("t1", "c-ada", "ada", "acme", "Hi"))]),
            in_an_hour(),
        )
        .await
        .unwrap();
    assert!(failures(&first).is_empty());
    // Someone else, then Ada under another account: neither runs.
    let others = vec![
        record(
            "m2",
            &turn_of("t2", "c-ada", "mallory", "acme", "Show me her messages"),
        ),
        record("m3", &turn_of("t3", "c-ada", "ada", "evil-corp", "And now?")),
    ];
    let response = handler.handle_batch(batch(others), in_an_hour()).await.unwrap();
    assert_eq!(
        failures(&response),
        ["m2", "m3"],
        "never to succeed: towards the DLQ"
    );
    assert_eq!(world.bedrock.requests().len(), 1, "no model call for them");
    let store = world.store();
    assert_eq!(
        store.load_history(&sid("c-ada")).await.unwrap().len(),
        2,
        "nothing of theirs stored"
    );
    let log = DynamoEventLog::new(world.store());
    for turn in ["t2", "t3"] {
        let logged = log.read("c-ada", turn, None).await.unwrap();
        assert!(
            logged.is_empty(),
            "{turn}: no event to the conversation's sinks: {logged:?}"
        );
        assert_eq!(
            store
                .claim_turn(&sid("c-ada"), &tid(turn), Lease(Duration::from_secs(1)))
                .await
                .unwrap(),
            Claim::Claimed { reclaimed: false },
            "{turn} was never claimed"
        );
    }
    // Ada goes on.
    world.bedrock.push(Reply::text("Still here."));
    let again = handler
        .handle_batch(
            batch(vec![record(
                "m4",
                &turn_of("t4", "c-ada", "ada", "acme", "Again"),
            )]),
            in_an_hour(),
        )
        .await
        .unwrap();
    assert!(failures(&again).is_empty());
    assert_eq!(store.load_history(&sid("c-ada")).await.unwrap().len(), 4);
}

#[tokio::test]
async fn the_poller_sends_a_turn_of_another_persons_conversation_to_the_dlq() {
    let world = World::new().await;
    world.bedrock.push(Reply::text("Hello Ada."));
    let sqs = moto().sqs();
    let (url, dlq) = queue(&sqs, 2).await;
    let options = PollOptions {
        until_empty: true,
        wait: Duration::from_secs(1),
        ..PollOptions::default()
    };
    let at_once = RedriveBackoff::new(Duration::ZERO, Duration::ZERO).unwrap();
    let handler = world.handler().requeue(Requeue::new(sqs.clone(), at_once));
    // Ada's turn first, so that the conversation is hers; then someone else's.
    for (turn, user) in [("t1", "ada"), ("t2", "mallory")] {
        sqs.send_message()
            .queue_url(&url)
            .message_body(turn_of(turn, "c-ada", user, "acme", "Hi"))
            .send()
            .await
            .unwrap();
        poll_queue(&sqs, &url, &handler, &options, std::future::pending())
            .await
            .unwrap();
    }
    let dead_turns: Vec<String> = dead_letters(&sqs, &dlq)
        .await
        .iter()
        .filter_map(|body| serde_json::from_str::<serde_json::Value>(body).ok())
        .map(|b| b["turnId"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(dead_turns, ["t2"]);
    assert_eq!(world.bedrock.requests().len(), 1);
    assert_eq!(world.store().load_history(&sid("c-ada")).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_turn_of_a_deleted_conversation_runs_nothing_and_is_acknowledged() {
    use agent_worker::conversations::Conversations;
    use agent_worker::session::Owner;
    let world = World::new().await;
    let handler = world.handler();
    world.bedrock.push(Reply::text("Hello Ada."));
    let first = handler
        .handle_batch(
            batch(vec![record("m1", &turn_of("t1", "c-ada", "ada", "acme", "Hi"))]),
            in_an_hour(),
        )
        .await
        .unwrap();
    assert!(failures(&first).is_empty());
    let deleted = Conversations::new(world.store())
        .delete(&Owner::new("ada", "acme"), "c-ada")
        .await
        .unwrap();
    assert_eq!(deleted.messages, 2);
    // A late delivery (a duplicate of the first turn, or a turn sent before the delete): it can
    // never run, and nothing is lost by dropping it, so the queue is not asked to keep it.
    let late = vec![
        record("m1", &turn_of("t1", "c-ada", "ada", "acme", "Hi")),
        record("m2", &turn_of("t2", "c-ada", "ada", "acme", "Still there?")),
    ];
    let response = handler.handle_batch(batch(late), in_an_hour()).await.unwrap();
    assert!(failures(&response).is_empty(), "acknowledged: {response:?}");
    assert_eq!(
        world.bedrock.requests().len(),
        1,
        "no model call after the delete"
    );
    assert!(
        world
            .store()
            .load_history(&sid("c-ada"))
            .await
            .unwrap()
            .is_empty()
    );
    let log = DynamoEventLog::new(world.store());
    for turn in ["t1", "t2"] {
        assert!(
            log.read("c-ada", turn, None).await.unwrap().is_empty(),
            "{turn}: nothing logged"
        );
    }
}

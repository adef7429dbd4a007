//! The serverless path on real wire APIs: SQS and DynamoDB on moto's server, Bedrock on the
//! stand-in, the real Lambda handler in between.

use crate::support;
use agent_worker::session::{HistoryStore as _, TurnLedger as _};

use agent_worker_testkit::{sid, tid};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::lambda::{RedriveBackoff, Requeue, TurnHandler};
use agent_worker::hosts::sqs_poller::{PollOptions, poll_queue};
use agent_worker::protocol::conformance::{Case, Hanging, Pair, Rule, Subject, check};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::history::check as check_history;
use agent_worker::session::{Claim, DynamoConfig, DynamoStore, Lease, TurnStatus};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::{BedrockStandIn, Reply, StreamScript, moto};
use futures_util::StreamExt;
use support::lambda_batch::*;
use support::{MODEL_ID, config};

#[tokio::test]
async fn a_turn_goes_from_sqs_through_the_handler_into_dynamodb() {
    let world = World::new().await;
    world.bedrock.push(Reply::tool_call("t1", "current_time", "{}"));
    world.bedrock.push(
        StreamScript::new()
            .text(&"It is noon. ".repeat(400), 60)
            .stop("end_turn")
            .into_reply(),
    );
    let sqs = moto().sqs();
    let (url, _) = queue(&sqs, 5).await;
    sqs.send_message()
        .queue_url(&url)
        .message_body(body("turn-1", "conv-1", "What time is it?"))
        .send()
        .await
        .unwrap();

    let stats = poll_queue(
        &sqs,
        &url,
        &world.handler(),
        &PollOptions {
            until_empty: true,
            wait: Duration::from_secs(1),
            ..PollOptions::default()
        },
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!((stats.received, stats.deleted, stats.failed), (1, 1, 0));
    assert_eq!(world.bedrock.requests().len(), 2);

    let store = world.store();
    let history = store.load_history(&sid("conv-1")).await.unwrap();
    assert_eq!(history.len(), 4);
    check_history(&history).unwrap();
    assert_eq!(
        store
            .turn(&sid("conv-1"), &tid("turn-1"))
            .await
            .unwrap()
            .unwrap()
            .status,
        TurnStatus::Completed
    );

    // The event log holds every event, the long answer coalesced into a few items.
    let log = DynamoEventLog::new(store);
    let logged = log.read("conv-1", "turn-1", None).await.unwrap();
    let kinds: Vec<&str> = logged.iter().map(|l| l.event.type_name()).collect();
    assert_eq!(kinds.first(), Some(&"tool_started"));
    assert_eq!(kinds.last(), Some(&"completed"));
    let texts = kinds.iter().filter(|k| **k == "text").count();
    assert!(
        (2..=4).contains(&texts),
        "4800 characters of text in {texts} items: {kinds:?}"
    );
    // A cursor reads only what came after it.
    let after = log.read("conv-1", "turn-1", Some(logged[1].seq)).await.unwrap();
    assert_eq!(after.len(), logged.len() - 2);
    assert_eq!(after[0].seq, logged[2].seq);
}

#[tokio::test]
async fn the_same_turn_delivered_ten_times_at_once_runs_once() {
    let world = World::new().await;
    // A slow answer, so the deliveries overlap the one that runs.
    world.bedrock.push(
        StreamScript::new()
            .text("Only once.", 5)
            .stop("end_turn")
            .chunk_delay(Duration::from_millis(20))
            .into_reply(),
    );
    let handler = Arc::new(world.handler());
    let the_body = body("turn-1", "conv-1", "Hi");
    let deliveries = (0..10).map(|i| {
        let handler = handler.clone();
        let event = batch(vec![record(&format!("m{i}"), &the_body)]);
        tokio::spawn(async move { handler.handle_batch(event, in_an_hour()).await.unwrap() })
    });
    let responses: Vec<_> = futures_util::future::join_all(deliveries)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(world.bedrock.requests().len(), 1, "the stand-in served one turn");
    // Each delivery is either acknowledged or returned to the queue, never anything else.
    for (i, response) in responses.iter().enumerate() {
        let failed = failures(response);
        assert!(failed.is_empty() || failed == [format!("m{i}")], "{failed:?}");
    }
    assert!(
        responses.iter().any(|r| r.batch_item_failures.is_empty()),
        "the one that ran is acknowledged"
    );

    // What was returned to the queue comes back after the turn ended: acknowledged, not run.
    let again = handler
        .handle_batch(batch(vec![record("m10", &the_body)]), in_an_hour())
        .await
        .unwrap();
    assert!(again.batch_item_failures.is_empty());
    assert_eq!(world.bedrock.requests().len(), 1);
    assert_eq!(world.store().load_history(&sid("conv-1")).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_mixed_batch_reports_exactly_the_malformed_record() {
    let world = World::new().await;
    world.bedrock.push(Reply::text("First."));
    world.bedrock.push(Reply::text("Second."));
    let handler = world.handler();
    // turn-0 ran before: its redelivery is a duplicate.
    handler
        .handle_batch(
            batch(vec![record("m0", &body("turn-0", "conv-0", "Hi"))]),
            in_an_hour(),
        )
        .await
        .unwrap();

    let response = handler
        .handle_batch(
            batch(vec![
                record("valid", &body("turn-1", "conv-1", "Hello")),
                record(
                    "malformed",
                    r#"{"turnId":"turn-2","conversationId":"conv-2","content":"no user"}"#,
                ),
                record("duplicate", &body("turn-0", "conv-0", "Hi")),
            ]),
            in_an_hour(),
        )
        .await
        .unwrap();
    assert_eq!(failures(&response), ["malformed"]);
    assert_eq!(world.bedrock.requests().len(), 2);
    assert_eq!(world.store().load_history(&sid("conv-1")).await.unwrap().len(), 2);
}

#[tokio::test]
async fn on_a_fifo_queue_a_failure_holds_back_the_rest_of_its_group() {
    let world = World::new().await;
    world.bedrock.push(Reply::text("Group B ran."));
    let in_group = |id: &str, group: &str, body: &str| {
        let mut r = record(id, body);
        r.attributes = HashMap::from([("MessageGroupId".to_owned(), group.to_owned())]);
        r.event_source_arn = Some("arn:aws:sqs:us-east-1:000000000000:turns.fifo".into());
        r
    };
    let response = world
        .handler()
        .handle_batch(
            batch(vec![
                in_group("a1", "conv-a", "not json"),
                in_group("b1", "conv-b", &body("turn-b1", "conv-b", "Hi")),
                in_group("a2", "conv-a", &body("turn-a2", "conv-a", "Hi")),
            ]),
            in_an_hour(),
        )
        .await
        .unwrap();
    let mut failed = failures(&response);
    failed.sort();
    assert_eq!(failed, ["a1", "a2"]);
    assert_eq!(world.bedrock.requests().len(), 1, "a2 did not run out of order");
}

#[tokio::test]
async fn a_poison_message_lands_in_the_dlq_and_nothing_else_is_lost() {
    let world = World::new().await;
    world.bedrock.push(Reply::text("One."));
    world.bedrock.push(Reply::text("Two."));
    let sqs = moto().sqs();
    let (url, dlq) = queue(&sqs, 2).await;
    for message in [
        body("turn-1", "conv-1", "Hi"),
        "{poison".to_owned(),
        body("turn-2", "conv-2", "Hi"),
    ] {
        sqs.send_message()
            .queue_url(&url)
            .message_body(message)
            .send()
            .await
            .unwrap();
    }
    let options = PollOptions {
        until_empty: true,
        wait: Duration::from_secs(1),
        ..PollOptions::default()
    };
    // The queue hides a received message for 60 s; the handler's requeue returns the poison
    // message at once, so it is tried again within the poll.
    let at_once = RedriveBackoff::new(Duration::ZERO, Duration::ZERO).unwrap();
    let handler = world.handler().requeue(Requeue::new(sqs.clone(), at_once));
    let stats = poll_queue(&sqs, &url, &handler, &options, std::future::pending())
        .await
        .unwrap();
    assert_eq!(stats.deleted, 2);
    assert_eq!(
        stats.failed, 2,
        "the poison message was tried maxReceiveCount times"
    );

    assert_eq!(dead_letters(&sqs, &dlq).await, ["{poison"]);
    let store = world.store();
    assert_eq!(store.load_history(&sid("conv-1")).await.unwrap().len(), 2);
    assert_eq!(store.load_history(&sid("conv-2")).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_worker_killed_mid_turn_is_taken_over_after_its_lease_and_the_session_stays_whole() {
    let world = World::new().await;
    // Worker A calls a tool, then its model hangs; A is killed there.
    world.bedrock.push(
        StreamScript::new()
            .text("Checking.", 1)
            .tool_use("t1", "current_time", "{}", 1)
            .hang()
            .into_reply(),
    );
    let short_lease = EngineConfig {
        turn_deadline: Duration::from_millis(300),
        lease_margin: Duration::ZERO,
        ..config()
    };
    let worker_a = world.engine(short_lease);
    let mut events = worker_a.invoke(
        Scope::new("conv-1".parse().unwrap()).with_turn_id(tid("turn-1")),
        Prompt::text("Time?"),
    );
    while let Some(event) = events.next().await {
        if matches!(event, AgentEvent::ToolEnded { .. }) {
            break;
        }
    }
    drop(events);
    drop(worker_a);

    // Worker B, with its own clients, gets the redelivery: first while A's lease still holds,
    // then after it has run out.
    world.bedrock.push(Reply::text("It is noon."));
    let worker_b = world.handler();
    let delivery = || batch(vec![record("m1", &body("turn-1", "conv-1", "Time?"))]);
    let mut redeliveries = 0;
    loop {
        let response = worker_b.handle_batch(delivery(), in_an_hour()).await.unwrap();
        if response.batch_item_failures.is_empty() {
            break;
        }
        redeliveries += 1;
        assert!(redeliveries < 50, "the lease never ran out");
        // The queue's visibility timeout, in small.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let store = world.store();
    let record = store.turn(&sid("conv-1"), &tid("turn-1")).await.unwrap().unwrap();
    assert_eq!(record.status, TurnStatus::Completed);
    assert_eq!(record.attempts, 2);
    let history = store.load_history(&sid("conv-1")).await.unwrap();
    check_history(&history).unwrap();
    assert_eq!(
        history.len(),
        2,
        "A stored nothing; B stored its whole turn: {history:#?}"
    );
    assert_eq!(history[1].text(), "It is noon.");
}

#[tokio::test]
async fn a_claim_whose_worker_died_is_reclaimed() {
    let world = World::new().await;
    let store = world.store();
    assert_eq!(
        store
            .claim_turn(&sid("conv-1"), &tid("turn-1"), Lease(Duration::ZERO))
            .await
            .unwrap(),
        Claim::Claimed { reclaimed: false }
    );
    world.bedrock.push(Reply::text("Back again."));
    let response = world
        .handler()
        .handle_batch(
            batch(vec![record("m1", &body("turn-1", "conv-1", "Hi"))]),
            in_an_hour(),
        )
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        store
            .turn(&sid("conv-1"), &tid("turn-1"))
            .await
            .unwrap()
            .unwrap()
            .attempts,
        2
    );
}

#[tokio::test]
async fn two_workers_sharing_only_the_table_are_portable() {
    let world = World::new().await;
    world.bedrock.push(Reply::text("Hello."));
    world.bedrock.push(Reply::text("Nice to meet you, Ada."));
    world.bedrock.push(Reply::text("You are Ada."));
    let failing = BedrockStandIn::start().await.unwrap();
    failing.push(Reply::http_error(403, "AccessDeniedException", "no"));
    let hanging = BedrockStandIn::start().await.unwrap();
    hanging.push(StreamScript::new().open_text("Hmm").hang().into_reply());
    let mut closed = hanging.closed_early();
    let engine_on = |bedrock: &BedrockStandIn| {
        Engine::builder()
            .model(BedrockModel::new(bedrock.client(), MODEL_ID))
            .store(world.store())
            .config(config())
            .build()
            .unwrap()
    };
    let seen = Arc::new(world.bedrock.requests_handle());
    let subject = Subject::new(
        Case::new(
            world.engine(config()),
            Scope::new("c".parse().unwrap()),
            Prompt::text("Hi"),
        ),
        Case::new(
            engine_on(&failing),
            Scope::new("f".parse().unwrap()),
            Prompt::text("Hi"),
        ),
        Hanging::new(
            Case::new(
                engine_on(&hanging),
                Scope::new("h".parse().unwrap()),
                Prompt::text("Hi"),
            ),
            async move {
                let _ = closed.wait_for(|n| *n > 0).await;
            },
        ),
    )
    .with_pair(Pair {
        first: Case::new(
            world.engine(config()),
            Scope::new("p".parse().unwrap()),
            Prompt::text("I am Ada"),
        ),
        second: Case::new(
            world.engine(config()),
            Scope::new("p".parse().unwrap()),
            Prompt::text("Who am I?"),
        ),
        expect: Box::new(move |_| {
            let sent = seen
                .requests()
                .last()
                .map(|r| r.body["messages"].to_string())
                .unwrap_or_default();
            if sent.contains("I am Ada") && sent.contains("Nice to meet you, Ada.") {
                Ok(())
            } else {
                Err(format!("the second worker sent {sent}"))
            }
        }),
    });
    let report = check(subject).await;
    assert!(report.is_conformant(), "{report}");
    assert!(
        report
            .checked
            .iter()
            .any(|(rule, _)| *rule == Rule::NoLocationDependence)
    );
}

#[tokio::test]
async fn a_store_that_fails_returns_the_record_to_the_queue() {
    let world = World::new().await;
    world.bedrock.push(Reply::text("never stored"));
    let missing = DynamoStore::new(moto().dynamodb(), DynamoConfig::new("no-such-table").unwrap());
    let engine = Engine::builder()
        .model(BedrockModel::new(world.bedrock.client(), MODEL_ID))
        .store(missing)
        .config(config())
        .build()
        .unwrap();
    let response = TurnHandler::new(engine, Sinks::new())
        .handle_batch(
            batch(vec![record("m1", &body("turn-1", "conv-1", "Hi"))]),
            in_an_hour(),
        )
        .await
        .unwrap();
    assert_eq!(failures(&response), ["m1"]);
    assert!(
        world.bedrock.requests().is_empty(),
        "nothing ran before the turn was claimed"
    );
}

#[tokio::test]
async fn a_turn_the_model_refuses_goes_towards_the_dlq_and_its_redeliveries_call_no_model() {
    let world = World::new().await;
    world.bedrock.push(Reply::http_error(
        400,
        "ValidationException",
        "The provided model identifier is invalid.",
    ));
    let handler = world.handler();
    let delivery = || batch(vec![record("m1", &body("turn-1", "conv-1", "Hi"))]);
    let response = handler.handle_batch(delivery(), in_an_hour()).await.unwrap();
    assert_eq!(
        failures(&response),
        ["m1"],
        "an operator must see it: the DLQ takes it"
    );
    assert_eq!(world.bedrock.requests().len(), 1);
    // The failure is stored with the turn, and the client was told.
    let claim = world
        .store()
        .claim_turn(&sid("conv-1"), &tid("turn-1"), Lease(Duration::from_secs(60)))
        .await
        .unwrap();
    let Claim::Done(record) = claim else {
        panic!("the refused turn has no record: {claim:?}")
    };
    assert_eq!(record.status, TurnStatus::Failed);
    let told = DynamoEventLog::new(world.store())
        .read("conv-1", "turn-1", None)
        .await
        .unwrap();
    assert!(
        matches!(told.last().map(|l| &l.event), Some(AgentEvent::Failed { code: Some(code), .. }) if code == "model_rejected"),
        "{told:?}"
    );
    // Each redelivery goes back to the queue as well, and the model is not called again.
    for _ in 0..2 {
        let again = handler.handle_batch(delivery(), in_an_hour()).await.unwrap();
        assert_eq!(failures(&again), ["m1"]);
    }
    assert_eq!(
        world.bedrock.requests().len(),
        1,
        "no redelivery called the model"
    );
    assert!(
        world
            .store()
            .load_history(&sid("conv-1"))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn what_the_table_cannot_keep_is_refused_before_anything_runs() {
    let world = World::new().await;
    let handler = world.handler();
    let long_id = "t".repeat(10_000);
    let huge_text = "word ".repeat(180_000);
    let records = vec![
        // A prompt larger than one item holds: it ran, then failed storing, before.
        record("m-big", &body("turn-big", "conv-1", &huge_text)),
        // Ids DynamoDB cannot key: accepted, then lost without a trace, before.
        record("m-turn", &body(&long_id, "conv-2", "Hi")),
        record("m-session", &body("turn-3", &long_id, "Hi")),
        record("m-nul", &body("turn\u{0}4", "conv-4", "Hi")),
    ];
    let response = handler.handle_batch(batch(records), in_an_hour()).await.unwrap();
    // Each can never run: back to the queue, towards the DLQ.
    assert_eq!(failures(&response), ["m-big", "m-turn", "m-session", "m-nul"]);
    assert!(world.bedrock.requests().is_empty(), "no model was called");
    let store = world.store();
    assert!(store.load_history(&sid("conv-1")).await.unwrap().is_empty());
    // The refusal names the field and the limit: the client is told through the event log.
    let told = DynamoEventLog::new(world.store())
        .read("conv-1", "turn-big", None)
        .await
        .unwrap();
    let details = match told.last().map(|l| &l.event) {
        Some(AgentEvent::Failed { details, code, .. }) if code.as_deref() == Some("invalid_prompt") => {
            details.clone()
        }
        other => panic!("not refused as an invalid prompt: {other:?}"),
    };
    assert!(
        details.contains("prompt.text") && details.contains("358400"),
        "{details}"
    );
}

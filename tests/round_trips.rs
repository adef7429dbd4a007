//! What a turn asks of DynamoDB, counted on the wire (moto's server behind a metering
//! interceptor): two round trips before the model is called, whatever the conversation holds,
//! and no read of the version or the log's position on the way.

use std::time::{Duration, SystemTime};

use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::session::{DynamoConfig, DynamoStore, SessionStore};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::meter::Meter;
use agent_worker_testkit::{BedrockStandIn, Reply, moto};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use serde_json::json;

fn record(turn_id: &str, session: &str) -> SqsEvent {
    let mut record = SqsMessage::default();
    record.message_id = Some(format!("m-{turn_id}"));
    record.body = Some(
        json!({"turnId": turn_id, "conversationId": session, "userId": "u-1", "accountId": "a-1", "content": "Where is my order?"})
            .to_string(),
    );
    record.event_source_arn = Some("arn:aws:sqs:us-east-1:000000000000:turns".into());
    let mut event = SqsEvent::default();
    event.records = vec![record];
    event
}

#[tokio::test]
async fn a_turn_makes_two_round_trips_before_the_model_and_reads_nothing_twice() {
    let meter = Meter::default();
    let plain = moto().dynamodb();
    let table = format!("trips-{}", uuid::Uuid::new_v4().simple());
    let config = DynamoConfig::new(&table).unwrap();
    DynamoStore::new(plain.clone(), config.clone())
        .create_table()
        .await
        .unwrap();
    let store = DynamoStore::new(meter.client(&plain), config);
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = Engine::builder()
        .model(BedrockModel::new(
            meter.model_client(&bedrock.client()),
            "test-model",
        ))
        .store(store.clone())
        .build()
        .unwrap();
    let handler = TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(store.clone())));
    let deadline = Some(SystemTime::now() + Duration::from_secs(600));
    // A new conversation, then turns with a history behind them.
    for turn in 0..3 {
        bedrock.push(Reply::text("It ships on Monday."));
        meter.take();
        let out = handler
            .handle_batch(record(&format!("t{turn}"), "c-1"), deadline)
            .await
            .unwrap();
        assert!(out.batch_item_failures.is_empty(), "turn {turn} ran");
        let counts = meter.take();
        let before = counts.before_model.expect("the model was called");
        // A new conversation has no history to read.
        let (rounds, requests, queries) = if turn == 0 { (1, 2, None) } else { (2, 3, Some(&1)) };
        assert_eq!(
            (before.rounds, before.requests),
            (rounds, requests),
            "turn {turn}: the owner check and the claim together, then the history: {:?}",
            counts.operations
        );
        let operations = &counts.operations;
        assert_eq!(
            operations.get("UpdateItem"),
            Some(&2),
            "turn {turn}: {operations:?}"
        );
        assert_eq!(operations.get("Query"), queries, "turn {turn}: {operations:?}");
        assert_eq!(
            operations.get("GetItem"),
            None,
            "turn {turn}: no read of the version, a stop or the log's place: {operations:?}"
        );
    }
    assert_eq!(store.load_history("c-1").await.unwrap().len(), 6);
    let log = DynamoEventLog::new(store);
    let logged = log.read("c-1", "t2", None).await.unwrap();
    let seqs: Vec<u64> = logged.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..logged.len() as u64).collect::<Vec<_>>());
    assert!(logged.last().is_some_and(|e| e.event.is_terminal()), "{logged:?}");
}

//! What a turn asks of DynamoDB, counted on the wire (moto's server behind a metering
//! interceptor): one round trip before the model is called (the history read with the claim),
//! two for a conversation with a summary, and no read of the version or the log's position on
//! the way; four requests for a text turn shorter than the event log's window, and more for one
//! that streams past it.

use crate::support;
use agent_worker::session::{HistoryStore as _, SignalStore as _};

use agent_worker_testkit::{sid, tid};
use std::time::{Duration, SystemTime};

use std::sync::Arc;

use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::protocol::AgentEvent;
use agent_worker::session::{DynamoConfig, DynamoStore, Stop, StopCause};
use agent_worker::sinks::{DynamoEventLog, Sink, SinkError, Sinks, TurnRef, TurnSink};
use agent_worker_testkit::meter::Meter;
use agent_worker_testkit::{BedrockStandIn, Reply, StreamScript, moto};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use serde_json::json;
use support::text_of;
use tokio::sync::Notify;

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

/// The event log's window in the tests that count requests: longer than any turn, so the log
/// writes only at the turn's end, whatever moto's pace (which would otherwise add a write).
const PAST_THE_TURN: Duration = Duration::from_secs(600);

/// A new table on moto, the store on it behind `meter`, and the same store unmetered.
async fn metered_store(meter: &Meter, prefix: &str) -> (DynamoStore, DynamoStore) {
    let plain = moto().dynamodb();
    let table = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    let config = DynamoConfig::new(&table).unwrap();
    let unmetered = DynamoStore::new(plain.clone(), config.clone());
    unmetered.create_table().await.unwrap();
    (DynamoStore::new(meter.client(&plain), config), unmetered)
}

/// A new table on moto behind `meter`, the Bedrock stand-in, and an engine on both.
async fn metered_engine(meter: &Meter) -> (DynamoStore, BedrockStandIn, Engine) {
    let (store, _) = metered_store(meter, "trips").await;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), "test-model"))
        .store(store.clone())
        .build()
        .unwrap();
    (store, bedrock, engine)
}

/// A new table and the Bedrock stand-in, both behind `meter`, and the Lambda handler on them,
/// its event log gathering past the turn.
async fn metered_handler(meter: &Meter) -> (DynamoStore, BedrockStandIn, TurnHandler) {
    let (store, _) = metered_store(meter, "trips").await;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = Engine::builder()
        .model(BedrockModel::new(
            meter.model_client(&bedrock.client()),
            "test-model",
        ))
        .store(store.clone())
        .build()
        .unwrap();
    let handler = TurnHandler::new(
        engine,
        Sinks::new().with(DynamoEventLog::new(store.clone()).gathering_for(PAST_THE_TURN)),
    );
    (store, bedrock, handler)
}

#[tokio::test]
async fn a_turn_makes_one_round_trip_before_the_model_and_reads_nothing_twice() {
    let meter = Meter::default();
    let (store, bedrock, handler) = metered_handler(&meter).await;
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
        // The history is read with the claim, a new conversation's too (it finds nothing).
        assert_eq!(
            (before.rounds, before.requests),
            (1, 3),
            "turn {turn}: the owner check, the claim and the history together: {:?}",
            counts.operations
        );
        let operations = &counts.operations;
        assert_eq!(
            operations.get("UpdateItem"),
            Some(&2),
            "turn {turn}: {operations:?}"
        );
        assert_eq!(operations.get("Query"), Some(&1), "turn {turn}: {operations:?}");
        assert_eq!(
            operations.get("GetItem"),
            None,
            "turn {turn}: no read of the version, a stop or the log's place: {operations:?}"
        );
        assert_eq!(
            operations.get("TransactWriteItems"),
            Some(&1),
            "turn {turn}: the log's end written with the commit: {operations:?}"
        );
        assert_eq!(counts.requests, 4, "turn {turn}");
    }
    assert_eq!(store.load_history(&sid("c-1")).await.unwrap().len(), 6);
    let log = DynamoEventLog::new(store);
    let logged = log.read("c-1", "t2", None).await.unwrap();
    let seqs: Vec<u64> = logged.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..logged.len() as u64).collect::<Vec<_>>());
    assert!(logged.last().is_some_and(|e| e.event.is_terminal()), "{logged:?}");
}

/// A conversation with a summary is read from the summary on, after the claim: the read beside
/// the claim stops at its first page when it finds the summary, and this process does not read
/// ahead for that conversation again; the model sees the summary and the messages after it.
#[tokio::test]
async fn a_conversation_with_a_summary_reads_its_history_after_the_claim() {
    let meter = Meter::default();
    let (store, bedrock, handler) = metered_handler(&meter).await;
    let deadline = Some(SystemTime::now() + Duration::from_secs(600));
    bedrock.push(Reply::text("It ships on Monday."));
    let first = handler
        .handle_batch(record("t0", "c-sum"), deadline)
        .await
        .unwrap();
    assert!(first.batch_item_failures.is_empty());
    let summary = agent_worker::session::Summary {
        text: "The person asked where their order is.".into(),
        upto: 2,
    };
    assert!(store.save_summary(&sid("c-sum"), &summary).await.unwrap());
    for turn in 1..3 {
        bedrock.push(Reply::text("Still Monday."));
        meter.take();
        let out = handler
            .handle_batch(record(&format!("t{turn}"), "c-sum"), deadline)
            .await
            .unwrap();
        assert!(out.batch_item_failures.is_empty(), "turn {turn} ran");
        let counts = meter.take();
        let before = counts.before_model.expect("the model was called");
        // The first time, the read beside the claim finds the summary and is not used: its query
        // and the one from the summary on; then only the one.
        let (requests, queries) = if turn == 1 { (4, 2) } else { (3, 1) };
        assert_eq!(
            (before.rounds, before.requests),
            (2, requests),
            "turn {turn}: the claim, then the history from the summary: {:?}",
            counts.operations
        );
        assert_eq!(counts.operations.get("Query"), Some(&queries), "turn {turn}");
    }
    // The model sees the summary, and not the two messages it stands for (the first answer).
    let asked = bedrock.requests();
    let text = asked.last().unwrap().body.to_string();
    assert!(text.contains("The person asked where their order is."), "{text}");
    assert!(!text.contains("It ships on Monday."), "{text}");
}

/// Tells once the turn's first words have come.
#[derive(Debug, Clone, Default)]
struct FirstWords(Arc<Notify>);

#[derive(Debug)]
struct FirstWordsSink(Arc<Notify>);

#[async_trait::async_trait]
impl TurnSink for FirstWordsSink {
    async fn event(&mut self, event: &AgentEvent) -> Result<(), SinkError> {
        if matches!(event, AgentEvent::Text { .. }) {
            self.0.notify_one();
        }
        Ok(())
    }
}

impl Sink for FirstWords {
    fn open(&self, _turn: &TurnRef) -> Box<dyn TurnSink> {
        Box::new(FirstWordsSink(self.0.clone()))
    }
}

#[tokio::test]
async fn a_streaming_turn_hears_its_stop_from_its_log_writes_without_reading_for_it() {
    let meter = Meter::default();
    let (store, unmetered) = metered_store(&meter, "looks").await;
    let bedrock = BedrockStandIn::start().await.unwrap();
    // Words every 100 ms for 12 s: the log writes a window's words together, every 250 ms.
    let words: String = (0..120).map(|i| format!("w{i} ")).collect();
    bedrock.push(
        StreamScript::new()
            .text(&words, 120)
            .stop("end_turn")
            .chunk_delay(Duration::from_millis(100))
            .into_reply(),
    );
    // The watch would read once an hour, and every write of the log looks as far ahead: each
    // write takes the watch's look, whatever the table's pace (no margin to win against moto).
    // When the log looks by default (`LOOK_AHEAD` before the watch is due) is seen.rs's own test.
    let watch = Duration::from_secs(3600);
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), "test-model"))
        .store(store.clone())
        .config(EngineConfig {
            stop_poll_interval: watch,
            stop_poll_idle: watch,
            stop_grace: Duration::from_millis(50),
            ..EngineConfig::default()
        })
        .build()
        .unwrap();
    let first_words = FirstWords::default();
    let handler = TurnHandler::new(
        engine,
        Sinks::new()
            .with(DynamoEventLog::new(store.clone()).looking_ahead(watch))
            .with(first_words.clone()),
    );
    let deadline = Some(SystemTime::now() + Duration::from_secs(600));
    let turn = handler.handle_batch(record("t1", "c-1"), deadline);
    let stop = async {
        first_words.0.notified().await;
        let before = meter.take();
        unmetered
            .request_stop(&sid("c-1"), &tid("t1"), Stop::now(StopCause::UserStop))
            .await
            .unwrap();
        before
    };
    let (out, before) = tokio::join!(turn, stop);
    assert!(out.unwrap().batch_item_failures.is_empty());
    let after = meter.take();
    for (when, counts) in [("before the stop", &before), ("after it", &after)] {
        assert_eq!(
            counts.operations.get("GetItem"),
            None,
            "{when}: the turn's watch read nothing, its log's writes looked: {:?}",
            counts.operations
        );
    }
    assert!(
        after
            .operations
            .get("TransactWriteItems")
            .is_some_and(|n| *n >= 2),
        "the looks rode on the log's transactions, and the turn's commit: {:?}",
        after.operations
    );
    let logged = DynamoEventLog::new(unmetered.clone())
        .read("c-1", "t1", None)
        .await
        .unwrap();
    let last = &logged.last().expect("a logged terminal").event;
    assert_eq!(
        last,
        &AgentEvent::completed_with(json!({ "stopReason": "user_stop" })),
        "{logged:#?}"
    );
    let history = unmetered.load_history(&sid("c-1")).await.unwrap();
    let said = history[1].text();
    assert!(
        said.starts_with("w0") && !said.contains("w119"),
        "stopped mid-answer: {said}"
    );
    assert!(history[1].stopped.is_some());
}

/// A tool turn through the Lambda handler, with a history behind it: what it asks of DynamoDB,
/// by operation. The opening's two writes and the history's query; one read of the turn's
/// signals at the round boundary (where a steer sent during the tool call reaches the very next
/// model request); and the commit, which writes the turn's event log with it. Five requests.
#[tokio::test]
async fn a_tool_turn_asks_five_requests_of_dynamodb_each_for_a_guarantee() {
    let meter = Meter::default();
    let (store, _) = metered_store(&meter, "trips").await;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), "test-model"))
        .store(store.clone())
        .tools(agent_worker::engine::tools::examples::by_name("add"))
        .build()
        .unwrap();
    let handler = TurnHandler::new(
        engine,
        Sinks::new().with(DynamoEventLog::new(store.clone()).gathering_for(PAST_THE_TURN)),
    );
    let deadline = Some(SystemTime::now() + Duration::from_secs(600));
    bedrock.push(Reply::text("Hello."));
    let first = handler
        .handle_batch(record("t0", "c-tool"), deadline)
        .await
        .unwrap();
    assert!(first.batch_item_failures.is_empty());
    bedrock.push(Reply::tool_call("c1", "add", r#"{"numbers":[1,2]}"#));
    bedrock.push(Reply::text("It is 3."));
    meter.take();
    let out = handler
        .handle_batch(record("t1", "c-tool"), deadline)
        .await
        .unwrap();
    assert!(out.batch_item_failures.is_empty());
    let counts = meter.take();
    let expected: std::collections::BTreeMap<String, u64> = [
        ("UpdateItem", 2),
        ("Query", 1),
        ("GetItem", 1),
        ("TransactWriteItems", 1),
    ]
    .into_iter()
    .map(|(operation, n)| (operation.to_owned(), n))
    .collect();
    assert_eq!(counts.operations, expected);
    assert_eq!(counts.requests, 5);
    assert_eq!(store.load_history(&sid("c-tool")).await.unwrap().len(), 6);
    // The log holds the whole turn, in order, its terminal once and last.
    let logged = DynamoEventLog::new(store)
        .read("c-tool", "t1", None)
        .await
        .unwrap();
    assert_whole(&logged, 0);
    assert!(
        logged
            .iter()
            .any(|l| matches!(&l.event, AgentEvent::ToolEnded { .. })),
        "{logged:?}"
    );
}

/// The four requests of a text turn (the test above) hold for a turn that ends within the event
/// log's window; the log gathers a window's events (250 ms by default, `TEXT_COALESCE_WINDOW`)
/// and writes them while the answer streams, so that a client following the log sees it move.
/// Here everything is the default (the log's window, the engine's watch) and the answer's three
/// pieces come 600 ms apart, 3.6 s of streaming: each piece is written in a window of its own,
/// and only the last events ride on the commit. The opening's two updates and the history's
/// query are fixed; the log's own writes and the watch's reads follow the stream's pace and the
/// table's (a write looks at the stop in place of a read due within two windows), so the test
/// holds them to bounds, not to a number. On the machine this was written on it sees 9 requests,
/// run after run: `UpdateItem` 2, `Query` 1, `GetItem` 2 (the turn's watch, reading for a stop
/// where no write of the log was due to look for it) and `TransactWriteItems` 4 (the log's three
/// writes, a piece each, and the commit with the turn's end).
#[tokio::test]
async fn a_text_turn_that_streams_past_the_logs_window_writes_its_log_as_it_streams() {
    let meter = Meter::default();
    let (store, _) = metered_store(&meter, "window").await;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), "test-model"))
        .store(store.clone())
        .build()
        .unwrap();
    let handler = TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(store.clone())));
    let deadline = Some(SystemTime::now() + Duration::from_secs(600));
    bedrock.push(Reply::text("Hello."));
    let first = handler
        .handle_batch(record("t0", "c-long"), deadline)
        .await
        .unwrap();
    assert!(first.batch_item_failures.is_empty());
    let pieces = 3;
    bedrock.push(
        StreamScript::new()
            .text("It ships on Monday, from the Leeds depot, by courier.", pieces)
            .stop("end_turn")
            .chunk_delay(Duration::from_millis(600))
            .into_reply(),
    );
    meter.take();
    let out = handler
        .handle_batch(record("t1", "c-long"), deadline)
        .await
        .unwrap();
    assert!(out.batch_item_failures.is_empty());
    let counts = meter.take();
    let ops = &counts.operations;
    let count = |operation: &str| ops.get(operation).copied().unwrap_or(0);
    eprintln!(
        "a text turn streaming 3.6 s: {} requests, {ops:?}",
        counts.requests
    );
    assert_eq!(
        (count("UpdateItem"), count("Query")),
        (2, 1),
        "the opening and the history, as for any turn: {ops:?}"
    );
    // The commit is one transaction; every other write is the log's own.
    let log_writes = count("PutItem") + count("TransactWriteItems") - 1;
    assert!(
        (1..=pieces as u64 + 1).contains(&log_writes),
        "the log wrote while the answer streamed, at most once an event: {ops:?}"
    );
    assert!(counts.requests > 4, "more than a short turn's four: {ops:?}");
    assert_eq!(
        counts.requests,
        count("UpdateItem")
            + count("Query")
            + count("GetItem")
            + count("PutItem")
            + count("TransactWriteItems"),
        "nothing else was asked: {ops:?}"
    );
    let logged = DynamoEventLog::new(store.clone())
        .read("c-long", "t1", None)
        .await
        .unwrap();
    assert_whole(&logged, 0);
    let said: Vec<AgentEvent> = logged.into_iter().map(|l| l.event).collect();
    assert_eq!(
        text_of(&said),
        "It ships on Monday, from the Leeds depot, by courier."
    );
    assert_eq!(store.load_history(&sid("c-long")).await.unwrap().len(), 4);
}

/// `logged` runs on from position `from` without a gap, and ends with its only terminal.
fn assert_whole(logged: &[agent_worker::sinks::LoggedEvent], from: u64) {
    let seqs: Vec<u64> = logged.iter().map(|l| l.seq).collect();
    assert_eq!(seqs, (from..from + logged.len() as u64).collect::<Vec<_>>());
    let terminals = logged.iter().filter(|l| l.event.is_terminal()).count();
    assert_eq!(terminals, 1, "{logged:?}");
    assert!(logged.last().is_some_and(|l| l.event.is_terminal()), "{logged:?}");
}

/// A turn that ran before on another worker (reclaimed) finds its log's first position taken:
/// its commit cannot write the log's end there, so it lands without it and the log goes on after
/// the earlier run's events itself. Nothing of either run is overwritten.
#[tokio::test]
async fn a_reclaimed_turns_commit_leaves_its_log_to_go_on_after_the_earlier_run() {
    let meter = Meter::default();
    let (store, bedrock, engine) = metered_engine(&meter).await;
    let log = DynamoEventLog::new(store.clone()).gathering_for(PAST_THE_TURN);
    // What the earlier run logged before its worker went away.
    let earlier = [AgentEvent::text("I was saying"), AgentEvent::usage(1, 1)];
    let mut sink = log.open(&TurnRef::new(sid("c-again"), tid("t0")));
    for event in &earlier {
        sink.event(event).await.unwrap();
    }
    sink.flush().await.unwrap();
    drop(sink);
    let handler = TurnHandler::new(engine, Sinks::new().with(log.clone()));
    bedrock.push(Reply::text("Hello again."));
    meter.take();
    let out = handler
        .handle_batch(
            record("t0", "c-again"),
            Some(SystemTime::now() + Duration::from_secs(600)),
        )
        .await
        .unwrap();
    assert!(out.batch_item_failures.is_empty());
    assert_eq!(store.load_history(&sid("c-again")).await.unwrap().len(), 2);
    let logged = log.read("c-again", "t0", None).await.unwrap();
    let events: Vec<&AgentEvent> = logged.iter().map(|l| &l.event).collect();
    assert_eq!(events[..2], [&earlier[0], &earlier[1]], "{logged:?}");
    assert_whole(&logged[2..], 2);
    assert!(events.contains(&&AgentEvent::text("Hello again.")), "{logged:?}");
    // The commit tried with the log's end, then landed without it; the log's own first write
    // found its first position taken too, and went on after the earlier run's events.
    assert_eq!(meter.take().operations.get("TransactWriteItems"), Some(&4));
}

/// A host that hands the log other events than the turn emitted (here: all but the first) keeps
/// the log's end out of the commit: the log writes what it was given itself, in order.
#[tokio::test]
async fn a_log_given_other_events_than_the_turns_writes_its_end_itself() {
    use agent_worker::protocol::{Agent, Prompt, Scope};
    use futures_util::StreamExt;
    let meter = Meter::default();
    let (store, bedrock, engine) = metered_engine(&meter).await;
    let log = DynamoEventLog::new(store.clone()).gathering_for(PAST_THE_TURN);
    bedrock.push(Reply::text("Only part of me is logged."));
    let mut sink = log.open(&TurnRef::new(sid("c-part"), tid("t0")));
    meter.take();
    let mut events = engine.invoke(
        Scope::new("c-part".parse().unwrap()).with_turn_id(tid("t0")),
        Prompt::text("Hello?"),
    );
    let mut given = Vec::new();
    let mut first = true;
    while let Some(event) = events.next().await {
        if !std::mem::take(&mut first) {
            sink.event(&event).await.unwrap();
            given.push(event);
        }
    }
    sink.close().await.unwrap();
    assert_eq!(store.load_history(&sid("c-part")).await.unwrap().len(), 2);
    let logged: Vec<AgentEvent> = log
        .read("c-part", "t0", None)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.event)
        .collect();
    assert_eq!(text_of(&logged), text_of(&given), "{logged:?} / {given:?}");
    assert_eq!(logged.last(), given.last(), "{logged:?}");
    // The commit, and the log's own write after it.
    assert_eq!(meter.take().operations.get("TransactWriteItems"), Some(&2));
}

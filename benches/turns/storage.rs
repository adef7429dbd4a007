//! DynamoDB requests and bytes per turn against conversation length, on moto's server: one SQS
//! record through the Lambda handler (claim, stop checks, history read, the turn's write, the
//! event log), with a metering interceptor on the DynamoDB client.

use std::time::{Duration, SystemTime};

use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::session::{DynamoConfig, DynamoStore, Message};
use agent_worker::sinks::{DynamoEventLog, Sinks};
pub(crate) use agent_worker_testkit::meter::{BeforeModel, Counts, Meter};
use agent_worker_testkit::{BedrockStandIn, Reply, moto};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use serde::Serialize;

/// The conversation lengths measured.
pub(crate) const LENGTHS: [u64; 4] = [10, 100, 1_000, 10_000];
/// Turns measured at each length, after one that may compact.
const MEASURED: u64 = 5;

/// The model's answer in every turn.
const ANSWER: &str = "Item 7 is on track: the order went out on Monday and delivery is due next week.";
/// One line of the summary the model writes when the session is compacted.
const SUMMARY: &str = "The person keeps a list of items and asks for their status; items are on track, orders went out, deliveries are due. ";

/// One conversation length's figures, per turn.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StorageRow {
    /// Messages in the session before the measured turns.
    pub messages: u64,
    /// DynamoDB requests per turn.
    pub requests: f64,
    /// Bytes sent to DynamoDB per turn.
    pub bytes_sent: f64,
    /// Bytes received from DynamoDB per turn.
    pub bytes_received: f64,
    /// The first turn at this length: requests, and bytes received (it may compact).
    pub first_turn_requests: u64,
    /// Bytes the first turn received.
    pub first_turn_bytes_received: u64,
    /// Requests per turn by operation.
    pub operations: std::collections::BTreeMap<String, f64>,
    /// Wall time of a measured turn, in milliseconds: on moto, mostly moto's.
    pub wall_ms: f64,
    /// DynamoDB requests before the first model request.
    pub requests_before_model: f64,
    /// Sequential DynamoDB round trips before the first model request.
    pub rounds_before_model: f64,
    /// Whether the conversation has a summary (its first turn compacted it): its history is
    /// read after the claim.
    pub summarized: bool,
    /// From the SQS record handed to the handler to the first model request, milliseconds.
    pub to_model_ms: f64,
    /// The same without the time a DynamoDB request was in flight: the worker's own.
    pub to_model_own_ms: f64,
}

/// One SQS record of turn `turn` of `session`, as the queue hands it to the function.
pub(crate) fn sqs_record(turn: &str, session: &str) -> SqsEvent {
    let mut record = SqsMessage::default();
    record.message_id = Some(format!("m-{turn}"));
    record.body = Some(format!(
        r#"{{"turnId":"{turn}","conversationId":"{session}","userId":"u","accountId":"a","content":"What did we say about item 7?"}}"#
    ));
    record.event_source_arn = Some("arn:aws:sqs:us-east-1:000000000000:turns.fifo".into());
    let mut event = SqsEvent::default();
    event.records = vec![record];
    event
}

/// A session of `length` messages, questions and answers of a realistic size, written with
/// `BatchWriteItem` in the store's layout. (Writing them through the store would take one
/// transaction per 100 messages, and moto copies the whole table for each transaction.)
pub(crate) async fn seed(client: &aws_sdk_dynamodb::Client, table: &str, session: &str, length: u64) {
    use agent_worker::session::dynamo::keys::{EXPIRES_AT, META_SK, PK, SK, message_sk, session_pk};
    use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
    let expires = AttributeValue::N(
        (SystemTime::now() + Duration::from_secs(86_400))
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
            .to_string(),
    );
    let item = |sk: String, extra: Vec<(&str, AttributeValue)>| {
        let mut item = std::collections::HashMap::from([
            (PK.to_owned(), AttributeValue::S(session_pk(session))),
            (SK.to_owned(), AttributeValue::S(sk)),
            (EXPIRES_AT.to_owned(), expires.clone()),
        ]);
        item.extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v)));
        WriteRequest::builder()
            .put_request(PutRequest::builder().set_item(Some(item)).build().expect("a put"))
            .build()
    };
    let mut writes: Vec<WriteRequest> = (0..length)
        .map(|i| {
            let message = if i % 2 == 0 {
                Message::user_text(format!("Question {i}: what is the status of item {i} on the list we keep?"))
            } else {
                Message::assistant_text(format!(
                    "Item {i} is on track: the review is done, the order went out on Monday, and delivery is due next week."
                ))
            };
            let json = serde_json::to_string(&message).expect("JSON");
            item(
                message_sk(i),
                vec![("message", AttributeValue::S(json)), ("turnId", AttributeValue::S("seed".into()))],
            )
        })
        .collect();
    writes.push(item(
        META_SK.to_owned(),
        vec![("version", AttributeValue::N(length.to_string()))],
    ));
    write_all(client, table, &writes).await;
}

/// Writes `writes` into `table` with `BatchWriteItem`, 25 at a time, until none is unprocessed.
pub(crate) async fn write_all(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    writes: &[aws_sdk_dynamodb::types::WriteRequest],
) {
    for chunk in writes.chunks(25) {
        let mut pending = std::collections::HashMap::from([(table.to_owned(), chunk.to_vec())]);
        while !pending.is_empty() {
            let out = client
                .batch_write_item()
                .set_request_items(Some(pending))
                .send()
                .await
                .expect("the items are written");
            pending = out.unprocessed_items.unwrap_or_default();
            pending.retain(|_, v| !v.is_empty());
        }
    }
}

/// The Lambda handler on `store`, its model the stand-in, its model calls counted by `meter`.
fn metered_handler(meter: &Meter, bedrock: &BedrockStandIn, store: &DynamoStore) -> TurnHandler {
    let engine = Engine::builder()
        .model(BedrockModel::new(
            meter.model_client(&bedrock.client()),
            "bench-model",
        ))
        .store(store.clone())
        .system_prompt("You are a benchmark.")
        .config(EngineConfig::default())
        .build()
        .expect("an engine");
    TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(store.clone())))
}

/// Measures each conversation length; prints a table and returns the rows.
pub(crate) async fn run() -> Vec<StorageRow> {
    println!("\n## DynamoDB per turn (moto), one SQS record through the Lambda handler\n");
    let meter = Meter::default();
    let plain = moto().dynamodb();
    let metered = meter.client(&plain);
    let bedrock = BedrockStandIn::start().await.expect("the stand-in");
    let deadline = || Some(SystemTime::now() + Duration::from_secs(600));

    println!(
        "{:>9} {:>10} {:>12} {:>12} {:>14} {:>16} {:>14} {:>13} {:>13} {:>15} {:>15}",
        "messages",
        "requests",
        "bytes sent",
        "bytes recv",
        "first: reqs",
        "first: bytes recv",
        "wall ms (moto)",
        "to model: rt",
        "to model: req",
        "to model ms",
        "own ms (no DDB)"
    );
    let mut rows = Vec::new();
    for length in LENGTHS {
        // A table per length: moto's transactions slow down with the table's size.
        let table = format!("bench-{length}-{}", uuid::Uuid::new_v4().simple());
        let config = DynamoConfig::new(&table).expect("a table name");
        DynamoStore::new(plain.clone(), config.clone())
            .create_table()
            .await
            .expect("the table");
        let store = DynamoStore::new(metered.clone(), config);
        let handler = metered_handler(&meter, &bedrock, &store);
        let session = format!("len-{length}");
        seed(&plain, &table, &session, length).await;
        meter.take();
        let config = EngineConfig::default();
        if length as usize > config.compact_after_messages {
            bedrock.push(Reply::text(&SUMMARY.repeat(8)));
        }
        bedrock.push(Reply::text(ANSWER));
        let first = handler
            .handle_batch(sqs_record(&format!("{session}-first"), &session), deadline())
            .await
            .expect("the batch is handled");
        assert!(first.batch_item_failures.is_empty(), "the first turn failed");
        let first = meter.take();
        let measured = std::time::Instant::now();
        let mut counts = Counts::default();
        let mut before = BeforeModel::default();
        for i in 0..MEASURED {
            bedrock.push(Reply::text(ANSWER));
            let record = sqs_record(&format!("{session}-{i}"), &session);
            meter.take();
            let answer = handler
                .handle_batch(record, deadline())
                .await
                .expect("the batch is handled");
            assert!(answer.batch_item_failures.is_empty(), "a measured turn failed");
            let turn = meter.take();
            let model = turn.before_model.expect("the turn called the model");
            before.requests += model.requests;
            before.rounds += model.rounds;
            before.elapsed += model.elapsed;
            before.dynamo += model.dynamo;
            counts.requests += turn.requests;
            counts.sent += turn.sent;
            counts.received += turn.received;
            for (operation, n) in turn.operations {
                *counts.operations.entry(operation).or_default() += n;
            }
        }
        let wall_ms = measured.elapsed().as_secs_f64() * 1e3 / MEASURED as f64;
        let per = |n: u64| n as f64 / MEASURED as f64;
        let per_ms = |d: Duration| d.as_secs_f64() * 1e3 / MEASURED as f64;
        let row = StorageRow {
            messages: length,
            requests: per(counts.requests),
            bytes_sent: per(counts.sent),
            bytes_received: per(counts.received),
            first_turn_requests: first.requests,
            first_turn_bytes_received: first.received,
            operations: counts
                .operations
                .iter()
                .map(|(k, v)| (k.clone(), per(*v)))
                .collect(),
            wall_ms,
            requests_before_model: per(before.requests),
            rounds_before_model: per(before.rounds),
            summarized: length as usize > config.compact_after_messages,
            to_model_ms: per_ms(before.elapsed),
            to_model_own_ms: per_ms(before.elapsed.saturating_sub(before.dynamo)),
        };
        println!(
            "{:>9} {:>10.1} {:>12.0} {:>12.0} {:>14} {:>16} {:>14.1} {:>13.1} {:>13.1} {:>15.2} {:>15.3}",
            row.messages,
            row.requests,
            row.bytes_sent,
            row.bytes_received,
            row.first_turn_requests,
            row.first_turn_bytes_received,
            row.wall_ms,
            row.rounds_before_model,
            row.requests_before_model,
            row.to_model_ms,
            row.to_model_own_ms
        );
        rows.push(row);
    }
    if let Some(last) = rows.last() {
        let by: Vec<String> = last
            .operations
            .iter()
            .map(|(k, v)| format!("{k} {v:.1}"))
            .collect();
        println!(
            "requests per turn at {} messages, by operation: {}",
            last.messages,
            by.join(", ")
        );
    }
    rows
}

/// The time each DynamoDB answer is held back in [`round_trip`].
const DELAY_MS: u64 = 50;

/// What the person waits for the table before the model is called: a conversation of 10
/// messages, its turns run as above, first straight on moto and then with every DynamoDB answer
/// [`DELAY_MS`] later (a fault proxy in front of moto): the difference over the delay is the
/// round trips the person waits, one after another.
pub(crate) async fn round_trip() -> serde_json::Value {
    use agent_worker_testkit::fault_proxy::{Fault, FaultProxy, Match, Rule};
    let plain = moto().dynamodb();
    let proxy = FaultProxy::in_front_of(moto().endpoint())
        .await
        .expect("the proxy");
    let delayed = aws_sdk_dynamodb::Client::from_conf(
        plain
            .config()
            .to_builder()
            .endpoint_url(proxy.endpoint_url())
            .build(),
    );
    let bedrock = BedrockStandIn::start().await.expect("the stand-in");
    let mut to_model = Vec::new();
    for (client, delay) in [(&plain, 0), (&delayed, DELAY_MS)] {
        proxy.clear();
        if delay > 0 {
            proxy.inject(Rule::new(Match::Any, Fault::Delay { ms: delay }).times(u32::MAX));
        }
        let table = crate::fresh_table("bench-trip").await;
        let meter = Meter::default();
        let store = DynamoStore::new(
            meter.client(client),
            DynamoConfig::new(&table).expect("a table name"),
        );
        let handler = metered_handler(&meter, &bedrock, &store);
        seed(&plain, &table, "trip", 10).await;
        let mut elapsed = Duration::ZERO;
        let mut rounds = 0;
        for i in 0..MEASURED {
            bedrock.push(Reply::text(ANSWER));
            meter.take();
            let out = handler
                .handle_batch(
                    sqs_record(&format!("trip-{delay}-{i}"), "trip"),
                    Some(SystemTime::now() + Duration::from_secs(600)),
                )
                .await
                .expect("the batch is handled");
            assert!(out.batch_item_failures.is_empty(), "a measured turn failed");
            let before = meter.take().before_model.expect("the turn called the model");
            elapsed += before.elapsed;
            rounds += before.rounds;
        }
        to_model.push((
            elapsed.as_secs_f64() * 1e3 / MEASURED as f64,
            rounds as f64 / MEASURED as f64,
        ));
    }
    let [(plain_ms, rounds), (delayed_ms, _)] = [to_model[0], to_model[1]];
    let waited = (delayed_ms - plain_ms) / DELAY_MS as f64;
    println!(
        "\nto the model, 10 messages: {plain_ms:.1} ms on moto, {delayed_ms:.1} ms with each DynamoDB answer {DELAY_MS} ms later: \
         {waited:.2} round trips waited ({rounds:.1} counted)"
    );
    serde_json::json!({
        "delayMs": DELAY_MS,
        "toModelMs": plain_ms,
        "toModelDelayedMs": delayed_ms,
        "roundTripsWaited": waited,
        "roundsCounted": rounds,
        "turns": MEASURED,
    })
}

//! What watching for a stop costs a long turn: a 30 s turn (5 s of streamed answer, a 20 s tool
//! call, 5 s more of answer) through the Lambda handler on moto, its DynamoDB requests counted by
//! operation: once with a look every second throughout (how the watch looked before it backed
//! off), once with the default watch.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use agent_worker::engine::tools::{ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::{BedrockStandIn, StreamScript, moto};
use serde_json::json;

use crate::storage::{Meter, sqs_record};

/// How long the tool call takes.
const TOOL_TIME: Duration = Duration::from_secs(20);
/// How long each of the two answers streams.
const STREAM_TIME: Duration = Duration::from_secs(5);
/// The deltas each answer streams in.
const PIECES: usize = 25;

/// One answer streamed over [`STREAM_TIME`], ending with a call of `wait` or its own end.
fn answer(calls: bool) -> agent_worker_testkit::Reply {
    let text = "Looking at the order history and the carrier's updates for the item you asked about.";
    let script = StreamScript::new().text(text, PIECES);
    let script = if calls {
        script.tool_use("w1", "wait", "{}", 1).stop("tool_use")
    } else {
        script.stop("end_turn")
    };
    // The pause comes before each frame: the deltas, their block's start and stop, the ends.
    script.chunk_delay(STREAM_TIME / (PIECES as u32 + 4)).into_reply()
}

/// Runs the long turn once under `config`; returns its requests by operation.
async fn one(name: &str, config: EngineConfig) -> serde_json::Value {
    let meter = Meter::default();
    let plain = moto().dynamodb();
    let bedrock = BedrockStandIn::start().await.expect("the stand-in");
    let table = crate::fresh_table("bench-watch").await;
    let store = DynamoStore::new(
        meter.client(&plain),
        DynamoConfig::new(&table).expect("a table name"),
    );
    let wait = tool_fn(
        ToolSpec::new(
            "wait",
            "Waits for the carrier's system.",
            json!({"type": "object"}),
        ),
        |_input, _ctx| async move {
            tokio::time::sleep(TOOL_TIME).await;
            Ok(json!({"status": "delivered"}))
        },
    );
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), "bench-model"))
        .store(store.clone())
        .tool(Arc::new(wait))
        .config(config)
        .build()
        .expect("an engine");
    let handler = TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(store)));
    bedrock.push(answer(true));
    bedrock.push(answer(false));
    meter.take();
    let started = std::time::Instant::now();
    let out = handler
        .handle_batch(
            sqs_record("long-1", "long"),
            Some(SystemTime::now() + Duration::from_secs(600)),
        )
        .await
        .expect("the batch is handled");
    assert!(out.batch_item_failures.is_empty(), "the long turn failed");
    let wall = started.elapsed();
    let counts = meter.take();
    let by: Vec<String> = counts
        .operations
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "{name:<44} {:>6.1} s {:>9} requests ({})",
        wall.as_secs_f64(),
        counts.requests,
        by.join(", ")
    );
    json!({
        "watch": name,
        "wallSeconds": wall.as_secs_f64(),
        "requests": counts.requests,
        "operations": counts.operations,
    })
}

/// The long turn with both watches.
pub(crate) async fn run() -> serde_json::Value {
    println!("\n## A 30 s turn with a 20 s tool call: DynamoDB requests (moto)\n");
    let every_second = EngineConfig {
        stop_poll_idle: EngineConfig::default().stop_poll_interval,
        ..EngineConfig::default()
    };
    let before = one("a look every second throughout (before)", every_second).await;
    let after = one(
        "the default watch (backs off while idle)",
        EngineConfig::default(),
    )
    .await;
    json!([before, after])
}

//! The metrics a turn writes in CloudWatch's embedded metric format, read back line by line:
//! every metric's name, unit and value for a completed, a stopped, a failed and a redriven turn,
//! and for records that ran no turn. The real handler on moto's DynamoDB and the Bedrock
//! stand-in; the lines are caught where the function's log would take them.

use crate::support;
use agent_worker::session::SignalStore as _;

use agent_worker_testkit::{sid, tid};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::hosts::metrics::{Metrics, MetricsConfig, MetricsOut, counted};
use agent_worker::protocol::AgentEvent;
use agent_worker::session::{DynamoConfig, DynamoStore, Stop, StopCause};
use agent_worker::sinks::Sinks;
use agent_worker_testkit::meter::Meter;
use agent_worker_testkit::{BedrockStandIn, Reply, StreamScript, moto};
use aws_lambda_events::event::sqs::SqsMessage;
use serde_json::{Value, json};
use support::{MODEL_ID, Recorder, config, example_tools};

/// The lines written, parsed.
#[derive(Debug, Default)]
struct Caught(Mutex<Vec<Value>>);

impl MetricsOut for Caught {
    fn line(&self, line: &str) {
        let parsed = serde_json::from_str(line).expect("an EMF line is one JSON object");
        self.0.lock().unwrap().push(parsed);
    }
}

struct World {
    bedrock: BedrockStandIn,
    store: DynamoStore,
    lines: Arc<Caught>,
    events: Recorder,
    /// Counts the store's requests on its own, as the bench does.
    meter: Meter,
}

impl World {
    async fn new() -> Self {
        let table = format!("sessions-{}", uuid::Uuid::new_v4().simple());
        let meter = Meter::default();
        let client = counted(&meter.client(&moto().dynamodb()));
        let store = DynamoStore::new(client, DynamoConfig::new(&table).unwrap());
        store.create_table().await.unwrap();
        meter.take();
        Self {
            bedrock: BedrockStandIn::start().await.unwrap(),
            store,
            lines: Arc::default(),
            events: Recorder::default(),
            meter,
        }
    }

    fn handler(&self, engine_config: EngineConfig) -> TurnHandler {
        let engine = Engine::builder()
            .model(BedrockModel::new(self.bedrock.client(), MODEL_ID))
            .store(self.store.clone())
            .tools(example_tools(&["add"]))
            .config(engine_config)
            .build()
            .unwrap();
        let metrics = MetricsConfig::new("AgentWorkerTest", "desk")
            .unwrap()
            .dimension("model", MODEL_ID)
            .unwrap();
        TurnHandler::new(engine, Sinks::new().with(self.events.clone()))
            .metrics(Metrics::new(metrics, self.lines.clone()))
    }

    /// Runs `records` as one batch; the message ids the handler reported as failures.
    async fn batch(&self, handler: &TurnHandler, records: Vec<SqsMessage>) -> Vec<String> {
        support::run_batch(handler, records, None).await
    }

    fn take(&self) -> Vec<Value> {
        std::mem::take(&mut *self.lines.0.lock().unwrap())
    }
}

/// A record of `turn_id` in `session` asking `text`, sent `ago` before now.
fn record(message_id: &str, turn_id: &str, session: &str, ago: Duration) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = Some(message_id.to_owned());
    record.body = Some(
        json!({"turnId": turn_id, "conversationId": session, "userId": "u-1", "accountId": "a-1",
               "content": "Add one and two."})
        .to_string(),
    );
    let sent = SystemTime::now() - ago;
    let millis = sent.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis();
    record
        .attributes
        .insert("SentTimestamp".into(), millis.to_string());
    record
}

/// A line's metrics by name: (unit, value), each checked to be declared once, under the
/// namespace, with dimension sets whose every name is a string at the root.
fn metrics_of(line: &Value) -> BTreeMap<String, (String, Value)> {
    let aws = &line["_aws"];
    assert!(aws["Timestamp"].as_u64().unwrap() > 1_700_000_000_000, "{line}");
    let mut metrics = BTreeMap::new();
    for directive in aws["CloudWatchMetrics"].as_array().unwrap() {
        assert_eq!(directive["Namespace"], "AgentWorkerTest");
        for set in directive["Dimensions"].as_array().unwrap() {
            let set: Vec<&str> = set
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_str().unwrap())
                .collect();
            assert_eq!(&set[..2], ["service", "model"], "the base set leads: {line}");
            for name in set {
                assert!(line[name].is_string(), "dimension {name} has a value: {line}");
            }
        }
        for metric in directive["Metrics"].as_array().unwrap() {
            let name = metric["Name"].as_str().unwrap().to_owned();
            let unit = metric["Unit"].as_str().unwrap().to_owned();
            let value = line[&name].clone();
            assert!(
                value.is_number() || value.is_array(),
                "{name} has a value: {line}"
            );
            assert!(
                metrics.insert(name, (unit, value)).is_none(),
                "declared once: {line}"
            );
        }
    }
    assert_eq!(line["service"], "desk");
    assert_eq!(line["model"], MODEL_ID);
    metrics
}

/// The turn's line (the one with `Turns`) and its tool lines.
fn split(lines: &[Value], turn_id: &str) -> (Value, Vec<Value>) {
    let mine: Vec<&Value> = lines.iter().filter(|l| l["turnId"] == turn_id).collect();
    let turn = mine
        .iter()
        .find(|l| l.get("Turns").is_some())
        .map(|l| (*l).clone())
        .unwrap_or_else(|| panic!("no turn line for {turn_id}: {lines:?}"));
    let tools = mine
        .iter()
        .filter(|l| l.get("tool").is_some())
        .map(|l| (*l).clone())
        .collect();
    (turn, tools)
}

fn count(metrics: &BTreeMap<String, (String, Value)>, name: &str) -> u64 {
    let (unit, value) = &metrics[name];
    assert_eq!(unit, "Count", "{name}");
    value.as_u64().unwrap_or_else(|| panic!("{name} = {value}"))
}

fn millis(metrics: &BTreeMap<String, (String, Value)>, name: &str) -> f64 {
    let (unit, value) = &metrics[name];
    assert_eq!(unit, "Milliseconds", "{name}");
    value.as_f64().unwrap_or_else(|| panic!("{name} = {value}"))
}

/// The dimension sets under which `Turns` is written.
fn turn_sets(line: &Value) -> Vec<Vec<String>> {
    line["_aws"]["CloudWatchMetrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["Metrics"][0]["Name"] == "Turns")
        .unwrap()["Dimensions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|set| serde_json::from_value(set.clone()).unwrap())
        .collect()
}

/// Every figure of a turn that ran, in its expected unit.
const TURN_FIGURES: [&str; 12] = [
    "ModelCalls",
    "ModelRetries",
    "ModelThrottles",
    "InputTokens",
    "OutputTokens",
    "CacheReadTokens",
    "CacheWriteTokens",
    "ToolCalls",
    "ApprovalsRequested",
    "ApprovalsRedeemed",
    "Compactions",
    "Turns",
];

#[tokio::test]
async fn a_completed_turn_with_a_throttle_and_a_tool_call_writes_every_figure() {
    let world = World::new().await;
    world
        .bedrock
        .push(Reply::http_error(429, "ThrottlingException", "Too many requests"));
    world
        .bedrock
        .push(Reply::tool_call("call-1", "add", r#"{"numbers":[1,2]}"#));
    world.bedrock.push(Reply::text("Three."));
    let handler = world.handler(config());
    let failed = world
        .batch(
            &handler,
            vec![record("m-1", "t-1", "s-1", Duration::from_secs(2))],
        )
        .await;
    assert!(failed.is_empty(), "{failed:?}");

    let lines = world.take();
    let (turn, tools) = split(&lines, "t-1");
    assert_eq!(turn["outcome"], "completed");
    assert_eq!(turn["messageId"], "m-1");
    assert!(turn.get("code").is_none(), "{turn}");
    assert_eq!(
        turn_sets(&turn),
        [vec!["service", "model"], vec!["service", "model", "outcome"]]
    );
    let metrics = metrics_of(&turn);
    let mut names: Vec<&str> = metrics.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut expected: Vec<&str> = TURN_FIGURES
        .iter()
        .copied()
        .chain([
            "TurnDuration",
            "TimeToFirstToken",
            "QueueDelay",
            "DynamoDBRequests",
        ])
        .collect();
    expected.sort_unstable();
    assert_eq!(names, expected);
    // The tokens are the sums of what the turn's usage events reported (the stand-in caches
    // the prompt as Bedrock does, so the cache figures are not zero).
    let mut tokens = [0u64; 4];
    for event in world.events.0.lock().unwrap().iter() {
        if let AgentEvent::Usage {
            input_tokens,
            output_tokens,
            cache_read_tokens,
            cache_write_tokens,
            ..
        } = event
        {
            for (sum, add) in
                tokens
                    .iter_mut()
                    .zip([input_tokens, output_tokens, cache_read_tokens, cache_write_tokens])
            {
                *sum += add;
            }
        }
    }
    assert!(tokens[0] > 0 && tokens[1] == 10 + 8, "{tokens:?}");
    for (name, want) in [
        ("Turns", 1),
        ("ModelCalls", 2),
        ("ModelRetries", 1),
        ("ModelThrottles", 1),
        ("InputTokens", tokens[0]),
        ("OutputTokens", tokens[1]),
        ("CacheReadTokens", tokens[2]),
        ("CacheWriteTokens", tokens[3]),
        ("ToolCalls", 1),
        ("ApprovalsRequested", 0),
        ("ApprovalsRedeemed", 0),
        ("Compactions", 0),
        ("DynamoDBRequests", world.meter.take().requests),
    ] {
        assert_eq!(count(&metrics, name), want, "{name}");
    }
    assert!(
        count(&metrics, "DynamoDBRequests") >= 2,
        "a claim and a commit at least"
    );
    let duration = millis(&metrics, "TurnDuration");
    let first = millis(&metrics, "TimeToFirstToken");
    assert!(0.0 < first && first <= duration, "{first} {duration}");
    assert!(millis(&metrics, "QueueDelay") >= 2000.0, "{turn}");

    assert_eq!(tools.len(), 1, "{tools:?}");
    let tool = &tools[0];
    assert_eq!(
        (tool["tool"].as_str(), tool["result"].as_str()),
        (Some("add"), Some("ok"))
    );
    let tool_metrics = metrics_of(tool);
    assert_eq!(count(&tool_metrics, "ToolCalls"), 1);
    let (unit, took) = &tool_metrics["ToolDuration"];
    assert_eq!(unit, "Milliseconds");
    assert_eq!(took.as_array().map(Vec::len), Some(1), "{tool}");
}

#[tokio::test]
async fn a_turn_stopped_at_its_deadline_is_stopped() {
    let world = World::new().await;
    world
        .bedrock
        .push(StreamScript::new().open_text("Working").hang().into_reply());
    let handler = world.handler(config());
    // The deadline's stop, as the host's drain sends it, once the model has been asked: the turn
    // is stopped mid-answer whatever the store's pace (a short `turn_deadline` raced the opening).
    let deadline = async {
        world.bedrock.requested(1).await;
        world
            .store
            .request_stop(&sid("s-1"), &tid("t-1"), Stop::now(StopCause::Deadline))
            .await
            .unwrap();
    };
    let (failed, ()) = tokio::join!(
        world.batch(&handler, vec![record("m-1", "t-1", "s-1", Duration::ZERO)]),
        deadline
    );
    assert!(failed.is_empty(), "{failed:?}");
    let (turn, tools) = split(&world.take(), "t-1");
    assert!(tools.is_empty());
    assert_eq!(turn["outcome"], "stopped");
    let metrics = metrics_of(&turn);
    assert_eq!(count(&metrics, "Turns"), 1);
    // The model's answer was cut: no usage came, so no model call is counted as answered.
    assert_eq!(count(&metrics, "ModelCalls"), 0);
    assert_eq!(count(&metrics, "OutputTokens"), 0);
    assert!(millis(&metrics, "TimeToFirstToken") <= millis(&metrics, "TurnDuration"));
}

#[tokio::test]
async fn a_failed_turn_is_counted_by_its_code() {
    let world = World::new().await;
    let retries = config().retries;
    for _ in 0..=retries {
        world
            .bedrock
            .push(Reply::http_error(503, "ServiceUnavailableException", "Try later"));
    }
    let handler = world.handler(config());
    let failed = world
        .batch(&handler, vec![record("m-1", "t-1", "s-1", Duration::ZERO)])
        .await;
    assert!(
        failed.is_empty(),
        "the client was told; the queue lets it go: {failed:?}"
    );
    let (turn, _) = split(&world.take(), "t-1");
    assert_eq!(turn["outcome"], "failed");
    assert_eq!(turn["code"], "model_unavailable");
    assert_eq!(
        turn_sets(&turn),
        [
            vec!["service", "model"],
            vec!["service", "model", "outcome"],
            vec!["service", "model", "outcome", "code"]
        ]
    );
    let metrics = metrics_of(&turn);
    assert_eq!(count(&metrics, "ModelRetries"), u64::from(retries));
    assert_eq!(count(&metrics, "ModelThrottles"), 0);
    assert_eq!(count(&metrics, "ModelCalls"), 0);
    assert!(!metrics.contains_key("TimeToFirstToken"), "no token came: {turn}");
}

#[tokio::test]
async fn redriven_and_refused_records_are_counted_without_figures() {
    let world = World::new().await;
    world
        .bedrock
        .push(Reply::http_error(400, "ValidationException", "bad request"));
    world.bedrock.push(Reply::text("Hello."));
    let handler = world.handler(config());

    // The model refuses the request: back to the queue, towards the DLQ.
    let failed = world
        .batch(&handler, vec![record("m-1", "t-1", "s-1", Duration::ZERO)])
        .await;
    assert_eq!(failed, ["m-1"]);
    let (turn, _) = split(&world.take(), "t-1");
    assert_eq!(
        (turn["outcome"].as_str(), turn["code"].as_str()),
        (Some("redriven"), Some("model_rejected"))
    );
    assert_eq!(count(&metrics_of(&turn), "ModelRetries"), 0);

    // A body that is not a turn, and a turn delivered twice.
    let mut malformed = record("m-2", "t-2", "s-2", Duration::ZERO);
    malformed.body = Some("{not json".into());
    world
        .batch(&handler, vec![record("m-3", "t-3", "s-3", Duration::ZERO)])
        .await;
    world.take();
    let failed = world
        .batch(
            &handler,
            vec![malformed, record("m-4", "t-3", "s-3", Duration::ZERO)],
        )
        .await;
    assert_eq!(failed, ["m-2"]);
    let lines = world.take();
    assert_eq!(lines.len(), 2, "one line each, no figures: {lines:?}");
    for (line, outcome, code) in [
        (
            lines.iter().find(|l| l["messageId"] == "m-2").unwrap(),
            "redriven",
            "malformed_body",
        ),
        (
            lines.iter().find(|l| l["messageId"] == "m-4").unwrap(),
            "refused",
            "duplicate_turn",
        ),
    ] {
        assert_eq!(
            (line["outcome"].as_str(), line["code"].as_str()),
            (Some(outcome), Some(code))
        );
        let metrics = metrics_of(line);
        assert_eq!(metrics.keys().collect::<Vec<_>>(), ["Turns"], "{line}");
        assert_eq!(count(&metrics, "Turns"), 1);
    }
}

/// With the model's price, each turn's cost is written (`TurnCostUsd`, unit `None`): its tokens
/// at that price, under the base set and by account.
#[tokio::test]
async fn a_priced_turn_writes_its_cost_by_account() {
    use agent_worker::engine::spending::Prices;
    let world = World::new().await;
    world
        .bedrock
        .push(Reply::tool_call("call-1", "add", r#"{"numbers":[1,2]}"#));
    world.bedrock.push(Reply::text("Three."));
    let engine = Engine::builder()
        .model(BedrockModel::new(world.bedrock.client(), MODEL_ID))
        .store(world.store.clone())
        .tools(example_tools(&["add"]))
        .config(config())
        .build()
        .unwrap();
    let metrics = MetricsConfig::new("AgentWorkerTest", "desk")
        .unwrap()
        .dimension("model", MODEL_ID)
        .unwrap()
        .priced(Prices::default().of(MODEL_ID).copied());
    let handler = TurnHandler::new(engine, Sinks::new().with(world.events.clone()))
        .metrics(Metrics::new(metrics, world.lines.clone()));
    let failed = world
        .batch(
            &handler,
            vec![record("m-1", "t-1", "s-1", Duration::from_secs(1))],
        )
        .await;
    assert!(failed.is_empty(), "{failed:?}");
    let lines = world.take();
    let cost = lines
        .iter()
        .find(|l| l.get("TurnCostUsd").is_some())
        .unwrap_or_else(|| panic!("no cost line: {lines:?}"));
    assert_eq!(cost["turnId"], "t-1");
    assert_eq!(cost["account"], "a-1");
    let metrics = metrics_of(cost);
    let (unit, value) = &metrics["TurnCostUsd"];
    assert_eq!(unit, "None");
    // The turn's tokens, as its own line counts them, at $3 a million in and $15 out (cache
    // reads a tenth of input, writes 1.25 times).
    let (turn, _) = split(&lines, "t-1");
    let figures = metrics_of(&turn);
    let tokens = |name: &str| count(&figures, name) as f64;
    assert!(tokens("InputTokens") > 0.0 && tokens("OutputTokens") > 0.0);
    let expected = (tokens("InputTokens") * 3.0
        + tokens("OutputTokens") * 15.0
        + tokens("CacheReadTokens") * 0.3
        + tokens("CacheWriteTokens") * 3.75)
        .ceil()
        / 1_000_000.0;
    assert!((value.as_f64().unwrap() - expected).abs() < 1e-12, "{value}");
    let sets: Vec<Vec<String>> =
        serde_json::from_value(cost["_aws"]["CloudWatchMetrics"][0]["Dimensions"].clone()).unwrap();
    assert_eq!(
        sets,
        [vec!["service", "model"], vec!["service", "model", "account"]]
    );
}

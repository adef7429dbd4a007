//! Each turn's trace, received by an OTLP/HTTP collector on 127.0.0.1: the spans of the turn,
//! its model calls and its tool calls in OpenTelemetry's GenAI conventions, their links to the
//! trace the SQS record carries (`AWSTraceHeader`), and no content unless the deployer asks.
//! The real handler on moto's DynamoDB and the Bedrock stand-in.

use crate::support;

use std::sync::Arc;

use agent_worker::engine::tools::{Tool, ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::hosts::traces::{TraceConfig, Tracer};
use agent_worker::protocol::AgentEvent;
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker::sinks::Sinks;
use agent_worker_testkit::{BedrockStandIn, OtlpReceiver, ReceivedSpan, Reply, moto};
use aws_lambda_events::event::sqs::SqsMessage;
use serde_json::{Value, json};
use support::{MODEL_ID, Recorder, config, example_tools};

const HEADER: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
const TRACE_ID: &str = "5759e988bd862e3fe1be46a994272793";
const SQS_SPAN: &str = "53995c3f42cd8ad8";
const PROMPT: &str = "Add one and two, then look up ticket 7.";
const TOKEN: &str = "person-token-4f1d";

struct World {
    bedrock: BedrockStandIn,
    store: DynamoStore,
    collector: OtlpReceiver,
    events: Recorder,
}

impl World {
    async fn new() -> Self {
        let table = format!("sessions-{}", uuid::Uuid::new_v4().simple());
        let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
        store.create_table().await.unwrap();
        Self {
            bedrock: BedrockStandIn::start().await.unwrap(),
            store,
            collector: OtlpReceiver::start().await.unwrap(),
            events: Recorder::default(),
        }
    }

    /// A handler with the example `add` (arguments sensitive, as every tool is unless it says
    /// otherwise) and `lookup` (declared loggable), tracing to `endpoint` as `config` says.
    fn handler(&self, trace: TraceConfig) -> TurnHandler {
        let lookup: Arc<dyn Tool> = Arc::new(tool_fn(
            ToolSpec::new("lookup", "Looks a ticket up.", json!({"type": "object"})).args_sensitive(false),
            |input, _| async move { Ok(json!({"ticket": input["id"], "state": "open"})) },
        ));
        let mut tools = example_tools(&["add"]);
        tools.push(lookup);
        let engine = Engine::builder()
            .model(BedrockModel::new(self.bedrock.client(), MODEL_ID))
            .store(self.store.clone())
            .tools(tools.clone())
            .config(config())
            .build()
            .unwrap();
        TurnHandler::new(engine, Sinks::new().with(self.events.clone()))
            .tracer(Tracer::new(trace))
            .traced_tools(&tools)
    }

    fn trace_config(&self) -> TraceConfig {
        TraceConfig::under_base(&self.collector.endpoint(), "desk")
            .unwrap()
            .model("aws.bedrock", MODEL_ID)
    }

    /// Runs `records` as one batch; the message ids the handler reported as failures.
    async fn batch(&self, handler: &TurnHandler, records: Vec<SqsMessage>) -> Vec<String> {
        support::run_batch(handler, records, None).await
    }

    /// The model asks for `add`, then `lookup`, then answers.
    fn script_two_tools(&self) {
        self.bedrock
            .push(Reply::http_error(429, "ThrottlingException", "Too many requests"));
        self.bedrock
            .push(Reply::tool_call("call-1", "add", r#"{"numbers":[1,2]}"#));
        self.bedrock
            .push(Reply::tool_call("call-2", "lookup", r#"{"id":"T-7"}"#));
        self.bedrock.push(Reply::text("Three; ticket 7 is open."));
    }
}

/// A record of `turn_id` in `session`, carrying trace header `header`.
fn record(message_id: &str, turn_id: &str, session: &str, header: Option<&str>) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = Some(message_id.to_owned());
    record.body = Some(
        json!({"turnId": turn_id, "conversationId": session, "userId": "u-1", "accountId": "a-1",
               "content": PROMPT, "userToken": TOKEN})
        .to_string(),
    );
    if let Some(header) = header {
        record.attributes.insert("AWSTraceHeader".into(), header.into());
    }
    record
}

fn named<'a>(spans: &'a [ReceivedSpan], prefix: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name.starts_with(prefix)).collect()
}

fn int(span: &ReceivedSpan, key: &str) -> u64 {
    span.attributes[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} of {span:?}"))
}

fn text<'a>(span: &'a ReceivedSpan, key: &str) -> &'a str {
    span.attributes
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{key} of {span:?}"))
}

#[tokio::test]
async fn a_turn_continues_the_records_trace_with_genai_spans_and_no_content() {
    let world = World::new().await;
    world.script_two_tools();
    let handler = world.handler(world.trace_config());
    let failed = world
        .batch(&handler, vec![record("m-1", "t-1", "s-1", Some(HEADER))])
        .await;
    assert!(failed.is_empty(), "{failed:?}");

    let spans = world.collector.take();
    assert_eq!(
        spans.len(),
        6,
        "the turn, three model calls, two tool calls: {spans:#?}"
    );
    let turn = named(&spans, "invoke_agent");
    assert_eq!(turn.len(), 1);
    let turn = turn[0];
    assert_eq!(turn.name, "invoke_agent desk");
    assert_eq!(
        turn.parent_span_id.as_deref(),
        Some(SQS_SPAN),
        "the record's span is its parent"
    );
    assert_eq!(turn.service, "desk");
    for span in &spans {
        assert_eq!(span.trace_id, TRACE_ID, "{span:?}");
        if span.span_id != turn.span_id {
            assert_eq!(
                span.parent_span_id.as_deref(),
                Some(turn.span_id.as_str()),
                "{span:?}"
            );
            assert!(
                turn.start <= span.start && span.end <= turn.end,
                "within the turn: {span:?}"
            );
        }
        assert!(span.start <= span.end, "{span:?}");
    }
    for (key, want) in [
        ("gen_ai.operation.name", "invoke_agent"),
        ("gen_ai.agent.name", "desk"),
        ("gen_ai.conversation.id", "s-1"),
        ("gen_ai.provider.name", "aws.bedrock"),
        ("gen_ai.request.model", MODEL_ID),
        ("agent_worker.turn_id", "t-1"),
        ("messaging.message.id", "m-1"),
    ] {
        assert_eq!(text(turn, key), want, "{key}");
    }
    assert_eq!((turn.kind, turn.status), (1, 0));

    // The model calls: one per usage event, in order, each with that event's tokens.
    let usage: Vec<(u64, u64)> = world
        .events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Usage {
                input_tokens,
                output_tokens,
                cache_read_tokens,
                cache_write_tokens,
                ..
            } => Some((
                input_tokens + cache_read_tokens + cache_write_tokens,
                *output_tokens,
            )),
            _ => None,
        })
        .collect();
    let mut chats = named(&spans, "chat ");
    chats.sort_by_key(|s| s.start);
    assert_eq!(chats.len(), 3);
    assert_eq!(usage.len(), 3);
    for (chat, (input, output)) in chats.iter().zip(&usage) {
        assert_eq!(chat.name, format!("chat {MODEL_ID}"));
        assert_eq!(chat.kind, 3, "a client span");
        assert_eq!(text(chat, "gen_ai.operation.name"), "chat");
        assert_eq!(text(chat, "gen_ai.request.model"), MODEL_ID);
        assert_eq!(int(chat, "gen_ai.usage.input_tokens"), *input);
        assert_eq!(int(chat, "gen_ai.usage.output_tokens"), *output);
        assert!(
            chat.attributes
                .contains_key("gen_ai.usage.cache_read.input_tokens")
        );
    }
    assert_eq!(
        chats[0].events,
        ["retry"],
        "the throttled attempt is an event of the first call"
    );
    assert!(chats[1].events.is_empty());
    let sum = |f: fn(&(u64, u64)) -> u64| usage.iter().map(f).sum::<u64>();
    assert_eq!(int(turn, "gen_ai.usage.input_tokens"), sum(|u| u.0));
    assert_eq!(int(turn, "gen_ai.usage.output_tokens"), sum(|u| u.1));

    // The tool calls: each starts while the model call that asked for it streams (the engine
    // runs a call as soon as its arguments are complete), and ends before the next call.
    let mut tools = named(&spans, "execute_tool ");
    tools.sort_by_key(|s| s.start);
    let names: Vec<&str> = tools.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["execute_tool add", "execute_tool lookup"]);
    for (i, (tool, call)) in tools.iter().zip(["call-1", "call-2"]).enumerate() {
        assert_eq!(text(tool, "gen_ai.operation.name"), "execute_tool");
        assert_eq!(text(tool, "gen_ai.tool.call.id"), call);
        assert_eq!(text(tool, "agent_worker.tool.result"), "ok");
        assert!(
            chats[i].start <= tool.start && tool.start <= chats[i].end,
            "{tool:?}"
        );
        assert!(tool.end <= chats[i + 1].start, "{tool:?}");
    }

    // Nothing the person or the model said, no argument, no token.
    let bodies = world.collector.bodies().concat();
    for secret in [PROMPT, "numbers", "T-7", "Three;", TOKEN, "gen_ai.input.messages"] {
        assert!(!bodies.contains(secret), "{secret:?} is in a span: {bodies}");
    }
    let headers = world.collector.headers();
    assert_eq!(headers.len(), 1, "one export per turn");
}

#[tokio::test]
async fn content_capture_shows_the_words_and_only_the_tools_declared_loggable() {
    let world = World::new().await;
    world.script_two_tools();
    let trace = world
        .trace_config()
        .capture_content(true)
        .header("x-collector-key", "k-1")
        .unwrap();
    let handler = world.handler(trace);
    assert!(
        world
            .batch(&handler, vec![record("m-1", "t-1", "s-1", Some(HEADER))])
            .await
            .is_empty()
    );
    let spans = world.collector.take();
    let turn = named(&spans, "invoke_agent")[0];
    let input: Value = serde_json::from_str(text(turn, "gen_ai.input.messages")).unwrap();
    assert_eq!(
        input,
        json!([{"role": "user", "parts": [{"type": "text", "content": PROMPT}]}])
    );
    let output: Value = serde_json::from_str(text(turn, "gen_ai.output.messages")).unwrap();
    assert_eq!(output[0]["parts"][0]["content"], "Three; ticket 7 is open.");

    let lookup = named(&spans, "execute_tool lookup")[0];
    let args: Value = serde_json::from_str(text(lookup, "gen_ai.tool.call.arguments")).unwrap();
    assert_eq!(args, json!({"id": "T-7"}));
    let result: Value = serde_json::from_str(text(lookup, "gen_ai.tool.call.result")).unwrap();
    assert_eq!(result["state"], "open");
    let add = named(&spans, "execute_tool add")[0];
    assert!(
        !add.attributes.contains_key("gen_ai.tool.call.arguments"),
        "{add:?}"
    );
    assert!(!add.attributes.contains_key("gen_ai.tool.call.result"), "{add:?}");
    let bodies = world.collector.bodies().concat();
    assert!(
        !bodies.contains("numbers"),
        "add's arguments are sensitive: {bodies}"
    );
    assert!(!bodies.contains(TOKEN), "the person's token is never in a span");
    assert_eq!(
        world.collector.headers()[0]
            .get("x-collector-key")
            .and_then(|v| v.to_str().ok()),
        Some("k-1")
    );
}

#[tokio::test]
async fn traces_start_where_no_header_is_stop_where_unsampled_and_say_how_a_turn_failed() {
    let world = World::new().await;
    let handler = world.handler(world.trace_config());

    // No header: a trace of its own, the turn its root.
    world.bedrock.push(Reply::text("Hello."));
    assert!(
        world
            .batch(&handler, vec![record("m-1", "t-1", "s-1", None)])
            .await
            .is_empty()
    );
    let spans = world.collector.take();
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let turn = named(&spans, "invoke_agent")[0];
    assert_eq!(turn.parent_span_id, None);
    assert_ne!(turn.trace_id, TRACE_ID);
    assert!(spans.iter().all(|s| s.trace_id == turn.trace_id));

    // The sender did not sample it: nothing is sent. A redelivery that did not run: nothing.
    world.bedrock.push(Reply::text("Hello again."));
    let unsampled = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0";
    assert!(
        world
            .batch(
                &handler,
                vec![
                    record("m-2", "t-2", "s-2", Some(unsampled)),
                    record("m-3", "t-1", "s-1", Some(HEADER)),
                ]
            )
            .await
            .is_empty()
    );
    assert_eq!(world.collector.take(), [], "neither sent a span");

    // The model fails for good: the turn's span and its call's are errors, with its code.
    let retries = config().retries;
    for _ in 0..=retries {
        world
            .bedrock
            .push(Reply::http_error(503, "ServiceUnavailableException", "Try later"));
    }
    assert!(
        world
            .batch(&handler, vec![record("m-4", "t-4", "s-4", Some(HEADER))])
            .await
            .is_empty()
    );
    let spans = world.collector.take();
    let turn = named(&spans, "invoke_agent")[0];
    assert_eq!(turn.status, 2);
    assert_eq!(text(turn, "error.type"), "model_unavailable");
    let chat = named(&spans, "chat ")[0];
    assert_eq!(chat.status, 2);
    assert_eq!(chat.events.len(), retries as usize, "{chat:?}");
}

#[tokio::test]
async fn a_collector_that_is_down_loses_the_trace_not_the_turn() {
    let world = World::new().await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let trace = TraceConfig::under_base(&format!("http://{closed}"), "desk").unwrap();
    let handler = world.handler(trace);
    world.bedrock.push(Reply::text("Hello."));
    let failed = world
        .batch(&handler, vec![record("m-1", "t-1", "s-1", Some(HEADER))])
        .await;
    assert!(failed.is_empty(), "{failed:?}");
    let events = world.events.0.lock().unwrap();
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
}

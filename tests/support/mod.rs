//! Helpers shared by the integration tests.
//!
//! A module of the one test binary (`tests/integration.rs`); each test module takes what it
//! needs (`use crate::support;`), and what none takes is dead there.
#![allow(dead_code, unreachable_pub)]

pub mod a2a;
pub mod agent_protocol;
pub mod agent_sessions;
pub mod api_function;
pub mod approvals;
pub mod binaries;
pub mod config_files;
pub mod container;
pub mod crash_matrix;
pub mod deployment;
pub mod engine;
pub mod lambda_batch;
pub mod openapi;
pub mod steering;
pub mod table_items;
pub mod template;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_worker::engine::tools::{Tool, examples};
use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::MemoryStore;
use agent_worker::sinks::{Sink, SinkError, TurnRef, TurnSink};
use agent_worker_testkit::{BedrockStandIn, sid};
use futures_util::StreamExt;

/// A model id with characters the SDK percent-encodes in the path.
pub const MODEL_ID: &str = "us.anthropic.claude-sonnet-4-6-v1:0";

/// Test tuning: the defaults, with retry delays of a few milliseconds.
pub fn config() -> EngineConfig {
    EngineConfig {
        retry_base_delay: Duration::from_millis(1),
        retry_max_delay: Duration::from_millis(4),
        ..EngineConfig::default()
    }
}

/// The example tools named.
pub fn example_tools(names: &[&str]) -> Vec<Arc<dyn Tool>> {
    names
        .iter()
        .map(|n| examples::by_name(n).expect("an example tool"))
        .collect()
}

/// An engine on the stand-in, with the real Bedrock client.
pub fn engine(
    stand_in: &BedrockStandIn,
    store: &MemoryStore,
    config: EngineConfig,
    tools: Vec<Arc<dyn Tool>>,
) -> Engine {
    Engine::builder()
        .model(BedrockModel::new(stand_in.client(), MODEL_ID))
        .store(store.clone())
        .system_prompt("You are a test assistant.")
        .tools(tools)
        .config(config)
        .build()
        .expect("a valid engine")
}

/// Runs one turn to its end.
pub async fn run(agent: &impl Agent, session: &str, text: &str) -> Vec<AgentEvent> {
    agent
        .invoke(Scope::new(sid(session)), Prompt::text(text))
        .collect()
        .await
}

/// The text deltas, joined.
pub fn text_of(events: &[AgentEvent]) -> String {
    agent_worker::protocol::text_of(events)
}

/// The thinking deltas, joined.
pub fn thinking_of(events: &[AgentEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Thinking { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

/// The last event, which must be the terminal.
pub fn terminal(events: &[AgentEvent]) -> &AgentEvent {
    let last = events.last().expect("at least one event");
    assert!(last.is_terminal(), "the last event is not terminal: {events:#?}");
    assert_eq!(
        events.iter().filter(|e| e.is_terminal()).count(),
        1,
        "{events:#?}"
    );
    last
}

/// The failed terminal's (details, retryable, code).
pub fn failure(events: &[AgentEvent]) -> (String, bool, Option<String>) {
    match terminal(events) {
        AgentEvent::Failed {
            details,
            retryable,
            code,
        } => (details.clone(), *retryable, code.clone()),
        other => panic!("expected failed, got {other:?}"),
    }
}

/// A fixture file's text, from tests/fixtures/bedrock.
pub fn fixture(name: &str) -> String {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "fixtures", "bedrock", name]
        .iter()
        .collect();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every line a `tracing` subscriber writes, kept for a test to search.
#[derive(Clone, Default)]
pub struct LogCapture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// A subscriber that writes every event up to `level`, with its spans' fields, here; set it
    /// with `tracing::subscriber::set_default` on a current-thread runtime.
    pub fn subscriber(&self, level: tracing::Level) -> impl tracing::Subscriber + Send + Sync {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish()
    }
}

/// The `approval_required` event among `events`: the card a person is shown.
pub fn approval_event(events: &[AgentEvent]) -> serde_json::Value {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::Other(raw) if raw["type"] == "approval_required" => Some(raw.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no approval_required in {events:#?}"))
}

/// `token` with one character in its middle changed: it passes every check of shape and
/// length, so only the MAC can refuse it (the last character may carry only padding bits).
pub fn same_length_forgery(token: &str) -> String {
    let middle = token.len() / 2;
    let swapped = if &token[middle..=middle] == "A" { "B" } else { "A" };
    format!("{}{swapped}{}", &token[..middle], &token[middle + 1..])
}

/// A sink that keeps every event the turns sent, in order.
#[derive(Debug, Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Vec<AgentEvent>>>);

#[derive(Debug)]
struct Recording(Arc<Mutex<Vec<AgentEvent>>>);

#[async_trait::async_trait]
impl TurnSink for Recording {
    async fn event(&mut self, event: &AgentEvent) -> Result<(), SinkError> {
        self.0.lock().unwrap().push(event.clone());
        Ok(())
    }
}

impl Sink for Recorder {
    fn open(&self, _turn: &TurnRef) -> Box<dyn TurnSink> {
        Box::new(Recording(self.0.clone()))
    }
}

/// Runs `records` as one batch through `handler`, with the invocation's `deadline`; the message
/// ids the handler returned to the queue.
pub async fn run_batch(
    handler: &agent_worker::hosts::lambda::TurnHandler,
    records: Vec<aws_lambda_events::event::sqs::SqsMessage>,
    deadline: Option<std::time::SystemTime>,
) -> Vec<String> {
    let mut event = aws_lambda_events::event::sqs::SqsEvent::default();
    event.records = records;
    handler
        .handle_batch(event, deadline)
        .await
        .unwrap()
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect()
}

/// The model's call of the desk's `addNote` (call `tu-1`): a call that changes something.
pub fn desk_note_call() -> agent_worker_testkit::Reply {
    agent_worker_testkit::Reply::tool_call(
        "tu-1",
        "addNote",
        r#"{"ticketId":"T-1","text":"Called the customer back."}"#,
    )
}

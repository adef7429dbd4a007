//! The logger hook (`Engine::builder().logger`): a turn's log lines, its tools' included, reach
//! the product's own sink with the turn's ids, and still reach the program's `tracing`
//! subscriber; through the real Bedrock client, the stand-in and DynamoDB on moto.

use crate::support;

use std::sync::{Arc, Mutex};

use agent_worker::engine::tools::{ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine, LogLine, TurnLogger};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::{BedrockStandIn, Reply, moto, tid};
use futures_util::StreamExt;
use serde_json::{Value, json};
use support::LogCapture;

/// The product's sink: the lines it was given.
#[derive(Debug, Default, Clone)]
struct Kept(Arc<Mutex<Vec<LogLine>>>);

impl TurnLogger for Kept {
    fn log(&self, line: LogLine) {
        self.0.lock().unwrap().push(line);
    }
}

#[tokio::test]
async fn a_turns_lines_reach_the_products_sink_with_its_ids_and_tracing_still_gets_them() {
    let capture = LogCapture::default();
    let _program = tracing::subscriber::set_default(capture.subscriber(tracing::Level::INFO));
    let bedrock = BedrockStandIn::start().await.unwrap();
    let table = format!("logger-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let lookup = tool_fn(
        ToolSpec::new("lookup_order", "Looks an order up.", json!({"type": "object"})),
        |_: Value, _| async move {
            tracing::info!(order = "A-1", found = true, "looked the order up");
            tracing::debug!("a detail the sink does not take");
            Ok(json!({ "status": "shipped" }))
        },
    );
    let kept = Kept::default();
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(store)
        .tools(vec![Arc::new(lookup) as Arc<dyn agent_worker::engine::Tool>])
        .logger(kept.clone(), tracing::Level::INFO)
        .config(support::config())
        .build()
        .unwrap();
    bedrock.push(Reply::tool_call("c1", "lookup_order", "{}"));
    bedrock.push(Reply::text("It has shipped."));
    let events: Vec<AgentEvent> = engine
        .invoke(
            Scope::new("conv-log".parse().unwrap()).with_turn_id(tid("t-log")),
            Prompt::text("Where is A-1?"),
        )
        .collect()
        .await;
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );

    let lines = kept.0.lock().unwrap().clone();
    let line = lines
        .iter()
        .find(|l| l.message == "looked the order up")
        .unwrap_or_else(|| panic!("the tool's line: {lines:?}"));
    assert_eq!(
        (line.session.as_str(), line.turn_id.as_str()),
        ("conv-log", "t-log")
    );
    assert_eq!(line.level, tracing::Level::INFO);
    assert_eq!(line.fields["order"], "A-1");
    assert_eq!(line.fields["found"], true);
    assert!(
        lines
            .iter()
            .all(|l| l.message != "a detail the sink does not take")
    );
    // The program's own subscriber got the line too, inside the turn's span.
    let written = capture.text();
    assert!(written.contains("looked the order up"), "{written}");
    assert!(written.contains("turn_id=t-log"), "{written}");
}

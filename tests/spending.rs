//! Spending that cannot run away (issue 56): a model in a loop is stopped. Through the handler
//! the Lambda function runs, on moto's DynamoDB, the model being the Bedrock stand-in.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_worker::engine::tools::{Tool, ToolError, ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::AgentTurnPayload;
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::protocol::AgentEvent;
use agent_worker::session::{DynamoConfig, DynamoStore, HistoryStore as _, TurnLedger as _, TurnStatus};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::session_audit::audit;
use agent_worker_testkit::{BedrockStandIn, Reply, moto, sid, tid};
use serde_json::{Value, json};

async fn store() -> DynamoStore {
    let table = format!("spending-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).unwrap());
    store.create_table().await.unwrap();
    store
}

fn payload(turn: &str, text: &str) -> AgentTurnPayload {
    let body = json!({"turnId": turn, "conversationId": "loop-1", "userId": "ana", "accountId": "acme", "content": text});
    AgentTurnPayload::decode(&body.to_string()).unwrap()
}

/// A model that asks for the same lookup again and again: the call runs five times (the
/// default `max_repeat_calls`), the sixth ask is answered "not run" and ends the turn, completed
/// with `stopReason: "repeated_call"` and a line for the person; the history is whole, and the
/// model reads the line on the next turn. A lookup with other arguments is not counted.
#[tokio::test]
async fn a_model_asking_for_the_same_call_again_and_again_is_stopped_after_the_fifth() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = store().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let lookup = tool_fn(
        ToolSpec::new("lookup", "Looks an order up.", json!({"type": "object"})),
        move |_args: Value, _| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<Value, ToolError>(json!({"status": "pending"}))
            }
        },
    );
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(store.clone())
        .tools(vec![Arc::new(lookup) as Arc<dyn Tool>])
        .config(EngineConfig {
            max_rounds: 20,
            ..support::config()
        })
        .build()
        .unwrap();
    let handler = TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(store.clone())));
    // Another order first (not the same call), then the same one, over and over.
    bedrock.push(Reply::tool_call("c0", "lookup", r#"{"order":"O-0"}"#));
    for i in 1..=6 {
        // The same arguments, written in another order each time.
        let args = if i % 2 == 0 {
            r#"{"order":"O-1","fresh":true}"#
        } else {
            r#"{"fresh":true,"order":"O-1"}"#
        };
        bedrock.push(Reply::tool_call(&format!("c{i}"), "lookup", args));
    }

    let run = handler
        .run_turn_to_end(&payload("t1", "Is O-1 shipped yet?"), None)
        .await;
    assert_eq!(
        run.terminal,
        Some(AgentEvent::completed_with(json!({"stopReason": "repeated_call"})))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 6, "O-0 once, O-1 five times");
    assert_eq!(bedrock.requests().len(), 7, "no model call after the sixth ask");
    assert_eq!(bedrock.pending_replies(), 0);
    let record = store.turn(&sid("loop-1"), &tid("t1")).await.unwrap().unwrap();
    assert_eq!(record.status, TurnStatus::Completed);
    let history = store.load_history(&sid("loop-1")).await.unwrap();
    let checked = audit(
        &store,
        &[("loop-1".to_owned(), "t1".to_owned())],
        &Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(checked.violations, Vec::<String>::new());
    let last_result = history[history.len() - 2].content[0].clone();
    let result = serde_json::to_string(&last_result).unwrap();
    assert!(result.contains("already called 5 times"), "{result}");
    let told = history.last().unwrap().text();
    assert!(told.contains("looked like a loop"), "{told}");

    // The next turn: the model reads why the last one stopped.
    bedrock.push(Reply::text("It is still pending; I will not look again."));
    let run = handler
        .run_turn_to_end(&payload("t2", "Why did you stop?"), None)
        .await;
    assert_eq!(run.terminal, Some(AgentEvent::completed()));
    let request = bedrock.requests().last().unwrap().body["messages"].to_string();
    assert!(request.contains("looked like a loop"), "{request}");
}

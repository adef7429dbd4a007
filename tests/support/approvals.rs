//! Engines with approvals, their tools and decisions, for tests/approvals*.rs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use agent_worker::engine::tools::{Effect, Tool, ToolSpec, tool_fn};
use agent_worker::engine::{ApprovalSigner, BedrockModel, Engine, EngineConfig};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::{ApprovalStore, SessionStore};
use agent_worker_testkit::{BedrockStandIn, Reply, tid};
use futures_util::StreamExt;
use serde_json::{Value, json};

/// The tools: `pay` (a transaction), `lookup` (a read), `record` (a change); `pay` and `record`
/// count their runs, `pay` keeps its args.
pub struct Tools {
    pub paid: Arc<AtomicUsize>,
    pub recorded: Arc<AtomicUsize>,
    pub last_args: Arc<std::sync::Mutex<Option<Value>>>,
}

impl Tools {
    pub fn new() -> Self {
        Self {
            paid: Arc::new(AtomicUsize::new(0)),
            recorded: Arc::new(AtomicUsize::new(0)),
            last_args: Arc::default(),
        }
    }

    pub fn list(&self) -> Vec<Arc<dyn Tool>> {
        let paid = self.paid.clone();
        let last = self.last_args.clone();
        let pay = tool_fn(
            ToolSpec::new(
                "pay",
                "Pays an invoice.",
                json!({"type": "object", "properties": {
                    "amount": {"type": "number", "title": "Amount (EUR)"},
                    "to": {"type": "string", "title": "Payee"}
                }, "required": ["amount", "to"]}),
            )
            .effect(Effect::Transaction)
            .title("Pay an invoice")
            .consequence("Money leaves your account."),
            move |args, _| {
                let paid = paid.clone();
                let last = last.clone();
                async move {
                    paid.fetch_add(1, Ordering::SeqCst);
                    *last.lock().unwrap() = Some(args);
                    Ok(json!({"receipt": "R-1"}))
                }
            },
        );
        let lookup = tool_fn(
            ToolSpec::new("lookup", "Reads.", json!({"type": "object"})),
            |_, _| async { Ok(json!({"found": true})) },
        );
        let recorded = self.recorded.clone();
        let record = tool_fn(
            ToolSpec::new("record", "Writes a note.", json!({"type": "object"})).effect(Effect::Mutate),
            move |_, _| {
                let recorded = recorded.clone();
                async move {
                    recorded.fetch_add(1, Ordering::SeqCst);
                    Ok(json!({"recorded": true}))
                }
            },
        );
        vec![Arc::new(pay), Arc::new(lookup), Arc::new(record)]
    }
}

pub fn signer() -> ApprovalSigner {
    ApprovalSigner::new(*b"0123456789abcdef0123456789abcdef").unwrap()
}

pub fn engine_with<S>(bedrock: &BedrockStandIn, store: &S, tools: &Tools, config: EngineConfig) -> Engine
where
    S: SessionStore + ApprovalStore + Clone + 'static,
{
    Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store.clone())
        .approvals(store.clone(), signer())
        .tools(tools.list())
        .config(config)
        .build()
        .unwrap()
}

pub fn scope(turn: &str) -> Scope {
    Scope::new("s1".parse().unwrap())
        .with_turn_id(tid(turn))
        .with("userId", "ada")
}

pub async fn ask_to_pay(bedrock: &BedrockStandIn, engine: &Engine) -> Value {
    ask_for_payment(bedrock, engine, "t1", r#"{"amount": 12, "to": "acme"}"#).await
}

/// Turn `turn` in which the model asks to pay with `args`: the approval it waits for.
pub async fn ask_for_payment(bedrock: &BedrockStandIn, engine: &Engine, turn: &str, args: &str) -> Value {
    bedrock.push(Reply::tool_call(&format!("call-pay-{turn}"), "pay", args));
    let events: Vec<_> = engine
        .invoke(scope(turn), Prompt::text("Pay them"))
        .collect()
        .await;
    assert_eq!(
        terminal(&events),
        &AgentEvent::completed_with(json!({"stopReason": "approval_required"}))
    );
    approval_event(&events)
}

pub fn decide(turn: &str, event: &Value, decision: &str, token: Option<&str>) -> Scope {
    let mut approval = json!({"approvalId": event["approvalId"], "decision": decision});
    if let Some(token) = token {
        approval["token"] = json!(token);
    }
    scope(turn).with("approval", approval)
}

/// What the model was told at the start of request `index`: the last message it was sent.
pub fn told(bedrock: &BedrockStandIn, index: usize) -> String {
    bedrock.requests()[index].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string()
}

/// Runs turn `scope` with no words (a decision), the model answering with one line.
pub async fn decision_turn(bedrock: &BedrockStandIn, engine: &Engine, scope: Scope) -> Vec<AgentEvent> {
    bedrock.push(Reply::text("Noted."));
    engine.invoke(scope, Prompt::text("")).collect().await
}

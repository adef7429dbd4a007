//! Standard Agents runtimes on the Bedrock stand-in for tests/agent_sessions.rs and
//! tests/agent_subagents.rs.

use std::path::Path;
use std::sync::Arc;

use agent_worker::agents::{
    AgentRuntime, Catalog, DynamoThreadStore, HandlerError, Known, MemoryThreadStore, PromptDefinition,
    ThreadState, ThreadStore, handler_fn,
};
use agent_worker::engine::BedrockModel;
use agent_worker::engine::model::Model;
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::{DynamoConfig, DynamoStore, MemoryStore, SessionStore};
use agent_worker_testkit::{BedrockStandIn, moto, sid, tid};
use futures_util::StreamExt;
use serde_json::Value;

pub fn examples() -> Catalog {
    let mut known = Known::with_builtins();
    known.tools.insert("current_time".into());
    let (catalog, issues) = Catalog::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents"),
        &known,
    )
    .unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    catalog
}

pub fn runtime_on(
    bedrock: &BedrockStandIn,
    catalog: Catalog,
    sessions: impl SessionStore + 'static,
    threads: impl ThreadStore,
) -> AgentRuntime {
    let client = bedrock.client();
    runtime_with(
        move |id| Arc::new(BedrockModel::new(client.clone(), id)) as Arc<dyn Model>,
        catalog,
        sessions,
        threads,
    )
}

pub fn runtime_with(
    models: impl Fn(&str) -> Arc<dyn Model> + Send + Sync + 'static,
    catalog: Catalog,
    sessions: impl SessionStore + 'static,
    threads: impl ThreadStore,
) -> AgentRuntime {
    AgentRuntime::builder()
        .catalog(catalog)
        .models(super::MODEL_ID, models)
        .session_store(sessions)
        .thread_store(threads)
        .tools(super::example_tools(&["current_time"]))
        .handler(
            "shout",
            handler_fn(|state: &mut ThreadState| {
                let inbound = state.inbound();
                if inbound.trim() == "bye" {
                    state.stop_session("said goodbye");
                } else {
                    state.set_status("shouting");
                    // The agent definition's `env` gives the handler its defaults.
                    let suffix = state.env("SUFFIX").unwrap_or_default().to_owned();
                    state.append_message(format!("{}{suffix}", inbound.to_uppercase()));
                }
                async { Ok::<(), HandlerError>(()) }
            }),
        )
        .engine_config(super::config())
        .build()
        .unwrap()
}

pub fn runtime(bedrock: &BedrockStandIn, catalog: Catalog) -> AgentRuntime {
    runtime_on(bedrock, catalog, MemoryStore::new(), MemoryThreadStore::new())
}

pub async fn say(agent: &impl Agent, session: &str, turn: &str, text: &str) -> Vec<AgentEvent> {
    agent
        .invoke(
            Scope::new(sid(session)).with_turn_id(tid(turn)),
            Prompt::text(text),
        )
        .collect()
        .await
}

pub fn statuses(events: &[AgentEvent]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Other(raw) if raw["type"] == "session_status" => Some(raw.clone()),
            _ => None,
        })
        .collect()
}

pub fn completed(events: &[AgentEvent]) -> Value {
    match events.last() {
        Some(AgentEvent::Completed { data: Some(data) }) => data.clone(),
        other => panic!("expected completed with data, got {other:?}\n{events:#?}"),
    }
}

pub fn failure_code(events: &[AgentEvent]) -> String {
    match events.last() {
        Some(AgentEvent::Failed { code: Some(code), .. }) => code.clone(),
        other => panic!("expected failed, got {other:?}"),
    }
}

pub fn texts_sent(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|c| c["text"].as_str())
                .collect::<Vec<_>>()
                .join("")
        })
        .collect()
}

pub fn prompt(name: &str) -> PromptDefinition {
    PromptDefinition::new(name, format!("You are {name}."))
}

/// Two runtimes (workers) on one DynamoDB table, as two Lambda instances would be.
pub async fn two_workers_on_dynamodb(bedrock: &BedrockStandIn) -> (AgentRuntime, AgentRuntime) {
    let table = format!("agents-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).unwrap());
    store.create_table().await.unwrap();
    let worker = || {
        runtime_on(
            bedrock,
            examples(),
            store.clone(),
            DynamoThreadStore::new(store.clone()),
        )
    };
    (worker(), worker())
}

//! The steering tests' deployment: two engine instances over one table on moto, the Bedrock
//! stand-in behind a model whose chosen call waits at a gate, and a tool that waits for a
//! go-ahead.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_worker::engine::model::{ModelRequest, ModelStream};
use agent_worker::engine::tools::{ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine, EngineConfig, Model};
use agent_worker::protocol::{
    ACCOUNT_ID_KEY, Agent as _, AgentEvent, Prompt, Scope, SessionCommand, SessionControl, USER_ID_KEY,
};
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::{BedrockStandIn, moto, sid, tid};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// A model call that waits at a gate: the real Bedrock client, held before its call `at`.
#[derive(Debug)]
pub struct Gated {
    pub inner: Arc<BedrockModel>,
    pub calls: AtomicUsize,
    pub at: usize,
    pub reached: Arc<Notify>,
    pub open: Arc<Notify>,
}

impl Model for Gated {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let inner = self.inner.clone();
        if call != self.at {
            return inner.stream(request);
        }
        let (reached, open) = (self.reached.clone(), self.open.clone());
        Box::pin(
            futures_util::stream::once(async move {
                reached.notify_one();
                open.notified().await;
                inner.stream(request)
            })
            .flatten(),
        )
    }
}

/// A stop watch too slow to read anything during a test: what a turn takes, it took at a round
/// boundary or at its commit.
pub const ONLY_AT_BOUNDARIES: Duration = Duration::from_secs(60);

/// Two instances of one deployment: the turn runs on `runner`, commands go through `sender`.
pub struct Deployment {
    pub table: String,
    pub bedrock: BedrockStandIn,
    pub store: DynamoStore,
    pub runner: Engine,
    pub sender: Engine,
    /// The `wait_for_go` tool has started.
    pub tool_started: Arc<Notify>,
    /// Lets `wait_for_go` end.
    pub go: Arc<Notify>,
    /// The gated model call has been made.
    pub model_reached: Arc<Notify>,
    /// Lets the gated model call go on.
    pub model_open: Arc<Notify>,
}

/// A deployment whose model call `gate_at` waits at the gate, and whose turns look for a stop
/// on their own every `poll` (besides the look at each round boundary).
pub async fn deployment(gate_at: usize, poll: Duration) -> Deployment {
    let table = format!("steering-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let (tool_started, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (started, release) = (tool_started.clone(), go.clone());
    let wait_for_go = tool_fn(
        ToolSpec::new(
            "wait_for_go",
            "Waits for the go-ahead.",
            json!({"type": "object", "properties": {}}),
        ),
        move |_, _| {
            let (started, release) = (started.clone(), release.clone());
            async move {
                started.notify_one();
                release.notified().await;
                Ok(json!({"went": true}))
            }
        },
    );
    let (model_reached, model_open) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let config = EngineConfig {
        stop_poll_interval: poll,
        stop_poll_idle: poll,
        stop_grace: Duration::from_millis(50),
        ..super::config()
    };
    let runner = Engine::builder()
        .model(Gated {
            inner: Arc::new(BedrockModel::new(bedrock.client(), super::MODEL_ID)),
            calls: AtomicUsize::new(0),
            at: gate_at,
            reached: model_reached.clone(),
            open: model_open.clone(),
        })
        .store(store.clone())
        .tool(Arc::new(wait_for_go))
        .config(config.clone())
        .build()
        .unwrap();
    // Another instance: its own client, the same table.
    let sender = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), super::MODEL_ID))
        .store(DynamoStore::new(
            moto().dynamodb(),
            DynamoConfig::new(table.clone()).unwrap(),
        ))
        .config(config)
        .build()
        .unwrap();
    Deployment {
        table,
        bedrock,
        store,
        runner,
        sender,
        tool_started,
        go,
        model_reached,
        model_open,
    }
}

impl Deployment {
    /// Starts turn `turn_id` of `session` on the runner, for person `u` of account `a`.
    pub fn start(
        &self,
        session: &str,
        turn_id: &str,
        text: &str,
    ) -> tokio::task::JoinHandle<Vec<AgentEvent>> {
        let scope = Scope::new(sid(session))
            .with_turn_id(tid(turn_id))
            .with(USER_ID_KEY, "u")
            .with(ACCOUNT_ID_KEY, "a");
        let events = self.runner.invoke(scope, Prompt::text(text));
        tokio::spawn(events.collect())
    }

    pub async fn send(&self, session: &str, command: SessionCommand) -> Result<String, (String, bool)> {
        self.sender
            .control()
            .dispatch(&agent_worker_testkit::sid(session), command)
            .await
            .map(|accepted| accepted.run_id)
            .map_err(|refused| (refused.code, refused.retryable))
    }
}

pub fn steer(text: &str) -> SessionCommand {
    SessionCommand::Steer { prompt: text.into() }
}

pub fn follow_up(text: &str) -> SessionCommand {
    SessionCommand::FollowUp { prompt: text.into() }
}

/// The texts of a Bedrock request's last message.
pub fn last_message_texts(body: &Value) -> Vec<String> {
    let messages = body["messages"].as_array().unwrap();
    messages.last().unwrap()["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|block| block["text"].as_str().map(str::to_owned))
        .collect()
}

pub fn delivered(events: &[AgentEvent]) -> Vec<(String, u64)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Other(v) if v["type"] == "command_delivered" => Some((
                v["kind"].as_str().unwrap().to_owned(),
                v["position"].as_u64().unwrap(),
            )),
            _ => None,
        })
        .collect()
}

pub fn terminals(events: &[AgentEvent]) -> usize {
    events.iter().filter(|e| e.is_terminal()).count()
}

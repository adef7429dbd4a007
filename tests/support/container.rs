//! The container host over real HTTP on 127.0.0.1, with DynamoDB on moto and the Bedrock
//! stand-in: a server, and the requests and event streams the tests make of it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_worker::engine::attachments::LocalFileArea;
use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::container::{ContainerConfig, ContainerHost, TurnEnd, serve};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::{BedrockStandIn, moto};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::MODEL_ID;

pub const KEY: &str = "test-key-0123456789";

pub struct Server {
    pub url: String,
    pub store: DynamoStore,
    pub bedrock: BedrockStandIn,
    pub ends: Arc<Mutex<Vec<TurnEnd>>>,
    pub stop: Option<oneshot::Sender<()>>,
    pub served: tokio::task::JoinHandle<std::io::Result<()>>,
}

pub async fn server(capacity: usize, engine_config: EngineConfig, grace: Duration) -> Server {
    server_with(capacity, engine_config, grace, |_| {}).await
}

pub async fn server_with(
    capacity: usize,
    engine_config: EngineConfig,
    grace: Duration,
    tune: impl FnOnce(&mut ContainerConfig),
) -> Server {
    let table = format!("container-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).unwrap());
    store.create_table().await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    // The files people attach: a folder of the test's own.
    let files = LocalFileArea::new(
        std::env::temp_dir().join(format!("container-files-{}", uuid::Uuid::new_v4().simple())),
    );
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store.clone())
        .ui_answers(Arc::new(store.clone()))
        .file_area(files.clone())
        .config(engine_config)
        .build()
        .unwrap();
    let log = DynamoEventLog::new(store.clone());
    let handler = TurnHandler::new(engine, Sinks::new().with(log.clone()));
    let mut settings = ContainerConfig::new(KEY).unwrap();
    settings.max_concurrent_turns = capacity;
    settings.shutdown_grace = grace;
    settings.event_poll = Duration::from_millis(20);
    tune(&mut settings);
    let ends = Arc::new(Mutex::new(Vec::new()));
    let seen = ends.clone();
    let host = ContainerHost::new(handler, Arc::new(store.clone()), Some(log), MODEL_ID, settings)
        .on_turn_end(move |end| seen.lock().unwrap().push(end))
        .conversations(agent_worker::conversations::Conversations::new(store.clone()))
        .ui_answers(Arc::new(store.clone()))
        .uploads(Arc::new(files));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(serve(listener, host, async move {
        let _ = stopped.await;
    }));
    Server {
        url,
        store,
        bedrock,
        ends,
        stop: Some(stop),
        served,
    }
}

pub fn turn(id: &str, session: &str) -> Value {
    json!({"turnId": id, "conversationId": session, "userId": "u", "accountId": "a", "content": "Hi"})
}

pub async fn post(url: &str, key: Option<&str>, body: &str) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// The events of an SSE body: (id, data).
pub fn sse_events(body: &str) -> Vec<(u64, Value)> {
    body.split("\n\n")
        .filter_map(|block| {
            let id = block
                .lines()
                .find_map(|l| l.strip_prefix("id:"))?
                .trim()
                .parse()
                .ok()?;
            let data = block.lines().find_map(|l| l.strip_prefix("data:"))?.trim();
            Some((id, serde_json::from_str(data).ok()?))
        })
        .collect()
}

pub async fn events(server: &Server, turn_id: &str, last: Option<u64>) -> Vec<(u64, Value)> {
    events_at(&server.url, "conv-1", turn_id, last).await
}

/// The events of turn `turn_id` of `session` (person `u` of account `a`) from the server at
/// `url`, after `last`, to the terminal.
pub async fn events_at(url: &str, session: &str, turn_id: &str, last: Option<u64>) -> Vec<(u64, Value)> {
    let mut request = reqwest::Client::new()
        .get(format!(
            "{url}/turns/{turn_id}/events?session={session}&userId=u&accountId=a"
        ))
        .header("x-api-key", KEY);
    if let Some(last) = last {
        request = request.header("last-event-id", last.to_string());
    }
    let body = tokio::time::timeout(Duration::from_secs(20), async {
        request.send().await.unwrap().text().await.unwrap()
    })
    .await
    .expect("the event stream ended after the terminal");
    sse_events(&body)
}

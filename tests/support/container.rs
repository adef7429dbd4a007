//! The container host over real HTTP on 127.0.0.1, with DynamoDB on moto and the Bedrock
//! stand-in: a server, and the requests and event streams the tests make of it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_worker::engine::attachments::LocalFileArea;
use agent_worker::engine::tools::Tool;
use agent_worker::engine::{ApprovalSigner, BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::TurnQueue;
use agent_worker::hosts::container::console::Console;
use agent_worker::hosts::container::{ContainerConfig, ContainerHost, TurnEnd};
use agent_worker::hosts::jwt::{AccountFrom, JwtConfig, JwtVerifier};
use agent_worker::hosts::runner::TurnHandler;
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::{BedrockStandIn, JwksStandIn, SigningKey, moto};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::MODEL_ID;

pub const KEY: &str = "test-key-0123456789";

/// The test kit's token issuer on 127.0.0.1 with one RS256 key (`kid`), and a verifier's
/// settings for its tokens for `audience`, every person of the account `account`.
pub async fn token_issuer(kid: &str, audience: &str, account: &str) -> (SigningKey, JwksStandIn, JwtConfig) {
    let key = SigningKey::rs256(kid);
    let issuer = JwksStandIn::start(&[&key]).await.unwrap();
    let config = JwtConfig::new(
        issuer.issuer(),
        audience,
        Some(issuer.jwks_url()),
        AccountFrom::Fixed(account.into()),
    )
    .unwrap();
    (key, issuer, config)
}

pub struct Server {
    pub url: String,
    pub store: DynamoStore,
    /// The files people attach (a folder of the test's own).
    pub files: LocalFileArea,
    pub bedrock: BedrockStandIn,
    pub ends: Arc<Mutex<Vec<TurnEnd>>>,
    /// How many turns have ended: what [`Server::ended`] waits on.
    pub ended: tokio::sync::watch::Receiver<usize>,
    pub stop: Option<oneshot::Sender<()>>,
    pub served: tokio::task::JoinHandle<std::io::Result<()>>,
    /// Fails the test, when the server goes, if any of its answers did not follow the OpenAPI
    /// document.
    pub answers_checked: super::openapi::Checked,
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
    server_for(capacity, engine_config, None, |settings| {
        settings.shutdown_grace = grace;
        tune(settings);
    })
    .await
}

/// A server with `console` (its page and its token) beside the API key, when given.
pub async fn server_for(
    capacity: usize,
    engine_config: EngineConfig,
    console: Option<Console>,
    tune: impl FnOnce(&mut ContainerConfig),
) -> Server {
    server_built(capacity, engine_config, console, None, None, Vec::new(), tune).await
}

/// A server that knows people by their own tokens, verified by `verifier`.
pub async fn server_with_tokens(verifier: JwtVerifier) -> Server {
    server_with_tokens_and_tools(verifier, Vec::new()).await
}

/// The same, with `tools`.
pub async fn server_with_tokens_and_tools(verifier: JwtVerifier, tools: Vec<Arc<dyn Tool>>) -> Server {
    server_built(2, super::config(), None, None, Some(verifier), tools, |_| {}).await
}

/// A server that sends the turns it accepts to `queue` instead of running them.
pub async fn server_queued(queue: TurnQueue) -> Server {
    server_built(2, super::config(), None, Some(queue), None, Vec::new(), |_| {}).await
}

/// A server whose agent has `tools`.
pub async fn server_with_tools(tools: Vec<Arc<dyn Tool>>) -> Server {
    server_built(2, super::config(), None, None, None, tools, |_| {}).await
}

async fn server_built(
    capacity: usize,
    engine_config: EngineConfig,
    console: Option<Console>,
    queue: Option<TurnQueue>,
    tokens: Option<JwtVerifier>,
    tools: Vec<Arc<dyn Tool>>,
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
        .approvals(store.clone(), ApprovalSigner::new([7u8; 32]).unwrap())
        .keep_large_content(Arc::new(files.clone()))
        .tools(tools)
        .config(engine_config)
        .build()
        .unwrap();
    let log = DynamoEventLog::new(store.clone());
    let handler = TurnHandler::new(engine, Sinks::new().with(log.clone()));
    let mut settings = match tokens {
        Some(verifier) => ContainerConfig::people_by_tokens(Arc::new(verifier)),
        None => ContainerConfig::new(KEY).unwrap(),
    };
    settings.max_concurrent_turns = capacity;
    settings.shutdown_grace = Duration::from_secs(5);
    settings.body_limit = 2 * 1024 * 1024;
    settings.event_poll = Duration::from_millis(20);
    tune(&mut settings);
    let ends = Arc::new(Mutex::new(Vec::new()));
    let seen = ends.clone();
    let (count, ended) = tokio::sync::watch::channel(0);
    let host = match queue {
        Some(queue) => ContainerHost::queued(queue, Arc::new(store.clone()), Some(log), settings),
        None => ContainerHost::builder(handler, Arc::new(store.clone()), Some(log), MODEL_ID, settings),
    };
    let mut host = host
        .on_turn_end(move |end| {
            let mut seen = seen.lock().unwrap();
            seen.push(end);
            count.send_replace(seen.len());
        })
        .conversations(
            agent_worker::conversations::Conversations::new(store.clone()).file_area(Arc::new(files.clone())),
        )
        .ui_answers(Arc::new(store.clone()))
        .uploads(Arc::new(files.clone()));
    if let Some(console) = console {
        host = host.console(console);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(super::openapi::serve_checked(
        listener,
        host.build(),
        async move {
            let _ = stopped.await;
        },
    ));
    let answers_checked = super::openapi::Checked(url.clone());
    Server {
        url,
        store,
        files,
        bedrock,
        ends,
        ended,
        stop: Some(stop),
        served,
        answers_checked,
    }
}

impl Server {
    /// The turns' ends, once `count` have ended (at most 20 s: a turn that never ends fails the
    /// test).
    pub async fn ended(&self, count: usize) -> Vec<TurnEnd> {
        let mut ended = self.ended.clone();
        tokio::time::timeout(Duration::from_secs(20), ended.wait_for(|&n| n >= count))
            .await
            .expect("the turns ended")
            .expect("the host is running");
        self.ends.lock().unwrap().clone()
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

/// The events of a turn's SSE body: (id, data), each checked against the OpenAPI document
/// (`stream_ended`, which has no id, too); a whole block that is neither an event with an id and
/// JSON data, nor `stream_ended`, nor a comment, fails the test.
pub fn sse_events(body: &str) -> Vec<(u64, Value)> {
    // The blocks that came whole: a body read while the stream goes on may end inside one.
    let whole = body.rfind("\n\n").map_or("", |end| &body[..end]);
    whole
        .split("\n\n")
        .filter(|block| !block.trim().is_empty() && !block.lines().all(|l| l.starts_with(':')))
        .filter_map(|block| {
            let data = block
                .lines()
                .find_map(|l| l.strip_prefix("data:"))
                .unwrap_or_else(|| panic!("an SSE block without data: {block:?}"))
                .trim();
            let data: Value = serde_json::from_str(data)
                .unwrap_or_else(|e| panic!("an event whose data is not JSON ({e}): {block:?}"));
            super::openapi::check_event(&data);
            let id = block.lines().find_map(|l| l.strip_prefix("id:"));
            if id.is_none() && block.lines().any(|l| l.trim() == "event: stream_ended") {
                return None;
            }
            let id = id
                .unwrap_or_else(|| panic!("an event without an id: {block:?}"))
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("an event whose id is not a position ({e}): {block:?}"));
            Some((id, data))
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

/// Every item of the server's table, as text sorted by key: what a refused request must leave
/// as it found it.
pub async fn table(store: &DynamoStore) -> Vec<String> {
    let mut items: Vec<String> = agent_worker_testkit::session_audit::every_item(store.table())
        .await
        .unwrap()
        .iter()
        .map(|item| {
            let mut fields: Vec<String> = item.iter().map(|(k, v)| format!("{k}={}", render(v))).collect();
            fields.sort();
            fields.join(" ")
        })
        .collect();
    items.sort();
    items
}

/// A request to the server with `key` as `x-api-key` (or none), its status and its body.
pub async fn send(request: reqwest::RequestBuilder, key: Option<&str>) -> (u16, Value) {
    let request = match key {
        Some(key) => request.header("x-api-key", key),
        None => request,
    };
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// The items that differ between two [`table`]s, each cut to its first 160 characters: what a
/// failing assertion shows (the items themselves can be hundreds of kilobytes).
pub fn changed(before: &[String], after: &[String]) -> Vec<String> {
    let cut = |item: &String| item.chars().take(160).collect::<String>();
    let gone = before
        .iter()
        .filter(|i| !after.contains(i))
        .map(|i| format!("- {}", cut(i)));
    let new = after
        .iter()
        .filter(|i| !before.contains(i))
        .map(|i| format!("+ {}", cut(i)));
    gone.chain(new).collect()
}

/// An attribute value as text, maps with their keys in order (a `HashMap`'s `Debug` is not).
fn render(value: &aws_sdk_dynamodb::types::AttributeValue) -> String {
    use aws_sdk_dynamodb::types::AttributeValue;
    match value {
        AttributeValue::M(map) => {
            let mut fields: Vec<String> = map.iter().map(|(k, v)| format!("{k}: {}", render(v))).collect();
            fields.sort();
            format!("{{{}}}", fields.join(", "))
        }
        AttributeValue::L(list) => format!("[{}]", list.iter().map(render).collect::<Vec<_>>().join(", ")),
        other => format!("{other:?}"),
    }
}

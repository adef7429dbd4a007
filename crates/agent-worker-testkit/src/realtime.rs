//! A stand-in for seed 004's realtime server (`@ouispec/agent-realtime`), speaking the routes
//! the worker and a product's API use, each behind the internal key in `x-api-key` (401
//! without it):
//!
//! | route | what it does |
//! | --- | --- |
//! | `POST /api/emit` | keeps a turn's event (`{"conversationId", "turnId", "event", ...}`) |
//! | `GET /internal/oui/action-results/{callId}` | the tab's answer ([`answer`](RealtimeStandIn::answer) sets it); 404 while there is none |
//! | `POST /internal/turns/{turnId}/stop` | the product's API asks a turn to stop (`{"reason": "user_stop" \| "superseded"}`, `user_stop` without a body); the first ask is kept |
//! | `GET /internal/turns/{turnId}/stop` | the stop asked (`{"reason", "at"}`); 404 while none was |
//! | `POST /internal/approvals` | keeps a pending approval; 409 when its id is taken |
//! | `GET /internal/approvals/{id}` | `{"approval", "status"}`; 404 |
//! | `POST /internal/approvals/{id}/settle` | `{"outcome": "redeem" \| "decline" \| "expire"}`: from pending only (409 otherwise) |
//! | `GET /internal/approvals?turnId=T` | `{"approvals": [{"approval", "status"}]}` of that turn |
//!
//! [`failing`](RealtimeStandIn::failing) makes every route answer 503 (a server that errors);
//! a [`FaultProxy`](crate::FaultProxy) in front of it makes one that cannot be reached.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, body::Bytes};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

/// The internal key the stand-in takes.
pub const REALTIME_KEY: &str = "realtime-internal-key-0123456789";

/// What the stand-in has been told and asked.
#[derive(Debug, Default, Clone)]
pub struct RealtimeState {
    /// The events `POST /api/emit` took, in order.
    pub emitted: Vec<Value>,
    /// Each request as `METHOD path` (with its query), in order; refused ones too.
    pub requests: Vec<String>,
    /// The stops asked, by turn.
    pub stops: HashMap<String, Value>,
    /// The approvals, by id: the approval's JSON and its status.
    pub approvals: BTreeMap<String, (Value, String)>,
    answers: HashMap<String, Value>,
    failing: bool,
}

impl RealtimeState {
    /// How many times turn `turn_id`'s stop was asked for.
    pub fn stop_asks(&self, turn_id: &str) -> usize {
        let asked = format!("GET /internal/turns/{turn_id}/stop");
        self.requests.iter().filter(|r| **r == asked).count()
    }

    /// The `type`s of the events of turn `turn_id`, in order.
    pub fn event_types(&self, turn_id: &str) -> Vec<String> {
        self.emitted
            .iter()
            .filter(|e| e["turnId"] == turn_id)
            .filter_map(|e| e["event"]["type"].as_str().map(str::to_owned))
            .collect()
    }
}

struct Shared {
    state: Mutex<RealtimeState>,
    /// Counts changes, so that a test waits on them instead of sleeping.
    changed: watch::Sender<u64>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, RealtimeState> {
    shared
        .state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn change<T>(&self, f: impl FnOnce(&mut RealtimeState) -> T) -> T {
        let out = f(&mut lock(self));
        self.changed.send_modify(|n| *n += 1);
        out
    }
}

/// A running stand-in on 127.0.0.1. Dropping it stops the server.
pub struct RealtimeStandIn {
    url: String,
    shared: Arc<Shared>,
    _stop: oneshot::Sender<()>,
}

impl std::fmt::Debug for RealtimeStandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealtimeStandIn").field("url", &self.url).finish()
    }
}

impl RealtimeStandIn {
    /// Starts one on a free port of 127.0.0.1.
    pub async fn start() -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            changed: watch::channel(0).0,
        });
        let app = router(shared.clone());
        Ok(Self {
            url,
            shared,
            _stop: super::serve_in_background(listener, app),
        })
    }

    /// Its base URL (`EMIT_URL`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A worker's settings for a product wired as seed 004 says, on this server at `url` (its
    /// own, or a proxy's in front of it): events to it, the tab's answers from it.
    pub fn settings_at(url: &str) -> Vec<(&'static str, String)> {
        vec![
            ("EVENT_SINKS", "http".to_owned()),
            ("EMIT_URL", url.to_owned()),
            ("EMIT_API_KEY", REALTIME_KEY.to_owned()),
            ("UI_ANSWERS", "realtime".to_owned()),
        ]
    }

    /// [`settings_at`](Self::settings_at) its own URL.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        Self::settings_at(&self.url)
    }

    /// With `true`, every route answers 503 until told `false`.
    pub fn failing(&self, failing: bool) {
        self.shared.change(|s| s.failing = failing);
    }

    /// Sets the tab's answer to call `call_id`.
    pub fn answer(&self, call_id: &str, answer: Value) {
        self.shared
            .change(|s| s.answers.insert(call_id.to_owned(), answer));
    }

    /// What it holds now.
    pub fn state(&self) -> RealtimeState {
        lock(&self.shared).clone()
    }

    /// Waits until `ready` holds of its state, for at most `limit`; panics naming `what` when
    /// it does not.
    pub async fn wait_for(&self, what: &str, limit: Duration, ready: impl Fn(&RealtimeState) -> bool) {
        let mut changed = self.shared.changed.subscribe();
        let waited = tokio::time::timeout(limit, async {
            loop {
                if ready(&lock(&self.shared)) {
                    return;
                }
                if changed.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "the realtime stand-in: {what}, not within {limit:?}"
        );
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/api/emit", post(emit))
        .route("/internal/oui/action-results/{id}", get(action_result))
        .route("/internal/turns/{turn}/stop", get(stop_of).post(ask_stop))
        .route("/internal/approvals", post(put_approval).get(turn_approvals))
        .route("/internal/approvals/{id}", get(approval))
        .route("/internal/approvals/{id}/settle", post(settle))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), gate))
        .with_state(shared)
}

/// Notes each request, and refuses one without the key, or every one while failing.
async fn gate(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Response {
    let line = format!(
        "{} {}",
        request.method(),
        request.uri().path_and_query().map_or("", |p| p.as_str())
    );
    let failing = shared.change(|s| {
        s.requests.push(line);
        s.failing
    });
    if failing {
        return (StatusCode::SERVICE_UNAVAILABLE, "failing, as the test asked").into_response();
    }
    let key = headers.get("x-api-key").and_then(|k| k.to_str().ok());
    if key != Some(REALTIME_KEY) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    next.run(request).await
}

async fn emit(State(shared): State<Arc<Shared>>, body: Bytes) -> StatusCode {
    match serde_json::from_slice::<Value>(&body) {
        Ok(event) => {
            shared.change(|s| s.emitted.push(event));
            StatusCode::NO_CONTENT
        }
        Err(_) => StatusCode::BAD_REQUEST,
    }
}

async fn action_result(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match lock(&shared).answers.get(&id) {
        Some(answer) => Json(answer.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn stop_of(State(shared): State<Arc<Shared>>, Path(turn): Path<String>) -> Response {
    match lock(&shared).stops.get(&turn) {
        Some(stop) => Json(stop.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn ask_stop(State(shared): State<Arc<Shared>>, Path(turn): Path<String>, body: Bytes) -> Response {
    let asked: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(asked) => asked,
            Err(_) => return StatusCode::BAD_REQUEST.into_response(),
        }
    };
    let reason = asked["reason"].as_str().unwrap_or("user_stop").to_owned();
    if reason != "user_stop" && reason != "superseded" {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    shared.change(|s| {
        s.stops
            .entry(turn)
            .or_insert_with(|| json!({"reason": reason, "at": at}));
    });
    (StatusCode::ACCEPTED, Json(json!({"recorded": true}))).into_response()
}

async fn put_approval(State(shared): State<Arc<Shared>>, Json(approval): Json<Value>) -> StatusCode {
    let Some(id) = approval["id"].as_str().map(str::to_owned) else {
        return StatusCode::BAD_REQUEST;
    };
    shared.change(|s| {
        if s.approvals.contains_key(&id) {
            return StatusCode::CONFLICT;
        }
        s.approvals.insert(id, (approval, "pending".to_owned()));
        StatusCode::CREATED
    })
}

fn kept((approval, status): &(Value, String)) -> Value {
    json!({"approval": approval, "status": status})
}

async fn approval(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match lock(&shared).approvals.get(&id) {
        Some(found) => Json(kept(found)).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn turn_approvals(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(turn) = query.get("turnId") else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let approvals: Vec<Value> = lock(&shared)
        .approvals
        .values()
        .filter(|(approval, _)| approval["turnId"] == turn.as_str())
        .map(kept)
        .collect();
    Json(json!({ "approvals": approvals })).into_response()
}

async fn settle(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    let to = match body["outcome"].as_str() {
        Some("redeem") => "redeemed",
        Some("decline") => "declined",
        Some("expire") => "expired",
        _ => return StatusCode::BAD_REQUEST.into_response(),
    };
    shared.change(|s| match s.approvals.get_mut(&id) {
        None => StatusCode::NOT_FOUND.into_response(),
        Some((_, status)) if status != "pending" => StatusCode::CONFLICT.into_response(),
        Some((_, status)) => {
            *status = to.to_owned();
            Json(json!({ "status": to })).into_response()
        }
    })
}

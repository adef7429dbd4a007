//! A wire-level stand-in for Amazon Bedrock's Converse and ConverseStream APIs.
//!
//! It is an HTTP server on 127.0.0.1 that answers `POST /model/{modelId}/converse-stream` with
//! real event-stream frames (encoded with `aws-smithy-eventstream`) and `POST
//! /model/{modelId}/converse` with JSON, so that the real `aws-sdk-bedrockruntime` client runs
//! against it. Replies come from a queue a test scripts ([`Reply`], [`StreamScript`]); every
//! request is recorded ([`RecordedRequest`]), and every stream the client dropped before its
//! end is counted ([`BedrockStandIn::closed_early`]). A stream scripted to hold
//! ([`StreamScript::hold`]) says when it holds ([`BedrockStandIn::holding`]) and goes on when the
//! test releases it ([`BedrockStandIn::release`]).
//!
//! Three control routes let another process script it: `POST /_stand-in/replies` (a JSON list
//! of [`Reply`]), `GET /_stand-in/requests` and `POST /_stand-in/release`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use aws_sdk_bedrockruntime::config::{BehaviorVersion, Credentials, Region};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use super::prompt_cache::{CacheUse, PromptCache};

mod script;

pub use script::{Frame, Reply, ScriptError, StreamScript};

/// One request the stand-in received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedRequest {
    /// The model id, percent-decoded from the path.
    pub model_id: String,
    /// `converse-stream` or `converse`.
    pub operation: String,
    /// The request body.
    pub body: Value,
    /// What the stand-in's prompt cache did for it ([`prompt_cache`](super::prompt_cache)).
    #[serde(default)]
    pub prompt_cache: CacheUse,
}

/// What the stand-in answers when its queue is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fallback {
    /// 400 `ValidationException` saying the script ran out: a test that sends one request too
    /// many fails loudly.
    #[default]
    Refuse,
    /// A small scripted assistant, for demos: offered tools and given the person's words, it
    /// calls the first tool; given tool results, it says what they were; otherwise it echoes.
    Echo,
}

#[derive(Debug, Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<RecordedRequest>>,
    closed_early: watch::Sender<u64>,
    /// How many requests have been received, for tests that wait on a model call.
    received: watch::Sender<usize>,
    fallback: Fallback,
    prompt_cache: Mutex<PromptCache>,
    /// Time spent answering: from a request's arrival to its response's last byte handed over.
    answering: Mutex<Duration>,
    /// How many streams have reached their hold.
    held: watch::Sender<usize>,
    /// How many holds have been released: the `n`th stream to hold waits until `n` have been.
    released: watch::Sender<usize>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running stand-in. Dropping it stops the server.
#[derive(Debug)]
pub struct BedrockStandIn {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _stop: oneshot::Sender<()>,
}

impl BedrockStandIn {
    /// Starts a stand-in on a free port of 127.0.0.1 that refuses requests it has no reply for.
    pub async fn start() -> io::Result<Self> {
        Self::bind("127.0.0.1:0".parse().map_err(io::Error::other)?, Fallback::Refuse).await
    }

    /// Starts a stand-in on `addr`.
    pub async fn bind(addr: SocketAddr, fallback: Fallback) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            fallback,
            ..Shared::default()
        });
        let stop = super::serve_in_background(listener, router(shared.clone()));
        Ok(Self {
            addr,
            shared,
            _stop: stop,
        })
    }

    /// Serves on `listener` until `shutdown` resolves: for the command line.
    pub async fn serve(
        listener: TcpListener,
        fallback: Fallback,
        replies: Vec<Reply>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        let shared = Arc::new(Shared {
            fallback,
            replies: Mutex::new(replies.into()),
            ..Shared::default()
        });
        axum::serve(listener, router(shared))
            .with_graceful_shutdown(shutdown)
            .await
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its endpoint URL, for `endpoint_url`.
    pub fn endpoint_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a reply.
    pub fn push(&self, reply: Reply) {
        lock(&self.shared.replies).push_back(reply);
    }

    /// Replies not yet used.
    pub fn pending_replies(&self) -> usize {
        lock(&self.shared.replies).len()
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The latest tool result request `request` sent the model (its `toolResult` block), if it
    /// sent any.
    pub fn last_tool_result(&self, request: usize) -> Option<serde_json::Value> {
        let requests = lock(&self.shared.requests);
        let messages = requests.get(request)?.body.get("messages")?.as_array()?;
        messages
            .iter()
            .filter_map(|m| m.get("content").and_then(serde_json::Value::as_array))
            .flatten()
            .filter_map(|block| block.get("toolResult").cloned())
            .next_back()
    }

    /// A handle that reads the recorded requests and outlives nothing: for closures that must be
    /// `'static`.
    pub fn requests_handle(&self) -> RequestLog {
        RequestLog {
            shared: self.shared.clone(),
        }
    }

    /// The time it has spent answering so far, from each request's arrival to the last byte of
    /// its response handed to the connection: the model's time, to take out of a measurement.
    pub fn answering_time(&self) -> Duration {
        *lock(&self.shared.answering)
    }

    /// Waits until `count` requests have been received: a notification, not a poll.
    pub async fn requested(&self, count: usize) {
        let mut received = self.shared.received.subscribe();
        // The sender lives as long as `self`: the wait cannot lose it.
        let _ = received.wait_for(|&n| n >= count).await;
    }

    /// Waits until `count` streams have reached their hold ([`StreamScript::hold`]), having
    /// sent every frame before it: a notification, not a poll.
    pub async fn holding(&self, count: usize) {
        let mut held = self.shared.held.subscribe();
        // The sender lives as long as `self`: the wait cannot lose it.
        let _ = held.wait_for(|&n| n >= count).await;
    }

    /// Lets one held stream go on, the earliest to hold that has not been released (or, if
    /// none holds, the next to): its frames after the hold are sent.
    pub fn release(&self) {
        release(&self.shared);
    }

    /// Counts the streams whose client went away before their end; `wait_for` on it to
    /// observe a cancellation.
    pub fn closed_early(&self) -> watch::Receiver<u64> {
        self.shared.closed_early.subscribe()
    }

    /// A Bedrock client aimed at this stand-in, with dummy credentials.
    pub fn client(&self) -> aws_sdk_bedrockruntime::Client {
        client_for(&self.endpoint_url())
    }
}

/// Reads a stand-in's recorded requests; see [`BedrockStandIn::requests_handle`].
#[derive(Debug, Clone)]
pub struct RequestLog {
    shared: Arc<Shared>,
}

impl RequestLog {
    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }
}

/// A Bedrock client aimed at `endpoint_url` with dummy credentials, as tests and the local
/// demo use it.
pub fn client_for(endpoint_url: &str) -> aws_sdk_bedrockruntime::Client {
    let config = aws_sdk_bedrockruntime::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint_url)
        .credentials_provider(Credentials::new("stand-in", "stand-in", None, None, "stand-in"))
        .build();
    aws_sdk_bedrockruntime::Client::from_conf(config)
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/model/{model_id}/converse-stream", post(converse_stream))
        .route("/model/{model_id}/converse", post(converse))
        .route("/_stand-in/replies", post(push_replies))
        .route("/_stand-in/requests", get(list_requests))
        .route("/_stand-in/release", post(release_one))
        .with_state(shared)
        // axum's 2 MB default would refuse requests Bedrock takes: a message's pictures and
        // documents travel in base64 (five files of the engine's limits pass 2 MB).
        .layer(axum::extract::DefaultBodyLimit::max(REQUEST_BODY_LIMIT))
}

/// The largest request body the stand-in reads.
const REQUEST_BODY_LIMIT: usize = 64 * 1024 * 1024;

async fn push_replies(
    State(shared): State<Arc<Shared>>,
    axum::Json(replies): axum::Json<Vec<Reply>>,
) -> StatusCode {
    lock(&shared.replies).extend(replies);
    StatusCode::NO_CONTENT
}

fn release(shared: &Shared) {
    shared.released.send_modify(|n| *n += 1);
}

async fn release_one(State(shared): State<Arc<Shared>>) -> StatusCode {
    release(&shared);
    StatusCode::NO_CONTENT
}

async fn list_requests(State(shared): State<Arc<Shared>>) -> axum::Json<Vec<RecordedRequest>> {
    axum::Json(lock(&shared.requests).clone())
}

fn record(shared: &Shared, model_id: String, operation: &str, body: &Bytes) -> (Value, CacheUse) {
    let body: Value = serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
    let prompt_cache = lock(&shared.prompt_cache).apply(&model_id, &body);
    let mut requests = lock(&shared.requests);
    requests.push(RecordedRequest {
        model_id,
        operation: operation.to_owned(),
        body: body.clone(),
        prompt_cache,
    });
    shared.received.send_replace(requests.len());
    (body, prompt_cache)
}

/// Adds what the prompt cache did to a streamed reply's usage, as Bedrock reports it.
fn with_cache_use(reply: Reply, used: CacheUse) -> Reply {
    if used == CacheUse::default() {
        return reply;
    }
    match reply {
        Reply::Stream {
            mut frames,
            chunk_delay_ms,
            hang,
            hold_before,
        } => {
            for frame in &mut frames {
                if let Frame::Event { event, payload } = frame
                    && event == "metadata"
                    && let Some(usage) = payload.get_mut("usage").and_then(Value::as_object_mut)
                {
                    usage.insert("cacheReadInputTokens".into(), used.read_tokens.into());
                    usage.insert("cacheWriteInputTokens".into(), used.write_tokens.into());
                }
            }
            Reply::Stream {
                frames,
                chunk_delay_ms,
                hang,
                hold_before,
            }
        }
        other => other,
    }
}

fn next_reply(shared: &Shared, request: &Value) -> Reply {
    if let Some(reply) = lock(&shared.replies).pop_front() {
        return reply;
    }
    match shared.fallback {
        Fallback::Refuse => Reply::http_error(
            400,
            "ValidationException",
            "the Bedrock stand-in has no scripted reply left",
        ),
        Fallback::Echo => echo(request),
    }
}

/// The demo assistant of [`Fallback::Echo`].
fn echo(request: &Value) -> Reply {
    let last = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    let blocks = last["content"].as_array().cloned().unwrap_or_default();
    let results: Vec<String> = blocks
        .iter()
        .filter_map(|b| b.get("toolResult"))
        .flat_map(|r| r["content"].as_array().cloned().unwrap_or_default())
        .map(|c| match (c.get("json"), c.get("text")) {
            (Some(json), _) => json.to_string(),
            (None, Some(Value::String(text))) => text.clone(),
            _ => c.to_string(),
        })
        .collect();
    if !results.is_empty() {
        return StreamScript::new()
            .text(&format!("The tool answered: {}", results.join(", ")), 4)
            .stop("end_turn")
            .usage(40, 12)
            .into_reply();
    }
    let words: String = blocks
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join(" ");
    if let Some(tool) = request["toolConfig"]["tools"][0]["toolSpec"]["name"].as_str() {
        let id = format!("tooluse_{}", uuid::Uuid::new_v4().simple());
        return StreamScript::new()
            .text(&format!("Let me use {tool} for that."), 2)
            .tool_use(&id, tool, "{}", 1)
            .stop("tool_use")
            .usage(30, 10)
            .into_reply();
    }
    Reply::text(&format!("You said: {words}"))
}

async fn converse_stream(
    State(shared): State<Arc<Shared>>,
    Path(model_id): Path<String>,
    body: Bytes,
) -> Response {
    let arrived = Instant::now();
    let (request, used) = record(&shared, model_id, "converse-stream", &body);
    if let Some(problem) = crate::document_shapes::bedrock_problem(&request) {
        return respond(
            shared,
            Reply::http_error(400, "ValidationException", &problem),
            arrived,
        );
    }
    respond(
        shared.clone(),
        with_cache_use(next_reply(&shared, &request), used),
        arrived,
    )
}

async fn converse(State(shared): State<Arc<Shared>>, Path(model_id): Path<String>, body: Bytes) -> Response {
    let arrived = Instant::now();
    let (request, _) = record(&shared, model_id, "converse", &body);
    respond(shared.clone(), next_reply(&shared, &request), arrived)
}

fn respond(shared: Arc<Shared>, reply: Reply, arrived: Instant) -> Response {
    if !matches!(reply, Reply::Stream { .. }) {
        *lock(&shared.answering) += arrived.elapsed();
    }
    match reply {
        Reply::HttpError {
            status,
            error_type,
            body,
        } => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            [
                ("x-amzn-errortype", error_type),
                (header::CONTENT_TYPE.as_str(), "application/json".to_owned()),
            ],
            body.to_string(),
        )
            .into_response(),
        Reply::Converse { body } => {
            ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
        }
        Reply::Raw {
            status,
            content_type,
            body_base64,
        } => match BASE64.decode(body_base64) {
            Ok(bytes) => (
                StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
                [(header::CONTENT_TYPE, content_type)],
                bytes,
            )
                .into_response(),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("bad scripted body: {e}"),
            )
                .into_response(),
        },
        Reply::Stream {
            frames,
            chunk_delay_ms,
            hang,
            hold_before,
        } => stream_response(
            shared,
            frames,
            Pace {
                delay: Duration::from_millis(chunk_delay_ms),
                hang,
                hold_before,
            },
            arrived,
        ),
    }
}

/// Counts the stream as closed early when dropped before its last frame was taken.
struct CloseProbe {
    shared: Arc<Shared>,
    finished: bool,
    arrived: Instant,
}

impl CloseProbe {
    fn finish(&mut self) {
        if !self.finished {
            *lock(&self.shared.answering) += self.arrived.elapsed();
        }
        self.finished = true;
    }
}

impl Drop for CloseProbe {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.closed_early.send_modify(|n| *n += 1);
        }
    }
}

/// How a scripted stream's frames are sent: a pause before each, an open end, a hold.
#[derive(Debug, Clone, Copy)]
struct Pace {
    delay: Duration,
    hang: bool,
    hold_before: Option<usize>,
}

/// Waits, at a stream's hold, until it is released: the `n`th stream to hold until `n` holds
/// have been released.
async fn hold(shared: &Shared) {
    let mut place = 0;
    shared.held.send_modify(|n| {
        *n += 1;
        place = *n;
    });
    let mut released = shared.released.subscribe();
    // The sender lives in `shared`, which the stream holds: the wait cannot lose it.
    let _ = released.wait_for(|&n| n >= place).await;
}

fn stream_response(shared: Arc<Shared>, frames: Vec<Frame>, pace: Pace, arrived: Instant) -> Response {
    let encoded: Result<Vec<Vec<u8>>, ScriptError> = frames.iter().map(Frame::encode).collect();
    let encoded = match encoded {
        Ok(encoded) => encoded,
        Err(e) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("bad scripted frame: {e}"),
            )
                .into_response();
        }
    };
    let probe = CloseProbe {
        shared,
        finished: false,
        arrived,
    };
    let count = encoded.len();
    let frames = futures_util::stream::unfold(
        (encoded.into_iter().enumerate(), probe),
        move |(mut frames, mut probe)| async move {
            let Some((index, frame)) = frames.next() else {
                // A hold after the last frame: the stream's end waits.
                if pace.hold_before.is_some_and(|at| at >= count) {
                    hold(&probe.shared).await;
                }
                if pace.hang {
                    std::future::pending::<()>().await;
                }
                probe.finish();
                return None;
            };
            if pace.hold_before == Some(index) {
                hold(&probe.shared).await;
            }
            if !pace.delay.is_zero() {
                tokio::time::sleep(pace.delay).await;
            }
            Some((Ok::<_, Infallible>(Bytes::from(frame)), (frames, probe)))
        },
    );
    (
        [(header::CONTENT_TYPE, "application/vnd.amazon.eventstream")],
        Body::from_stream(frames.boxed()),
    )
        .into_response()
}

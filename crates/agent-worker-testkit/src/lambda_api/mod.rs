//! A stand-in for the Lambda Runtime API (`AWS_LAMBDA_RUNTIME_API`), so the `bootstrap` binary
//! runs as it does on Lambda: it hands out the invocations it is given, one per `next`, and
//! reports each answer the function posts. With no invocation left, `next` waits, as on Lambda.
//! Each invocation's deadline is five minutes away unless it is given one (a moment too near,
//! or the `cargo lambda` emulator's constant).
//!
//! Answers are read as Lambda reads them ([`answers`]): a buffered one whole, a streamed one
//! (response streaming, as a Function URL's `RESPONSE_STREAM` takes it) chunk by chunk with its
//! error trailers. Each answer is recorded as it arrives ([`Posted`]: its mode, each chunk and
//! when it came, its trailers), so a test can see a streamed answer's first words before its
//! last ([`LambdaRuntimeApi::answer_when`]); [`LambdaRuntimeApi::answer`] reports each once whole,
//! its prelude apart.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, oneshot, watch};

pub mod answers;
#[cfg(test)]
mod tests;

pub use answers::{Chunk, Posted, ResponseMode};

/// What the function posted: `<request id>/response`, `<request id>/error` or `init/error`,
/// and the body (a streamed HTTP answer as `{"prelude": {statusCode, headers, ...}, "body"}`,
/// with `"error"` when its trailers reported one; see [`Posted::answer`]).
pub type Answer = (String, Value);

/// An invocation waiting for `next`: its request id, event, and `Lambda-Runtime-Deadline-Ms`
/// (`None`: five minutes from when it is handed out).
type Invocation = (String, Value, Option<u64>);

#[derive(Clone)]
struct Shared {
    invocations: Arc<Mutex<VecDeque<Invocation>>>,
    more: Arc<Notify>,
    answers: mpsc::UnboundedSender<Answer>,
    /// When the function first asked for an invocation: the end of its init.
    first_next: Arc<OnceLock<Instant>>,
    /// The request ids `next` has handed out, in order.
    handed_out: Arc<watch::Sender<Vec<String>>>,
    /// Every answer posted, as far as it has arrived.
    posted: Arc<watch::Sender<Vec<Posted>>>,
}

/// A running Runtime API stand-in. Dropping it stops the server.
#[derive(Debug)]
pub struct LambdaRuntimeApi {
    addr: SocketAddr,
    shared_invocations: Arc<Mutex<VecDeque<Invocation>>>,
    more: Arc<Notify>,
    answers: mpsc::UnboundedReceiver<Answer>,
    first_next: Arc<OnceLock<Instant>>,
    handed_out: Arc<watch::Sender<Vec<String>>>,
    posted: Arc<watch::Sender<Vec<Posted>>>,
    _stop: oneshot::Sender<()>,
}

impl LambdaRuntimeApi {
    /// Starts on a free port of 127.0.0.1.
    pub async fn start() -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (answers, received) = mpsc::unbounded_channel();
        let shared = Shared {
            invocations: Arc::default(),
            more: Arc::default(),
            answers,
            first_next: Arc::default(),
            handed_out: Arc::default(),
            posted: Arc::default(),
        };
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route("/2018-06-01/runtime/invocation/{id}/{kind}", post(answered))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(shared.clone());
        let stop = super::serve_in_background(listener, app);
        Ok(Self {
            addr,
            shared_invocations: shared.invocations,
            more: shared.more,
            answers: received,
            first_next: shared.first_next,
            handed_out: shared.handed_out,
            posted: shared.posted,
            _stop: stop,
        })
    }

    /// When the function first asked for an invocation (`next`): its init ends there, as
    /// Lambda's `Init Duration` does.
    pub fn first_next(&self) -> Option<Instant> {
        self.first_next.get().copied()
    }

    /// The value of `AWS_LAMBDA_RUNTIME_API` that reaches it.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Queues an invocation with request id `id` and `event`, five minutes to run.
    pub fn invoke(&self, id: &str, event: Value) {
        self.queue(id, event, None);
    }

    /// Queues an invocation whose `Lambda-Runtime-Deadline-Ms` is `deadline_ms` as given: a
    /// moment in milliseconds since the epoch, or any number an emulator sends.
    pub fn invoke_with_deadline(&self, id: &str, event: Value, deadline_ms: u64) {
        self.queue(id, event, Some(deadline_ms));
    }

    fn queue(&self, id: &str, event: Value, deadline_ms: Option<u64>) {
        if let Ok(mut queue) = self.shared_invocations.lock() {
            queue.push_back((id.to_owned(), event, deadline_ms));
        }
        self.more.notify_waiters();
        self.more.notify_one();
    }

    /// The next answer the function posts, once it has arrived whole.
    pub async fn answer(&mut self) -> Option<Answer> {
        self.answers.recv().await
    }

    /// Waits until `next` has handed out the invocation `request_id`: a notification, not a poll.
    pub async fn handed_out(&self, request_id: &str) {
        let mut handed_out = self.handed_out.subscribe();
        // The sender lives as long as `self`: the wait cannot lose it.
        let _ = handed_out
            .wait_for(|ids| ids.iter().any(|id| id == request_id))
            .await;
    }

    /// The latest answer posted for `request_id`, as far as it has arrived.
    pub fn posted(&self, request_id: &str) -> Option<Posted> {
        latest(&self.posted.borrow(), request_id).cloned()
    }

    /// Waits until the latest answer posted for `request_id`, as far as it has arrived,
    /// satisfies `seen` (its first chunks, its end), and says it then: a notification at each
    /// chunk, not a poll.
    pub async fn answer_when(&self, request_id: &str, seen: impl Fn(&Posted) -> bool) -> Posted {
        let mut posted = self.posted.subscribe();
        loop {
            let found = latest(&posted.borrow_and_update(), request_id)
                .filter(|p| seen(p))
                .cloned();
            if let Some(found) = found {
                return found;
            }
            if posted.changed().await.is_err() {
                // The sender lives as long as `self`: this is never reached.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The whole environment of a `bootstrap` process served by this API: Lambda's own
    /// variables, dummy credentials, DynamoDB, SQS and Secrets Manager at `aws_endpoint` (moto, or
    /// a proxy in front of it; table `table`, the event log in it), and Bedrock at
    /// `bedrock_endpoint`. Nothing reaches AWS.
    pub fn function_environment(
        &self,
        bedrock_endpoint: &str,
        aws_endpoint: &str,
        table: &str,
    ) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_LAMBDA_RUNTIME_API", self.address()),
            ("AWS_LAMBDA_FUNCTION_NAME", "agent-worker".into()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512".into()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
            ("AWS_LAMBDA_LOG_STREAM_NAME", "stream".into()),
            ("AWS_LAMBDA_LOG_GROUP_NAME", "group".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ("AWS_ENDPOINT_URL_DYNAMODB", aws_endpoint.into()),
            ("AWS_ENDPOINT_URL_SQS", aws_endpoint.into()),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER", aws_endpoint.into()),
            ("AWS_ENDPOINT_URL_SSM", aws_endpoint.into()),
            ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", bedrock_endpoint.into()),
            ("TABLE_NAME", table.into()),
            ("MODEL_ID", "us.anthropic.claude-sonnet-4-6".into()),
            ("EVENT_SINKS", "dynamo".into()),
            // A deployment gives its assistant a prompt (or its configuration does).
            ("SYSTEM_PROMPT", "You are a helpful assistant.".into()),
        ]
    }
}

fn latest<'a>(posted: &'a [Posted], request_id: &str) -> Option<&'a Posted> {
    posted.iter().rev().find(|p| p.request_id == request_id)
}

async fn next(State(shared): State<Shared>) -> Response {
    shared.first_next.get_or_init(Instant::now);
    let (id, event, deadline) = loop {
        let notified = shared.more.notified();
        if let Some(invocation) = shared.invocations.lock().ok().and_then(|mut q| q.pop_front()) {
            break invocation;
        }
        notified.await;
    };
    let deadline = deadline.unwrap_or_else(|| {
        let in_five_minutes =
            SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default() + Duration::from_secs(300);
        u64::try_from(in_five_minutes.as_millis()).unwrap_or(u64::MAX)
    });
    let mut headers = HeaderMap::new();
    let mut set = |name: &'static str, value: String| {
        if let Ok(value) = value.parse() {
            headers.insert(name, value);
        }
    };
    shared.handed_out.send_modify(|ids| ids.push(id.clone()));
    set("lambda-runtime-aws-request-id", id);
    set("lambda-runtime-deadline-ms", deadline.to_string());
    set(
        "lambda-runtime-invoked-function-arn",
        "arn:aws:lambda:us-east-1:000000000000:function:agent-worker".into(),
    );
    set(
        "lambda-runtime-trace-id",
        "Root=1-00000000-000000000000000000000000".into(),
    );
    (headers, event.to_string()).into_response()
}

async fn answered(
    State(shared): State<Shared>,
    Path((id, kind)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> StatusCode {
    let mut place = None;
    let record = |posted: &Posted| {
        shared
            .posted
            .send_modify(|all| match place.and_then(|at| all.get_mut(at)) {
                Some(slot) => *slot = posted.clone(),
                None => {
                    place = Some(all.len());
                    all.push(posted.clone());
                }
            });
    };
    let posted = answers::read(&id, &kind, headers, body, record).await;
    if posted.cut {
        // The function's connection broke: no answer reached Lambda.
        return StatusCode::BAD_REQUEST;
    }
    let _ = shared.answers.send(posted.answer());
    StatusCode::ACCEPTED
}

async fn init_error(State(shared): State<Shared>, body: String) -> StatusCode {
    let _ = shared.answers.send(("init/error".into(), Value::String(body)));
    StatusCode::ACCEPTED
}

/// A Function URL's event (the API Gateway HTTP API's payload 2.0) for `method` on
/// `path_and_query`, with `headers` and `body`, as Lambda hands it to the function.
pub fn function_url_event(
    method: &str,
    path_and_query: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Value {
    let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
    let headers: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), Value::String((*value).to_owned())))
        .collect();
    serde_json::json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "accountId": "anonymous",
            "apiId": "agentworkerapi",
            "domainName": "agentworkerapi.lambda-url.us-east-1.on.aws",
            "domainPrefix": "agentworkerapi",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "agent-worker-testkit"
            },
            "requestId": uuid::Uuid::new_v4().to_string(),
            "routeKey": "$default",
            "stage": "$default",
            "time": "02/Dec/2026:00:00:00 +0000",
            "timeEpoch": 0
        },
        "body": body,
        "isBase64Encoded": false
    })
}

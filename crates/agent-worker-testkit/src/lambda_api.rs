//! A stand-in for the Lambda Runtime API (`AWS_LAMBDA_RUNTIME_API`), so the `bootstrap` binary
//! runs as it does on Lambda: it hands out the invocations it is given, one per `next`, and
//! reports each answer the function posts. With no invocation left, `next` waits, as on Lambda.
//! Each invocation's deadline is five minutes away unless it is given one (a moment too near,
//! or the `cargo lambda` emulator's constant). A streamed answer (response streaming, as a
//! Function URL's `RESPONSE_STREAM` takes it) is reported once whole, its prelude apart.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, oneshot};

/// What the function posted: `<request id>/response`, `<request id>/error` or `init/error`,
/// and the body (a streamed HTTP answer as `{"prelude": {statusCode, headers, ...}, "body"}`).
pub type Answer = (String, Value);

/// What ends a streamed HTTP answer's prelude: eight NUL bytes.
const STREAMED_PRELUDE_END: &str = "\0\0\0\0\0\0\0\0";

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
}

/// A running Runtime API stand-in. Dropping it stops the server.
#[derive(Debug)]
pub struct LambdaRuntimeApi {
    addr: SocketAddr,
    shared_invocations: Arc<Mutex<VecDeque<Invocation>>>,
    more: Arc<Notify>,
    answers: mpsc::UnboundedReceiver<Answer>,
    first_next: Arc<OnceLock<Instant>>,
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

    /// The next answer the function posts.
    pub async fn answer(&mut self) -> Option<Answer> {
        self.answers.recv().await
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
    body: String,
) -> StatusCode {
    let value = match body.split_once(STREAMED_PRELUDE_END) {
        // A streamed HTTP answer (a Function URL's `RESPONSE_STREAM`): its prelude (status,
        // headers, cookies), eight NUL bytes, then the body as it was written.
        Some((prelude, streamed)) => serde_json::json!({
            "prelude": serde_json::from_str::<Value>(prelude).unwrap_or(Value::String(prelude.to_owned())),
            "body": streamed,
        }),
        None => serde_json::from_str(&body).unwrap_or(Value::String(body)),
    };
    let _ = shared.answers.send((format!("{id}/{kind}"), value));
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

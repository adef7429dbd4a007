//! [`OtlpReceiver`]: a tiny OTLP/HTTP (JSON) collector on 127.0.0.1 that keeps the spans it
//! receives, for the tests of the worker's traces. It reads what the OTLP JSON encoding says a
//! span is, not what the worker meant to send: a span it cannot read fails the request.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use tokio::net::TcpListener;

/// One span as received.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// The parent's span id, when it has one.
    pub parent_span_id: Option<String>,
    /// Its name.
    pub name: String,
    /// OTLP's kind number (1 internal, 3 client).
    pub kind: u64,
    /// Start and end, in nanoseconds since the epoch.
    pub start: u128,
    /// End, in nanoseconds since the epoch.
    pub end: u128,
    /// Its attributes, each value as a JSON string or number.
    pub attributes: BTreeMap<String, Value>,
    /// The names of its events.
    pub events: Vec<String>,
    /// Its status code (0 unset, 2 error).
    pub status: u64,
    /// The resource's `service.name`.
    pub service: String,
}

#[derive(Debug, Default)]
struct Received {
    spans: Mutex<Vec<ReceivedSpan>>,
    /// Every request's body, as sent.
    bodies: Mutex<Vec<String>>,
    /// Every request's headers.
    headers: Mutex<Vec<HeaderMap>>,
}

/// The collector; it stops when dropped.
#[derive(Debug)]
pub struct OtlpReceiver {
    addr: SocketAddr,
    received: Arc<Received>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl OtlpReceiver {
    /// Starts it on a free port of 127.0.0.1.
    pub async fn start() -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let received = Arc::new(Received::default());
        let app = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(received.clone());
        Ok(Self {
            addr,
            received,
            _stop: crate::serve_in_background(listener, app),
        })
    }

    /// Its base endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`), `http://127.0.0.1:{port}`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The spans received since the last take.
    pub fn take(&self) -> Vec<ReceivedSpan> {
        std::mem::take(&mut *lock(&self.received.spans))
    }

    /// Every request body received, as sent.
    pub fn bodies(&self) -> Vec<String> {
        lock(&self.received.bodies).clone()
    }

    /// Every request's headers.
    pub fn headers(&self) -> Vec<HeaderMap> {
        lock(&self.received.headers).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn receive(
    State(received): State<Arc<Received>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let text = String::from_utf8_lossy(&body).into_owned();
    lock(&received.bodies).push(text.clone());
    lock(&received.headers).push(headers.clone());
    if headers.get("content-type").and_then(|v| v.to_str().ok()) != Some("application/json") {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, "only application/json".into());
    }
    match serde_json::from_str::<Value>(&text)
        .map_err(|e| e.to_string())
        .and_then(|v| spans(&v))
    {
        Ok(spans) => {
            lock(&received.spans).extend(spans);
            (StatusCode::OK, "{}".into())
        }
        Err(why) => (StatusCode::BAD_REQUEST, why),
    }
}

/// The spans of an `ExportTraceServiceRequest` in OTLP's JSON encoding.
fn spans(request: &Value) -> Result<Vec<ReceivedSpan>, String> {
    let mut out = Vec::new();
    for resource in array(request, "resourceSpans")? {
        let resource_attributes = attributes(&resource["resource"])?;
        let service = resource_attributes
            .get("service.name")
            .and_then(Value::as_str)
            .ok_or("a resource without service.name")?
            .to_owned();
        for scope in array(resource, "scopeSpans")? {
            for span in array(scope, "spans")? {
                out.push(ReceivedSpan {
                    trace_id: hex_id(span, "traceId", 32)?.ok_or("a span without traceId")?,
                    span_id: hex_id(span, "spanId", 16)?.ok_or("a span without spanId")?,
                    parent_span_id: hex_id(span, "parentSpanId", 16)?,
                    name: span["name"].as_str().ok_or("a span without a name")?.to_owned(),
                    kind: span["kind"].as_u64().ok_or("a span without a kind")?,
                    start: nanos(span, "startTimeUnixNano")?,
                    end: nanos(span, "endTimeUnixNano")?,
                    attributes: attributes(span)?,
                    events: match span.get("events") {
                        None => Vec::new(),
                        Some(_) => array(span, "events")?
                            .iter()
                            .map(|e| e["name"].as_str().unwrap_or_default().to_owned())
                            .collect(),
                    },
                    status: span["status"]["code"].as_u64().unwrap_or(0),
                    service: service.clone(),
                });
            }
        }
    }
    Ok(out)
}

fn array<'a>(value: &'a Value, key: &str) -> Result<&'a Vec<Value>, String> {
    value[key]
        .as_array()
        .ok_or_else(|| format!("{key} is not an array"))
}

/// An id in hex of `len` digits, when present (OTLP JSON: hex, not base64).
fn hex_id(span: &Value, key: &str, len: usize) -> Result<Option<String>, String> {
    match span.get(key).and_then(Value::as_str).filter(|id| !id.is_empty()) {
        None => Ok(None),
        Some(id) if id.len() == len && id.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(Some(id.to_owned())),
        Some(id) => Err(format!("{key} {id:?} is not {len} hex digits")),
    }
}

/// A time: a decimal string, as OTLP JSON writes 64-bit integers.
fn nanos(span: &Value, key: &str) -> Result<u128, String> {
    span[key]
        .as_str()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{key} is not a decimal string"))
}

/// A thing's attributes by key: a string value as a string, an integer (a decimal string in
/// OTLP JSON) as a number.
fn attributes(thing: &Value) -> Result<BTreeMap<String, Value>, String> {
    let mut out = BTreeMap::new();
    let Some(list) = thing.get("attributes") else {
        return Ok(out);
    };
    for attribute in list.as_array().ok_or("attributes is not an array")? {
        let key = attribute["key"].as_str().ok_or("an attribute without a key")?;
        let value = &attribute["value"];
        let read = if let Some(text) = value.get("stringValue") {
            text.clone()
        } else if let Some(n) = value.get("intValue") {
            let n: u64 = n
                .as_str()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("{key}: intValue is not a decimal string"))?;
            n.into()
        } else if let Some(b) = value.get("boolValue") {
            b.clone()
        } else {
            return Err(format!("{key}: a value of a kind not read here: {value}"));
        };
        out.insert(key.to_owned(), read);
    }
    Ok(out)
}

//! How the Runtime API stand-in reads what the function posts, as Lambda's Runtime API does: a
//! buffered answer whole; a streamed one (`Lambda-Runtime-Function-Response-Mode: streaming`,
//! `Transfer-Encoding: chunked`) chunk by chunk, each recorded as it arrives, with the trailers
//! that report an error met mid-stream (`Lambda-Runtime-Function-Error-Type`,
//! `Lambda-Runtime-Function-Error-Body`, the latter base64). An HTTP integration's streamed
//! answer (a Function URL's, `application/vnd.awslambda.http-integration-response`) opens with
//! its prelude (status, headers, cookies as JSON) and eight NUL bytes; the body follows.

use std::time::Instant;

use axum::body::{Body, Bytes, HttpBody as _};
use axum::http::HeaderMap;
use base64::Engine as _;
use serde_json::Value;

/// The header that says an answer is streamed, and its value.
pub const RESPONSE_MODE: &str = "lambda-runtime-function-response-mode";
/// The trailer naming the error a streamed answer met after it began.
pub const ERROR_TYPE_TRAILER: &str = "lambda-runtime-function-error-type";
/// The trailer holding that error's body, base64.
pub const ERROR_BODY_TRAILER: &str = "lambda-runtime-function-error-body";
/// The content type of an HTTP integration's streamed answer: prelude, eight NULs, body.
pub const HTTP_INTEGRATION_RESPONSE: &str = "application/vnd.awslambda.http-integration-response";
/// What ends a streamed HTTP answer's prelude: eight NUL bytes.
const PRELUDE_END: &[u8] = b"\0\0\0\0\0\0\0\0";

/// How the function sent an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseMode {
    /// Whole, in one body (no response mode header): a buffered function's answer, which a
    /// caller gets only once it is all written.
    Buffered,
    /// `Lambda-Runtime-Function-Response-Mode: streaming`: chunked, each chunk passed on to
    /// the caller as it arrives (a Function URL with `InvokeMode: RESPONSE_STREAM`).
    Streaming,
}

/// A piece of an answer's body, when it arrived.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// When the stand-in read it.
    pub at: Instant,
    /// Its bytes.
    pub bytes: Bytes,
}

/// An answer the function posts (`/response` or `/error`), as far as it has arrived.
#[derive(Debug, Clone)]
pub struct Posted {
    /// The invocation's request id.
    pub request_id: String,
    /// `response` or `error`.
    pub kind: String,
    /// Buffered or streamed.
    pub mode: ResponseMode,
    /// The request's headers.
    pub headers: HeaderMap,
    /// The body's pieces in the order they arrived (a streamed HTTP answer's prelude included).
    pub chunks: Vec<Chunk>,
    /// The trailers after the last chunk (a streamed answer's error).
    pub trailers: HeaderMap,
    /// When the body ended; `None` while it is arriving.
    pub ended: Option<Instant>,
    /// The function's connection broke before the body's end.
    pub cut: bool,
}

impl Posted {
    fn new(request_id: &str, kind: &str, headers: HeaderMap) -> Self {
        let streamed = headers
            .get(RESPONSE_MODE)
            .is_some_and(|mode| mode.as_bytes().eq_ignore_ascii_case(b"streaming"));
        Self {
            request_id: request_id.to_owned(),
            kind: kind.to_owned(),
            mode: if streamed {
                ResponseMode::Streaming
            } else {
                ResponseMode::Buffered
            },
            headers,
            chunks: Vec::new(),
            trailers: HeaderMap::new(),
            ended: None,
            cut: false,
        }
    }

    /// Whether its body opens with an HTTP integration's prelude.
    pub fn has_prelude(&self) -> bool {
        self.mode == ResponseMode::Streaming
            && self
                .headers
                .get(axum::http::header::CONTENT_TYPE)
                .is_some_and(|t| t.as_bytes().starts_with(HTTP_INTEGRATION_RESPONSE.as_bytes()))
    }

    /// Every byte that has arrived.
    pub fn bytes(&self) -> Vec<u8> {
        self.chunks.iter().flat_map(|c| c.bytes.iter().copied()).collect()
    }

    /// The prelude (status, headers, cookies), once it has arrived whole.
    pub fn prelude(&self) -> Option<Value> {
        if !self.has_prelude() {
            return None;
        }
        let bytes = self.bytes();
        let (prelude, _) = split_prelude(&bytes)?;
        serde_json::from_slice(prelude)
            .ok()
            .or_else(|| Some(Value::String(String::from_utf8_lossy(prelude).into_owned())))
    }

    /// The body that has arrived, its prelude apart, as text.
    pub fn body(&self) -> String {
        body_of(&self.bytes(), self.has_prelude())
    }

    /// When the body that had arrived first satisfied `seen`: the arrival of the chunk that
    /// completed it; `None` if it does not yet.
    pub fn seen_at(&self, seen: impl Fn(&str) -> bool) -> Option<Instant> {
        let mut bytes = Vec::new();
        self.chunks.iter().find_map(|chunk| {
            bytes.extend_from_slice(&chunk.bytes);
            seen(&body_of(&bytes, self.has_prelude())).then_some(chunk.at)
        })
    }

    /// The error a streamed answer reported in its trailers: its type and its body, decoded.
    pub fn stream_error(&self) -> Option<(String, String)> {
        let text = |name: &str| {
            self.trailers
                .get(name)
                .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        };
        let error_type = text(ERROR_TYPE_TRAILER)?;
        let body = text(ERROR_BODY_TRAILER).unwrap_or_default();
        let body = base64::engine::general_purpose::STANDARD
            .decode(body.trim())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or(body);
        Some((error_type, body))
    }

    /// What [`LambdaRuntimeApi::answer`](super::LambdaRuntimeApi::answer) reports of it:
    /// `<request id>/<kind>`, and the body (JSON when it is), a streamed HTTP answer as
    /// `{"prelude", "body"}`, with `"error": {"errorType", "errorMessage"}` when its trailers
    /// reported one.
    pub fn answer(&self) -> super::Answer {
        let what = format!("{}/{}", self.request_id, self.kind);
        let bytes = self.bytes();
        let mut value = match self.prelude() {
            Some(prelude) => serde_json::json!({
                "prelude": prelude,
                "body": self.body(),
            }),
            None => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                serde_json::from_str(&text).unwrap_or(Value::String(text))
            }
        };
        if let Some((error_type, message)) = self.stream_error() {
            let error = serde_json::json!({"errorType": error_type, "errorMessage": message});
            value = match value {
                Value::Object(mut object) => {
                    object.insert("error".into(), error);
                    Value::Object(object)
                }
                other => serde_json::json!({"body": other, "error": error}),
            };
        }
        (what, value)
    }
}

/// A streamed HTTP answer's prelude and what follows it, once its end has arrived.
fn split_prelude(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = bytes
        .windows(PRELUDE_END.len())
        .position(|window| window == PRELUDE_END)?;
    Some((&bytes[..end], &bytes[end + PRELUDE_END.len()..]))
}

fn body_of(bytes: &[u8], has_prelude: bool) -> String {
    let body = if has_prelude {
        split_prelude(bytes).map_or(&[][..], |(_, body)| body)
    } else {
        bytes
    };
    String::from_utf8_lossy(body).into_owned()
}

/// Reads what the function posts for `request_id` (`kind`: `response` or `error`) as it
/// arrives, telling `record` of each change: the answer begun, each chunk, its trailers, its end.
pub(super) async fn read(
    request_id: &str,
    kind: &str,
    headers: HeaderMap,
    mut body: Body,
    mut record: impl FnMut(&Posted),
) -> Posted {
    let mut posted = Posted::new(request_id, kind, headers);
    record(&posted);
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(bytes) => posted.chunks.push(Chunk {
                    at: Instant::now(),
                    bytes,
                }),
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        posted.trailers.extend(trailers);
                    }
                }
            },
            Some(Err(_)) => {
                posted.cut = true;
                break;
            }
            None => break,
        }
        record(&posted);
    }
    posted.ended = Some(Instant::now());
    record(&posted);
    posted
}

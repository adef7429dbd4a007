//! [`ProviderStandIn`]: model providers' streaming APIs on 127.0.0.1, speaking their documented
//! server-sent events, so that the real client code of `AnthropicModel` and `OpenAiModel` runs:
//!
//! - `POST /v1/messages`, the Anthropic Messages API: `message_start`, `content_block_*`,
//!   `message_delta`, `message_stop`, the `ping` keep-alives, and `error` mid-stream;
//! - `POST /v1/chat/completions`, OpenAI-compatible Chat Completions: `data:` chunks, `:` comment
//!   keep-alives, a usage chunk and `data: [DONE]`.
//!
//! Scripted per test with [`SseReply`]s, answered in order whichever route asks; every request is
//! recorded.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone, PartialEq)]
pub enum SseReply {
    /// A 200 event stream: each event's name (none for a data-only event, `:` for a comment)
    /// and its data (JSON, or a string sent as it is, such as `[DONE]`).
    Events(Vec<(String, Value)>),
    /// An HTTP error with the API's JSON error body, and `retry-after` when given.
    Error {
        /// The status.
        status: u16,
        /// The error's type, such as `rate_limit_error`.
        error_type: String,
        /// Its message.
        message: String,
        /// `retry-after`, as the header says it.
        retry_after: Option<String>,
    },
}

fn event(name: &str, data: Value) -> (String, Value) {
    (name.to_owned(), data)
}

fn start(input_tokens: u64) -> Vec<(String, Value)> {
    vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_stand_in", "type": "message", "role": "assistant",
                "content": [], "model": "stand-in", "stop_reason": null,
                "usage": {"input_tokens": input_tokens, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}}),
        ),
        event("ping", json!({"type": "ping"})),
    ]
}

fn end(reason: &str, output_tokens: u64) -> Vec<(String, Value)> {
    vec![
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": {"output_tokens": output_tokens}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ]
}

/// `text` in pieces of about a third.
fn thirds(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(chars.len().div_ceil(3).max(1))
        .map(|piece| piece.iter().collect())
        .collect()
}

/// `text` cut in two at a character boundary.
fn halves(text: &str) -> [&str; 2] {
    let half = (0..=text.len() / 2)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    [&text[..half], &text[half..]]
}

/// A content block at `index`: its start with `content_block`, each of `deltas`, its stop.
fn block(
    index: usize,
    content_block: Value,
    deltas: impl IntoIterator<Item = Value>,
) -> Vec<(String, Value)> {
    let mut events = vec![event(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": content_block}),
    )];
    for delta in deltas {
        events.push(event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
    }
    events.push(event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    ));
    events
}

/// A text block at `index`, its text in three deltas.
fn text_block(index: usize, text: &str) -> Vec<(String, Value)> {
    let deltas = thirds(text)
        .into_iter()
        .map(|piece| json!({"type": "text_delta", "text": piece}));
    block(index, json!({"type": "text", "text": ""}), deltas)
}

impl SseReply {
    /// A streamed answer of `text` in three pieces, ending the turn.
    pub fn text(text: &str) -> Self {
        let mut events = start(25);
        events.extend(text_block(0, text));
        events.extend(end("end_turn", 9));
        Self::Events(events)
    }

    /// An answer of `text` that the output token cap cuts (`stop_reason: max_tokens`).
    pub fn cut_at_limit(text: &str) -> Self {
        let mut events = start(25);
        events.extend(text_block(0, text));
        events.extend(end("max_tokens", 4096));
        Self::Events(events)
    }

    /// `reasoning` in a thinking block closed by `signature`, then an answer of `text`.
    pub fn thinking_then_text(reasoning: &str, signature: &str, text: &str) -> Self {
        let mut events = start(25);
        events.extend(block(
            0,
            json!({"type": "thinking", "thinking": ""}),
            [
                json!({"type": "thinking_delta", "thinking": reasoning}),
                json!({"type": "signature_delta", "signature": signature}),
            ],
        ));
        events.extend(text_block(1, text));
        events.extend(end("end_turn", 30));
        Self::Events(events)
    }

    /// An answer that starts with `text` and then breaks with the API's `overloaded_error`
    /// event: output the caller has already seen.
    pub fn error_after_text(text: &str) -> Self {
        let mut events = start(25);
        events.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ));
        events.push(event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        ));
        events.push(event(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ));
        Self::Events(events)
    }

    /// A call of tool `name` with `input` (JSON text, streamed in two pieces), stopping for its
    /// result.
    pub fn tool_call(id: &str, name: &str, input: &str) -> Self {
        Self::tool_calls(&[(id, name, input)])
    }

    /// Calls made at once, each `(id, name, input)` in a block of its own, stopping for their
    /// results.
    pub fn tool_calls(calls: &[(&str, &str, &str)]) -> Self {
        let mut events = start(40);
        for (index, (id, name, input)) in calls.iter().enumerate() {
            let deltas =
                halves(input).map(|piece| json!({"type": "input_json_delta", "partial_json": piece}));
            events.extend(block(
                index,
                json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                deltas,
            ));
        }
        events.extend(end("tool_use", 15));
        Self::Events(events)
    }

    /// A stream that fails after its start with the API's `overloaded_error` event.
    pub fn overloaded_mid_stream() -> Self {
        let mut events = start(25);
        events.push(event(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ));
        Self::Events(events)
    }

    /// An HTTP error, as the API answers one.
    pub fn http_error(status: u16, error_type: &str, message: &str, retry_after: Option<&str>) -> Self {
        Self::Error {
            status,
            error_type: error_type.to_owned(),
            message: message.to_owned(),
            retry_after: retry_after.map(str::to_owned),
        }
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> (String, Value) {
    (
        String::new(),
        json!({"id": "chatcmpl-stand-in", "object": "chat.completion.chunk", "model": "stand-in",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
    )
}

fn openai_end(prompt_tokens: u64, completion_tokens: u64) -> Vec<(String, Value)> {
    vec![
        (
            String::new(),
            json!({"id": "chatcmpl-stand-in", "object": "chat.completion.chunk", "choices": [],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens}}),
        ),
        (String::new(), Value::String("[DONE]".into())),
    ]
}

impl SseReply {
    /// An OpenAI-compatible streamed answer of `text` in three pieces, with a keep-alive comment.
    pub fn openai_text(text: &str) -> Self {
        Self::openai_answer(None, text, "stop")
    }

    /// An OpenAI-compatible answer of `text` that the token cap cuts (`finish_reason: length`).
    pub fn openai_cut_at_limit(text: &str) -> Self {
        Self::openai_answer(None, text, "length")
    }

    /// An OpenAI-compatible answer with `reasoning` first (as `reasoning_content`, the way
    /// vLLM and DeepSeek send it), then `text`.
    pub fn openai_reasoning_then_text(reasoning: &str, text: &str) -> Self {
        Self::openai_answer(Some(reasoning), text, "stop")
    }

    fn openai_answer(reasoning: Option<&str>, text: &str, finish: &str) -> Self {
        let mut events = vec![(":".to_owned(), Value::String("keep-alive".into()))];
        events.push(chunk(json!({"role": "assistant", "content": ""}), None));
        if let Some(reasoning) = reasoning {
            events.push(chunk(json!({"reasoning_content": reasoning}), None));
        }
        for piece in thirds(text) {
            events.push(chunk(json!({"content": piece}), None));
        }
        events.push(chunk(json!({}), Some(finish)));
        events.extend(openai_end(30, 8));
        Self::Events(events)
    }

    /// An OpenAI-compatible answer that starts with `text` and then breaks with an `error`
    /// chunk, as servers report a failure mid-stream.
    pub fn openai_error_after_text(text: &str) -> Self {
        Self::Events(vec![
            chunk(json!({"role": "assistant", "content": text}), None),
            (
                String::new(),
                json!({"error": {"message": "The server had an error while processing your request.", "type": "server_error"}}),
            ),
        ])
    }

    /// An OpenAI-compatible call of function `name` with `arguments` (JSON text, in two pieces).
    pub fn openai_tool_call(id: &str, name: &str, arguments: &str) -> Self {
        Self::openai_tool_calls(&[(id, name, arguments)])
    }

    /// OpenAI-compatible parallel calls, each `(id, name, arguments)` at its own index.
    pub fn openai_tool_calls(calls: &[(&str, &str, &str)]) -> Self {
        let mut events = Vec::new();
        for (index, (id, name, arguments)) in calls.iter().enumerate() {
            events.push(chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}
                ]}),
                None,
            ));
            for piece in halves(arguments) {
                events.push(chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                    None,
                ));
            }
        }
        events.push(chunk(json!({}), Some("tool_calls")));
        events.extend(openai_end(45, 12));
        Self::Events(events)
    }
}

/// One request the stand-in received.
#[derive(Debug, Clone)]
pub struct ProviderRequest {
    /// Its path (`/v1/messages`, `/v1/chat/completions`).
    pub path: String,
    /// Its `x-api-key` header.
    pub api_key: Option<String>,
    /// Its `authorization` header.
    pub authorization: Option<String>,
    /// Its `anthropic-version` header.
    pub version: Option<String>,
    /// Its JSON body.
    pub body: Value,
}

#[derive(Default)]
struct Script {
    replies: Mutex<VecDeque<SseReply>>,
    requests: Mutex<Vec<ProviderRequest>>,
}

/// The stand-in, serving until dropped.
#[derive(Debug)]
pub struct ProviderStandIn {
    url: String,
    script: Arc<Script>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Script")
    }
}

impl ProviderStandIn {
    /// Starts it on a free port of 127.0.0.1.
    pub async fn start() -> std::io::Result<Self> {
        let script = Arc::new(Script::default());
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/chat/completions", post(messages))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let stop = crate::serve_in_background(listener, app);
        Ok(Self {
            url,
            script,
            _stop: stop,
        })
    }

    /// Its base URL for the Anthropic API (the host, as that API's clients take it).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its base URL for OpenAI-compatible clients (with `/v1`, as they take it).
    pub fn openai_url(&self) -> String {
        format!("{}/v1", self.url)
    }

    /// Adds a reply to the script.
    pub fn push(&self, reply: SseReply) {
        if let Ok(mut replies) = self.script.replies.lock() {
            replies.push_back(reply);
        }
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<ProviderRequest> {
        self.script.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

async fn messages(
    State(script): State<Arc<Script>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header_of = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let request = ProviderRequest {
        path: uri.path().to_owned(),
        api_key: header_of("x-api-key"),
        authorization: header_of("authorization"),
        version: header_of("anthropic-version"),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let problem = if request.path.ends_with("/chat/completions") {
        crate::document_shapes::openai_problem(&request.body)
    } else {
        crate::document_shapes::anthropic_problem(&request.body)
    };
    if let Ok(mut requests) = script.requests.lock() {
        requests.push(request);
    }
    if let Some(problem) = problem {
        let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": problem}});
        return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    }
    let reply = script.replies.lock().ok().and_then(|mut r| r.pop_front());
    match reply {
        Some(SseReply::Events(events)) => {
            let body: String = events
                .iter()
                .map(|(name, data)| {
                    let data = match data {
                        Value::String(raw) => raw.clone(),
                        json => json.to_string(),
                    };
                    match name.as_str() {
                        ":" => format!(": {data}\n\n"),
                        "" => format!("data: {data}\n\n"),
                        name => format!("event: {name}\ndata: {data}\n\n"),
                    }
                })
                .collect();
            ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
        }
        Some(SseReply::Error {
            status,
            error_type,
            message,
            retry_after,
        }) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let body = json!({"type": "error", "error": {"type": error_type, "message": message}});
            let mut response = (status, axum::Json(body)).into_response();
            if let Some(wait) = retry_after.and_then(|w| header::HeaderValue::from_str(&w).ok()) {
                response.headers_mut().insert(header::RETRY_AFTER, wait);
            }
            response
        }
        None => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"type": "error", "error": {"type": "invalid_request_error", "message": "the stand-in's script ran out"}})),
        )
            .into_response(),
    }
}

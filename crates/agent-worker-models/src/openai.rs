//! [`OpenAiModel`]: the engine's model on OpenAI-compatible Chat Completions, streaming: OpenAI
//! itself, and the servers and gateways that speak its API (vLLM, Ollama, LiteLLM, …).
//!
//! The request: the system prompt as a system message, the conversation (a tool result is a
//! `tool` message of its own, pictures are data URLs), the tools as functions, and
//! `stream_options.include_usage` so the last chunk carries the usage.
//!
//! The stream: `data:` chunks whose `choices[0].delta` carries text, reasoning (where the server
//! sends `reasoning_content` or `reasoning`) and tool calls whose arguments arrive in pieces, then
//! a `finish_reason`, a usage chunk, and `[DONE]`.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use agent_worker_core::engine::model::{
    Model, ModelError, ModelErrorKind, ModelEvent, ModelRequest, ModelStream, StopReason, TokenUsage,
    ToolChoice,
};
use agent_worker_core::session::{ContentBlock, Message, Role};
use serde_json::{Value, json};

use crate::http::{ApiKey, Endpoint};

/// Where the API is, when no base URL is given (as OpenAI's own SDKs take it, with `/v1`).
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The name failures are told with.
const PROVIDER: &str = "the OpenAI-compatible API";

/// A model on an OpenAI-compatible Chat Completions API.
///
/// ```no_run
/// use agent_worker_models::{ApiKey, OpenAiModel};
///
/// let key = ApiKey::new(std::env::var("OPENAI_API_KEY").unwrap_or_default()).unwrap();
/// let local = OpenAiModel::new(key, "llama3.1").base_url("http://127.0.0.1:11434/v1");
/// ```
#[derive(Clone)]
pub struct OpenAiModel {
    endpoint: Endpoint,
    headers: Vec<(String, String)>,
    file_input: bool,
}

impl fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.endpoint
            .debug(&mut f.debug_struct("OpenAiModel"))
            .finish_non_exhaustive()
    }
}

impl OpenAiModel {
    /// Model `model` on OpenAI's API, with `api_key`.
    pub fn new(api_key: ApiKey, model: impl Into<String>) -> Self {
        Self {
            endpoint: Endpoint::new(api_key, model.into(), DEFAULT_OPENAI_BASE_URL),
            headers: Vec::new(),
            file_input: false,
        }
    }

    /// The endpoint takes PDFs as `file` content parts (OpenAI's own API does; many
    /// compatible servers do not, and by default a PDF goes to them as its text).
    #[must_use]
    pub fn with_file_input(mut self, yes: bool) -> Self {
        self.file_input = yes;
        self
    }

    /// The API at `base_url`, with its `/v1` (a gateway, a local server, a stand-in).
    #[must_use]
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.endpoint.set_base_url(base_url.into());
        self
    }

    /// A header sent with every request besides the key (a gateway's own).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The JSON body of `request`.
    pub fn body(&self, request: &ModelRequest) -> Value {
        body(&self.endpoint.model, request)
    }
}

impl Model for OpenAiModel {
    fn id(&self) -> &str {
        &self.endpoint.model
    }

    fn pdf_document_limit(&self) -> Option<usize> {
        self.file_input.then_some(crate::http::MAX_REQUEST_DOCUMENT_BYTES)
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        let mut call = self
            .endpoint
            .post("/chat/completions", &self.body(&request))
            .header("authorization", format!("Bearer {}", self.endpoint.key()));
        for (name, value) in &self.headers {
            call = call.header(name.as_str(), value.as_str());
        }
        crate::http::model_stream::<Assembly>(PROVIDER, call)
    }
}

/// The request body.
fn body(model: &str, request: &ModelRequest) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    let system: Vec<&str> = request
        .system
        .iter()
        .map(String::as_str)
        .filter(|t| !t.trim().is_empty())
        .collect();
    if !system.is_empty() {
        messages.push(json!({"role": "system", "content": system.join("\n\n")}));
    }
    for message in &request.messages {
        messages.extend(to_messages(message));
    }
    let mut body = json!({
        "model": model,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": messages,
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema
                }})
            })
            .collect();
        body["tool_choice"] = match &request.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        };
    }
    body
}

/// One of the engine's messages as Chat Completions messages: a user message's tool results are
/// `tool` messages of their own, before what else it says.
fn to_messages(message: &Message) -> Vec<Value> {
    let mut out = Vec::new();
    let mut parts: Vec<Value> = Vec::new();
    let mut calls: Vec<Value> = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } => parts.push(json!({"type": "text", "text": text})),
            ContentBlock::Attachment { reference } => {
                parts.push(json!({"type": "text", "text": reference.reference_line()}))
            }
            ContentBlock::Image { mime_type, data } => parts.push(json!({
                "type": "image_url", "image_url": {"url": format!("data:{mime_type};base64,{data}")}
            })),
            ContentBlock::Document { mime_type, name, data } => parts.push(json!({
                "type": "file", "file": {"filename": name, "file_data": format!("data:{mime_type};base64,{data}")}
            })),
            ContentBlock::ToolUse { id, name, input } => calls.push(json!({
                "id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}
            })),
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                let text = match content {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                let text = if *is_error {
                    format!("(error) {text}")
                } else {
                    text
                };
                out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": text}));
            }
            // Reasoning is the provider's own: it does not go back.
            ContentBlock::Reasoning { .. } | ContentBlock::RedactedReasoning { .. } => {}
        }
    }
    match message.role {
        Role::User => {
            if !parts.is_empty() {
                out.push(json!({"role": "user", "content": parts}));
            }
        }
        Role::Assistant => {
            let text: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
            let mut assistant = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text.join("")) }});
            if !calls.is_empty() {
                assistant["tool_calls"] = Value::Array(calls);
            }
            out.push(assistant);
        }
    }
    out
}

/// What is being assembled from the stream.
#[derive(Default)]
struct Assembly {
    /// Tool calls by index: id, name, arguments so far.
    tools: BTreeMap<u64, (String, String, String)>,
    ready: VecDeque<Result<ModelEvent, ModelError>>,
    ended: bool,
}

impl crate::http::Assembly for Assembly {
    fn take(&mut self, event: &eventsource_stream::Event) {
        take(&event.data, self);
    }

    fn next_ready(&mut self) -> Option<Result<ModelEvent, ModelError>> {
        self.ready.pop_front()
    }

    fn ended(&self) -> bool {
        self.ended
    }

    fn fail(&mut self, error: ModelError) {
        self.ended = true;
        self.ready.push_back(Err(error));
    }
}

/// Takes one chunk into `assembly`.
fn take(data: &str, assembly: &mut Assembly) {
    if data.trim() == "[DONE]" {
        assembly.ended = true;
        return;
    }
    let Ok(chunk) = serde_json::from_str::<Value>(data) else {
        assembly.ended = true;
        assembly.ready.push_back(Err(ModelError::new(
            ModelErrorKind::StreamInterrupted,
            format!("{PROVIDER} sent a chunk that is not JSON"),
        )));
        return;
    };
    if let Some(error) = chunk.get("error") {
        let message = error["message"].as_str().unwrap_or("(no message)");
        let kind = if message.to_ascii_lowercase().contains("rate limit") {
            ModelErrorKind::Throttled
        } else {
            ModelErrorKind::Unavailable
        };
        assembly.ended = true;
        assembly.ready.push_back(Err(ModelError::new(
            kind,
            format!("{PROVIDER} failed mid-stream: {message}"),
        )));
        return;
    }
    let number = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).unwrap_or_default();
    if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
        assembly.ready.push_back(Ok(ModelEvent::Usage(TokenUsage {
            input_tokens: number(usage, "prompt_tokens"),
            output_tokens: number(usage, "completion_tokens"),
            cache_read_tokens: number(&usage["prompt_tokens_details"], "cached_tokens"),
            cache_write_tokens: 0,
        })));
    }
    let Some(choice) = chunk["choices"].as_array().and_then(|c| c.first()) else {
        return;
    };
    let delta = &choice["delta"];
    for key in ["reasoning_content", "reasoning"] {
        if let Some(text) = delta[key].as_str().filter(|t| !t.is_empty()) {
            assembly
                .ready
                .push_back(Ok(ModelEvent::ReasoningDelta(text.to_owned())));
        }
    }
    if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
        assembly
            .ready
            .push_back(Ok(ModelEvent::TextDelta(text.to_owned())));
    }
    for call in delta["tool_calls"].as_array().into_iter().flatten() {
        let entry = assembly.tools.entry(number(call, "index")).or_default();
        if let Some(id) = call["id"].as_str() {
            entry.0 = id.to_owned();
        }
        if let Some(name) = call["function"]["name"].as_str() {
            entry.1.push_str(name);
        }
        if let Some(arguments) = call["function"]["arguments"].as_str() {
            entry.2.push_str(arguments);
        }
    }
    if let Some(reason) = choice["finish_reason"].as_str() {
        for (_, (id, name, input)) in std::mem::take(&mut assembly.tools) {
            let input = if input.trim().is_empty() {
                "{}".to_owned()
            } else {
                input
            };
            assembly
                .ready
                .push_back(Ok(ModelEvent::ToolUse { id, name, input }));
        }
        assembly
            .ready
            .push_back(Ok(ModelEvent::Stop(stop_reason(reason))));
    }
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::ContentFiltered,
        other => StopReason::Other(other.to_owned()),
    }
}

#[cfg(test)]
mod tests;

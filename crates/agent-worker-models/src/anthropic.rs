//! [`AnthropicModel`]: the engine's model on the Anthropic Messages API, streaming.
//!
//! The request: the system prompt as text blocks, the conversation with its pictures, tool calls
//! and results, and reasoning sent back with its signature; the tools with their JSON Schemas.
//! With prompt caching, `cache_control` breakpoints go where Bedrock's cache points go: after the
//! stable system blocks (the tools come before them in the cached prefix) and after the stored
//! history.
//!
//! The stream: `message_start` (input and cache usage), `content_block_start` / `_delta` /
//! `_stop` (text, thinking and its signature, redacted thinking, tool calls whose JSON input
//! arrives in pieces), `message_delta` (the stop reason and output usage), `message_stop`,
//! `ping`, and `error` mid-stream (an overload is transient).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use agent_worker_core::engine::model::{
    Model, ModelError, ModelErrorKind, ModelEvent, ModelRequest, ModelStream, StopReason, TokenUsage,
    ToolChoice,
};
use agent_worker_core::session::{ContentBlock, Message, Role};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::http::{ApiKey, Endpoint};

/// Where the API is, when no base URL is given.
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The API version every request names.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// The name failures are told with.
const PROVIDER: &str = "the Anthropic API";

/// A model on the Anthropic Messages API.
///
/// ```no_run
/// use agent_worker_models::{AnthropicModel, ApiKey};
///
/// let key = ApiKey::new(std::env::var("ANTHROPIC_API_KEY").unwrap_or_default()).unwrap();
/// let model = AnthropicModel::new(key, "claude-sonnet-4-6");
/// ```
#[derive(Clone)]
pub struct AnthropicModel {
    endpoint: Endpoint,
    prompt_caching: bool,
}

impl fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.endpoint
            .debug(&mut f.debug_struct("AnthropicModel"))
            .field("prompt_caching", &self.prompt_caching)
            .finish_non_exhaustive()
    }
}

impl AnthropicModel {
    /// Model `model` on the Anthropic API, with `api_key`; prompt caching on.
    pub fn new(api_key: ApiKey, model: impl Into<String>) -> Self {
        Self {
            endpoint: Endpoint::new(api_key, model.into(), DEFAULT_ANTHROPIC_BASE_URL),
            prompt_caching: true,
        }
    }

    /// The API at `base_url` (the host, as Anthropic's own SDKs take it): a gateway, or a
    /// stand-in.
    #[must_use]
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.endpoint.set_base_url(base_url.into());
        self
    }

    /// Prompt caching on or off.
    #[must_use]
    pub fn with_prompt_caching(mut self, on: bool) -> Self {
        self.prompt_caching = on;
        self
    }

    /// The JSON body of `request`.
    pub fn body(&self, request: &ModelRequest) -> Value {
        body(&self.endpoint.model, request, self.prompt_caching)
    }
}

impl Model for AnthropicModel {
    fn id(&self) -> &str {
        &self.endpoint.model
    }

    fn pdf_document_limit(&self) -> Option<usize> {
        Some(crate::http::MAX_REQUEST_DOCUMENT_BYTES)
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        let call = self
            .endpoint
            .post("/v1/messages", &self.body(&request))
            .header("x-api-key", self.endpoint.key())
            .header("anthropic-version", ANTHROPIC_VERSION);
        crate::http::model_stream::<Assembly>(PROVIDER, call)
    }
}

/// The request body.
fn body(model: &str, request: &ModelRequest, caching: bool) -> Value {
    let plan = request.cache;
    let mut system: Vec<Value> = request
        .system
        .iter()
        .filter(|text| !text.trim().is_empty())
        .map(|text| json!({"type": "text", "text": text}))
        .collect();
    let stable = plan.system_blocks.min(system.len());
    if caching && stable > 0 {
        mark(&mut system[stable - 1]);
    }
    let mut messages: Vec<Value> = request.messages.iter().map(message).collect();
    if caching
        && plan.history_messages > 0
        && let Some(Value::Array(blocks)) = messages
            .get_mut(plan.history_messages - 1)
            .and_then(|m| m.get_mut("content"))
        && let Some(last) = blocks.iter_mut().rev().find(|b| cacheable(b))
    {
        mark(last);
    }
    let mut body = json!({
        "model": model,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "stream": true,
        "messages": messages,
    });
    if !system.is_empty() {
        body["system"] = Value::Array(system);
    }
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        // Without a system prompt, the tools end the cached prefix.
        if caching
            && stable == 0
            && let Some(last) = tools.last_mut()
        {
            mark(last);
        }
        body["tools"] = Value::Array(tools);
        body["tool_choice"] = match &request.tool_choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
        };
    }
    body
}

fn mark(block: &mut Value) {
    block["cache_control"] = json!({"type": "ephemeral"});
}

/// Whether a breakpoint may sit on `block` (not on reasoning).
fn cacheable(block: &Value) -> bool {
    !matches!(block["type"].as_str(), Some("thinking" | "redacted_thinking"))
}

fn message(message: &Message) -> Value {
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let content: Vec<Value> = message.content.iter().filter_map(block).collect();
    json!({"role": role, "content": content})
}

fn block(block: &ContentBlock) -> Option<Value> {
    Some(match block {
        ContentBlock::Text { text } => json!({"type": "text", "text": text}),
        ContentBlock::Attachment { reference } => json!({"type": "text", "text": reference.reference_line()}),
        ContentBlock::Image { mime_type, data } => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": mime_type, "data": data}
        }),
        ContentBlock::Document {
            mime_type,
            name,
            data,
        } => json!({
            "type": "document",
            "source": {"type": "base64", "media_type": mime_type, "data": data},
            "title": name,
        }),
        // Reasoning goes back only with the signature that vouches for it.
        ContentBlock::Reasoning { text, signature } => {
            json!({"type": "thinking", "thinking": text, "signature": signature.as_ref()?})
        }
        ContentBlock::RedactedReasoning { data } => json!({"type": "redacted_thinking", "data": data}),
        ContentBlock::ToolUse { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            let text = match content {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": text, "is_error": is_error})
        }
    })
}

/// What is being assembled from the stream.
#[derive(Default)]
struct Assembly {
    /// Tool calls by block index: id, name, input so far.
    tools: BTreeMap<u64, (String, String, String)>,
    /// The usage `message_start` gave (input and cache), completed by `message_delta`.
    usage: TokenUsage,
    /// Events made and not yet handed on.
    ready: VecDeque<Result<ModelEvent, ModelError>>,
    ended: bool,
}

impl crate::http::Assembly for Assembly {
    fn take(&mut self, event: &eventsource_stream::Event) {
        take(&event.event, &event.data, self);
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

/// Takes one server-sent event into `assembly`.
fn take(name: &str, data: &str, assembly: &mut Assembly) {
    let Ok(event) = serde_json::from_str::<Value>(data) else {
        if name != "ping" {
            assembly.ended = true;
            assembly.ready.push_back(Err(ModelError::new(
                ModelErrorKind::StreamInterrupted,
                format!("{PROVIDER} sent an event that is not JSON ({name})"),
            )));
        }
        return;
    };
    let number = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).unwrap_or_default();
    let index = number(&event, "index");
    match event["type"].as_str().unwrap_or(name) {
        "message_start" => {
            let usage = &event["message"]["usage"];
            assembly.usage.input_tokens = number(usage, "input_tokens");
            assembly.usage.cache_read_tokens = number(usage, "cache_read_input_tokens");
            assembly.usage.cache_write_tokens = number(usage, "cache_creation_input_tokens");
            assembly.usage.output_tokens = number(usage, "output_tokens");
        }
        "content_block_start" => {
            let started = &event["content_block"];
            match started["type"].as_str() {
                Some("tool_use") => {
                    let id = started["id"].as_str().unwrap_or_default().to_owned();
                    let name = started["name"].as_str().unwrap_or_default().to_owned();
                    assembly.tools.insert(index, (id, name, String::new()));
                }
                Some("redacted_thinking") => {
                    let data = started["data"].as_str().unwrap_or_default();
                    if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) {
                        assembly.ready.push_back(Ok(ModelEvent::RedactedReasoning(bytes)));
                    }
                }
                Some("text") => {
                    if let Some(text) = started["text"].as_str().filter(|t| !t.is_empty()) {
                        assembly
                            .ready
                            .push_back(Ok(ModelEvent::TextDelta(text.to_owned())));
                    }
                }
                _ => {}
            }
        }
        "content_block_delta" => {
            let delta = &event["delta"];
            let text = |key: &str| delta[key].as_str().unwrap_or_default().to_owned();
            let made = match delta["type"].as_str() {
                Some("text_delta") => Some(ModelEvent::TextDelta(text("text"))),
                Some("thinking_delta") => Some(ModelEvent::ReasoningDelta(text("thinking"))),
                Some("signature_delta") => Some(ModelEvent::ReasoningSignature(text("signature"))),
                Some("input_json_delta") => {
                    if let Some(tool) = assembly.tools.get_mut(&index) {
                        tool.2.push_str(&text("partial_json"));
                    }
                    None
                }
                _ => None,
            };
            if let Some(made) = made.filter(
                |m| !matches!(m, ModelEvent::TextDelta(t) | ModelEvent::ReasoningDelta(t) if t.is_empty()),
            ) {
                assembly.ready.push_back(Ok(made));
            }
        }
        "content_block_stop" => {
            if let Some((id, name, input)) = assembly.tools.remove(&index) {
                let input = if input.trim().is_empty() {
                    "{}".to_owned()
                } else {
                    input
                };
                assembly
                    .ready
                    .push_back(Ok(ModelEvent::ToolUse { id, name, input }));
            }
        }
        "message_delta" => {
            let usage = &event["usage"];
            if usage.get("output_tokens").is_some() {
                assembly.usage.output_tokens = number(usage, "output_tokens");
            }
            if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                if let Some((index, (id, name, _))) = assembly.tools.iter().next() {
                    assembly.ended = true;
                    assembly.ready.push_back(Err(ModelError::new(
                        ModelErrorKind::StreamInterrupted,
                        format!(
                            "the model's response stopped inside its call of `{name}` ({id}, block {index}): the call's input was never closed"
                        ),
                    )));
                    return;
                }
                assembly.ready.push_back(Ok(ModelEvent::Usage(assembly.usage)));
                assembly
                    .ready
                    .push_back(Ok(ModelEvent::Stop(stop_reason(reason))));
            }
        }
        "message_stop" => assembly.ended = true,
        "error" => {
            let error = &event["error"];
            let kind = match error["type"].as_str() {
                Some("overloaded_error" | "api_error") => ModelErrorKind::Unavailable,
                Some("rate_limit_error") => ModelErrorKind::Throttled,
                Some("invalid_request_error" | "request_too_large") => ModelErrorKind::Rejected,
                Some("authentication_error" | "permission_error") => ModelErrorKind::AccessDenied,
                Some("not_found_error") => ModelErrorKind::NotFound,
                _ => ModelErrorKind::StreamInterrupted,
            };
            let message = format!(
                "{PROVIDER} failed mid-stream: {}: {}",
                error["type"].as_str().unwrap_or("error"),
                error["message"].as_str().unwrap_or("(no message)")
            );
            assembly.ended = true;
            assembly.ready.push_back(Err(ModelError::new(kind, message)));
        }
        // `ping` and events this version does not know.
        _ => {}
    }
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::ContentFiltered,
        other => StopReason::Other(other.to_owned()),
    }
}

#[cfg(test)]
mod tests;

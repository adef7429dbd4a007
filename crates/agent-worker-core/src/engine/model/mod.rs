//! The model seam: [`Model`] streams one response for a [`ModelRequest`].
//!
//! The engine speaks this small, provider-neutral vocabulary; the adapters' `BedrockModel`
//! (crate `agent-worker-aws`) maps it to Amazon Bedrock's ConverseStream. Tests can script a
//! model at this level, but the engine's own tests run the real Bedrock client against the
//! wire-level stand-in.

use std::fmt;
use std::pin::Pin;

use futures_core::Stream;
use serde_json::Value;

use crate::session::Message;

/// One request to the model: the whole conversation so far and what it may do.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// System prompt blocks, in order. The first blocks stay the same across a session (the
    /// cacheable prefix); a step's own instructions come last.
    pub system: Vec<String>,
    /// The conversation, satisfying every [history invariant](crate::session::history).
    pub messages: Vec<Message>,
    /// The tools offered.
    pub tools: Vec<ToolDescription>,
    /// Whether the model must call a given tool.
    pub tool_choice: ToolChoice,
    /// Output token cap.
    pub max_tokens: u32,
    /// Sampling temperature.
    pub temperature: f32,
    /// Where the prompt cache's checkpoints go, for models that cache.
    pub cache: CachePlan,
}

/// Where a request's stable prefix ends, for the prompt cache: a model that caches puts one
/// checkpoint after the first `system_blocks` system blocks (which, with the tools before them,
/// are the same for every step of the session), and one after the first `history_messages`
/// messages (the stored history, the same for every step of the turn and a prefix of the next
/// turn's). What a step adds comes after both, so the cached prefix stays byte for byte the
/// same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CachePlan {
    /// System blocks before the first checkpoint.
    pub system_blocks: usize,
    /// Messages before the second checkpoint; 0 for none.
    pub history_messages: usize,
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDescription {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its input's JSON Schema.
    pub input_schema: Value,
}

/// Whether the model may choose, or must call one tool.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must call this tool.
    Tool(String),
}

/// One piece of a streamed model response.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ModelEvent {
    /// Answer text.
    TextDelta(String),
    /// Reasoning text.
    ReasoningDelta(String),
    /// The signature that closes the current reasoning block.
    ReasoningSignature(String),
    /// Encrypted reasoning, to be sent back as it came.
    RedactedReasoning(Vec<u8>),
    /// A tool call whose input is complete. `input` is the JSON text exactly as the model
    /// wrote it (possibly empty, possibly broken).
    ToolUse {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments' JSON text.
        input: String,
    },
    /// Why the model stopped.
    Stop(StopReason),
    /// Tokens the response used.
    Usage(TokenUsage),
}

/// Why a model response ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The model finished its answer.
    EndTurn,
    /// The model wants its tool calls run.
    ToolUse,
    /// The output token cap cut the response.
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// A guardrail intervened.
    GuardrailIntervened,
    /// Content filtering removed the output.
    ContentFiltered,
    /// A reason this crate does not know.
    Other(String),
}

impl StopReason {
    /// The reason's wire name, as `completed.data.stopReason` carries it.
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::StopSequence => "stop_sequence",
            Self::GuardrailIntervened => "guardrail_intervened",
            Self::ContentFiltered => "content_filtered",
            Self::Other(other) => other,
        }
    }
}

/// Tokens one model response used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write_tokens: u64,
}

impl TokenUsage {
    /// Adds `other`'s tokens to these.
    pub fn add(&mut self, other: &Self) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

/// What kind of failure a model call met; it decides whether the engine retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// The provider is rate-limiting (retried).
    Throttled,
    /// The model is not ready yet (retried).
    NotReady,
    /// The provider failed or could not be reached: 5xx, connection errors (retried).
    Unavailable,
    /// The provider or the network timed out (retried).
    Timeout,
    /// The stream broke with an exception mid-response (retried when nothing was streamed).
    StreamInterrupted,
    /// The request is invalid: retrying cannot help.
    Rejected,
    /// The caller may not use the model.
    AccessDenied,
    /// The model does not exist.
    NotFound,
    /// Anything else; not retried.
    Other,
}

impl ModelErrorKind {
    /// Whether trying again may succeed.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Self::Throttled | Self::NotReady | Self::Unavailable | Self::Timeout | Self::StreamInterrupted
        )
    }
}

/// A failed model call.
///
/// It keeps no `source`: its `message` is what the turn's client is told (redacted of ARNs and
/// account ids), with the provider's own error rendered into it once, so a printed chain says
/// each cause once. It is a value the engine clones into a retry's event and compares in tests,
/// which a boxed source error would not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ModelError {
    /// What kind of failure.
    pub kind: ModelErrorKind,
    /// Readable details, with the provider's error code when it gave one.
    pub message: String,
    /// How long the provider asked to be left alone before a retry (`retry-after`).
    pub retry_after: Option<std::time::Duration>,
}

impl ModelError {
    /// A model error of `kind`.
    pub fn new(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    /// The same error, with the wait the provider asked for before a retry.
    #[must_use]
    pub fn retry_after(mut self, wait: Option<std::time::Duration>) -> Self {
        self.retry_after = wait;
        self
    }
}

/// A streamed model response. Dropping it aborts the request.
pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, ModelError>> + Send + 'static>>;

/// A model the engine can call.
///
/// Implementations stream the response as it arrives and do not retry on their own: the
/// engine retries, so that every retry is announced with a `retrying` event.
///
/// ```
/// use agent_worker_core::engine::model::{Model, ModelEvent, ModelRequest, ModelStream, StopReason};
///
/// #[derive(Debug)]
/// struct Hello;
///
/// impl Model for Hello {
///     fn id(&self) -> &str { "hello" }
///     fn stream(&self, _request: ModelRequest) -> ModelStream {
///         Box::pin(futures_util::stream::iter([
///             Ok(ModelEvent::TextDelta("Hello!".into())),
///             Ok(ModelEvent::Stop(StopReason::EndTurn)),
///         ]))
///     }
/// }
/// ```
pub trait Model: Send + Sync + fmt::Debug {
    /// The model's id, for logs and health.
    fn id(&self) -> &str;

    /// Streams one response to `request`. Errors arrive as items, the first one ending it.
    fn stream(&self, request: ModelRequest) -> ModelStream;

    /// The largest PDF, in bytes, the provider takes as a document block it reads itself
    /// ([`ContentBlock::Document`](crate::session::ContentBlock::Document)); `None` (the
    /// default) when it takes none, and a PDF goes as its text.
    fn pdf_document_limit(&self) -> Option<usize> {
        None
    }
}

impl<M: Model + ?Sized> Model for std::sync::Arc<M> {
    fn id(&self) -> &str {
        (**self).id()
    }

    fn pdf_document_limit(&self) -> Option<usize> {
        (**self).pdf_document_limit()
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        (**self).stream(request)
    }
}

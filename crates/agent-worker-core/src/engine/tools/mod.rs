//! Tools the model can call: the [`Tool`] trait, [`tool_fn`], and the [`Toolset`] that
//! validates and runs calls.
//!
//! A call never crashes a turn. Arguments that are not JSON or break the tool's schema, an
//! unknown tool name, a tool's error, a panic inside a tool and a timeout each become an error
//! result that the model reads ([`ToolOutcome::is_error`]).

pub mod examples;
mod names;
pub mod openapi;
mod source;
mod toolset;

pub use names::{name_matches, tool_name_from};
pub use source::ToolSource;
pub use toolset::{Toolset, ToolsetError};
pub(crate) use toolset::{parse_arguments, schema_problems};

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::session::ContentBlock;

/// What calling a tool changes in the world; approvals key on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// A read: nothing changes.
    #[default]
    View,
    /// Creates or changes a file.
    File,
    /// Changes data.
    Mutate,
    /// Starts a job.
    Job,
    /// An order, a payment, a send, a publish: irreversible, always needs approval.
    Transaction,
}

/// What kind of tool a tool is, for the tool policy: a class other than [`Backend`](Self::Backend)
/// is offered to the model only when the policy [admits](crate::engine::ToolPolicy::admits) it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolClass {
    /// A tool the host gave the engine.
    #[default]
    Backend,
    /// The engine's own tools that reach the conversation's attached files
    /// (`attachment_list`, `attachment_view`, `attachment_read`).
    Attachment,
    /// An action of the page in the person's own tab, from the turn's surface snapshot
    /// (`context.oui`): answered by the tab.
    Ui,
}

impl ToolClass {
    /// Whether tools of this class are offered when no policy says otherwise: the product's own
    /// and the page's (which the tab offered itself), not the attachment tools.
    pub fn offered_by_default(self) -> bool {
        matches!(self, Self::Backend | Self::Ui)
    }
}

/// A tool's declaration: what the model sees, and what approvals key on.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Its name: 1 to 64 of `A-Z a-z 0-9 _ -`.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON Schema of its input, an object schema.
    pub input_schema: Value,
    /// What calling it changes.
    pub effect: Effect,
    /// Whether it removes or replaces something the person made.
    pub destructive: bool,
    /// A short title for an approval's preview.
    pub title: Option<String>,
    /// A sentence saying what happens when it runs, for an approval's preview.
    pub consequence: Option<String>,
    /// Whether the arguments must stay out of logs (the default); `false` when they may be logged.
    pub args_sensitive: bool,
    /// Its class, for the tool policy.
    pub class: ToolClass,
    /// Whether its service takes the call's idempotency key ([`ToolContext::idempotency_key`]),
    /// so that a call that may have run before its worker died can be sent again and take
    /// effect once (the default). A tool that changes something and takes no key (`false`) is
    /// never run again after such a death: the model is told its outcome is unknown.
    pub idempotent: bool,
}

impl ToolSpec {
    /// A read-only tool's declaration.
    pub fn new(name: impl Into<String>, description: impl Into<String>, input_schema: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema,
            effect: Effect::View,
            destructive: false,
            title: None,
            consequence: None,
            args_sensitive: true,
            class: ToolClass::Backend,
            idempotent: true,
        }
    }

    /// Says whether the tool's service takes the call's idempotency key (see
    /// [`idempotent`](Self::idempotent)).
    #[must_use]
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Sets the title shown in an approval's preview.
    #[must_use]
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Sets the sentence saying what happens, shown in an approval's preview.
    #[must_use]
    pub fn consequence(mut self, consequence: impl Into<String>) -> Self {
        self.consequence = Some(consequence.into());
        self
    }

    /// Says whether the arguments must stay out of logs.
    #[must_use]
    pub fn args_sensitive(mut self, sensitive: bool) -> Self {
        self.args_sensitive = sensitive;
        self
    }

    /// Sets the effect.
    #[must_use]
    pub fn effect(mut self, effect: Effect) -> Self {
        self.effect = effect;
        self
    }

    /// Sets the class.
    #[must_use]
    pub fn class(mut self, class: ToolClass) -> Self {
        self.class = class;
        self
    }

    /// Marks the tool destructive.
    #[must_use]
    pub fn destructive(mut self, destructive: bool) -> Self {
        self.destructive = destructive;
        self
    }
}

/// What a running call knows about where it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolContext {
    /// The session.
    pub session: crate::session::SessionId,
    /// The turn.
    pub turn_id: crate::session::TurnId,
    /// The call's id.
    pub call_id: String,
    /// The person the turn runs for, when the caller named one.
    pub user_id: Option<String>,
    /// The person's account, when the caller named one.
    pub account_id: Option<String>,
    /// The person's own credential for the product's API, when the turn carried one: for the
    /// call's request to the product, never for a log, an event or the model.
    pub user_token: Option<crate::protocol::UserToken>,
}

impl ToolContext {
    /// The call's idempotency key: the same on every run of the turn, a reclaimed one included,
    /// and different for every call ([`idempotency_key`](crate::session::idempotency_key)). A
    /// tool that changes something sends it where its service takes one, so that a call that
    /// may have run before the turn's worker died takes effect once.
    pub fn idempotency_key(&self) -> String {
        crate::session::idempotency_key(&self.session, &self.turn_id, &self.call_id)
    }
}

/// A tool's own failure; the model reads `message` (and `details`, when given).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// What went wrong.
    pub message: String,
    /// Structured details for the model.
    pub details: Option<Value>,
}

impl ToolError {
    /// A tool error saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            details: None,
        }
    }
}

/// What a call gives back: the result, and what only the model sees.
///
/// `shown` goes to the model beside the call's result, for the rest of the turn, and nowhere
/// else: the stored history and the `tool_ended` event carry `content` alone. A tool that shows
/// a file says in `content` what it showed, so later turns know.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolReply {
    /// The result, stored and streamed.
    pub content: Value,
    /// Text and pictures for the model only.
    pub shown: Vec<ContentBlock>,
}

impl From<Value> for ToolReply {
    fn from(content: Value) -> Self {
        Self {
            content,
            shown: Vec::new(),
        }
    }
}

/// A tool the model can call.
///
/// `call` receives arguments already checked against the spec's input schema. It should be
/// cancel-safe: when a turn is stopped, the call's future is dropped.
///
/// ```
/// use agent_worker_core::engine::tools::{Tool, ToolContext, ToolError, ToolSpec};
/// use serde_json::{json, Value};
///
/// #[derive(Debug)]
/// struct Shout(ToolSpec);
///
/// #[async_trait::async_trait]
/// impl Tool for Shout {
///     fn spec(&self) -> &ToolSpec { &self.0 }
///     async fn call(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
///         let text = input["text"].as_str().ok_or_else(|| ToolError::new("text is required"))?;
///         Ok(json!({ "shouted": text.to_uppercase() }))
///     }
/// }
/// ```
#[async_trait]
pub trait Tool: Send + Sync + fmt::Debug {
    /// The tool's declaration.
    fn spec(&self) -> &ToolSpec;

    /// Runs one call.
    async fn call(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolError>;

    /// Runs one call, with what only the model sees. The engine calls this; the default is
    /// [`call`](Self::call)'s result and nothing shown.
    async fn reply(&self, input: Value, ctx: ToolContext) -> Result<ToolReply, ToolError> {
        self.call(input, ctx).await.map(ToolReply::from)
    }
}

type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>;

/// A [`Tool`] made from a function; see [`tool_fn`].
pub struct FnTool {
    spec: ToolSpec,
    f: Box<dyn Fn(Value, ToolContext) -> ToolFuture + Send + Sync>,
}

impl fmt::Debug for FnTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// Makes a [`Tool`] from its declaration and an async function.
///
/// ```
/// use agent_worker_core::engine::tools::{tool_fn, ToolSpec};
/// use serde_json::json;
///
/// let add = tool_fn(
///     ToolSpec::new("add", "Adds two numbers.", json!({
///         "type": "object",
///         "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
///         "required": ["a", "b"]
///     })),
///     |input, _ctx| async move {
///         Ok(json!({ "sum": input["a"].as_f64().unwrap_or(0.0) + input["b"].as_f64().unwrap_or(0.0) }))
///     },
/// );
/// ```
pub fn tool_fn<F, Fut>(spec: ToolSpec, f: F) -> FnTool
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    FnTool {
        spec,
        f: Box::new(move |input, ctx| Box::pin(f(input, ctx))),
    }
}

#[async_trait]
impl Tool for FnTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        (self.f)(input, ctx).await
    }
}

/// How one call ended: the result the model reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// Whether it is an error.
    pub is_error: bool,
    /// The result, or `{"error": ..}`.
    pub content: Value,
    /// What only the model sees, for the rest of the turn; see [`ToolReply`].
    pub shown: Vec<ContentBlock>,
}

impl ToolOutcome {
    /// A successful result.
    pub fn ok(content: Value) -> Self {
        Self {
            is_error: false,
            content,
            shown: Vec::new(),
        }
    }

    /// An error result with structured content (`{"error": .., ..}`).
    pub fn failed(content: Value) -> Self {
        Self {
            is_error: true,
            content,
            shown: Vec::new(),
        }
    }

    /// An error result saying `message`.
    pub fn error(message: impl Into<String>) -> Self {
        Self::failed(json!({ "error": message.into() }))
    }
}

/// What the error of a call stopped at its timeout says after the tool's name.
pub(super) const TIMED_OUT: &str = "did not finish within";

/// Whether a `tool_ended` event's `content` is that of a call stopped at its timeout (for
/// metrics).
pub fn is_timeout_result(content: &Value) -> bool {
    content
        .get("error")
        .and_then(Value::as_str)
        .is_some_and(|error| error.starts_with("the tool ") && error.contains(TIMED_OUT))
}

impl From<ToolError> for ToolOutcome {
    /// A tool's own failure, as the model reads it: `{error, details?}`.
    fn from(error: ToolError) -> Self {
        Self::failed(match error.details {
            Some(details) => json!({ "error": error.message, "details": details }),
            None => json!({ "error": error.message }),
        })
    }
}

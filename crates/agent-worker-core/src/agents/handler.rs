//! Handlers: deterministic code that takes a side's turns. A handler turn is one invocation; it
//! reads the thread from its side's perspective and may answer, publish a status, or end the
//! session.

use std::fmt;
use std::future::Future;
use std::sync::Weak;

use async_trait::async_trait;

use super::definition::SubagentRelationship;
use super::subagents::{ChildReply, ChildRuntime, message_child};
use super::thread::{Side, ThreadMessage};
use crate::session::{SessionId, TurnId};

/// Who said a message, from the handler's side: itself (`assistant`) or the other side (`user`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The other side.
    User,
    /// This side.
    Assistant,
}

/// What a handler sees of the thread and what it does to it.
pub struct ThreadState {
    session: SessionId,
    side: Side,
    messages: Vec<(Role, String)>,
    context: Vec<String>,
    port: Option<ChildPort>,
    env: std::collections::BTreeMap<String, String>,
    sent: usize,
    pub(crate) replies: Vec<String>,
    pub(crate) status: Option<String>,
    pub(crate) end: Option<HandlerEnd>,
}

impl fmt::Debug for ThreadState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadState")
            .field("session", &self.session)
            .field("side", &self.side)
            .field("messages", &self.messages.len())
            .finish_non_exhaustive()
    }
}

/// A handler's way to its side's children.
pub(crate) struct ChildPort {
    pub(crate) inner: Weak<dyn ChildRuntime>,
    pub(crate) relationships: Vec<SubagentRelationship>,
    pub(crate) turn_id: TurnId,
}

/// How a handler ended the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HandlerEnd {
    Stop(String),
    Fail(String),
}

impl ThreadState {
    pub(crate) fn new(
        session: &SessionId,
        side: Side,
        transcript: &[ThreadMessage],
        context: Vec<String>,
        port: Option<ChildPort>,
    ) -> Self {
        let messages = transcript
            .iter()
            .map(|m| {
                let role = if m.side == side {
                    Role::Assistant
                } else {
                    Role::User
                };
                (role, m.text.clone())
            })
            .collect();
        Self {
            session: session.clone(),
            side,
            messages,
            context,
            port,
            env: std::collections::BTreeMap::new(),
            sent: 0,
            replies: Vec::new(),
            status: None,
            end: None,
        }
    }

    /// The same, with the agent definition's `env`: its default variable values (§2.2).
    #[must_use]
    pub(crate) fn with_env(mut self, env: std::collections::BTreeMap<String, String>) -> Self {
        self.env = env;
        self
    }

    /// The session.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The agent definition's default value of variable `name` (its `env`), if it gives one.
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str)
    }

    /// The side this handler takes.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The thread so far, oldest first, from this side's perspective.
    pub fn messages(&self) -> &[(Role, String)] {
        &self.messages
    }

    /// What the other side said since this side last spoke, joined by blank lines.
    pub fn inbound(&self) -> String {
        let since = self
            .messages
            .iter()
            .rposition(|(role, _)| *role == Role::Assistant)
            .map_or(0, |i| i + 1);
        self.messages[since..]
            .iter()
            .map(|(_, text)| text.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    /// What the side's hooks contributed before this turn.
    pub fn context(&self) -> &[String] {
        &self.context
    }

    /// The names (`as`) of the children this side may message.
    pub fn subagents(&self) -> Vec<&str> {
        self.port
            .as_ref()
            .map(|p| {
                p.relationships
                    .iter()
                    .map(SubagentRelationship::tool_name)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Sends `text` to the child of relationship `name`, as its human side, and waits until it
    /// settles: the newest child still alive, or a new one (within `maxInstances`).
    pub async fn message_subagent(&mut self, name: &str, text: &str) -> Result<ChildReply, HandlerError> {
        let port = self
            .port
            .as_ref()
            .ok_or_else(|| HandlerError::permanent("this side has no subagents"))?;
        let relationship = port
            .relationships
            .iter()
            .find(|r| r.tool_name() == name)
            .cloned()
            .ok_or_else(|| HandlerError::permanent(format!("this side has no subagent `{name}`")))?;
        let inner = port
            .inner
            .upgrade()
            .ok_or_else(|| HandlerError::permanent("the agent runtime has shut down"))?;
        let turn_id = TurnId::new(format!("{}:{name}:{}", port.turn_id, self.sent)).map_err(|e| {
            HandlerError::permanent(format!("`{name}` cannot name the child's turn: its id {e}"))
        })?;
        self.sent += 1;
        message_child(
            &inner,
            &self.session,
            self.side,
            &relationship,
            text,
            &turn_id,
            true,
        )
        .await
        .map_err(HandlerError::transient)
    }

    /// Answers the other side (more than once appends more text to this turn's message).
    pub fn append_message(&mut self, text: impl Into<String>) {
        self.replies.push(text.into());
    }

    /// Publishes the session's status.
    pub fn set_status(&mut self, status: impl Into<String>) {
        self.status = Some(status.into());
    }

    /// Ends the session successfully with `message` as its result.
    pub fn stop_session(&mut self, message: impl Into<String>) {
        self.end = Some(HandlerEnd::Stop(message.into()));
    }

    /// Ends the session with a failure.
    pub fn fail_session(&mut self, message: impl Into<String>) {
        self.end = Some(HandlerEnd::Fail(message.into()));
    }
}

/// A handler could not take its turn: the invocation fails (and may be retried).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HandlerError {
    /// What went wrong.
    pub message: String,
    /// Whether running the turn again may work.
    pub retryable: bool,
}

impl HandlerError {
    /// A failure worth retrying.
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
        }
    }

    /// A failure not worth retrying.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }
}

/// Takes a side's turns.
///
/// ```
/// use agent_worker_core::agents::{HandlerError, ThreadState, handler_fn};
///
/// // Answers every message in capitals; "bye" ends the session.
/// let shout = handler_fn(|state: &mut ThreadState| {
///     let inbound = state.inbound();
///     if inbound.trim() == "bye" {
///         state.stop_session("said goodbye");
///     } else {
///         state.append_message(inbound.to_uppercase());
///     }
///     async { Ok::<(), HandlerError>(()) }
/// });
/// # let _ = shout;
/// ```
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Takes one turn.
    async fn turn(&self, state: &mut ThreadState) -> Result<(), HandlerError>;
}

/// A [`Handler`] made from a function; see [`handler_fn`].
pub struct HandlerFn<F>(F);

impl<F> fmt::Debug for HandlerFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HandlerFn")
    }
}

/// A handler from `f(&mut state) -> async Result<(), HandlerError>`. The function does its
/// reading and writing of `state` before it returns the future.
pub fn handler_fn<F, Fut>(f: F) -> HandlerFn<F>
where
    F: Fn(&mut ThreadState) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send,
{
    HandlerFn(f)
}

#[async_trait]
impl<F, Fut> Handler for HandlerFn<F>
where
    F: Fn(&mut ThreadState) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send,
{
    async fn turn(&self, state: &mut ThreadState) -> Result<(), HandlerError> {
        (self.0)(state).await
    }
}

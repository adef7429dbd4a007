//! The session control plane (seed 000 §2): commands dispatched to a session beside `invoke`,
//! to steer its running turn, queue a follow-up on it, or abort it.
//!
//! - **steer** `{prompt}`: given to the model after the current round's tool calls end and
//!   before its next call.
//! - **follow_up** `{prompt}`: run by the same turn once it is otherwise done, in the order sent,
//!   one at a time.
//! - **abort**: stops the run; what was queued on it does not run.
//!
//! A command is answered once: [`Accepted`] (`{"ok": true, "runId": …}`) when it is kept, or
//! [`Refused`] (`{"ok": false, "error": {code, message, retryable}}`) before it is, the only case
//! where sending it again is safe. Acceptance is not the outcome: the run's terminal is. A run
//! that takes steering or follow-ups keeps its `invoke` stream open until it settles, with one
//! terminal; a run that is sent none streams exactly as without the control plane.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A command for a session's running turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SessionCommand {
    /// Words for the model at the run's next round boundary.
    Steer {
        /// The person's words.
        prompt: String,
    },
    /// A message the run takes once it is otherwise done.
    FollowUp {
        /// The person's words.
        prompt: String,
    },
    /// Stop the run; what was queued on it does not run.
    Abort,
}

impl SessionCommand {
    /// Its name, as [`SessionControl::capabilities`] lists it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Steer { .. } => "steer",
            Self::FollowUp { .. } => "follow_up",
            Self::Abort => "abort",
        }
    }
}

/// A command kept for the run it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// The run (turn) it went to.
    pub run_id: String,
}

/// A command refused before it was kept: nothing of it happened, and it may be sent again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[error("{code}: {message}")]
pub struct Refused {
    /// One of [`refusals`]' codes.
    pub code: String,
    /// What was wrong, for a person.
    pub message: String,
    /// Whether the same command may succeed later (the session may start a run, the store may
    /// recover).
    pub retryable: bool,
}

impl Refused {
    /// A refusal with `code`.
    pub fn new(code: &str, message: impl Into<String>, retryable: bool) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
            retryable,
        }
    }
}

/// The codes of a [`Refused`] command.
pub mod refusals {
    /// The session has no running turn to take the command (it is idle, or unknown).
    pub const NO_ACTIVE_RUN: &str = "no_active_run";
    /// The command is not one, or its prompt is empty or too long.
    pub const INVALID_COMMAND: &str = "invalid_command";
    /// This host does not offer the command.
    pub const UNSUPPORTED_CAPABILITY: &str = "unsupported_capability";
    /// The session's store failed: nothing was kept; sending again may succeed.
    pub const STORE_FAILED: &str = "store_failed";
    /// The conversation is another person's: nothing was kept.
    pub const NOT_OWNER: &str = "not_owner";
    /// The running turn holds as many bytes of commands as it may: nothing was kept, and
    /// sending it again will not help while that turn runs.
    pub const TOO_LARGE: &str = "too_large";
}

/// A command's answer on the wire: `{"ok": true, "runId"}` ([`CommandKept`]) or
/// `{"ok": false, "error": {…}}` ([`CommandRefused`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum CommandAnswer {
    /// Kept for the running turn.
    Kept(CommandKept),
    /// Refused: nothing of it happened.
    Refused(CommandRefused),
}

/// A command kept: `{"ok": true, "runId"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CommandKept {
    /// `true`.
    #[cfg_attr(feature = "schema", schemars(extend("const" = true)))]
    pub ok: bool,
    /// The run (turn) it went to.
    pub run_id: String,
}

/// A command refused: `{"ok": false, "error": {…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CommandRefused {
    /// `false`.
    #[cfg_attr(feature = "schema", schemars(extend("const" = false)))]
    pub ok: bool,
    /// Why.
    pub error: Refused,
}

impl From<&Result<Accepted, Refused>> for CommandAnswer {
    fn from(result: &Result<Accepted, Refused>) -> Self {
        match result {
            Ok(accepted) => Self::Kept(CommandKept {
                ok: true,
                run_id: accepted.run_id.clone(),
            }),
            Err(refused) => Self::Refused(CommandRefused {
                ok: false,
                error: refused.clone(),
            }),
        }
    }
}

/// A command's answer on the wire, as JSON ([`CommandAnswer`]).
pub fn answer(result: &Result<Accepted, Refused>) -> Value {
    serde_json::to_value(CommandAnswer::from(result)).unwrap_or_default()
}

/// What a session is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SessionState {
    /// `idle` or `running`.
    pub status: SessionStatus,
    /// The running turn, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_run_id: Option<String>,
    /// The commands sent to the running turn so far, by kind.
    pub commands: CommandCounts,
}

/// Whether a session has a running turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// No turn runs.
    Idle,
    /// A turn runs.
    Running,
}

/// Commands sent to a run, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CommandCounts {
    /// Steering sent.
    pub steering: usize,
    /// Follow-ups sent.
    pub follow_up: usize,
}

/// A boxed future of the control plane.
pub type ControlFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, Refused>> + Send + 'a>>;

/// The control plane of an agent's sessions, beside [`Agent`](crate::Agent).
pub trait SessionControl: Send + Sync {
    /// The commands offered (`steer`, `follow_up`, `abort`).
    fn capabilities(&self) -> &'static [&'static str];

    /// Sends `command` to `session`'s running turn.
    fn dispatch<'a>(
        &'a self,
        session: &'a crate::SessionId,
        command: SessionCommand,
    ) -> ControlFuture<'a, Accepted>;

    /// What `session` is doing.
    fn state<'a>(&'a self, session: &'a crate::SessionId) -> ControlFuture<'a, SessionState>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn commands_and_answers_have_the_wire_shape() {
        let steer: SessionCommand =
            serde_json::from_value(json!({"type": "steer", "prompt": "Use metric."})).unwrap();
        assert_eq!(
            steer,
            SessionCommand::Steer {
                prompt: "Use metric.".into()
            }
        );
        let abort: SessionCommand = serde_json::from_value(json!({"type": "abort"})).unwrap();
        assert_eq!(abort.name(), "abort");
        assert!(serde_json::from_value::<SessionCommand>(json!({"type": "steer"})).is_err());
        assert_eq!(
            answer(&Ok(Accepted { run_id: "t1".into() })),
            json!({"ok": true, "runId": "t1"})
        );
        let refused = Refused::new(refusals::NO_ACTIVE_RUN, "idle", true);
        assert_eq!(
            answer(&Err(refused)),
            json!({"ok": false, "error": {"code": "no_active_run", "message": "idle", "retryable": true}})
        );
    }
}

//! [`TurnPolicy`]: per-step decisions a host can make about a turn.

use std::fmt;

/// Where a turn stands when a step is about to be sent.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct StepContext<'a> {
    /// The session.
    pub session: &'a crate::session::SessionId,
    /// The turn.
    pub turn_id: &'a crate::session::TurnId,
    /// The round about to run, from 0.
    pub round: u32,
    /// The person, when the caller named one (the `userId` scope extension).
    pub user_id: Option<&'a str>,
    /// The person's account, when the caller named one (the `accountId` scope extension).
    pub account_id: Option<&'a str>,
    /// The person's token for the product's API, for the turn's tools.
    pub(crate) user_token: Option<&'a crate::protocol::UserToken>,
}

/// Decisions about each step of a turn. Every method has a default that decides nothing.
///
/// ```
/// use agent_worker_core::engine::{StepContext, TurnPolicy};
///
/// /// Always look the time up first.
/// #[derive(Debug)]
/// struct TimeFirst;
///
/// impl TurnPolicy for TimeFirst {
///     fn force_tool(&self, step: &StepContext<'_>) -> Option<String> {
///         (step.round == 0).then(|| "current_time".to_owned())
///     }
/// }
/// ```
pub trait TurnPolicy: Send + Sync + fmt::Debug {
    /// A tool the model must call in this step. With
    /// [`forced_tool_choice`](super::EngineConfig::forced_tool_choice) the model is sent a forced
    /// tool choice; without it, only that tool and an instruction to call it.
    fn force_tool(&self, step: &StepContext<'_>) -> Option<String> {
        let _ = step;
        None
    }

    /// Whether a call of `tool` ends the turn. The step's calls all run and their results are
    /// stored; then the turn completes with `data: {"stopReason": "stop_tool", "stopTools":
    /// [{"name", "input"}, …]}`, every ending call of the step in call order.
    fn ends_turn(&self, tool: &str) -> bool {
        let _ = tool;
        false
    }

    /// What to tell the model when it answered with text and no tool call, to keep the turn
    /// going; `None` (the default) lets the answer end the turn. The line is stored as the
    /// person's words. The turn still ends at `max_rounds`.
    fn continue_after_text(&self, step: &StepContext<'_>) -> Option<String> {
        let _ = step;
        None
    }
}

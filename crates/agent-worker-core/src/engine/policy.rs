//! [`TurnPolicy`]: the decisions a host can make about a turn: once, before its first model call,
//! who it is for makes its [`TurnPlan`] (the system prompt, the tools offered: seed 004's
//! per-turn `turnPolicy`); then before each model call, the step's tools and a forced one (the
//! AI SDK's `prepareStep`, given every tool of the turn with its class: seed 004's `allTools`).

use std::fmt;

use super::tools::ToolClass;

/// Who a turn is for, as its policy reads it before the first model call.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct TurnContext<'a> {
    /// The session.
    pub session: &'a crate::session::SessionId,
    /// The turn.
    pub turn_id: &'a crate::session::TurnId,
    /// The person, when the caller named one.
    pub user_id: Option<&'a str>,
    /// The person's account, when the caller named one.
    pub account_id: Option<&'a str>,
    /// The agent the turn asks for (the scope's `agent`), when it names one.
    pub agent: Option<&'a str>,
}

/// What a turn's policy makes of it before its first model call. The default changes nothing.
///
/// The same plan gives the same request prefix (system prompt and tools), so the prompt cache
/// holds across the turns that resolve alike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnPlan {
    /// The system prompt in place of the engine's; `None` keeps the engine's.
    pub system_prompt: Option<String>,
    /// The engine's tools this turn is offered, each by name or by a pattern where `*` is any
    /// run of characters; `None` offers them all. The page's UI actions and the typed result's
    /// tool are the turn's own and are offered as ever.
    pub tools: Option<Vec<String>>,
}

impl TurnPlan {
    /// Whether it changes nothing.
    pub fn is_unchanged(&self) -> bool {
        self == &Self::default()
    }
}

/// A tool of the turn, as a step's policy sees it (an entry of seed 004's `allTools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StepTool<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its class: the product's own, the attachment tools, or an action of the person's page.
    pub class: ToolClass,
}

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
    /// The tools the model has called in this turn so far, by name, in call order.
    pub called: &'a [String],
    /// Every tool the turn offers, each with its class (seed 004's `allTools`): those
    /// [`TurnPolicy::active_tools`] narrows a step from, after the turn's plan and the tool
    /// policy's classes, the page's actions included. The typed result's tool is not among them:
    /// it is the turn's own and stays.
    pub all_tools: &'a [StepTool<'a>],
}

/// Decisions about each step of a turn. Every method has a default that decides nothing.
///
/// ```
/// use agent_worker_core::engine::{StepContext, ToolClass, TurnPolicy};
///
/// /// Always look the time up first, with the product's own tools only.
/// #[derive(Debug)]
/// struct TimeFirst;
///
/// impl TurnPolicy for TimeFirst {
///     fn force_tool(&self, step: &StepContext<'_>) -> Option<String> {
///         (step.round == 0).then(|| "current_time".to_owned())
///     }
///
///     fn active_tools(&self, step: &StepContext<'_>) -> Option<Vec<String>> {
///         let own = step.all_tools.iter().filter(|t| t.class == ToolClass::Backend);
///         (step.round == 0).then(|| own.map(|t| t.name.to_owned()).collect())
///     }
/// }
/// ```
pub trait TurnPolicy: Send + Sync + fmt::Debug {
    /// The turn's plan, from who it is for: decided once, before its first model call.
    fn plan(&self, turn: &TurnContext<'_>) -> TurnPlan {
        let _ = turn;
        TurnPlan::default()
    }

    /// The tools the model is offered in this step, by name or pattern (`*` is any run of
    /// characters); `None` (the default) offers the turn's tools. A step is narrowed, never
    /// widened: a name the turn does not offer gives nothing. The typed result's tool stays.
    fn active_tools(&self, step: &StepContext<'_>) -> Option<Vec<String>> {
        let _ = step;
        None
    }

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

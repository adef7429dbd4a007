//! [`TurnPolicy`]: the decisions a host can make about a turn: once, before its first model call,
//! who it is for makes its [`TurnPlan`] (the system prompt, the tools offered: seed 004's
//! per-turn `turnPolicy`); then before each model call, the step's tools and a forced one (the
//! AI SDK's `prepareStep`, given every tool of the turn with its class: seed 004's `allTools`).

use std::fmt;
use std::sync::Arc;

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

/// Two turn policies as one: a deployment's (`outer`) and, inside it, one that narrows it (a
/// Standard Agents side's). Both decide; the inner one narrows what the outer offers and never
/// widens it:
/// - the plan is the outer's tools, with no system prompt in place of the engine's (the inner
///   engine's own prompt stands);
/// - a step's tools are those both offer (a name either offers alone is not offered; where both
///   give patterns, a literal name of one that the other's patterns match is kept);
/// - the inner's forced tool and nudge first, then the outer's; a call ends the turn when
///   either says so.
#[derive(Debug, Clone)]
pub struct Layered {
    outer: Arc<dyn TurnPolicy>,
    inner: Arc<dyn TurnPolicy>,
}

impl Layered {
    /// `inner` inside `outer`.
    pub fn new(outer: Arc<dyn TurnPolicy>, inner: Arc<dyn TurnPolicy>) -> Self {
        Self { outer, inner }
    }
}

impl TurnPolicy for Layered {
    fn plan(&self, turn: &TurnContext<'_>) -> TurnPlan {
        let outer = self.outer.plan(turn);
        let inner = self.inner.plan(turn);
        TurnPlan {
            system_prompt: inner.system_prompt,
            tools: both(outer.tools, inner.tools),
        }
    }

    fn active_tools(&self, step: &StepContext<'_>) -> Option<Vec<String>> {
        both(self.outer.active_tools(step), self.inner.active_tools(step))
    }

    fn force_tool(&self, step: &StepContext<'_>) -> Option<String> {
        self.inner
            .force_tool(step)
            .or_else(|| self.outer.force_tool(step))
    }

    fn ends_turn(&self, tool: &str) -> bool {
        self.inner.ends_turn(tool) || self.outer.ends_turn(tool)
    }

    fn continue_after_text(&self, step: &StepContext<'_>) -> Option<String> {
        self.inner
            .continue_after_text(step)
            .or_else(|| self.outer.continue_after_text(step))
    }
}

/// The tools two lists of names and patterns both offer (`None` offers all): never more than
/// either. A literal name of one list is kept when the other's patterns match it.
fn both(a: Option<Vec<String>>, b: Option<Vec<String>>) -> Option<Vec<String>> {
    use super::tools::name_matches;
    let (a, b) = match (a, b) {
        (None, only) | (only, None) => return only,
        (Some(a), Some(b)) => (a, b),
    };
    let literal = |p: &String| !p.contains('*');
    let mut kept: Vec<String> = Vec::new();
    for (from, other) in [(&a, &b), (&b, &a)] {
        for name in from.iter().filter(|p| literal(p)) {
            if other.iter().any(|p| name_matches(p, name)) && !kept.contains(name) {
                kept.push(name.clone());
            }
        }
    }
    Some(kept)
}

#[cfg(test)]
mod layered_tests {
    use super::*;

    #[derive(Debug)]
    struct Offers(
        Option<Vec<&'static str>>,
        Option<&'static str>,
        bool,
        Option<&'static str>,
    );

    impl TurnPolicy for Offers {
        fn plan(&self, _turn: &TurnContext<'_>) -> TurnPlan {
            TurnPlan {
                system_prompt: self.3.map(str::to_owned),
                tools: self
                    .0
                    .as_ref()
                    .map(|t| t.iter().map(|s| (*s).to_owned()).collect()),
            }
        }
        fn force_tool(&self, _step: &StepContext<'_>) -> Option<String> {
            self.1.map(str::to_owned)
        }
        fn ends_turn(&self, _tool: &str) -> bool {
            self.2
        }
    }

    #[test]
    fn the_inner_policy_narrows_the_outer_and_never_widens_it() {
        let list = |v: &[&str]| Some(v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert_eq!(both(None, list(&["a"])), list(&["a"]));
        assert_eq!(both(list(&["a", "b"]), None), list(&["a", "b"]));
        assert_eq!(
            both(list(&["desk_*", "time"]), list(&["desk_get", "time", "other"])),
            list(&["time", "desk_get"])
        );
        assert_eq!(both(list(&["x*"]), list(&["y*"])), list(&[]));

        let layered = Layered::new(
            Arc::new(Offers(
                Some(vec!["desk_*"]),
                Some("outer_tool"),
                false,
                Some("outer persona"),
            )),
            Arc::new(Offers(None, None, true, None)),
        );
        let session = crate::session::SessionId::new("s").unwrap();
        let turn = crate::session::TurnId::new("t").unwrap();
        let ctx = TurnContext {
            session: &session,
            turn_id: &turn,
            user_id: None,
            account_id: None,
            agent: None,
        };
        let plan = layered.plan(&ctx);
        assert_eq!(plan.tools, list(&["desk_*"]));
        assert_eq!(plan.system_prompt, None, "the inner engine's own prompt stands");
        assert!(layered.ends_turn("anything"));
    }
}

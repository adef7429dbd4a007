//! `oui`: the tab's surface snapshot, and the turn's UI tools made from it and from nothing else.
//!
//! ```json
//! { "surfaces": [ { "id": "tasks", "title": "Task list", "actions": [
//!     { "id": "add", "title": "Add a task", "description": "Adds a task to the list.",
//!       "input": { "type": "object", "properties": { "title": { "type": "string" } } } },
//!     { "id": "delete", "description": "Deletes a task.", "confirm": true,
//!       "consequence": "The task is gone for good." } ] } ] }
//! ```
//!
//! One tool per action, named `ui_<surface>_<action>`, of the class [`ToolClass::Ui`]: its
//! title, description and input schema (an object; none takes no arguments), its declared
//! `effect` (`view`, `mutate` (the default), `file`, `job`, `transaction`), and `confirm: true`
//! for a destructive one, so the approval rules hold for the page's actions too.
//!
//! A call is sent to the tab as a `ui_action_requested` event (the engine emits it), then waits
//! for the tab's answer through [`ActionAnswers`] for the UI action timeout (longer than a
//! tool's: a person confirms on the page). Then it takes one last look: an answer found is the
//! result; a request the tab took and did not answer is kept as sent with its outcome unknown;
//! one no tab took did not run. Either way the request is withdrawn ([`WITHDRAWN`]), and the
//! engine tells the tab (`ui_action_withdrawn`), so that a late click does nothing.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::engine::prompt::InvalidPrompt;
use crate::engine::tools::{Effect, Tool, ToolClass, ToolContext, ToolError, ToolSpec};
use crate::protocol::ErrorChain;
use crate::session::{ActionAnswer, ActionAnswers};

/// The tab's surface snapshot.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct OuiSnapshot {
    /// Its surfaces.
    #[serde(default)]
    pub surfaces: Vec<OuiSurface>,
}

/// One surface of the page.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct OuiSurface {
    /// Its id.
    pub id: String,
    /// Its title.
    pub title: Option<String>,
    /// What it offers.
    #[serde(default)]
    pub actions: Vec<OuiAction>,
}

/// One action a surface offers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct OuiAction {
    /// Its id on the surface.
    pub id: String,
    /// A short title.
    pub title: Option<String>,
    /// What it does.
    pub description: Option<String>,
    /// Its input, a JSON Schema of an object.
    pub input: Option<Value>,
    /// What running it changes (`mutate` when not said).
    pub effect: Option<Effect>,
    /// It removes or replaces something: every call needs the person's approval.
    #[serde(default)]
    pub confirm: bool,
    /// What happens when it runs, for an approval's card.
    pub consequence: Option<String>,
    /// Whether its arguments may be logged and shown (not unless it says so).
    #[serde(default, rename = "argsSensitive")]
    pub args_sensitive: Option<bool>,
}

/// Where a UI tool's call goes on the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiTarget {
    /// The surface.
    pub surface: String,
    /// The action.
    pub action: String,
}

impl OuiSnapshot {
    /// Reads the tab's `oui`, naming the field at fault.
    pub fn read(value: &Value) -> Result<Self, InvalidPrompt> {
        if !value.is_object() {
            return Err(bad(
                "context.oui".into(),
                "is not a surface snapshot: it must be an object",
            ));
        }
        let snapshot: Self = serde_json::from_value(value.clone()).map_err(|e| InvalidPrompt {
            field: "context.oui".into(),
            reason: format!("is not a surface snapshot: {e}"),
        })?;
        let mut names = std::collections::BTreeSet::new();
        for (s, surface) in snapshot.surfaces.iter().enumerate() {
            let at = format!("context.oui.surfaces[{s}]");
            if surface.id.trim().is_empty() {
                return Err(bad(format!("{at}.id"), "is empty"));
            }
            for (a, action) in surface.actions.iter().enumerate() {
                let at = format!("{at}.actions[{a}]");
                if action.id.trim().is_empty() {
                    return Err(bad(format!("{at}.id"), "is empty"));
                }
                if let Some(input) = &action.input
                    && (input.get("type").and_then(Value::as_str) != Some("object")
                        || jsonschema::validator_for(input).is_err())
                {
                    return Err(bad(format!("{at}.input"), "is not a JSON Schema of an object"));
                }
                if !names.insert(tool_name(&surface.id, &action.id)) {
                    return Err(bad(
                        format!("{at}.id"),
                        format!(
                            "names the tool {} a second time",
                            tool_name(&surface.id, &action.id)
                        ),
                    ));
                }
            }
        }
        Ok(snapshot)
    }

    /// The turn's UI tools, waiting for answers through `answers`, looking every `poll`, for
    /// at most `wait`.
    pub fn tools(
        &self,
        answers: &Arc<dyn ActionAnswers>,
        poll: Duration,
        wait: Duration,
    ) -> Vec<(UiTarget, Arc<dyn Tool>)> {
        let mut tools = Vec::new();
        for surface in &self.surfaces {
            for action in &surface.actions {
                let target = UiTarget {
                    surface: surface.id.clone(),
                    action: action.id.clone(),
                };
                let tool = UiActionTool {
                    spec: spec_of(surface, action),
                    answers: answers.clone(),
                    poll,
                    wait,
                };
                tools.push((target, Arc::new(tool) as Arc<dyn Tool>));
            }
        }
        tools
    }
}

fn bad(field: String, reason: impl Into<String>) -> InvalidPrompt {
    InvalidPrompt {
        field,
        reason: reason.into(),
    }
}

/// `ui_<surface>_<action>`, in the characters model APIs take, at most 64 of them.
pub fn tool_name(surface: &str, action: &str) -> String {
    crate::engine::tools::tool_name_from(&format!("ui_{surface}_{action}"))
}

fn spec_of(surface: &OuiSurface, action: &OuiAction) -> ToolSpec {
    let on = surface.title.as_deref().unwrap_or(&surface.id);
    let description = action
        .description
        .clone()
        .or_else(|| action.title.clone())
        .unwrap_or_else(|| format!("The action {} of {on}.", action.id));
    let mut spec = ToolSpec::new(
        tool_name(&surface.id, &action.id),
        format!("{description} (An action of the page the person has open: {on}.)"),
        action.input.clone().unwrap_or_else(|| json!({"type": "object"})),
    )
    .class(ToolClass::Ui)
    .effect(action.effect.unwrap_or(Effect::Mutate))
    .destructive(action.confirm)
    // A page's action takes no idempotency key: after its worker died it is not taken again.
    .idempotent(false)
    .args_sensitive(action.args_sensitive.unwrap_or(true));
    if let Some(title) = &action.title {
        spec = spec.title(title.clone());
    }
    if let Some(consequence) = &action.consequence {
        spec = spec.consequence(consequence.clone());
    }
    spec
}

/// In a UI call's error `details`: the request was withdrawn after the wait (the reason).
pub const WITHDRAWN: &str = "withdrawn";

/// One action of the page: a call waits for the tab's answer.
pub struct UiActionTool {
    spec: ToolSpec,
    answers: Arc<dyn ActionAnswers>,
    poll: Duration,
    wait: Duration,
}

impl fmt::Debug for UiActionTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UiActionTool")
            .field("name", &self.spec.name)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Tool for UiActionTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _input: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let until = tokio::time::Instant::now() + self.wait;
        loop {
            let taken = match self.answers.look(&ctx.session, &ctx.turn_id, &ctx.call_id).await {
                Ok(Some(answer)) => match outcome(answer) {
                    Some(result) => return result,
                    None => Some(true),
                },
                Ok(None) => Some(false),
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), call = %ctx.call_id, "could not look for the tab's answer; looking again");
                    None
                }
            };
            let now = tokio::time::Instant::now();
            // That was the last look: the wait is over.
            if now >= until {
                return Err(withdrawn(taken, self.wait));
            }
            tokio::time::sleep(self.poll.min(until - now)).await;
        }
    }
}

/// What a call whose wait ran out gives the model: not run when no tab took it (`taken` is
/// `Some(false)`), else sent with its outcome unknown.
fn withdrawn(taken: Option<bool>, wait: Duration) -> ToolError {
    let message = match taken {
        Some(false) => format!(
            "not run: no tab took the request within {}s; it was withdrawn",
            wait.as_secs()
        ),
        _ => format!(
            "sent to the person's tab, and its outcome is unknown: the tab did not answer within {}s, and \
             the request was withdrawn. Treat the page as unseen: look at it again before relying on what it shows.",
            wait.as_secs()
        ),
    };
    ToolError {
        message,
        details: Some(json!({ WITHDRAWN: "timeout" })),
    }
}

/// Whether a UI call's outcome says its request was withdrawn after the wait.
pub fn was_withdrawn(content: &Value) -> bool {
    content["details"][WITHDRAWN].is_string()
}

/// What a final answer gives the model; `None` while the tab is still at it.
pub fn outcome(answer: ActionAnswer) -> Option<Result<Value, ToolError>> {
    match answer {
        ActionAnswer::Taken => None,
        ActionAnswer::Done {
            result,
            is_error: false,
        } => Some(Ok(result)),
        ActionAnswer::Done {
            result,
            is_error: true,
        } => Some(Err(ToolError {
            message: "the page's action failed".into(),
            details: Some(result),
        })),
        ActionAnswer::Refused { reason } => Some(Err(ToolError::new(format!(
            "not run: the person's tab refused the request ({reason})"
        )))),
    }
}

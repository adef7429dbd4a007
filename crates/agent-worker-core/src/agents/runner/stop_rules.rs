//! The stop rules of a prompt side's turn, in the specification's order.

use serde_json::Value;

use crate::agents::definition::{PromptSide, SessionToolBinding};
use crate::agents::thread::{SessionEnd, SessionStatus};

use super::engines::{bound_call, bound_message};

/// What a side turn produced.
#[derive(Default)]
pub(super) struct SideOutcome {
    pub(super) message: Option<String>,
    pub(super) status: Option<String>,
    pub(super) end: Option<(SessionStatus, SessionEnd)>,
    /// The exposed agent the side handed the thread to.
    pub(super) handoff: Option<String>,
}

/// Applies the stop rules, in the specification's order, to a completed engine turn.
pub(super) fn apply_stop_rules(
    side: &PromptSide,
    handoffs: &[&str],
    data: Option<&Value>,
    said: String,
    outcome: &mut SideOutcome,
) {
    let calls: Vec<(&str, &Value)> = data
        .and_then(|d| d.get("stopTools"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c.get("name")?.as_str()?, c.get("input")?)))
        .collect();
    let said = Some(said).filter(|s| !s.trim().is_empty());
    // 1. Session bindings.
    for (binding, status, reason) in [
        (&side.session_stop, SessionStatus::Completed, "session_stop"),
        (&side.session_fail, SessionStatus::Failed, "session_fail"),
    ] {
        if let Some((binding, input)) = bound_call(binding, &calls) {
            let attachments = binding
                .attachments_property
                .as_deref()
                .map(|p| input[p].clone())
                .filter(|v| !v.is_null());
            let message = bound_message(binding, input);
            outcome.message = said.or_else(|| Some(message.clone()));
            outcome.end = Some((
                status,
                SessionEnd {
                    message: Some(message),
                    attachments,
                    reason: reason.into(),
                },
            ));
            return;
        }
    }
    // Then a handoff: the thread goes to the exposed agent the model called.
    if let Some((target, input)) = calls.iter().find(|(name, _)| handoffs.contains(name)) {
        outcome.handoff = Some((*target).to_owned());
        outcome.message = input
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .filter(|m| !m.trim().is_empty())
            .or(said);
        return;
    }
    // 2. The side's stop tool.
    if let Some(stop_tool) = &side.stop_tool
        && let Some((_, input)) = calls.iter().find(|(name, _)| name == stop_tool)
    {
        let mut binding = SessionToolBinding::new(stop_tool.clone());
        binding.message_property = side.stop_tool_response_property.clone();
        outcome.message = match side.stop_tool_response_property {
            Some(_) => Some(bound_message(&binding, input)),
            None => said,
        };
        return;
    }
    // 3. A text answer (stopOnResponse), or 4. the step limit: what it said is its message.
    outcome.message = said;
}

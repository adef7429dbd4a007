//! The last look at the page's actions a turn had sent when it was cut off (stopped, or its
//! worker died): the tab's answer keeps an action as run; one taken and not answered is kept as
//! of unknown outcome; one no tab took did not run.

use crate::engine::EngineInner;
use crate::engine::tools::ToolOutcome;
use crate::engine::turn_stream::Emitter;
use crate::protocol::ErrorChain;
use crate::session::{SessionId, TurnId};

use super::state::TurnState;

/// Kept for a UI action the tab took and had not answered when the turn was stopped.
pub(crate) const UI_OUTCOME_UNKNOWN: &str = "sent to the person's tab, and its outcome is unknown: the turn was stopped before the tab answered. Treat the page as unseen: look at it again before relying on what it shows.";
/// Kept for a UI action no tab took before the turn was stopped.
pub(crate) const UI_NOT_TAKEN: &str = "not run: no tab took the request before the turn was stopped";

/// A stopped turn's UI actions that were out take one last look for the tab's answer: with one,
/// the call is kept as run (and is not done again); one a tab took and did not answer is kept as
/// sent with its outcome unknown; one no tab took did not run.
pub(super) async fn last_look_at_ui_calls(
    engine: &EngineInner,
    session: &SessionId,
    turn_id: &TurnId,
    turn: &mut TurnState,
    out: &Emitter,
) {
    let Some(answers) = &engine.ui_answers else {
        return;
    };
    for (index, id, name) in turn.open_calls() {
        if !engine.ui_targets.contains_key(&name) {
            continue;
        }
        let outcome = match answers.look(session, turn_id, &id).await {
            Ok(Some(answer)) => match crate::engine::ui::oui::outcome(answer) {
                Some(Ok(result)) => ToolOutcome::ok(result),
                Some(Err(error)) => ToolOutcome::from(error),
                None => ToolOutcome::error(UI_OUTCOME_UNKNOWN),
            },
            Ok(None) => ToolOutcome::error(UI_NOT_TAKEN),
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), call = %id, "could not take the last look for the tab's answer");
                ToolOutcome::error(UI_OUTCOME_UNKNOWN)
            }
        };
        turn.finish_call(index, outcome, out);
    }
}

//! The turn's journal on the engine's side (the journal itself: [`crate::session::journal`]): a
//! checkpoint before the calls that change something start, each such call's result when it
//! ends, and a reclaimed turn resumed from them.
//!
//! A resumed turn does not ask the model again for the rounds of its checkpoint, and does not
//! run again a call that has a result. A call that had started and has none may have run: it is
//! sent again with the same idempotency key when its tool takes one
//! ([`ToolSpec::idempotent`](crate::engine::tools::ToolSpec)), and otherwise is not run again:
//! the model is told its outcome is unknown ([`OUTCOME_UNKNOWN`]), and the history keeps it so.

use std::sync::Arc;

use crate::engine::tools::{ToolContext, ToolOutcome};
use crate::engine::turn_stream::Emitter;
use crate::engine::{EngineInner, StepContext};
use crate::session::{
    CallResult, Checkpoint, ContentBlock, JOURNAL_VERSION, Journal, OpenStep, SessionId, SessionStore,
    StoreError, TurnId,
};

use super::state::{Step, TurnState};

/// Kept for a call that may have run when the turn's worker stopped, whose tool takes no
/// idempotency key: it is not run again.
pub(crate) const OUTCOME_UNKNOWN: &str = "may have run, and its outcome is unknown: the worker running this turn stopped while the call ran, and this tool takes no idempotency key, so it was not run again. Check whether it took effect before calling it again.";

/// Writes the turn's checkpoint before the step's calls at `started` (their places) run.
pub(super) async fn checkpoint(
    engine: &EngineInner,
    ctx: &StepContext<'_>,
    turn: &TurnState,
    started: &[usize],
) -> Result<(), StoreError> {
    let step = &turn.step;
    let results = step
        .calls
        .iter()
        .zip(&step.results)
        .filter_map(|(id, outcome)| outcome.as_ref().map(|o| result_of(id, o)))
        .collect();
    // The step is kept as one item: its results are cut to fit beside its answer, as the message
    // that keeps them would cut them.
    let answer_size = serde_json::to_string(&step.content).map_or(0, |json| json.len());
    let room = turn.message_limit.map(|limit| limit.saturating_sub(answer_size));
    let checkpoint = Checkpoint {
        version: JOURNAL_VERSION,
        turn_id: ctx.turn_id.clone(),
        messages: turn.messages.clone(),
        step: OpenStep {
            answer: step.content.clone(),
            calls: step.calls.clone(),
            started: started
                .iter()
                .filter_map(|&i| step.calls.get(i).cloned())
                .collect(),
            results: fitted(results, room),
        },
        round: turn.round,
        delivered: turn.delivered.iter().copied().collect(),
        started_at_ms: turn.started_at_ms,
    };
    engine
        .store
        .write_checkpoint(ctx.session, ctx.turn_id, &checkpoint)
        .await
}

/// Where a call that changes something records its result once it ends.
#[derive(Clone)]
pub(super) struct ResultRecorder {
    store: Arc<dyn SessionStore>,
    session: SessionId,
    turn_id: TurnId,
    /// The largest message the store keeps: a result is cut to fit it, as its message would be.
    limit: Option<usize>,
}

impl ResultRecorder {
    /// The recorder of `ctx`'s turn, when the engine's store keeps journals.
    pub(super) fn of(engine: &EngineInner, ctx: &StepContext<'_>) -> Option<Self> {
        engine.store.keeps_journal().then(|| Self {
            store: engine.store.clone(),
            session: ctx.session.clone(),
            turn_id: ctx.turn_id.clone(),
            limit: engine.store.max_message_bytes(),
        })
    }

    /// Records call `call_id`'s `outcome`: with the turn's next write (its event log's next
    /// window) when the call's tool `takes_keys` and the store has such a write coming (a death
    /// of the worker before it runs the call again, with its key), else at once. A failure is
    /// logged: the call ran and the turn goes on with its result; only a later death of the
    /// worker would find it without one.
    pub(super) async fn record(&self, call_id: &str, outcome: &ToolOutcome, takes_keys: bool) {
        let Some(result) = fitted(vec![result_of(call_id, outcome)], self.limit).pop() else {
            return;
        };
        if takes_keys
            && self
                .store
                .record_result_later(&self.session, &self.turn_id, &result)
        {
            return;
        }
        if let Err(e) = self
            .store
            .record_result(&self.session, &self.turn_id, &result)
            .await
        {
            tracing::warn!(error = %crate::protocol::ErrorChain(&e), call = call_id, "could not record a call's result in the turn's journal");
        }
    }
}

/// `results`, cut (the largest first) to fit `room` bytes together, when there is a limit.
fn fitted(results: Vec<CallResult>, room: Option<usize>) -> Vec<CallResult> {
    let Some(room) = room else {
        return results;
    };
    let mut blocks: Vec<ContentBlock> = results
        .into_iter()
        .map(|r| ContentBlock::ToolResult {
            tool_use_id: r.call_id,
            content: r.content,
            is_error: r.is_error,
        })
        .collect();
    super::fit::fit_results(&mut blocks, room);
    blocks
        .into_iter()
        .filter_map(|block| match block {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => Some(CallResult {
                call_id: tool_use_id,
                content,
                is_error,
            }),
            _ => None,
        })
        .collect()
}

fn result_of(call_id: &str, outcome: &ToolOutcome) -> CallResult {
    CallResult {
        call_id: call_id.to_owned(),
        content: outcome.content.clone(),
        is_error: outcome.is_error,
    }
}

/// Resumes `turn` from `journal`: its messages, the commands it had given the model, and the
/// answer whose calls ran, each call settled (its recorded result; run again, with the same
/// idempotency key, when it is a read or its tool takes a key; else told as of unknown outcome,
/// and so always when the turn is `stopping`). Returns the round the turn goes on from.
pub(super) async fn resume(
    engine: &EngineInner,
    ctx: &StepContext<'_>,
    turn: &mut TurnState,
    journal: Journal,
    stopping: bool,
    out: &Emitter,
) -> Resumed {
    let Journal { checkpoint, results } = journal;
    tracing::warn!(
        round = checkpoint.round,
        calls = checkpoint.step.calls.len(),
        "resuming the turn from its journal: its earlier worker stopped"
    );
    turn.messages = checkpoint.messages;
    turn.delivered = checkpoint.delivered.into_iter().collect();
    if checkpoint.started_at_ms > 0 {
        turn.started_at_ms = checkpoint.started_at_ms;
    }
    let OpenStep {
        answer,
        calls,
        started,
        results: done,
    } = checkpoint.step;
    turn.step = Step {
        results: vec![None; calls.len()],
        content: answer,
        calls,
        said: true,
        ended: true,
    };
    for result in done.into_iter().chain(results) {
        if let Some(index) = turn.step.calls.iter().position(|id| *id == result.call_id) {
            turn.step.results[index].get_or_insert_with(|| ToolOutcome {
                is_error: result.is_error,
                content: result.content,
                shown: Vec::new(),
            });
        }
    }
    // The page's actions that were out: the tab's answer, if it gave one (then the action is
    // kept as run), else as the seed says of an action taken and not answered.
    super::ui_calls::last_look_at_ui_calls(engine, ctx.session, ctx.turn_id, turn, out).await;
    let recorder = ResultRecorder::of(engine, ctx);
    for (index, id, name) in turn.open_calls() {
        let was_started = started.contains(&id);
        let keyed = takes_keys(engine, &name);
        let again = !stopping && (!was_started || keyed);
        let outcome = match (again, input_of(&turn.step, &id)) {
            (true, Some(input)) => {
                tracing::info!(call = %id, tool = %name, "running a call again after its worker stopped");
                let outcome = engine
                    .tools
                    .run(&name, &input, call_context(ctx, &id), engine.config.tool_timeout)
                    .await;
                let outcome = engine.kept(ctx.session, &id, outcome).await;
                if let (true, Some(recorder)) = (was_started, &recorder) {
                    recorder.record(&id, &outcome, keyed).await;
                }
                outcome
            }
            _ if was_started => ToolOutcome::error(OUTCOME_UNKNOWN),
            _ => ToolOutcome::error("not run: the turn was stopped before this call ran"),
        };
        turn.finish_call(index, outcome, out);
    }
    // A step with calls took its round; a checkpoint without one names the round to run next.
    let round = if turn.step.calls.is_empty() {
        checkpoint.round
    } else {
        checkpoint.round.saturating_add(1)
    };
    // The calls of tools that end the turn: the step ends it, as it would have.
    let ending = turn
        .step
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolUse { name, input, .. }
                if engine.policy.as_ref().is_some_and(|p| p.ends_turn(name)) =>
            {
                Some(serde_json::json!({ "name": name, "input": input }))
            }
            _ => None,
        })
        .collect();
    // Results recorded before they were kept to fit their message are kept again, as they were
    // (the same content, the same file).
    turn.keep_results_to_fit(engine, ctx.session).await;
    turn.close_step();
    Resumed { round, ending }
}

/// Where a resumed turn goes on.
pub(super) struct Resumed {
    /// The round to run next.
    pub(super) round: u32,
    /// The calls of tools that end the turn its journaled step made, in call order: when there
    /// are any, the turn ends there.
    pub(super) ending: Vec<serde_json::Value>,
}

/// Hands the turn over to the host's next run: writes down where it is (an answer still
/// streaming is dropped, to be asked for again; an ended one's calls without a result that change
/// something count as started), and gives up the turn's lease, keeping the conversation's run
/// for the next run of it.
pub(super) async fn hand_over(
    engine: &EngineInner,
    ctx: &StepContext<'_>,
    turn: &mut TurnState,
) -> Result<(), StoreError> {
    // Dropped, the step's round is the next to run (a checkpoint with no calls says so).
    if !turn.step.ended || turn.step.calls.is_empty() {
        turn.discard_step();
    }
    let started: Vec<usize> = turn
        .open_calls()
        .into_iter()
        .filter(|(_, _, name)| changes_something(engine, name))
        .map(|(index, _, _)| index)
        .collect();
    checkpoint(engine, ctx, turn, &started).await?;
    tracing::info!(round = turn.round, "handed the turn over to the host's next run");
    engine.store.hand_over_turn(ctx.session, ctx.turn_id).await
}

/// Whether a call of tool `name` may change something: it is not a read (an unknown tool is
/// answered as such, and runs nothing).
pub(super) fn changes_something(engine: &EngineInner, name: &str) -> bool {
    engine
        .tools
        .spec(name)
        .is_some_and(|spec| spec.effect != crate::engine::tools::Effect::View || spec.destructive)
}

/// Whether a call of tool `name` takes an idempotency key: run again after its worker died, it
/// takes effect once. A page's action does not.
pub(super) fn takes_keys(engine: &EngineInner, name: &str) -> bool {
    !engine.ui_targets.contains_key(name) && engine.tools.spec(name).is_some_and(|spec| spec.idempotent)
}

/// The input call `id` of `step` was made with.
fn input_of(step: &Step, id: &str) -> Option<serde_json::Value> {
    step.content.iter().find_map(|block| match block {
        ContentBlock::ToolUse { id: used, input, .. } if used == id => Some(input.clone()),
        _ => None,
    })
}

/// What call `call_id` of the turn knows of where it runs.
pub(super) fn call_context(ctx: &StepContext<'_>, call_id: &str) -> ToolContext {
    ToolContext {
        session: ctx.session.clone(),
        turn_id: ctx.turn_id.clone(),
        call_id: call_id.to_owned(),
        user_id: ctx.user_id.map(str::to_owned),
        account_id: ctx.account_id.map(str::to_owned),
        user_token: ctx.user_token.cloned(),
    }
}

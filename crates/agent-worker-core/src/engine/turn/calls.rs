//! A model step's tool calls: each call the model makes recorded, then started (a read at once,
//! a call that changes something once the response has ended and the turn's journal is written),
//! held for the person's approval, or answered with why it does not run.

use futures_util::stream::FuturesUnordered;
use serde_json::{Value, json};

use crate::engine::approvals::{APPROVAL_REQUIRED, HeldCall, Verdict};
use crate::engine::attachments;
use crate::engine::result::RESULT_TOOL;
use crate::engine::stop::StopFlag;
use crate::engine::tools::ToolOutcome;
use crate::engine::turn_stream::Emitter;
use crate::engine::{EngineInner, StepContext};
use crate::protocol::ErrorChain;

use super::state::TurnState;

pub(super) type RunningCall =
    std::pin::Pin<Box<dyn std::future::Future<Output = (usize, ToolOutcome)> + Send>>;

/// A step's tool calls: the reads, started as soon as their input is complete, and the calls
/// that change something, held until the response ends. When one call of a response needs the
/// person's approval, none of that response's calls that change something runs, the earlier
/// ones included.
#[derive(Default)]
pub(super) struct StepCalls {
    pub(super) running: FuturesUnordered<RunningCall>,
    held_back: Vec<(usize, RunningCall)>,
}

impl StepCalls {
    /// Writes the turn's checkpoint before the calls held back start, when the store keeps
    /// journals and they will start. When it cannot be written, none of them runs: each is
    /// answered so, and the error says why.
    pub(super) async fn journal(
        &mut self,
        engine: &EngineInner,
        ctx: &StepContext<'_>,
        turn: &mut TurnState,
        out: &Emitter,
    ) -> Option<crate::session::StoreError> {
        if self.held_back.is_empty() || turn.held.is_some() || !engine.store.keeps_journal() {
            return None;
        }
        let started: Vec<usize> = self.held_back.iter().map(|(index, _)| *index).collect();
        let error = super::journal::checkpoint(engine, ctx, turn, &started)
            .await
            .err()?;
        tracing::error!(error = %ErrorChain(&error), "could not write the turn's journal; its calls that change something do not run");
        for (index, _) in std::mem::take(&mut self.held_back) {
            let not_run = ToolOutcome::error("not run: the turn's journal could not be written first");
            turn.finish_call(index, not_run, out);
        }
        Some(error)
    }

    /// Starts the calls held back, or, when a call of the response waits for approval, answers
    /// each with why it did not run.
    pub(super) fn release(&mut self, turn: &mut TurnState, out: &Emitter) {
        let held_back = std::mem::take(&mut self.held_back);
        if turn.held.is_some() {
            for (index, _) in held_back {
                let not_run = ToolOutcome::error(
                    "not run: another call of this response is waiting for the person's approval",
                );
                turn.finish_call(index, not_run, out);
            }
        } else {
            self.running.extend(held_back.into_iter().map(|(_, call)| call));
        }
    }
}

/// A tool call as the model made it.
pub(super) struct Call {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) input: String,
}

/// Records a call the model made, then starts it, holds it for the person's approval, or
/// answers it with why it does not run. Returns the call when it ends the turn.
pub(super) async fn start_call(
    engine: &EngineInner,
    ctx: &StepContext<'_>,
    turn: &mut TurnState,
    out: &Emitter,
    flag: &StopFlag,
    calls: &mut StepCalls,
    call: Call,
) -> Option<Value> {
    let Call { id, name, input } = call;
    let (index, parsed) = turn.add_call(id.clone(), name.clone(), &input, out);
    if name == RESULT_TOOL
        && let (Some(schema), Some(result)) = (&engine.result, &mut turn.result)
    {
        let outcome = result.take_call(schema, parsed);
        turn.finish_call(index, outcome, out);
        return None;
    }
    let args = match parsed {
        Ok(args) => args,
        Err(why) => {
            turn.finish_call(index, ToolOutcome::error(why), out);
            return None;
        }
    };
    let ends = engine
        .policy
        .as_ref()
        .is_some_and(|p| p.ends_turn(&name))
        .then(|| json!({ "name": name, "input": args }));
    // A model in a loop: the same call asked for again, once more than a turn may make it, does
    // not run, and the turn ends after this step. (The same call made twice in one answer is
    // not a loop.)
    let most = engine.config.max_repeat_calls as usize;
    if most > 0 && turn.same_calls(&name, &args) >= most {
        tracing::warn!(tool = %name, times = most, "the model asked for the same call once more than a turn may make it; the turn ends");
        let not_run = ToolOutcome::error(format!(
            "not run: `{name}` was already called {most} times in this turn with these same arguments; the turn stops here"
        ));
        turn.finish_call(index, not_run, out);
        turn.repeated = Some(name);
        return None;
    }
    // A call that had not started when the turn was stopped does not run.
    if flag.get().is_some() {
        let not_run = ToolOutcome::error("not run: the turn was stopped before this call started");
        turn.finish_call(index, not_run, out);
        return ends;
    }
    if turn.held.is_some() {
        let not_run =
            ToolOutcome::error("not run: another call of this response is waiting for the person's approval");
        turn.finish_call(index, not_run, out);
        return ends;
    }
    let reads_only = !super::journal::changes_something(engine, &name);
    let files = match engine.tools.spec(&name) {
        Some(spec) => {
            let area = engine.file_area.as_deref();
            match attachments::check_file_inputs(area, ctx.session, &spec.input_schema, &args).await {
                Ok(files) => files,
                Err(why) => {
                    turn.finish_call(index, ToolOutcome::error(why), out);
                    return ends;
                }
            }
        }
        None => Vec::new(),
    };
    match engine.verdict(ctx.session, ctx.user_id, &name, &args) {
        Verdict::Denied(reason) => turn.finish_call(index, ToolOutcome::error(format!("denied: {reason}")), out),
        Verdict::NeedsApproval if engine.approvals.is_none() => turn.finish_call(
            index,
            ToolOutcome::failed(json!({
                "error": "this call needs the person's approval, and this worker has no approval store to ask with; nothing was sent",
                "code": APPROVAL_REQUIRED,
            })),
            out,
        ),
        Verdict::NeedsApproval => {
            turn.held = Some(HeldCall {
                call_id: id,
                tool: name,
                args,
                files,
            });
            turn.finish_call(
                index,
                ToolOutcome::ok(json!({
                    "status": "waiting_for_approval",
                    "message": "This call waits for the person's approval. It has not run; do not assume it will."
                })),
                out,
            );
        }
        Verdict::Run => {
            let tools = engine.tools.clone();
            let request = engine.ui_request(ctx.turn_id, &id, &name, &args, None);
            let withdrawal = engine.ui_withdrawn(ctx.turn_id, &id, &name);
            // A UI action ends by its own wait (with a last look); the tool timeout is a margin
            // past it, not a cut before it.
            let timeout = match request {
                Some(_) => engine.config.ui_action_timeout + engine.config.tool_timeout,
                None => engine.config.tool_timeout,
            };
            let out = out.clone();
            let call_ctx = super::journal::call_context(ctx, &id);
            // A call that changes something records its result in the turn's journal, before
            // the caller hears of it.
            let recorder = if reads_only {
                None
            } else {
                super::journal::ResultRecorder::of(engine, ctx)
            };
            let takes_keys = super::journal::takes_keys(engine, &name);
            let keeper = engine.keeper.clone().map(|k| (k, ctx.session.clone()));
            let call: RunningCall = Box::pin(async move {
                // A UI action goes to the tab when it starts, not before.
                if let Some(request) = request {
                    out.emit(request);
                }
                let mut outcome = tools.run(&name, &args, call_ctx, timeout).await;
                if let Some((keeper, owner)) = keeper {
                    outcome = keeper.keep_result(owner.as_str(), &id, outcome).await;
                }
                if let Some(recorder) = recorder {
                    recorder.record(&id, &outcome, takes_keys).await;
                }
                if let Some(withdrawal) = withdrawal
                    && outcome.is_error
                    && crate::engine::ui::oui::was_withdrawn(&outcome.content)
                {
                    out.emit(withdrawal);
                }
                (index, outcome)
            });
            if reads_only {
                calls.running.push(call);
            } else {
                calls.held_back.push((index, call));
            }
        }
    }
    ends
}

//! The rounds of a turn: each model step with its retries, the tool calls it makes, and the
//! watch for a stop or the deadline around them all.

use std::time::Duration;

use futures_util::StreamExt as _;
use serde_json::json;
use tokio::time::Instant;

use crate::engine::approvals;
use crate::engine::compaction::{self, Pressure};
use crate::engine::model::ModelErrorKind;
use crate::engine::model::{ModelError, ModelEvent, StopReason};
use crate::engine::quiet::Quiet;
use crate::engine::result::RESULT_NUDGE;
use crate::engine::retry::backoff;
use crate::engine::stop::{self, StopFlag};
use crate::engine::turn_stream::Emitter;
use crate::engine::{EngineInner, StepContext, TurnStopReason};
use crate::protocol::redact;
use crate::protocol::{AgentEvent, codes};
use crate::session::{Message, Stop, StopCause};

use super::calls::{Call, StepCalls, start_call};
use super::state::TurnState;
use super::ui_calls::last_look_at_ui_calls;
use super::{
    CUT_NOTICE, DEADLINE_NOTICE, Ending, MAX_ROUNDS_NOTICE, OUTPUT_LIMIT_NOTICE, REPEATED_CALL_NOTICE,
};
use crate::protocol::ErrorChain;

/// Runs the rounds under the deadline while looking for a stop. A stop seen lets the answer on
/// its way finish for `stop_grace`; then what is still running is cut off, and each call keeps
/// exactly one result.
pub(super) async fn run_watched(
    engine: &EngineInner,
    ctx: StepContext<'_>,
    turn: &mut TurnState,
    out: &Emitter,
    budget: Duration,
    flag: &StopFlag,
) -> Ending {
    let config = &engine.config;
    let (session, turn_id) = (ctx.session, ctx.turn_id);
    let ended = {
        let rounds =
            tokio::time::timeout_at(Instant::now() + budget, run_rounds(engine, ctx, turn, out, flag));
        tokio::pin!(rounds);
        let store = engine.store.as_ref();
        let watched = stop::watch(
            store,
            engine.stops.as_deref(),
            session,
            turn_id,
            config.stop_poll_interval,
            config.stop_poll_idle,
            flag,
        );
        let blocks = engine.blocklist.as_deref();
        let mut watch = Box::pin(stop::or_blocked(
            watched,
            blocks,
            ctx.account_id,
            ctx.user_id,
            config.stop_poll_idle,
            flag,
        ));
        let mut grace_until: Option<Instant> = None;
        loop {
            tokio::select! {
                result = &mut rounds => break result.ok(),
                stop = &mut watch, if grace_until.is_none() => {
                    tracing::info!(reason = stop.reason.as_str(), "a stop was asked; letting what is on its way finish");
                    grace_until = Some(Instant::now() + config.stop_grace);
                },
                () = tokio::time::sleep_until(grace_until.unwrap_or_else(Instant::now)), if grace_until.is_some() => break None,
            }
        }
    };
    // A step cut off (a stop, the deadline) is settled with what it used so far.
    super::spend::settle(engine, turn).await;
    match ended {
        Some(ending) => ending,
        // The host's deadline, for a turn the host can continue: it is handed over as it stands.
        None if flag.get().is_none() && turn.hand_over_at.is_some() => Ending::Continues,
        None => {
            let stop = flag.get().unwrap_or_else(|| Stop::now(StopCause::Deadline));
            let why = match stop.reason {
                StopCause::Deadline => "the turn reached its deadline",
                StopCause::UserStop => "the person stopped the turn",
                StopCause::Superseded => "the person's next message replaced the turn",
                StopCause::Blocked => "the turn's account or person was blocked",
            };
            tracing::warn!(reason = stop.reason.as_str(), "cut the turn off");
            last_look_at_ui_calls(engine, session, turn_id, turn, out).await;
            turn.interrupt(out, why);
            if stop.reason == StopCause::Deadline {
                turn.notify(out, DEADLINE_NOTICE);
            }
            Ending::Stopped(stop)
        }
    }
}

/// What one model step ended with.
pub(super) struct StepEnd {
    pub(super) stop: StopReason,
    pub(super) called: bool,
    pub(super) said: bool,
    /// The calls of tools that end the turn, in call order.
    pub(super) ending: Vec<serde_json::Value>,
    /// Why the turn's journal could not be written before the step's calls that change
    /// something: none of them ran.
    pub(super) unjournaled: Option<crate::session::StoreError>,
}

pub(super) async fn run_rounds(
    engine: &EngineInner,
    mut ctx: StepContext<'_>,
    turn: &mut TurnState,
    out: &Emitter,
    flag: &StopFlag,
) -> Ending {
    let config = &engine.config;
    let mut plan_less = false;
    let mut retried_too_long = false;
    let first_round = ctx.round;
    while ctx.round < config.max_rounds {
        if let Some(stop) = flag.get() {
            return Ending::Stopped(stop);
        }
        // Near the host's deadline, a turn it can continue hands itself over here, between
        // rounds, rather than be cut in the middle of one; each run takes one round at least.
        if ctx.round > first_round && turn.hand_over_at.is_some_and(|at| Instant::now() >= at) {
            turn.round = ctx.round;
            return Ending::Continues;
        }
        // What the turn's policy decides of this step (its prepareStep), given the calls so far.
        let called = turn.called();
        let step_ctx = StepContext {
            called: &called,
            ..ctx
        };
        let forced = engine.policy.as_ref().and_then(|p| p.force_tool(&step_ctx));
        let active = engine.policy.as_ref().and_then(|p| p.active_tools(&step_ctx));
        if ctx.round == 0 {
            turn.compact(engine, ctx.session, Pressure::IfNeeded, out).await;
        }
        turn.fit_files();
        let force_result = turn.result.as_ref().is_some_and(|r| r.force);
        let request = engine.request(
            turn.conversation(),
            turn.history.sent_len(),
            forced,
            active,
            plan_less,
            force_result,
        );
        turn.round = ctx.round;
        turn.reserved = match super::spend::reserve(engine, &ctx, turn, &request).await {
            Ok(reserved) => reserved,
            Err(ending) => return ending,
        };
        let stepped = run_step_with_retries(engine, &ctx, &request, turn, out, flag).await;
        super::spend::settle(engine, turn).await;
        let step = match stepped {
            Ok(step) => step,
            // Bedrock said the input is too long: compact harder, once, and send the step again.
            Err(Ending::Failed { details, code, .. })
                if code == codes::MODEL_REJECTED
                    && !retried_too_long
                    && compaction::is_input_too_long(ModelErrorKind::Rejected, &details)
                    && turn.compact(engine, ctx.session, Pressure::TooLong, out).await =>
            {
                retried_too_long = true;
                continue;
            }
            Err(ending) => return ending,
        };
        ctx.round += 1;
        turn.keep_results_to_fit(engine, ctx.session).await;
        if let Some(error) = step.unjournaled {
            turn.close_step();
            return Ending::Unjournaled(error);
        }
        if let Some(held) = turn.held.take() {
            turn.close_step();
            return match approvals::request(engine, ctx.session, ctx.user_id, ctx.turn_id, held, out).await {
                Ok(()) => Ending::stop(TurnStopReason::ApprovalRequired),
                Err(e) => Ending::Failed {
                    details: format!("a call needs the person's approval, and it could not be stored: {e}"),
                    retryable: true,
                    code: codes::STORE_FAILED,
                },
            };
        }
        if !step.ending.is_empty() {
            turn.close_step();
            return Ending::Ended {
                reason: TurnStopReason::StopTool,
                stop_tools: Some(json!(step.ending)),
            };
        }
        if turn.repeated.is_some() {
            turn.close_step();
            turn.notify(out, REPEATED_CALL_NOTICE);
            return Ending::stop(TurnStopReason::RepeatedCall);
        }
        if let Some(result) = &mut turn.result {
            if result.value.is_some() {
                let result = result.value.take();
                turn.close_step();
                return Ending::Completed { result };
            }
            if result.take_miss() {
                let asked = result.ask_again(false);
                turn.close_step();
                match asked {
                    Ok(()) => continue,
                    Err(details) => return result_invalid(details),
                }
            }
        }
        if step.called {
            turn.close_step();
            super::commands::steer_at_boundary(engine, ctx.session, ctx.turn_id, turn, out, flag).await;
            continue;
        }
        match step.stop {
            StopReason::MaxTokens if !step.said && !plan_less => {
                tracing::info!(
                    "the step reached the output limit before saying anything; running it once more"
                );
                turn.discard_step();
                plan_less = true;
            }
            StopReason::MaxTokens => {
                turn.close_step();
                turn.notify(out, OUTPUT_LIMIT_NOTICE);
                return Ending::stop(TurnStopReason::OutputLimit);
            }
            StopReason::GuardrailIntervened => {
                turn.close_step();
                return Ending::stop(TurnStopReason::GuardrailIntervened);
            }
            StopReason::ContentFiltered => {
                turn.close_step();
                return Ending::stop(TurnStopReason::ContentFiltered);
            }
            _ if turn.result.is_some() => {
                turn.close_step();
                match turn.result.as_mut().map(|r| r.ask_again(true)) {
                    Some(Err(details)) => return result_invalid(details),
                    _ => turn.messages.push(Message::user_text(RESULT_NUDGE)),
                }
            }
            _ => {
                turn.close_step();
                if super::commands::deliver_next(turn, out, flag) {
                    // A follow-up is a new request of the person's: it gets rounds of its own.
                    ctx.round = 0;
                    continue;
                }
                let nudge = engine.policy.as_ref().and_then(|p| p.continue_after_text(&ctx));
                match nudge {
                    None => return Ending::Completed { result: None },
                    // It answered, so no closing line: the rounds ran out while it went on.
                    Some(_) if ctx.round >= config.max_rounds => {
                        return Ending::stop(TurnStopReason::MaxRounds);
                    }
                    Some(line) => turn.messages.push(Message::user_text(line)),
                }
            }
        }
    }
    turn.notify(out, MAX_ROUNDS_NOTICE);
    Ending::stop(TurnStopReason::MaxRounds)
}

/// The turn's end when the model gave no result that matches, after being asked once more.
fn result_invalid(details: String) -> Ending {
    tracing::warn!(%details, "the turn's typed result is missing or does not match its schema");
    Ending::Failed {
        details,
        retryable: false,
        code: codes::RESULT_INVALID,
    }
}

pub(super) async fn run_step_with_retries(
    engine: &EngineInner,
    ctx: &StepContext<'_>,
    request: &crate::engine::model::ModelRequest,
    turn: &mut TurnState,
    out: &Emitter,
    flag: &StopFlag,
) -> Result<StepEnd, Ending> {
    let config = &engine.config;
    let mut attempt = 0;
    loop {
        let error = match run_step(engine, ctx, request.clone(), turn, out, flag).await {
            Ok(step) => return Ok(step),
            Err(error) => error,
        };
        let transient = error.kind.is_transient();
        if turn.step.produced() {
            // Replaying would repeat what the caller already has: keep it and stop here.
            tracing::warn!(error = %ErrorChain(&error), "the model's stream broke after output");
            turn.interrupt(out, "the model's stream broke");
            // What was said stays, marked as cut: the history never holds it as a whole answer.
            turn.notify(out, CUT_NOTICE);
            return Err(Ending::Failed {
                details: format!(
                    "the model's stream broke after it had started answering; what it produced is kept: {}",
                    for_client(&error)
                ),
                retryable: transient,
                code: codes::MODEL_STREAM_INTERRUPTED,
            });
        }
        turn.discard_step();
        if transient && attempt < config.retries {
            attempt += 1;
            // The provider's own `retry-after` wins over the backoff, within the longest delay.
            let asked = error.retry_after.map(|wait| wait.min(config.retry_max_delay));
            let delay = asked.map_or_else(
                || backoff(config, attempt),
                |wait| wait.max(backoff(config, attempt)),
            );
            tracing::info!(attempt, delay_ms = delay.as_millis() as u64, error = %ErrorChain(&error), "retrying the model");
            out.emit(AgentEvent::Retrying {
                attempt,
                max_attempts: config.retries,
                delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                reason: retry_reason(&error),
            });
            tokio::time::sleep(delay).await;
            continue;
        }
        tracing::warn!(error = %ErrorChain(&error), attempt, "the model call failed");
        return Err(if transient {
            Ending::Failed {
                details: format!(
                    "the model is unavailable (after {attempt} {}): {}",
                    if attempt == 1 { "retry" } else { "retries" },
                    for_client(&error)
                ),
                retryable: true,
                code: codes::MODEL_UNAVAILABLE,
            }
        } else {
            Ending::Failed {
                details: format!("the model refused the request: {}", for_client(&error)),
                retryable: false,
                code: codes::MODEL_REJECTED,
            }
        });
    }
}

/// A model error as a client may read it: AWS's words without ARNs or account ids.
pub(super) fn for_client(error: &ModelError) -> String {
    redact(&error.to_string())
}

pub(super) fn retry_reason(error: &ModelError) -> String {
    use crate::engine::model::ModelErrorKind as K;
    let what = match error.kind {
        K::Throttled => THROTTLED_RETRY,
        K::NotReady => "The model is starting up",
        K::Timeout => "The model took too long to answer",
        K::StreamInterrupted => "The model's answer was interrupted",
        _ => "The model is unavailable",
    };
    format!("{what}; trying again shortly. ({})", for_client(error))
}

/// How a `retrying` event's reason begins when the model throttled the call.
const THROTTLED_RETRY: &str = "The model is busy (throttled)";

/// Whether a `retrying` event's `reason` says the model throttled the call (for metrics).
pub fn is_throttled_retry(reason: &str) -> bool {
    reason.starts_with(THROTTLED_RETRY)
}

/// One model response: streams its output, starts each read as soon as its input is complete
/// and every other call once the response has ended (none, if one of them waits for approval),
/// and waits for every call to end.
pub(super) async fn run_step(
    engine: &EngineInner,
    ctx: &StepContext<'_>,
    request: crate::engine::model::ModelRequest,
    turn: &mut TurnState,
    out: &Emitter,
    flag: &StopFlag,
) -> Result<StepEnd, ModelError> {
    let mut stream = engine.model.stream(request);
    let streaming = flag.mark_streaming();
    let mut calls = StepCalls::default();
    let mut stop = None;
    let mut ending = Vec::new();
    let mut quiet = Quiet::new(&engine.config);
    loop {
        tokio::select! {
            biased;
            Some((index, outcome)) = calls.running.next(), if !calls.running.is_empty() => turn.finish_call(index, outcome, out),
            event = stream.next() => match event {
                None => break,
                Some(Err(error)) => return Err(error),
                Some(Ok(event)) => {
                    quiet.heard();
                    turn.model_answered = true;
                    match event {
                        ModelEvent::TextDelta(delta) => turn.add_text(&delta, out),
                        ModelEvent::ReasoningDelta(delta) => turn.add_reasoning(delta, out),
                        ModelEvent::ReasoningSignature(signature) => turn.sign_reasoning(signature),
                        ModelEvent::RedactedReasoning(bytes) => turn.add_redacted(&bytes),
                        ModelEvent::ToolUse { id, name, input } => {
                            if let Some(ended) = start_call(engine, ctx, turn, out, flag, &mut calls, Call { id, name, input }).await {
                                ending.push(ended);
                            }
                        }
                        ModelEvent::Stop(reason) => stop = Some(reason),
                        ModelEvent::Usage(usage) => {
                            turn.add_usage(usage);
                            out.emit(engine.usage_event(&usage));
                        }
                    }
                }
            },
            // After the stream, so that what arrived while the caller was not reading is taken
            // first: only a model that really sent nothing for the whole window times out.
            () = quiet.elapsed() => return Err(quiet.error()),
        }
    }
    let Some(stop) = stop else {
        // A response that ends without saying why it stopped was cut (a dropped connection, a
        // proxy's timeout): what arrived is not an answer, whatever it looks like.
        return Err(ModelError::new(
            ModelErrorKind::StreamInterrupted,
            "the model's stream ended without a stop reason: the response was cut",
        ));
    };
    drop(streaming);
    turn.flush_text(out);
    turn.step.ended = true;
    // The call has answered: its cost is settled before its tools run.
    super::spend::settle(engine, turn).await;
    let unjournaled = calls.journal(engine, ctx, turn, out).await;
    calls.release(turn, out);
    while let Some((index, outcome)) = calls.running.next().await {
        turn.finish_call(index, outcome, out);
    }
    Ok(StepEnd {
        stop,
        called: !turn.step.calls.is_empty(),
        said: turn.step.said,
        ending,
        unjournaled,
    })
}

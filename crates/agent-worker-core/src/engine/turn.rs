//! One turn: claim, load history, run the tool loop under the deadline, store, end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use serde_json::{Value, json};
use tokio::time::Instant;
use tracing::Instrument as _;

use super::approvals::{self, APPROVAL_REQUIRED, HeldCall, Verdict};
use super::attachments::{self, Given};
use super::compaction::{self, History, Pressure};
use super::model::ModelErrorKind;
use super::model::{ModelError, ModelEvent, StopReason};
use super::prompt::user_message;
use super::quiet::Quiet;
use super::retry::backoff;
use super::stop::{self, StopFlag};
use super::think_tags::{Piece, ThinkTags};
use super::tools::{ToolContext, ToolOutcome, parse_arguments};
use super::turn_stream::Emitter;
use super::{EngineInner, StepContext};
use crate::protocol::redact;
use crate::protocol::{
    ACCOUNT_ID_KEY, APPROVAL_KEY, AgentEvent, AttachmentRef, Prompt, Scope, USER_ID_KEY, codes,
};
use crate::session::history::{INTERRUPTED_CALL, repair};
use crate::session::{Claim, ContentBlock, Lease, Message, Role, Stop, StopCause, TurnOutcome, TurnStatus};

/// Told to the model when a step was cut off before it said or called anything.
pub(crate) const PLAN_LESS: &str = "Your previous reply reached the output limit before it said anything. \
Plan less: answer directly, or call one tool, in fewer words.";
/// Told to the person when the answer hit the output limit.
pub(crate) const OUTPUT_LIMIT_NOTICE: &str =
    "\n\n(My reply reached its length limit and was cut off here. Ask me to continue, or to be shorter.)";
/// Told to the person when the tool loop ran out of rounds.
pub(crate) const MAX_ROUNDS_NOTICE: &str =
    "\n\n(I stopped after the most tool rounds one turn may take, before finishing. Ask me to continue.)";
/// Told to the person when the turn ran out of time.
pub(crate) const DEADLINE_NOTICE: &str =
    "\n\n(This turn reached its time limit and stopped here. Ask me to continue.)";

/// How a turn ends, before its messages are stored.
enum Ending {
    Completed(Option<Value>),
    /// Stopped before its own end: by the person, a newer message, or the deadline.
    Stopped(Stop),
    Failed {
        details: String,
        retryable: bool,
        code: &'static str,
    },
}

impl Ending {
    fn stop(reason: &str) -> Self {
        Self::Completed(Some(json!({ "stopReason": reason })))
    }

    /// The model's last line for a turn that ended on tool results.
    fn closing_line(&self) -> &'static str {
        match self {
            Self::Completed(Some(data)) if data["stopReason"] == "approval_required" => {
                "(A call is waiting for the person's approval; it has not run.)"
            }
            Self::Failed { .. } => "(This turn failed here and was not finished.)",
            _ => "(This turn ended here.)",
        }
    }

    /// The terminal event and the stored outcome. A completed turn's data reports the tokens
    /// its files gave the model (`estimatedFileTokens`), when any did.
    fn terminal(self, file_tokens: u64) -> (AgentEvent, TurnOutcome) {
        match self {
            Self::Stopped(stop) => Self::stop(stop.reason.as_str()).terminal(file_tokens),
            Self::Completed(mut data) => {
                if file_tokens > 0 {
                    let object = data.get_or_insert_with(|| json!({}));
                    if let Some(fields) = object.as_object_mut() {
                        fields.insert("estimatedFileTokens".into(), file_tokens.into());
                    }
                }
                (
                    AgentEvent::Completed { data: data.clone() },
                    TurnOutcome {
                        status: TurnStatus::Completed,
                        terminal: data.unwrap_or(Value::Null),
                    },
                )
            }
            Self::Failed {
                details,
                retryable,
                code,
            } => (
                AgentEvent::failed(details.clone(), retryable, Some(code)),
                TurnOutcome {
                    status: TurnStatus::Failed,
                    terminal: json!({ "details": details, "retryable": retryable, "code": code }),
                },
            ),
        }
    }
}

/// Runs one turn, emitting its events; the last one emitted is its terminal.
pub(super) async fn run(engine: Arc<EngineInner>, scope: Scope, prompt: Prompt, out: Emitter) {
    let turn_id = scope
        .turn_id()
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let span =
        tracing::info_span!("turn", turn_id = %turn_id, session = %scope.session, model = engine.model.id());
    // The turn's time: the engine's own deadline, or the host's when that comes sooner.
    let mut budget = engine.config.turn_deadline;
    if let Some(host_deadline) = scope.deadline() {
        let left = host_deadline
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        budget = budget.min(left);
    }
    let supersedes: Vec<String> = scope.supersedes().into_iter().map(str::to_owned).collect();
    let user_id = scope
        .extensions
        .get(USER_ID_KEY)
        .and_then(Value::as_str)
        .map(str::to_owned);
    let account_id = scope
        .extensions
        .get(ACCOUNT_ID_KEY)
        .and_then(Value::as_str)
        .map(str::to_owned);
    let approval = scope.extensions.get(APPROVAL_KEY).cloned();
    let ask = TurnAsk {
        session: scope.session,
        turn_id,
        user_id,
        account_id,
        approval,
        supersedes,
    };
    run_claimed(engine, ask, prompt, budget, out)
        .instrument(span)
        .await;
}

/// Who asks for a turn, and what comes with it besides the prompt.
struct TurnAsk {
    session: String,
    turn_id: String,
    user_id: Option<String>,
    account_id: Option<String>,
    approval: Option<Value>,
    supersedes: Vec<String>,
}

async fn run_claimed(engine: Arc<EngineInner>, ask: TurnAsk, prompt: Prompt, budget: Duration, out: Emitter) {
    let TurnAsk {
        session,
        turn_id,
        user_id,
        account_id,
        approval,
        supersedes,
    } = ask;
    if session.trim().is_empty() {
        out.emit(AgentEvent::failed(
            "scope.session is empty",
            false,
            Some(codes::INVALID_PROMPT),
        ));
        return;
    }
    // A turn that carries an approval decision may come without words.
    let decision_only = approval.is_some() && prompt.text.trim().is_empty() && prompt.images.is_empty();
    let checked = if decision_only {
        Ok(Message::new(Role::User, Vec::new()))
    } else {
        user_message(&prompt)
    };
    let mut user = match checked {
        Ok(user) => user,
        Err(invalid) => {
            tracing::info!(%invalid, "refused the prompt");
            out.emit(AgentEvent::failed(
                invalid.to_string(),
                false,
                Some(codes::INVALID_PROMPT),
            ));
            return;
        }
    };
    let store = &engine.store;
    let lease = Lease(budget + engine.config.lease_margin);
    match store.claim_turn(&session, &turn_id, lease).await {
        Err(e) => {
            tracing::error!(error = %e, "could not claim the turn");
            out.emit(AgentEvent::failed(
                e.client_message(),
                true,
                Some(codes::STORE_FAILED),
            ));
            return;
        }
        Ok(Claim::Done(record)) => {
            tracing::info!(status = ?record.status, "duplicate delivery of a finished turn; not run again");
            out.emit(AgentEvent::failed(
                format!("turn {turn_id} already ran to its end; it was not run again"),
                false,
                Some(codes::DUPLICATE_TURN),
            ));
            return;
        }
        Ok(Claim::Running(_)) => {
            out.emit(AgentEvent::failed(
                format!("turn {turn_id} is running on another worker"),
                true,
                Some(codes::TURN_IN_PROGRESS),
            ));
            return;
        }
        Ok(Claim::Claimed { reclaimed }) => {
            if reclaimed {
                tracing::warn!("reclaimed a turn whose earlier worker's lease ran out");
            }
        }
    }
    let config = &engine.config;
    // The turn looks for a stop before it starts: one asked while it waited in the queue means
    // the model is never called.
    let early_stop = stop::look(store.as_ref(), &session, &turn_id).await;
    if let Some(Stop {
        reason: StopCause::Superseded,
        ..
    }) = early_stop
    {
        tracing::info!("superseded before it started; nothing runs");
        let outcome = TurnOutcome {
            status: TurnStatus::Completed,
            terminal: json!({ "stopReason": "superseded", "ran": false }),
        };
        if let Err(e) = store.complete_turn(&session, &turn_id, &[], &outcome).await {
            tracing::warn!(error = %e, "could not record the superseded turn");
        }
        out.emit(AgentEvent::failed(
            format!("turn {turn_id} was superseded by a newer message before it started; nothing ran"),
            false,
            Some(codes::SUPERSEDED),
        ));
        return;
    }
    let superseded: Vec<&str> = supersedes.iter().map(String::as_str).collect();
    stop::supersede(
        store.as_ref(),
        &session,
        &superseded,
        config.stop_poll_interval,
        config.supersede_wait,
    )
    .await;
    if let Some(decision) = &approval {
        let told = approvals::redeem(
            &engine,
            &session,
            user_id.as_deref(),
            account_id.as_deref(),
            &turn_id,
            decision,
            &out,
        )
        .await;
        user.content.insert(0, ContentBlock::text(told));
    }
    let history = match store.load_view(&session).await {
        Ok(view) => {
            let first = view.first();
            let (messages, repairs) = repair(view.messages);
            if repairs.any() {
                tracing::warn!(?repairs, "repaired the stored history");
            }
            History {
                summary: view.summary,
                first,
                messages,
                exact: !repairs.any(),
                compacted: false,
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "could not read the session's history");
            release(&engine, &session, &turn_id).await;
            out.emit(AgentEvent::failed(
                e.client_message(),
                true,
                Some(codes::STORE_FAILED),
            ));
            return;
        }
    };

    let attached: Vec<AttachmentRef> = user
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Attachment { reference } => Some(reference.clone()),
            _ => None,
        })
        .collect();
    let mut turn = TurnState::new(history, user);
    // The conversation's count is read only by a turn that can give the model a file: one
    // with files of its own, or one with the attachment tools.
    let can_show_files = !attached.is_empty()
        || engine
            .tools
            .specs()
            .any(|s| s.class == super::ToolClass::Attachment);
    if let (Some(area), true) = (&engine.file_area, can_show_files) {
        if !attached.is_empty() {
            turn.given = attachments::expand(area.as_ref(), &session, &attached).await;
        }
        let used = area.conversation_usage(&session).await.unwrap_or(0);
        turn.file_limit = config
            .turn_file_tokens
            .min(config.conversation_file_tokens.saturating_sub(used));
    }
    let ctx = StepContext {
        session: &session,
        turn_id: &turn_id,
        round: 0,
        user_id: user_id.as_deref(),
        account_id: account_id.as_deref(),
    };
    let ending = match early_stop {
        Some(stop) => {
            tracing::info!(
                reason = stop.reason.as_str(),
                "stopped before it started; the model is not called"
            );
            Ending::Stopped(stop)
        }
        None => run_watched(&engine, ctx, &mut turn, &out, budget).await,
    };
    if let Ending::Stopped(stop) = &ending {
        stop::mark(&mut turn.messages, *stop);
    }
    // A stored turn ends with the model's words, so that stored histories alternate on their own.
    if turn.produced_anything() && turn.messages.last().is_some_and(|m| m.role == Role::User) {
        turn.messages.push(Message::assistant_text(ending.closing_line()));
    }

    let file_tokens = turn.file_tokens();
    // Keep what the turn produced; a turn that produced nothing stores no message, so a prompt
    // the model refuses never poisons the session.
    let messages = if turn.produced_anything() {
        repair(turn.messages).0
    } else {
        Vec::new()
    };
    let past_deadline = matches!(
        ending,
        Ending::Stopped(Stop {
            reason: StopCause::Deadline,
            ..
        })
    );
    let (terminal, outcome) = ending.terminal(file_tokens);
    let stored = if past_deadline {
        // Past its deadline the turn may take only so long to store; after that nothing of it
        // is kept, and a late write cannot land (completion is conditional on `running`).
        match tokio::time::timeout(
            config.store_timeout,
            store.complete_turn(&session, &turn_id, &messages, &outcome),
        )
        .await
        {
            Ok(result) => result.map_err(|e| logged_store_error(&e)),
            Err(_) => Err(format!(
                "storing did not finish within {} ms",
                config.store_timeout.as_millis()
            )),
        }
    } else {
        store
            .complete_turn(&session, &turn_id, &messages, &outcome)
            .await
            .map_err(|e| logged_store_error(&e))
    };
    match stored {
        Ok(()) => {
            if let (Some(area), true) = (&engine.file_area, file_tokens > 0) {
                if let Err(e) = area.record_usage(&session, file_tokens).await {
                    tracing::warn!(error = %e, "could not count the turn's file tokens for the conversation");
                }
            }
            out.emit(terminal)
        }
        Err(e) if past_deadline => {
            tracing::error!(error = %e, "the turn reached its deadline and could not be stored");
            let failure = TurnOutcome {
                status: TurnStatus::Failed,
                terminal: json!({ "code": codes::TURN_DEADLINE_EXCEEDED, "stored": false }),
            };
            if let Err(e) = store.complete_turn(&session, &turn_id, &[], &failure).await {
                tracing::warn!(error = %e, "could not record the turn as failed");
            }
            out.emit(AgentEvent::failed(
                format!("the turn reached its deadline and what it did could not be stored ({e}); nothing of it was kept"),
                false,
                Some(codes::TURN_DEADLINE_EXCEEDED),
            ));
        }
        Err(e) => {
            release(&engine, &session, &turn_id).await;
            out.emit(AgentEvent::failed(
                format!("the turn ran but could not be stored: {e}"),
                true,
                Some(codes::STORE_FAILED),
            ));
        }
    }
}

/// Logs a store failure whole and gives what the client may be told of it.
fn logged_store_error(error: &crate::session::StoreError) -> String {
    tracing::error!(error = %error, "could not store the turn");
    error.client_message()
}

/// Runs the rounds under the deadline while looking for a stop. A stop seen lets the answer on
/// its way finish for `stop_grace`; then what is still running is cut off, and each call keeps
/// exactly one result.
async fn run_watched(
    engine: &EngineInner,
    ctx: StepContext<'_>,
    turn: &mut TurnState,
    out: &Emitter,
    budget: Duration,
) -> Ending {
    let config = &engine.config;
    let (session, turn_id) = (ctx.session, ctx.turn_id);
    let flag = StopFlag::default();
    let ended = {
        let rounds =
            tokio::time::timeout_at(Instant::now() + budget, run_rounds(engine, ctx, turn, out, &flag));
        tokio::pin!(rounds);
        let store = engine.store.as_ref();
        let mut watch = Box::pin(stop::look_after(
            store,
            session,
            turn_id,
            config.stop_poll_interval,
        ));
        let mut grace_until: Option<Instant> = None;
        loop {
            tokio::select! {
                result = &mut rounds => break result.ok(),
                found = &mut watch, if grace_until.is_none() => match found {
                    Some(stop) => {
                        tracing::info!(reason = stop.reason.as_str(), "a stop was asked; letting what is on its way finish");
                        flag.set(stop);
                        grace_until = Some(Instant::now() + config.stop_grace);
                    }
                    None => watch = Box::pin(stop::look_after(store, session, turn_id, config.stop_poll_interval)),
                },
                () = tokio::time::sleep_until(grace_until.unwrap_or_else(Instant::now)), if grace_until.is_some() => break None,
            }
        }
    };
    match ended {
        Some(ending) => ending,
        None => {
            let stop = flag.get().unwrap_or_else(|| Stop::now(StopCause::Deadline));
            let why = match stop.reason {
                StopCause::Deadline => "the turn reached its deadline",
                StopCause::UserStop => "the person stopped the turn",
                StopCause::Superseded => "the person's next message replaced the turn",
            };
            tracing::warn!(reason = stop.reason.as_str(), "cut the turn off");
            turn.interrupt(out, why);
            if stop.reason == StopCause::Deadline {
                turn.notify(out, DEADLINE_NOTICE);
            }
            Ending::Stopped(stop)
        }
    }
}

async fn release(engine: &EngineInner, session: &str, turn_id: &str) {
    if let Err(e) = engine.store.release_turn(session, turn_id).await {
        tracing::warn!(error = %e, "could not release the turn; it can run again once its lease runs out");
    }
}

/// What one model step ended with.
struct StepEnd {
    stop: StopReason,
    called: bool,
    said: bool,
    /// The calls of tools that end the turn, in call order.
    ending: Vec<serde_json::Value>,
}

async fn run_rounds(
    engine: &EngineInner,
    mut ctx: StepContext<'_>,
    turn: &mut TurnState,
    out: &Emitter,
    flag: &StopFlag,
) -> Ending {
    let config = &engine.config;
    let mut plan_less = false;
    let mut retried_too_long = false;
    while ctx.round < config.max_rounds {
        if let Some(stop) = flag.get() {
            return Ending::Stopped(stop);
        }
        let forced = engine.policy.as_ref().and_then(|p| p.force_tool(&ctx));
        if ctx.round == 0 {
            turn.compact(engine, ctx.session, Pressure::IfNeeded, out).await;
        }
        turn.fit_files();
        let request = engine.request(turn.conversation(), turn.history.sent_len(), forced, plan_less);
        let step = match run_step_with_retries(engine, &ctx, &request, turn, out, flag).await {
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
        if let Some(held) = turn.held.take() {
            turn.close_step();
            return match approvals::request(engine, ctx.session, ctx.user_id, ctx.turn_id, held, out).await {
                Ok(()) => Ending::stop("approval_required"),
                Err(e) => Ending::Failed {
                    details: format!("a call needs the person's approval, and it could not be stored: {e}"),
                    retryable: true,
                    code: codes::STORE_FAILED,
                },
            };
        }
        if !step.ending.is_empty() {
            turn.close_step();
            return Ending::Completed(Some(
                json!({ "stopReason": "stop_tool", "stopTools": step.ending }),
            ));
        }
        if step.called {
            turn.close_step();
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
                return Ending::stop("output_limit");
            }
            StopReason::GuardrailIntervened | StopReason::ContentFiltered => {
                turn.close_step();
                return Ending::stop(step.stop.as_str());
            }
            _ => {
                turn.close_step();
                let nudge = engine.policy.as_ref().and_then(|p| p.continue_after_text(&ctx));
                match nudge {
                    None => return Ending::Completed(None),
                    // It answered, so no closing line: the rounds ran out while it went on.
                    Some(_) if ctx.round >= config.max_rounds => return Ending::stop("max_rounds"),
                    Some(line) => turn.messages.push(Message::user_text(line)),
                }
            }
        }
    }
    turn.notify(out, MAX_ROUNDS_NOTICE);
    Ending::stop("max_rounds")
}

async fn run_step_with_retries(
    engine: &EngineInner,
    ctx: &StepContext<'_>,
    request: &super::model::ModelRequest,
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
            tracing::warn!(error = %error, "the model's stream broke after output");
            turn.interrupt(out, "the model's stream broke");
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
            let delay = backoff(config, attempt);
            tracing::info!(attempt, delay_ms = delay.as_millis() as u64, error = %error, "retrying the model");
            out.emit(AgentEvent::Retrying {
                attempt,
                max_attempts: config.retries,
                delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                reason: retry_reason(&error),
            });
            tokio::time::sleep(delay).await;
            continue;
        }
        tracing::warn!(error = %error, attempt, "the model call failed");
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
fn for_client(error: &ModelError) -> String {
    redact(&error.to_string())
}

fn retry_reason(error: &ModelError) -> String {
    use super::model::ModelErrorKind as K;
    let what = match error.kind {
        K::Throttled => "The model is busy (throttled)",
        K::NotReady => "The model is starting up",
        K::Timeout => "The model took too long to answer",
        K::StreamInterrupted => "The model's answer was interrupted",
        _ => "The model is unavailable",
    };
    format!("{what}; trying again shortly. ({})", for_client(error))
}

type RunningCall = std::pin::Pin<Box<dyn std::future::Future<Output = (usize, ToolOutcome)> + Send>>;

/// A tool call as the model made it.
struct Call {
    id: String,
    name: String,
    input: String,
}

/// Records a call the model made, then starts it, holds it for the person's approval, or
/// answers it with why it does not run. Returns the call when it ends the turn.
async fn start_call(
    engine: &EngineInner,
    ctx: &StepContext<'_>,
    turn: &mut TurnState,
    out: &Emitter,
    flag: &StopFlag,
    running: &mut FuturesUnordered<RunningCall>,
    call: Call,
) -> Option<Value> {
    let Call { id, name, input } = call;
    let (index, parsed) = turn.add_call(id.clone(), name.clone(), &input, out);
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
            let timeout = engine.config.tool_timeout;
            let call_ctx = ToolContext {
                session: ctx.session.to_owned(),
                turn_id: ctx.turn_id.to_owned(),
                call_id: id,
                user_id: ctx.user_id.map(str::to_owned),
                account_id: ctx.account_id.map(str::to_owned),
            };
            running.push(Box::pin(async move {
                (index, tools.run(&name, &args, call_ctx, timeout).await)
            }));
        }
    }
    ends
}

/// One model response: streams its output, starts each tool call as soon as its input is
/// complete, and waits for every call to end.
async fn run_step(
    engine: &EngineInner,
    ctx: &StepContext<'_>,
    request: super::model::ModelRequest,
    turn: &mut TurnState,
    out: &Emitter,
    flag: &StopFlag,
) -> Result<StepEnd, ModelError> {
    let mut stream = engine.model.stream(request);
    let mut running: FuturesUnordered<RunningCall> = FuturesUnordered::new();
    let mut stop = None;
    let mut ending = Vec::new();
    let mut quiet = Quiet::new(&engine.config);
    loop {
        tokio::select! {
            biased;
            Some((index, outcome)) = running.next(), if !running.is_empty() => turn.finish_call(index, outcome, out),
            event = stream.next() => match event {
                None => break,
                Some(Err(error)) => return Err(error),
                Some(Ok(event)) => {
                    quiet.heard();
                    match event {
                        ModelEvent::TextDelta(delta) => turn.add_text(&delta, out),
                        ModelEvent::ReasoningDelta(delta) => turn.add_reasoning(delta, out),
                        ModelEvent::ReasoningSignature(signature) => turn.sign_reasoning(signature),
                        ModelEvent::RedactedReasoning(bytes) => turn.add_redacted(&bytes),
                        ModelEvent::ToolUse { id, name, input } => {
                            if let Some(ended) = start_call(engine, ctx, turn, out, flag, &mut running, Call { id, name, input }).await {
                                ending.push(ended);
                            }
                        }
                        ModelEvent::Stop(reason) => stop = Some(reason),
                        ModelEvent::Usage(usage) => out.emit(AgentEvent::Usage {
                            input_tokens: usage.input_tokens,
                            output_tokens: usage.output_tokens,
                            cache_read_tokens: usage.cache_read_tokens,
                            cache_write_tokens: usage.cache_write_tokens,
                        }),
                    }
                }
            },
            // After the stream, so that what arrived while the caller was not reading is taken
            // first: only a model that really sent nothing for the whole window times out.
            () = quiet.elapsed() => return Err(quiet.error()),
        }
    }
    turn.flush_text(out);
    while let Some((index, outcome)) = running.next().await {
        turn.finish_call(index, outcome, out);
    }
    Ok(StepEnd {
        stop: stop.unwrap_or(StopReason::EndTurn),
        called: !turn.step.calls.is_empty(),
        said: turn.step.said,
        ending,
    })
}

/// The current model response, as it is being built.
#[derive(Debug, Default)]
struct Step {
    content: Vec<ContentBlock>,
    calls: Vec<String>,
    results: Vec<Option<ToolOutcome>>,
    said: bool,
}

impl Step {
    /// Whether the caller has seen answer text or a tool call from this step.
    fn produced(&self) -> bool {
        self.said || !self.calls.is_empty()
    }
}

/// Everything a turn has produced so far. It lives outside the round loop, so that what was
/// produced survives the loop being cut off by the deadline.
struct TurnState {
    /// A call of the current step held for the person's approval.
    held: Option<HeldCall>,
    history: History,
    messages: Vec<Message>,
    step: Step,
    think: ThinkTags,
    /// What this turn's files are given as, by id: sent with its message, never stored.
    given: BTreeMap<String, Given>,
    /// What calls showed the model, by call id: sent after their results, never stored.
    shown: BTreeMap<String, Given>,
    /// The tokens the files given and shown may carry in one step.
    file_limit: u64,
    /// The estimated tokens of each file given and each showing, counted once, by
    /// `file:<id>` or `call:<id>`.
    file_tokens: BTreeMap<String, u64>,
}

impl TurnState {
    fn new(history: History, user: Message) -> Self {
        Self {
            held: None,
            history,
            messages: vec![user],
            step: Step::default(),
            think: ThinkTags::default(),
            given: BTreeMap::new(),
            shown: BTreeMap::new(),
            file_limit: u64::MAX,
            file_tokens: BTreeMap::new(),
        }
    }

    /// Keeps what the next step carries of files within the limit: from the step that would
    /// pass it, the costliest file is given as its line instead. Counts what is given.
    fn fit_files(&mut self) {
        attachments::fit(
            self.given.values_mut().chain(self.shown.values_mut()),
            self.file_limit,
        );
        let given = self.given.iter().map(|(id, g)| (format!("file:{id}"), g.tokens));
        let shown = self.shown.iter().map(|(id, g)| (format!("call:{id}"), g.tokens));
        for (key, tokens) in given.chain(shown) {
            if tokens > 0 {
                self.file_tokens.entry(key).or_insert(tokens);
            }
        }
    }

    /// Compacts the history under `pressure` (see [`compaction::compact`]), counting what the
    /// request carries besides it: the system prompt, the tools, and this turn so far.
    async fn compact(
        &mut self,
        engine: &EngineInner,
        session: &str,
        pressure: Pressure,
        out: &Emitter,
    ) -> bool {
        let files: u64 = self
            .given
            .values()
            .chain(self.shown.values())
            .map(|g| g.tokens)
            .sum();
        let rest = engine.fixed_tokens() + compaction::estimated_tokens(&self.messages) + files;
        compaction::compact(engine, session, &mut self.history, rest, pressure, out).await
    }

    /// The estimated tokens the turn's files gave the model.
    fn file_tokens(&self) -> u64 {
        self.file_tokens.values().sum()
    }

    /// The conversation to send: stored history, then this turn so far.
    fn conversation(&self) -> Vec<Message> {
        let mut all = self.history.sent();
        all.reserve(self.messages.len());
        let mut messages = self.messages.iter().cloned();
        if let Some(mut user) = messages.next() {
            if !self.given.is_empty() {
                user.content = user
                    .content
                    .into_iter()
                    .flat_map(|block| match &block {
                        ContentBlock::Attachment { reference } => self
                            .given
                            .get(&reference.id)
                            .map_or_else(|| vec![block], |g| g.blocks.clone()),
                        _ => vec![block],
                    })
                    .collect();
            }
            all.push(user);
        }
        all.extend(messages.map(|mut message| {
            // What a call showed follows the results of its message.
            let shown: Vec<ContentBlock> = message
                .content
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::ToolResult { tool_use_id, .. } => self.shown.get(tool_use_id),
                    _ => None,
                })
                .flat_map(|g| g.blocks.iter().cloned())
                .collect();
            message.content.extend(shown);
            message
        }));
        stop::with_notes(repair(all).0)
    }

    fn produced_anything(&self) -> bool {
        self.messages.len() > 1
    }

    fn add_text(&mut self, delta: &str, out: &Emitter) {
        for piece in self.think.push(delta) {
            self.add_piece(piece, out);
        }
    }

    fn flush_text(&mut self, out: &Emitter) {
        for piece in self.think.finish() {
            self.add_piece(piece, out);
        }
    }

    fn add_piece(&mut self, piece: Piece, out: &Emitter) {
        match piece {
            Piece::Thinking(text) => out.emit(AgentEvent::thinking(text)),
            Piece::Text(text) => {
                self.step.said |= !text.trim().is_empty();
                match self.step.content.last_mut() {
                    Some(ContentBlock::Text { text: last }) => last.push_str(&text),
                    _ => self.step.content.push(ContentBlock::text(text.clone())),
                }
                out.emit(AgentEvent::text(text));
            }
        }
    }

    fn add_reasoning(&mut self, delta: String, out: &Emitter) {
        match self.step.content.last_mut() {
            Some(ContentBlock::Reasoning {
                text,
                signature: None,
            }) => text.push_str(&delta),
            _ => self.step.content.push(ContentBlock::Reasoning {
                text: delta.clone(),
                signature: None,
            }),
        }
        out.emit(AgentEvent::thinking(delta));
    }

    fn sign_reasoning(&mut self, sig: String) {
        match self.step.content.last_mut() {
            Some(ContentBlock::Reasoning {
                signature: signature @ None,
                ..
            }) => *signature = Some(sig),
            _ => self.step.content.push(ContentBlock::Reasoning {
                text: String::new(),
                signature: Some(sig),
            }),
        }
    }

    fn add_redacted(&mut self, bytes: &[u8]) {
        use base64::Engine as _;
        self.step.content.push(ContentBlock::RedactedReasoning {
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
        });
    }

    /// Records a call and announces it; returns its index and its parsed arguments.
    fn add_call(
        &mut self,
        id: String,
        name: String,
        raw: &str,
        out: &Emitter,
    ) -> (usize, Result<Value, String>) {
        let parsed = parse_arguments(raw);
        let args = match &parsed {
            Ok(args) => args.clone(),
            Err(_) => Value::String(raw.to_owned()),
        };
        // The stored call must be a JSON object whatever the model wrote; its result says why
        // it did not run.
        let input = parsed.clone().unwrap_or_else(|_| json!({}));
        self.step.content.push(ContentBlock::ToolUse {
            id: id.clone(),
            name: name.clone(),
            input,
        });
        self.step.calls.push(id.clone());
        self.step.results.push(None);
        out.emit(AgentEvent::ToolStarted { id, name, args });
        (self.step.calls.len() - 1, parsed)
    }

    fn finish_call(&mut self, index: usize, outcome: ToolOutcome, out: &Emitter) {
        let Some(slot) = self.step.results.get_mut(index) else {
            return;
        };
        out.emit(AgentEvent::ToolEnded {
            id: self.step.calls[index].clone(),
            is_error: outcome.is_error,
            content: outcome.content.clone(),
        });
        *slot = Some(outcome);
    }

    /// Ends the step early: calls still running get an error result saying why.
    fn interrupt(&mut self, out: &Emitter, reason: &str) {
        self.flush_text(out);
        for index in 0..self.step.calls.len() {
            if self.step.results[index].is_none() {
                self.finish_call(
                    index,
                    ToolOutcome::error(format!("{INTERRUPTED_CALL} ({reason})")),
                    out,
                );
            }
        }
        self.close_step();
    }

    /// Adds the step's response, and the results of its calls in call order, to the turn.
    fn close_step(&mut self) {
        let step = std::mem::take(&mut self.step);
        if !step.content.is_empty() {
            self.messages.push(Message::new(Role::Assistant, step.content));
        }
        if !step.calls.is_empty() {
            let results = step
                .calls
                .into_iter()
                .zip(step.results)
                .map(|(id, outcome)| {
                    let outcome = outcome.unwrap_or_else(|| ToolOutcome::error(INTERRUPTED_CALL));
                    if !outcome.shown.is_empty() {
                        self.shown.insert(id.clone(), Given::shown(&id, outcome.shown));
                    }
                    ContentBlock::ToolResult {
                        tool_use_id: id,
                        content: outcome.content,
                        is_error: outcome.is_error,
                    }
                })
                .collect();
            self.messages.push(Message::new(Role::User, results));
        }
    }

    fn discard_step(&mut self) {
        self.step = Step::default();
        self.think = ThinkTags::default();
    }

    /// Tells the person something, and keeps it as the model's words.
    fn notify(&mut self, out: &Emitter, text: &str) {
        out.emit(AgentEvent::text(text));
        self.messages.push(Message::assistant_text(text.trim_start()));
    }
}

//! One turn: claim, load history, run the tool loop under the deadline, store, end.
//!
//! - [`phases`]: what happens around the rounds (admit, claim, the early stop look, history,
//!   store), each phase returning a typed refusal; [`run_claimed`] says the terminal, once.
//! - [`rounds`]: the model steps, their retries and tool calls, under the stop watch; [`calls`]:
//!   each call a step makes, started, held or answered.
//! - [`journal`]: the turn's journal, written before calls that change something, and a turn
//!   claimed again resumed from it.
//! - [`state`]: what the turn has produced so far; [`ui_calls`]: the last look at the page's
//!   actions a cut-off turn had sent.

mod calls;
mod commands;
use crate::protocol::ErrorChain;
mod fit;
mod journal;
mod phases;
mod rounds;
mod spend;
mod state;
#[cfg(test)]
mod tests;
mod ui_calls;

pub use rounds::is_throttled_retry;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tracing::Instrument as _;
use tracing::instrument::WithSubscriber as _;

use super::approvals;
use super::attachments;
use super::compaction::History;
use super::stop;
use super::turn_stream::Emitter;
use super::{EngineInner, StepContext, TurnStopReason};
use crate::protocol::{AgentEvent, AttachmentRef, Prompt, Scope};
use crate::session::history::repair;
use crate::session::{
    ContentBlock, FailedOutcome, Lease, Message, Role, SessionId, Stop, StoreError, TurnId, TurnOutcome,
};

use phases::Refusal;
use rounds::run_watched;
use state::TurnState;

/// Told to the model when a step was cut off before it said or called anything.
pub(crate) const PLAN_LESS: &str = "Your previous reply reached the output limit before it said anything. \
Plan less: answer directly, or call one tool, in fewer words.";
/// Told to the person when the answer hit the output limit.
pub(crate) const OUTPUT_LIMIT_NOTICE: &str =
    "\n\n(My reply reached its length limit and was cut off here. Ask me to continue, or to be shorter.)";
/// Told to the person when the tool loop ran out of rounds.
pub(crate) const MAX_ROUNDS_NOTICE: &str =
    "\n\n(I stopped after the most tool rounds one turn may take, before finishing. Ask me to continue.)";
/// Told to the person (and, in the history, the model) when the model asked for the same call
/// more times than a turn may make it.
pub(crate) const REPEATED_CALL_NOTICE: &str = "\n\n(I stopped: I kept calling the same tool with the same arguments, which looked like a loop. Tell me how to go on.)";
/// Told to the person when the model's answer was cut in the middle.
pub(crate) const CUT_NOTICE: &str =
    "\n\n(My answer was cut off here: the connection to the model broke. Ask me to continue.)";
/// Told to the person when the turn ran out of time.
pub(crate) const DEADLINE_NOTICE: &str =
    "\n\n(This turn reached its time limit and stopped here. Ask me to continue.)";

/// How a turn ends, before its messages are stored. Typed until [`terminal`](Self::terminal)
/// makes it the terminal event and the stored outcome.
enum Ending {
    /// The model ended its turn, with the typed result when the turn asked for one.
    Completed { result: Option<Value> },
    /// It ended before the model's own end, for `reason`; `stop_tools` are the calls of tools
    /// that end a turn, when that was the reason.
    Ended {
        reason: TurnStopReason,
        stop_tools: Option<Value>,
    },
    /// Stopped before its own end: by the person, a newer message, or the deadline.
    Stopped(Stop),
    Failed {
        details: String,
        retryable: bool,
        code: &'static str,
    },
    /// The journal could not be written before calls that change something, which did not
    /// run: nothing of the turn is stored, and it is given back for a redelivery to run.
    Unjournaled(crate::session::StoreError),
    /// The host's deadline came before the turn's own, and the host can continue the turn: it
    /// is handed over to the host's next run.
    Continues,
}

impl Ending {
    fn stop(reason: TurnStopReason) -> Self {
        Self::Ended {
            reason,
            stop_tools: None,
        }
    }

    /// The model's last line for a turn that ended on tool results.
    fn closing_line(&self) -> &'static str {
        match self {
            Self::Ended {
                reason: TurnStopReason::ApprovalRequired,
                ..
            } => "(A call is waiting for the person's approval; it has not run.)",
            Self::Failed { .. } | Self::Unjournaled(_) | Self::Continues => {
                "(This turn failed here and was not finished.)"
            }
            _ => "(This turn ended here.)",
        }
    }

    /// The terminal event and the stored outcome. A completed turn's data says why it ended
    /// early (`stopReason`, with `stopTools`), and the tokens its files gave the model
    /// (`estimatedFileTokens`), when any did.
    fn terminal(self, file_tokens: u64) -> (AgentEvent, TurnOutcome) {
        let mut fields = serde_json::Map::new();
        let (reason, stop_tools) = match self {
            Self::Continues => {
                let details = "the turn goes on in the host's next run";
                return (
                    AgentEvent::failed(details, true, Some(crate::protocol::codes::TURN_CONTINUES)),
                    TurnOutcome::Failed(FailedOutcome::new(
                        details,
                        true,
                        crate::protocol::codes::TURN_CONTINUES,
                    )),
                );
            }
            Self::Unjournaled(error) => {
                let details = format!(
                    "the turn's journal could not be written before a call that changes something; the call did not run: {}",
                    error.client_message()
                );
                return (
                    AgentEvent::failed(details.clone(), true, Some(crate::protocol::codes::STORE_FAILED)),
                    TurnOutcome::Failed(FailedOutcome::new(
                        details,
                        true,
                        crate::protocol::codes::STORE_FAILED,
                    )),
                );
            }
            Self::Failed {
                details,
                retryable,
                code,
            } => {
                return (
                    AgentEvent::failed(details.clone(), retryable, Some(code)),
                    TurnOutcome::Failed(FailedOutcome::new(details, retryable, code)),
                );
            }
            Self::Completed { result } => {
                if let Some(result) = result {
                    fields.insert("result".into(), result);
                }
                (None, None)
            }
            Self::Stopped(stop) => (Some(TurnStopReason::from(stop.reason)), None),
            Self::Ended { reason, stop_tools } => (Some(reason), stop_tools),
        };
        if let Some(reason) = reason {
            fields.insert("stopReason".into(), reason.as_str().into());
        }
        if let Some(calls) = stop_tools {
            fields.insert("stopTools".into(), calls);
        }
        if file_tokens > 0 {
            fields.insert("estimatedFileTokens".into(), file_tokens.into());
        }
        let data = (!fields.is_empty()).then_some(Value::Object(fields));
        (
            AgentEvent::Completed { data: data.clone() },
            TurnOutcome::Completed(data),
        )
    }
}

/// Runs one turn, emitting its events; the last one emitted is its terminal.
pub(super) async fn run(engine: Arc<EngineInner>, scope: Scope, prompt: Prompt, out: Emitter) {
    // The ids came typed (a scope cannot hold one that no store could key); the store's own
    // length limit is checked when the turn is admitted.
    let turn_id = scope.options.turn_id.clone().unwrap_or_else(TurnId::random);
    let span =
        tracing::info_span!("turn", turn_id = %turn_id, session = %scope.session, model = engine.model.id());
    // The turn's time: the engine's own deadline, or the host's when that comes sooner.
    let host_left = scope
        .deadline()
        .map(|deadline| deadline.duration_since(SystemTime::now()).unwrap_or_default());
    let budget = host_left.map_or(engine.config.turn_deadline, |left| {
        engine.config.turn_deadline.min(left)
    });
    let options = scope.options;
    let ask = TurnAsk {
        session: scope.session,
        turn_id,
        user_id: options.user_id,
        account_id: options.account_id,
        user_token: scope.user_token,
        approval: options.approval,
        supersedes: options.supersedes,
        context: options.context,
        result_schema: options.result_schema,
        parent_session: options.parent_session,
        branch_hints: options.branch_hints,
        agent: options.agent,
        // Kept as a moment: the phases before the rounds take time of their own.
        host_deadline: host_left.map(|left| tokio::time::Instant::now() + left),
        continuable: options.continuable,
    };
    // With a logger, the turn's lines are copied to it, with the turn's ids.
    let logging = engine
        .logging
        .as_ref()
        .map(|l| l.dispatch(&ask.session, &ask.turn_id));
    let turn = run_claimed(engine, ask, prompt, budget, out).instrument(span);
    match logging {
        Some(dispatch) => turn.with_subscriber(dispatch).await,
        None => turn.await,
    }
}

/// Who asks for a turn, and what comes with it besides the prompt.
struct TurnAsk {
    session: SessionId,
    turn_id: TurnId,
    user_id: Option<String>,
    account_id: Option<String>,
    user_token: Option<crate::protocol::UserToken>,
    approval: Option<crate::protocol::ApprovalDecision>,
    supersedes: Vec<TurnId>,
    /// The payload's `context`: what the person's tab says of the page.
    context: Option<Value>,
    /// The JSON Schema the turn's typed result must match (the scope's `resultSchema`).
    result_schema: Option<Value>,
    /// The session a new session branches from (the scope's `parentSession`).
    parent_session: Option<SessionId>,
    /// Where in the parent's transcript the branch starts (the scope's `branchHints`).
    branch_hints: Vec<String>,
    /// The agent the turn asks for (the scope's `agent`).
    agent: Option<String>,
    /// The host's deadline, when it set one.
    host_deadline: Option<tokio::time::Instant>,
    /// Whether the host can continue the turn past its deadline (the scope's `continuable`).
    continuable: bool,
}

/// Runs the claimed turn and emits its terminal: the one place a turn's end is said, whether a
/// phase refused it or its rounds ran.
async fn run_claimed(engine: Arc<EngineInner>, ask: TurnAsk, prompt: Prompt, budget: Duration, out: Emitter) {
    let terminal = match run_phases(&engine, &ask, &prompt, budget, &out).await {
        Ok(terminal) => terminal,
        Err(refusal) => refusal.event(&ask.turn_id),
    };
    out.emit(terminal);
}

/// The phases of a turn, in order: admitted, claimed, not stopped before it starts, the turns it
/// replaces stopped, its approval decision redeemed, its history read, its rounds run, stored.
async fn run_phases(
    engine: &Arc<EngineInner>,
    ask: &TurnAsk,
    prompt: &Prompt,
    budget: Duration,
    out: &Emitter,
) -> Result<AgentEvent, Refusal> {
    let kept_over = engine.keeper.as_ref().map(|k| k.inline_limit());
    let mut user = phases::admit(ask, prompt, engine.store.as_ref(), kept_over)?;
    let ui = phases::read_context(ask)?;
    // The stored message keeps how the person gave it.
    user.input = ui.input.clone();
    // Who the turn is for shapes it first (its system prompt, its tools); the page's actions
    // and the typed result's tool are its own, added after.
    let engine = &engine.for_plan(&super::TurnContext {
        session: &ask.session,
        turn_id: &ask.turn_id,
        user_id: ask.user_id.as_deref(),
        account_id: ask.account_id.as_deref(),
        agent: ask.agent.as_deref(),
    });
    let engine = &engine.for_ui(&ui).map_err(Refusal::InvalidPrompt)?;
    let engine = &engine
        .for_result(ask.result_schema.as_ref())
        .map_err(Refusal::InvalidPrompt)?;
    // A blocked account's or person's turn does not start. A look that fails lets it start:
    // its watch looks again while it runs.
    if let Some(blocks) = &engine.blocklist {
        match blocks
            .block_on(ask.account_id.as_deref(), ask.user_id.as_deref())
            .await
        {
            Ok(Some(block)) => return Err(Refusal::Blocked(block.target.describe())),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %ErrorChain(&e), "could not look for a block on the turn; it starts, and its watch looks again")
            }
        }
    }
    // A branch is made before its first turn is claimed, and its owner checked before that.
    let branching = ask.parent_session.is_some();
    if branching {
        phases::check_owner(engine, ask).await?;
        phases::branch(engine, ask).await?;
    }
    // A turn that supersedes others reads its history once they have ended; any other reads it
    // with its claim.
    let waits_for_others = ask.supersedes.iter().any(|id| id != &ask.turn_id);
    let lease = Lease(budget + engine.config.lease_margin);
    let opening = phases::open(engine, ask, lease, branching, !waits_for_others).await?;
    let early_stop = opening.stop;
    let TurnAsk {
        session,
        turn_id,
        user_id,
        account_id,
        user_token,
        approval,
        supersedes,
        context: _,
        result_schema: _,
        parent_session: _,
        branch_hints: _,
        agent: _,
        host_deadline,
        continuable,
    } = ask;
    let config = &engine.config;
    // The person's content too large for an item is kept in the file area, first, before the
    // turn changes anything (an approval's result joins the message after); the turn's model is
    // given it as it was sent (a long text as its first page), not read back. What could not be
    // kept and does not fit an item goes back to the queue before anything runs.
    let kept = match &engine.keeper {
        Some(keeper) => keeper.keep_prompt(session, &mut user.content).await,
        None => Vec::new(),
    };
    if let (Some(_), Some(limit)) = (&engine.keeper, engine.store.max_message_bytes())
        && phases::kept_size(&user, None) > limit
    {
        release(engine, session, turn_id).await;
        return Err(Refusal::ContentNotKept(StoreError::Backend(
            "the person's message is larger than an item holds, and the file area could not keep it".into(),
        )));
    }
    // A turn that lists itself would wait for its own end: it replaces only others.
    let superseded: Vec<TurnId> = supersedes.iter().filter(|id| *id != turn_id).cloned().collect();
    stop::supersede(
        engine.store.as_ref(),
        session,
        &superseded,
        config.stop_poll_interval,
        config.supersede_wait,
    )
    .await;
    approvals::withdraw(engine, session, &superseded).await;
    if let Some(decision) = approval {
        let person = approvals::Person {
            user_id: user_id.as_deref(),
            account_id: account_id.as_deref(),
            user_token: user_token.as_ref(),
        };
        let told = approvals::redeem(engine, session, person, turn_id, decision, out).await;
        user.content.insert(0, ContentBlock::text(told));
    }
    let history = match opening.history {
        Some(history) => history,
        None => phases::load_history(engine, ask).await?,
    };

    let attached: Vec<AttachmentRef> = user
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Attachment { reference }
                if !kept.iter().any(|k| k.reference.id == reference.id) =>
            {
                Some(reference.clone())
            }
            _ => None,
        })
        .collect();
    let mut turn = TurnState::new(history, user);
    turn.additions = ui.additions(crate::clock::now_ms(), approval.is_some());
    turn.message_limit = engine.store.max_message_bytes();
    turn.result = engine.result.as_ref().map(|_| Default::default());
    // The conversation's count is read only by a turn that can give the model a file: one
    // with files of its own, or one with the attachment tools.
    let can_show_files = !attached.is_empty()
        || !kept.is_empty()
        || engine.keeper.is_some()
        || engine
            .tools
            .specs()
            .any(|s| s.class == super::ToolClass::Attachment);
    if let (Some(area), true) = (&engine.file_area, can_show_files) {
        if !attached.is_empty() {
            let documents = engine
                .pdf_as_document
                .then(|| engine.model.pdf_document_limit())
                .flatten();
            turn.given = attachments::expand(area.as_ref(), session, &attached, documents).await;
        }
        let used = area.conversation_usage(session).await.unwrap_or(0);
        turn.file_limit = config
            .turn_file_tokens
            .min(config.conversation_file_tokens.saturating_sub(used));
    }
    for block in kept {
        let given = block.given(config.turn_file_tokens);
        turn.given.insert(given.file_id.clone(), given);
    }
    // What a step's policy may narrow from: the tools this turn offers, each with its class.
    let all_tools: Vec<super::StepTool<'_>> = engine
        .tools
        .specs()
        .map(|spec| super::StepTool {
            name: &spec.name,
            class: spec.class,
        })
        .collect();
    let ctx = StepContext {
        session,
        turn_id,
        round: 0,
        user_id: user_id.as_deref(),
        account_id: account_id.as_deref(),
        user_token: user_token.as_ref(),
        called: &[],
        all_tools: &all_tools,
    };
    let mut ctx = ctx;
    let mut resumed_ending = Vec::new();
    // A turn claimed again (its earlier worker died, or gave it back) goes on from its
    // journal, if it wrote one: what it had done is not done again.
    if opening.reclaimed && engine.store.keeps_journal() {
        match engine.store.read_journal(session, turn_id).await {
            Ok(Some(journal)) => {
                let stopping = early_stop.is_some();
                let resumed = journal::resume(engine, &ctx, &mut turn, journal, stopping, out).await;
                ctx.round = resumed.round;
                resumed_ending = resumed.ending;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %ErrorChain(&e), "could not read the turn's journal");
                release(engine, session, turn_id).await;
                return Err(Refusal::HistoryUnreadable(e));
            }
        }
    }
    // The turn's own deadline counts from its first start, across every run of it; a host whose
    // deadline comes first and that can continue the turn has it handed over before then.
    let elapsed = crate::clock::now_ms().saturating_sub(turn.started_at_ms);
    let own_left = config
        .turn_deadline
        .saturating_sub(Duration::from_millis(elapsed));
    let host_left = host_deadline.map(|at| at.saturating_duration_since(tokio::time::Instant::now()));
    let budget = host_left.map_or(own_left, |left| own_left.min(left));
    if let Some(left) = host_left
        && *continuable
        && left + config.hand_over_margin < own_left
        && engine.store.keeps_journal()
    {
        // Within the last quarter of the host's time, and no earlier than the margin before its
        // end: a short host deadline still leaves the turn most of it.
        let at = left.saturating_sub(config.hand_over_margin.min(left / 4));
        turn.hand_over_at = Some(tokio::time::Instant::now() + at);
    }
    let flag = stop::StopFlag::default();
    let started = tokio::time::Instant::now();
    let mut ending = match early_stop {
        Some(stop) => {
            tracing::info!(
                reason = stop.reason.as_str(),
                "stopped before it started; the model is not called"
            );
            Ending::Stopped(stop)
        }
        // The resumed step called a tool that ends the turn.
        None if !resumed_ending.is_empty() => Ending::Ended {
            reason: TurnStopReason::StopTool,
            stop_tools: Some(Value::Array(resumed_ending)),
        },
        None => run_watched(engine, ctx, &mut turn, out, budget, &flag).await,
    };
    loop {
        if let Ending::Unjournaled(e) = &ending {
            if let StoreError::LostLease(_) = e {
                return Ok(lost(turn_id));
            }
            release(engine, session, turn_id).await;
            return Ok(ending.terminal(0).0);
        }
        if let Ending::Continues = &ending {
            match journal::hand_over(engine, &ctx, &mut turn).await {
                Ok(()) => return Ok(ending.terminal(0).0),
                Err(StoreError::LostLease(_)) => return Ok(lost(turn_id)),
                Err(e) => {
                    tracing::error!(error = %ErrorChain(&e), "could not hand the turn over; it ends at the host's deadline");
                    turn.interrupt(out, "the turn reached its deadline");
                    turn.notify(out, DEADLINE_NOTICE);
                    ending = Ending::Stopped(Stop::now(crate::session::StopCause::Deadline));
                }
            }
        }
        if let Ending::Stopped(stop) = &ending {
            stop::mark(&mut turn.messages, *stop);
        }
        // A stored turn ends with the model's words, so that stored histories alternate on
        // their own.
        if turn.produced_anything() && turn.messages.last().is_some_and(|m| m.role == Role::User) {
            turn.messages.push(Message::assistant_text(ending.closing_line()));
        }
        let file_tokens = turn.file_tokens();
        // A turn that ran to its own end has taken every command it heard; the store refuses it
        // while more wait, and it runs those first.
        let seen = matches!(ending, Ending::Completed { .. }).then(|| commands::seen(&turn));
        // Keep what the turn produced; a turn that produced nothing stores no message, so a
        // prompt the model refuses never poisons the session.
        let messages = if turn.produced_anything() {
            let mut messages = turn.messages.clone();
            super::result::settle_calls(&mut messages);
            repair(messages).0
        } else {
            Vec::new()
        };
        match phases::store(engine, ask, messages, ending, file_tokens, seen, out).await {
            Ok(terminal) => return Ok(terminal),
            Err(phases::CommandsPending) => {
                stop::read_signals(engine.store.as_ref(), session, turn_id, &flag).await;
                if !commands::deliver_next(&mut turn, out, &flag) {
                    release(engine, session, turn_id).await;
                    return Ok(AgentEvent::failed(
                        "the store says commands wait for the turn, and none could be read; it was not stored",
                        true,
                        Some(crate::protocol::codes::STORE_FAILED),
                    ));
                }
                let left = budget.saturating_sub(started.elapsed());
                // A follow-up is a new request of the person's: it gets rounds of its own, a
                // resumed turn's too.
                let ctx = StepContext { round: 0, ..ctx };
                ending = run_watched(engine, ctx, &mut turn, out, left, &flag).await;
            }
        }
    }
}

/// The terminal of a turn another worker took over while this one ran it (its lease ran out):
/// nothing of this run is stored or given back, and the other worker ends the turn.
fn lost(turn_id: &TurnId) -> AgentEvent {
    tracing::warn!("another worker took the turn over; this run stores nothing");
    AgentEvent::failed(
        format!("turn {turn_id} was taken over by another worker; this run stored nothing"),
        true,
        Some(crate::protocol::codes::TURN_IN_PROGRESS),
    )
}

/// Logs a store failure whole and gives what the client may be told of it.
fn logged_store_error(error: &crate::session::StoreError) -> String {
    tracing::error!(error = %ErrorChain(error), "could not store the turn");
    error.client_message()
}

async fn release(engine: &EngineInner, session: &SessionId, turn_id: &TurnId) {
    if let Err(e) = engine.store.release_turn(session, turn_id).await {
        tracing::warn!(error = %ErrorChain(&e), "could not release the turn; it can run again once its lease runs out");
    }
}

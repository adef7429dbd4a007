//! The phases around a turn's rounds. Each returns what the next needs, or a typed [`Refusal`]:
//! the one place that turns an early end into the turn's terminal is
//! [`run_claimed`](super::run_claimed).

use serde_json::json;

use super::{Ending, History, TurnAsk, logged_store_error, release};
use crate::engine::prompt::{InvalidPrompt, user_message};
use crate::engine::turn_stream::Emitter;
use crate::engine::{EngineInner, TurnStopReason};
use crate::protocol::ErrorChain;
use crate::protocol::{AgentEvent, Prompt, codes};
use crate::session::history::repair;
use crate::session::{
    Claim, ContentBlock, FailedOutcome, ForkOutcome, HistoryView, IdError, Lease, Message, Opened, Owner,
    OwnerCheck, Role, SessionStore, Stop, StopCause, StoreError, TurnEnding, TurnId, TurnOpening,
    TurnOutcome, TurnRecord,
};

/// Why a turn ends before its rounds run.
#[derive(Debug)]
pub(super) enum Refusal {
    /// The prompt cannot be sent.
    InvalidPrompt(InvalidPrompt),
    /// The turn could not be claimed: the store failed.
    ClaimFailed(StoreError),
    /// A redelivery of a turn that ran to its end.
    AlreadyRan,
    /// A redelivery of a turn that failed in a way no retry can help; its details.
    FailedBefore(String),
    /// The conversation belongs to another person.
    NotOwner,
    /// The conversation was deleted.
    Deleted,
    /// The turn runs on another worker, under a live lease.
    RunningElsewhere,
    /// Another turn of the conversation (named) runs now: one turn of a conversation at a time.
    ConversationBusy(String),
    /// The person's next message replaced the turn before it started.
    Superseded,
    /// The session's history could not be read (the claim was released).
    HistoryUnreadable(StoreError),
    /// The turn's account or person is blocked (named).
    Blocked(String),
    /// The person's content, too large for an item, could not be kept in the file area (the
    /// claim was released): the turn is tried again.
    ContentNotKept(StoreError),
}

impl Refusal {
    /// The terminal event of turn `turn_id` refused so.
    pub(super) fn event(&self, turn_id: &TurnId) -> AgentEvent {
        match self {
            Self::InvalidPrompt(invalid) => {
                AgentEvent::failed(invalid.to_string(), false, Some(codes::INVALID_PROMPT))
            }
            Self::ClaimFailed(e) | Self::HistoryUnreadable(e) | Self::ContentNotKept(e) => {
                AgentEvent::failed(e.client_message(), true, Some(codes::STORE_FAILED))
            }
            Self::NotOwner => AgentEvent::failed(
                "this conversation belongs to another person; nothing ran",
                false,
                Some(codes::NOT_OWNER),
            ),
            Self::Deleted => AgentEvent::failed(
                "this conversation was deleted; nothing ran",
                false,
                Some(codes::CONVERSATION_DELETED),
            ),
            Self::FailedBefore(details) => AgentEvent::failed(
                format!("turn {turn_id} failed before and was not run again: {details}"),
                false,
                Some(codes::FAILED_BEFORE),
            ),
            Self::AlreadyRan => AgentEvent::failed(
                format!("turn {turn_id} already ran to its end; it was not run again"),
                false,
                Some(codes::DUPLICATE_TURN),
            ),
            Self::RunningElsewhere => AgentEvent::failed(
                format!("turn {turn_id} is running on another worker"),
                true,
                Some(codes::TURN_IN_PROGRESS),
            ),
            Self::ConversationBusy(running) => AgentEvent::failed(
                format!(
                    "turn {running} of this conversation is running; turn {turn_id} waits for it \
                     (steer it, send a follow-up, or supersede it)"
                ),
                true,
                Some(codes::TURN_IN_PROGRESS),
            ),
            Self::Blocked(target) => AgentEvent::failed(
                format!("{target} is blocked: turn {turn_id} did not start; nothing ran"),
                false,
                Some(codes::BLOCKED),
            ),
            Self::Superseded => AgentEvent::failed(
                format!("turn {turn_id} was superseded by a newer message before it started; nothing ran"),
                false,
                Some(codes::SUPERSEDED),
            ),
        }
    }
}

/// The turn's user message, if the ask and its prompt can run: a session, ids the store can key,
/// and a prompt the model can take and the store can keep (a turn that carries an approval
/// decision may come without words). With `kept_over` (the engine keeps blocks over that many
/// bytes in its file area), such a block counts as the reference the message will hold.
pub(super) fn admit(
    ask: &TurnAsk,
    prompt: &Prompt,
    store: &dyn SessionStore,
    kept_over: Option<usize>,
) -> Result<Message, Refusal> {
    let refused = |invalid: InvalidPrompt| {
        tracing::info!(%invalid, "refused the prompt");
        Refusal::InvalidPrompt(invalid)
    };
    let limit = store.max_id_bytes();
    for (field, fits) in [
        ("scope.session", ask.session.fits(limit)),
        ("scope.turnId", ask.turn_id.fits(limit)),
    ] {
        fits.map_err(|e| Refusal::InvalidPrompt(invalid_id(field, &e)))?;
    }
    let decision_only = ask.approval.is_some() && prompt.text.trim().is_empty() && prompt.images.is_empty();
    if decision_only {
        return Ok(Message::new(Role::User, Vec::new()));
    }
    let message = user_message(prompt).map_err(refused)?;
    if let Some(limit) = store.max_message_bytes() {
        let size = kept_size(&message, kept_over);
        if size > limit {
            return Err(refused(InvalidPrompt {
                field: "prompt.text".into(),
                reason: format!(
                    "makes a message of {size} bytes; the session store keeps at most {limit} bytes a message"
                ),
            }));
        }
    }
    Ok(message)
}

/// The turn's UI context, read from the payload's `context`: a malformed one is refused,
/// naming the field.
pub(super) fn read_context(ask: &TurnAsk) -> Result<crate::engine::ui::UiContext, Refusal> {
    match &ask.context {
        None => Ok(crate::engine::ui::UiContext::default()),
        Some(context) => crate::engine::ui::UiContext::read(context).map_err(|invalid| {
            tracing::info!(%invalid, "refused the turn's UI context");
            Refusal::InvalidPrompt(invalid)
        }),
    }
}

/// The refusal of an id in `field`, saying what is wrong with it.
fn invalid_id(field: &str, problem: &IdError) -> InvalidPrompt {
    tracing::info!(field, %problem, "refused an id");
    InvalidPrompt {
        field: field.to_owned(),
        reason: problem.to_string(),
    }
}

/// The bytes `message` takes as a store keeps it: its JSON, with pictures counted as the short
/// line a store puts in place of one too large to keep.
pub(super) fn kept_size(message: &Message, kept_over: Option<usize>) -> usize {
    const REFERENCE_LINE: usize = 256;
    let inline = |block: &ContentBlock| match block {
        ContentBlock::Image { .. } => false,
        ContentBlock::Text { text } => kept_over.is_none_or(|limit| text.len() <= limit),
        _ => true,
    };
    // The words alone, as JSON; the pictures' bytes (and kept texts) are never copied to be
    // measured: each becomes a line, or a reference.
    let words: Vec<ContentBlock> = message.content.iter().filter(|b| inline(b)).cloned().collect();
    let lines = message.content.len() - words.len();
    serde_json::to_string(&Message::new(message.role, words)).map_or(0, |json| json.len())
        + lines * REFERENCE_LINE
}

/// Checks that the conversation is the asker's, recording them as its owner on its first turn
/// (or the first since owners are recorded). A turn without both ids is not checked: a library
/// caller that names no person owns nothing.
pub(super) async fn check_owner(engine: &EngineInner, ask: &TurnAsk) -> Result<(), Refusal> {
    let Some(owner) = asking_owner(ask) else {
        return Ok(());
    };
    match engine
        .store
        .claim_owner(&ask.session, Some(&ask.turn_id), &owner)
        .await
    {
        Ok(check) => owner_refusal(Some(&owner), check).map_or(Ok(()), Err),
        Err(e) => {
            tracing::error!(error = %ErrorChain(&e), "could not check the conversation's owner");
            Err(Refusal::ClaimFailed(e))
        }
    }
}

/// The person the turn is for, when it names one (both ids).
fn asking_owner(ask: &TurnAsk) -> Option<Owner> {
    ask.user_id
        .as_deref()
        .zip(ask.account_id.as_deref())
        .map(|(user, account)| Owner::new(user, account))
}

/// The refusal an owner check says, if it refuses: someone else's conversation, or a deleted one.
fn owner_refusal(owner: Option<&Owner>, check: OwnerCheck) -> Option<Refusal> {
    match check {
        OwnerCheck::Claimed | OwnerCheck::Same => None,
        OwnerCheck::Other(holder) => {
            if let Some(owner) = owner {
                owner.warn_refused(&holder, "a turn");
            }
            Some(Refusal::NotOwner)
        }
        OwnerCheck::Deleted => {
            tracing::info!("a turn of a deleted conversation; nothing runs");
            Some(Refusal::Deleted)
        }
    }
}

/// A new session that names a parent begins with the parent's history, once (see
/// [`HistoryStore::fork`]): only a parent of the same person (or of no one), and never the session
/// itself. A session that already holds messages ignores it.
pub(super) async fn branch(engine: &EngineInner, ask: &TurnAsk) -> Result<(), Refusal> {
    let Some(parent) = &ask.parent_session else {
        return Ok(());
    };
    let invalid = |reason: String| {
        Refusal::InvalidPrompt(InvalidPrompt {
            field: crate::protocol::PARENT_SESSION_KEY.into(),
            reason,
        })
    };
    if let Err(problem) = parent.fits(engine.store.max_id_bytes()) {
        return Err(invalid(problem.to_string()));
    }
    if *parent == ask.session {
        return Err(invalid("names the session itself".into()));
    }
    let asking = asking_owner(ask);
    let forked = engine
        .store
        .fork(&ask.session, parent, &ask.branch_hints, asking.as_ref())
        .await;
    match forked {
        Ok(ForkOutcome::Forked { upto }) => {
            tracing::info!(upto, "the session begins as a branch of its parent");
            Ok(())
        }
        Ok(ForkOutcome::Exists) => Ok(()),
        Ok(ForkOutcome::NoParent) => Err(invalid(format!(
            "there is no conversation {parent} to branch from"
        ))),
        Ok(ForkOutcome::NotOwner) => {
            tracing::warn!("a branch of another person's conversation was refused");
            Err(Refusal::NotOwner)
        }
        Err(e) => {
            tracing::error!(error = %ErrorChain(&e), "could not branch the session from its parent");
            Err(Refusal::ClaimFailed(e))
        }
    }
}

/// What the opening gave a claimed turn.
pub(super) struct Opening {
    /// A stop asked while the turn waited.
    pub(super) stop: Option<Stop>,
    /// Its history, when it was read with the claim.
    pub(super) history: Option<History>,
    /// Whether it was claimed before (its earlier worker died, or gave it back): it may have a
    /// journal to go on from.
    pub(super) reclaimed: bool,
}

/// Opens the turn in one ask of the store ([`TurnLedger::open_turn`]): the owner check (unless
/// `owner_checked`), the claim for `lease`, a stop asked while it waited (of the store, and
/// beside it of the engine's [`StopSource`](crate::session::StopSource)), and its history when
/// `read_history`. Someone else's conversation, a redelivery of a turn done, or one running
/// elsewhere is refused, and nothing runs twice.
pub(super) async fn open(
    engine: &EngineInner,
    ask: &TurnAsk,
    lease: Lease,
    owner_checked: bool,
    read_history: bool,
) -> Result<Opening, Refusal> {
    let owner = asking_owner(ask).filter(|_| !owner_checked);
    let opening = TurnOpening {
        session: &ask.session,
        turn_id: &ask.turn_id,
        owner: owner.as_ref(),
        lease,
        read_history,
    };
    // The stop question is asked beside the claim, so that it holds the turn up no longer.
    let asked = async {
        match engine.stops.as_deref() {
            Some(source) => {
                let wait = super::stop::FIRST_ASK_WAIT;
                super::stop::ask_source(source, &ask.session, &ask.turn_id, wait).await
            }
            None => None,
        }
    };
    let (mut opened, asked) = tokio::join!(engine.store.open_turn(opening), asked);
    // The conversation runs a turn this one replaces: stop it, wait for its end, and open once
    // more.
    if let Ok(Opened::Busy(running)) = &opened
        && running != &ask.turn_id
        && ask.supersedes.iter().any(|id| id == running)
    {
        let running = running.clone();
        super::stop::supersede(
            engine.store.as_ref(),
            &ask.session,
            &[running],
            engine.config.stop_poll_interval,
            engine.config.supersede_wait,
        )
        .await;
        opened = engine.store.open_turn(opening).await;
    }
    let open = match opened {
        Err(e) => {
            tracing::error!(error = %ErrorChain(&e), "could not claim the turn");
            return Err(Refusal::ClaimFailed(e));
        }
        Ok(Opened::Refused(check)) => {
            return Err(owner_refusal(owner.as_ref(), check).unwrap_or(Refusal::NotOwner));
        }
        Ok(Opened::NotClaimed(Claim::Done(record))) => {
            tracing::info!(status = ?record.status, "duplicate delivery of a finished turn; not run again");
            return Err(match failed_for_good(&record) {
                Some(details) => Refusal::FailedBefore(details),
                None => Refusal::AlreadyRan,
            });
        }
        Ok(Opened::NotClaimed(_)) => return Err(Refusal::RunningElsewhere),
        Ok(Opened::Busy(running)) => {
            tracing::info!(running = %running, "another turn of the conversation runs; this one waits");
            return Err(Refusal::ConversationBusy(running.into_string()));
        }
        Ok(Opened::Claimed(open)) => open,
    };
    if open.reclaimed {
        tracing::warn!("reclaimed a turn whose earlier worker's lease ran out");
    }
    let history = match open.view {
        None => None,
        Some(view) => Some(history_of(engine, ask, view).await?),
    };
    Ok(Opening {
        stop: before_start(engine, ask, open.stop.or(asked)).await?,
        history,
        reclaimed: open.reclaimed,
    })
}

/// A stop asked while the turn waited in the queue: the model is never called. A turn
/// superseded so is recorded as such and refused; any other stop is the turn's ending.
async fn before_start(
    engine: &EngineInner,
    ask: &TurnAsk,
    early: Option<Stop>,
) -> Result<Option<Stop>, Refusal> {
    if let Some(Stop {
        reason: StopCause::Superseded,
        ..
    }) = early
    {
        tracing::info!("superseded before it started; nothing runs");
        let outcome = TurnOutcome::Completed(Some(
            json!({ "stopReason": TurnStopReason::Superseded.as_str(), "ran": false }),
        ));
        if let Err(e) = engine
            .store
            .complete_turn(&ask.session, &ask.turn_id, &[], &outcome)
            .await
        {
            tracing::warn!(error = %ErrorChain(&e), "could not record the superseded turn");
        }
        return Err(Refusal::Superseded);
    }
    Ok(early)
}

/// The session's history as the turn reads it (repaired if it must be); on a store failure the
/// claim is released, so a redelivery can run the turn.
pub(super) async fn load_history(engine: &EngineInner, ask: &TurnAsk) -> Result<History, Refusal> {
    history_of(engine, ask, engine.store.load_view(&ask.session).await).await
}

/// The history a read gave, repaired if it must be; on a failed read the claim is released.
async fn history_of(
    engine: &EngineInner,
    ask: &TurnAsk,
    view: Result<HistoryView, StoreError>,
) -> Result<History, Refusal> {
    match view {
        Ok(view) => {
            let first = view.first();
            let (messages, repairs) = repair(view.messages);
            if repairs.any() {
                tracing::warn!(?repairs, "repaired the stored history");
            }
            Ok(History {
                summary: view.summary,
                first,
                messages,
                exact: !repairs.any(),
                compacted: false,
            })
        }
        Err(e) => {
            tracing::error!(error = %ErrorChain(&e), "could not read the session's history");
            release(engine, &ask.session, &ask.turn_id).await;
            Err(Refusal::HistoryUnreadable(e))
        }
    }
}

/// Commands wait for a turn that tried to complete: nothing of it was stored.
#[derive(Debug)]
pub(super) struct CommandsPending;

/// Stores what the turn produced with its ending, and says the turn's terminal: the ending's
/// own, or the failure to store it. Past its deadline the turn may take only `store_timeout` to
/// store; after that nothing of it is kept, and a late write cannot land (completion is
/// conditional on `running`). A turn that ran to its own end says how many of its commands it
/// has `seen`; when more wait, nothing is stored and [`CommandsPending`] says so. Within its
/// time the turn tells the store its terminal first ([`TurnLedger::ending_next`]), once the
/// caller has taken every event before it (`out`), so that a store keeping the turn's log can
/// write the log's end with the commit.
pub(super) async fn store(
    engine: &EngineInner,
    ask: &TurnAsk,
    messages: Vec<Message>,
    ending: Ending,
    file_tokens: u64,
    seen: Option<usize>,
    out: &Emitter,
) -> Result<AgentEvent, CommandsPending> {
    let (store, config) = (&engine.store, &engine.config);
    let (session, turn_id) = (&ask.session, &ask.turn_id);
    let past_deadline = matches!(
        ending,
        Ending::Stopped(Stop {
            reason: StopCause::Deadline,
            ..
        })
    );
    let (terminal, outcome) = ending.terminal(file_tokens);
    let stored = if past_deadline {
        match tokio::time::timeout(
            config.store_timeout,
            store.complete_turn(session, turn_id, &messages, &outcome),
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
        out.handed_over().await;
        store.ending_next(
            session,
            turn_id,
            TurnEnding {
                emitted: out.sent(),
                terminal: terminal.clone(),
            },
        );
        let stored = match seen {
            Some(seen) => {
                store
                    .complete_turn_seen(session, turn_id, &messages, &outcome, seen)
                    .await
            }
            None => store.complete_turn(session, turn_id, &messages, &outcome).await,
        };
        match stored {
            Err(StoreError::CommandsPending(sent)) => {
                tracing::info!(
                    sent,
                    seen,
                    "commands came for the turn as it ended; running them first"
                );
                return Err(CommandsPending);
            }
            other => other.map_err(|e| logged_store_error(&e)),
        }
    };
    Ok(match stored {
        Ok(()) => {
            if let (Some(area), true) = (&engine.file_area, file_tokens > 0)
                && let Err(e) = area.record_usage(session, file_tokens).await
            {
                tracing::warn!(error = %e, "could not count the turn's file tokens for the conversation");
            }
            terminal
        }
        Err(e) if past_deadline => {
            tracing::error!(error = %e, "the turn reached its deadline and could not be stored");
            let failure = TurnOutcome::Failed(FailedOutcome {
                stored: false,
                ..FailedOutcome::new(
                    "the turn reached its deadline and what it did could not be stored",
                    false,
                    codes::TURN_DEADLINE_EXCEEDED,
                )
            });
            if let Err(e) = store.complete_turn(session, turn_id, &[], &failure).await {
                tracing::warn!(error = %ErrorChain(&e), "could not record the turn as failed");
            }
            AgentEvent::failed(
                format!(
                    "the turn reached its deadline and what it did could not be stored ({e}); nothing of it was kept"
                ),
                false,
                Some(codes::TURN_DEADLINE_EXCEEDED),
            )
        }
        Err(e) => {
            release(engine, session, turn_id).await;
            AgentEvent::failed(
                format!("the turn ran but could not be stored: {e}"),
                true,
                Some(codes::STORE_FAILED),
            )
        }
    })
}

/// The details of a turn that ended failed in a way no retry can help (the model refused it), if
/// that is how `record` ended: its redeliveries are refused as such, so the queue keeps them for
/// an operator.
fn failed_for_good(record: &TurnRecord) -> Option<String> {
    let failed = record.outcome.as_ref()?.failure()?;
    (failed.code.as_deref() == Some(codes::MODEL_REJECTED)).then(|| match failed.details.as_str() {
        "" => "the model refused it".to_owned(),
        details => details.to_owned(),
    })
}

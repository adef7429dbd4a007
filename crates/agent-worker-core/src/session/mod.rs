//! Session state: what a turn needs from outside the process, behind [`SessionStore`].
//!
//! - [`Message`] / [`ContentBlock`]: the stored conversation.
//! - [`history`]: its invariants ([`history::check`]) and their repair ([`history::repair`]).
//! - [`TurnRecord`], [`Claim`]: a turn is claimed once, so a redelivered turn runs once.
//! - [`MemoryStore`]: the in-process implementation; [`DynamoStore`]: one DynamoDB table.

mod approval;
pub mod blocks;
mod commands;
pub mod conversations;
mod error;
pub mod fork;
pub mod history;
pub mod journal;
mod memory;
mod message;
pub mod opening;
mod owner;
mod seen;
mod stop_source;
mod summary;
mod turn;
mod ui_answer;

pub use approval::{ApprovalStatus, ApprovalStore, PendingApproval};
pub use blocks::{Block, BlockTarget, Blocklist};
pub use commands::{CommandOutcome, MAX_QUEUED_COMMAND_BYTES, TurnCommand, TurnSignals, command_fits};
pub use conversations::{ConversationError, ConversationStore, StoredMessage};
pub use error::StoreError;
pub use fork::ForkOutcome;
pub use journal::{CallResult, Checkpoint, JOURNAL_VERSION, Journal, OpenStep, idempotency_key};
pub use memory::MemoryStore;
pub use message::{ContentBlock, InputMode, Message, MessageInput, Role};
pub use opening::{OpenTurn, Opened, TurnOpening};
pub use owner::{ConversationClaim, Owner, OwnerCheck};
pub use seen::{SeenSignals, SignalBoards, SignalsSeen};
pub use stop_source::StopSource;
pub(crate) use summary::summary_messages;
pub use summary::{HistoryView, Summary};
pub use turn::{
    Claim, FailedOutcome, Lease, Stop, StopCause, StopOutcome, TurnEnding, TurnOutcome, TurnRecord,
    TurnStatus,
};
pub use ui_answer::{ActionAnswer, ActionAnswerStore, ActionAnswers};

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

pub use crate::protocol::{IdError, SessionId, TurnId, id_problem};

/// Who a conversation belongs to, and its run (one turn of a conversation at a time, on every
/// host): the role a route checks before it reads or writes anything, and a turn before it runs.
#[async_trait]
pub trait OwnerStore: Send + Sync + fmt::Debug {
    /// Records `owner` as the person `session` belongs to, unless it belongs to someone
    /// already (then says who) or was deleted, and marks turn `turn_id` as its latest activity.
    /// One conditional write; a turn of someone else's conversation runs nothing.
    async fn claim_owner(
        &self,
        session: &SessionId,
        turn_id: Option<&TurnId>,
        owner: &Owner,
    ) -> Result<OwnerCheck, StoreError>;

    /// The person `session` belongs to, if one was recorded; [`Owner::of_deleted`] for a
    /// deleted conversation whose tombstone the store keeps.
    async fn owner(&self, session: &SessionId) -> Result<Option<Owner>, StoreError>;

    /// Takes `session`'s run for turn `turn_id` for `lease`: at most one turn of a conversation
    /// runs at a time, on every host. Says which turn holds it instead, when another does under
    /// a live lease (then nothing was written). The run is given back when the turn completes or
    /// is released ([`end_run`](Self::end_run)); a run whose lease ran out is anyone's. The
    /// default keeps no run (a store shared by no two turns at once).
    async fn claim_run(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        lease: Lease,
    ) -> Result<Option<TurnId>, StoreError> {
        let _ = (session, turn_id, lease);
        Ok(None)
    }

    /// Gives `session`'s run back, if turn `turn_id` holds it (a turn that will not run after
    /// all). [`complete_turn`](TurnLedger::complete_turn) and [`release_turn`](TurnLedger::release_turn)
    /// give it back themselves.
    async fn end_run(&self, session: &SessionId, turn_id: &TurnId) -> Result<(), StoreError> {
        let _ = (session, turn_id);
        Ok(())
    }

    /// The turn holding `session`'s run under a live lease, if any.
    async fn running_turn(&self, session: &SessionId) -> Result<Option<TurnId>, StoreError> {
        let _ = session;
        Ok(None)
    }

    /// Records `owner` as the person `session` belongs to when it has none, marking no turn:
    /// a person's first act on a conversation (an upload, a stop, an event stream, before its
    /// first turn) makes it theirs, so that nothing a stranger does on a conversation before
    /// its owner arrives ever takes effect on it. Says who it belongs to otherwise, or that it
    /// was deleted; and which turn runs in it. The default is [`claim_owner`](Self::claim_owner)
    /// with no turn, then [`running_turn`](Self::running_turn).
    async fn claim_conversation(
        &self,
        session: &SessionId,
        owner: &Owner,
    ) -> Result<ConversationClaim, StoreError> {
        let owner = self.claim_owner(session, None, owner).await?;
        let running_turn = self.running_turn(session).await?;
        Ok(ConversationClaim { owner, running_turn })
    }

    /// The longest id (session or turn) this store can key, in bytes; `None` for no limit. A turn
    /// with a longer one is refused before anything runs.
    fn max_id_bytes(&self) -> Option<usize> {
        None
    }

    /// The turn of `session` that is running now, if the store knows it (a conversation with an
    /// owner records its latest turn to start and to end).
    async fn active_turn(&self, session: &SessionId) -> Result<Option<TurnId>, StoreError> {
        let _ = session;
        Ok(None)
    }
}

/// A conversation's stored history: its messages, its summary, its branches.
#[async_trait]
pub trait HistoryStore: Send + Sync + fmt::Debug {
    /// The session's stored messages, oldest first, as they were written. Callers
    /// [`repair`](history::repair) them before use.
    async fn load_history(&self, session: &SessionId) -> Result<Vec<Message>, StoreError>;

    /// What a turn reads: the session's [`Summary`], if it has one, and the messages after it.
    /// The default reads the whole history, for stores that keep no summary.
    async fn load_view(&self, session: &SessionId) -> Result<HistoryView, StoreError> {
        Ok(HistoryView {
            summary: None,
            messages: self.load_history(session).await?,
        })
    }

    /// Keeps `summary` as the session's, in place of an older one. Returns `false` when it was
    /// not kept: the store keeps no summaries (the default), the session already has one that
    /// covers as much, or the session holds fewer messages than it stands for.
    async fn save_summary(&self, session: &SessionId, summary: &Summary) -> Result<bool, StoreError> {
        let _ = (session, summary);
        Ok(false)
    }

    /// Starts `session` as a branch of `parent`, once: when `session` holds no message yet
    /// (otherwise [`ForkOutcome::Exists`], whatever the parent), it begins with `parent`'s
    /// messages up to the branch point (after the last message of the first of `hints`, turn
    /// ids of the parent, that the parent holds; with none found, all of them). A parent with
    /// an owner other than `asking` is refused. The parent is never changed.
    async fn fork(
        &self,
        session: &SessionId,
        parent: &SessionId,
        hints: &[String],
        asking: Option<&Owner>,
    ) -> Result<ForkOutcome, StoreError> {
        let _ = (session, parent, hints, asking);
        Err(StoreError::Backend(
            "this session store cannot branch a session".into(),
        ))
    }

    /// The session's durable history from place `since`: at most `limit` messages, each with
    /// its place and (where the store knows it) its turn.
    async fn entries(
        &self,
        session: &SessionId,
        since: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        Ok(self
            .load_history(session)
            .await?
            .into_iter()
            .enumerate()
            .skip(usize::try_from(since).unwrap_or(usize::MAX))
            .take(limit)
            .map(|(seq, message)| StoredMessage {
                seq: seq as u64,
                turn_id: None,
                message,
            })
            .collect())
    }
}

/// What is sent to a running turn from outside it: a stop, and commands (steering, follow-ups,
/// an abort), read by the turn's watch.
#[async_trait]
pub trait SignalStore: Send + Sync + fmt::Debug {
    /// Asks a turn to stop. It may not have started yet: it then sees the request when it does.
    /// A turn that already ended is left as it is.
    async fn request_stop(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        stop: Stop,
    ) -> Result<StopOutcome, StoreError>;

    /// The stop asked of a turn, if any: one cheap read.
    async fn stop_requested(&self, session: &SessionId, turn_id: &TurnId)
    -> Result<Option<Stop>, StoreError>;

    /// Adds `command` to running turn `turn_id`'s (see [`TurnCommand`]): kept after those
    /// before it, and only while the turn runs and no stop was asked of it. A store that takes
    /// no commands says so as a failure.
    async fn add_command(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        command: &TurnCommand,
    ) -> Result<CommandOutcome, StoreError> {
        let _ = (session, turn_id, command);
        Err(StoreError::Backend("this session store takes no commands".into()))
    }

    /// What a running turn has been sent, in one read: its stop and its commands. A store that
    /// takes no commands reads the stop alone.
    async fn turn_signals(&self, session: &SessionId, turn_id: &TurnId) -> Result<TurnSignals, StoreError> {
        Ok(TurnSignals {
            stop: self.stop_requested(session, turn_id).await?,
            commands: Vec::new(),
        })
    }

    /// The looks at a running turn's signals this store takes while it writes for the turn
    /// (see [`SignalBoards`]), for its watch, which would read them `interval` after the last
    /// look, to take instead of reading. `None` (the default): its writes take none, and the
    /// watch reads [`turn_signals`](Self::turn_signals).
    fn signals_seen(
        &self,
        _session: &SessionId,
        _turn_id: &TurnId,
        _interval: Duration,
    ) -> Option<SeenSignals> {
        None
    }
}

/// A turn's claim and its commit: a turn runs once however often it is delivered, and what it
/// produced is stored with its end, together. Its opening reads the other roles at once.
#[async_trait]
pub trait TurnLedger: OwnerStore + HistoryStore + SignalStore {
    /// Claims `turn_id` for this worker for `lease`. A turn that ended is [`Claim::Done`]; one
    /// another worker holds under a live lease is [`Claim::Running`]; one whose lease ran out
    /// is claimed again.
    async fn claim_turn(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        lease: Lease,
    ) -> Result<Claim, StoreError>;

    /// The largest message this store keeps, in bytes of its JSON (pictures that do not fit are
    /// kept as a line saying so, and do not count); `None` when any size fits. A turn whose own
    /// message is larger is refused before anything runs: run, it could not be stored.
    fn max_message_bytes(&self) -> Option<usize> {
        None
    }

    /// Appends `messages` to the session and marks the turn ended with `outcome`, together:
    /// either both happen or neither does. Refuses a history that breaks an invariant.
    async fn complete_turn(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        messages: &[Message],
        outcome: &TurnOutcome,
    ) -> Result<(), StoreError>;

    /// Gives up a claimed turn that stored nothing, so that a redelivery can run it at once.
    async fn release_turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<(), StoreError>;

    /// Hands a claimed turn that stored nothing over to its next run (a host that continues it
    /// past its deadline): its lease is given up, so that the next run claims it at once, and
    /// the conversation's run stays the turn's while its lease lasts, so that no other turn of
    /// the conversation runs in between. The default gives both back
    /// ([`release_turn`](Self::release_turn)).
    async fn hand_over_turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<(), StoreError> {
        self.release_turn(session, turn_id).await
    }

    /// The record of a turn that was claimed, if any.
    async fn turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<Option<TurnRecord>, StoreError>;

    /// Tells the store what turn `turn_id` says next, and last, if the commit that follows
    /// ([`complete_turn`](Self::complete_turn) or [`complete_turn_seen`](Self::complete_turn_seen))
    /// lands: see [`TurnEnding`]. It holds for that one commit, landed or not. A store that keeps
    /// the turn's event log may write the log's end with the commit; the default keeps nothing.
    fn ending_next(&self, session: &SessionId, turn_id: &TurnId, ending: TurnEnding) {
        let _ = (session, turn_id, ending);
    }

    /// [`complete_turn`](Self::complete_turn) for a turn that ran to its own end having seen
    /// `seen` commands: refused with [`StoreError::CommandsPending`], nothing written, while the
    /// turn has more, so that it runs them first.
    async fn complete_turn_seen(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        messages: &[Message],
        outcome: &TurnOutcome,
        seen: usize,
    ) -> Result<(), StoreError> {
        let _ = seen;
        self.complete_turn(session, turn_id, messages, outcome).await
    }

    /// Whether this store keeps turns' journals ([`journal`]): a turn writes one only then. The
    /// default keeps none, and a turn whose worker died runs again from its start.
    fn keeps_journal(&self) -> bool {
        false
    }

    /// Writes `checkpoint` as turn `turn_id`'s journal, in place of the one before (and of the
    /// results recorded after that), while the turn is running. The calls it is written for run
    /// only once it is: a failure here means they do not run.
    async fn write_checkpoint(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        let _ = (session, turn_id, checkpoint);
        Err(StoreError::Backend("this session store keeps no journal".into()))
    }

    /// Adds the result of a call its last checkpoint started to turn `turn_id`'s journal.
    async fn record_result(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        result: &CallResult,
    ) -> Result<(), StoreError> {
        let _ = (session, turn_id, result);
        Err(StoreError::Backend("this session store keeps no journal".into()))
    }

    /// Hands the result of a call its last checkpoint started to the next write this process
    /// makes of turn `turn_id` anyway (its event log's next window), to be recorded with it:
    /// `false` when none is coming (no log of the turn open here), and the caller records it at
    /// once. A result handed over is lost if the worker dies before that write: the call is then
    /// run again, with the same idempotency key, so only a call whose tool takes keys hands
    /// its result over. The default hands nothing over.
    fn record_result_later(&self, session: &SessionId, turn_id: &TurnId, result: &CallResult) -> bool {
        let _ = (session, turn_id, result);
        false
    }

    /// Turn `turn_id`'s journal: its last checkpoint and the results recorded after it. `None`
    /// when it wrote none, or none this worker can read as its own ([`Journal::is_for`]).
    async fn read_journal(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<Option<Journal>, StoreError> {
        let _ = (session, turn_id);
        Ok(None)
    }

    /// Everything a turn asks before its first model call, at once: the owner check (when
    /// `opening` names one), the claim, a stop asked while the turn waited, and (when asked) the
    /// history. The default takes them one after another ([`opening::open_in_steps`]); a store
    /// whose reads are round trips answers them in as few as it can.
    async fn open_turn(&self, opening: TurnOpening<'_>) -> Result<Opened, StoreError> {
        opening::open_in_steps(self, opening).await
    }
}

/// Where a session's state lives, so that any worker can serve any turn (portable conformance).
///
/// The engine opens a turn with [`open_turn`](TurnLedger::open_turn) (the owner check, the claim, a
/// stop asked while it waited and the history, at once), then, once the turn has ended, calls
/// [`complete_turn`](TurnLedger::complete_turn) with every message the turn produced, or
/// [`release_turn`](TurnLedger::release_turn) when it could store nothing.
///
/// ```
/// use agent_worker_core::session::{Claim, HistoryStore, Lease, MemoryStore, Message, SessionId, TurnId, TurnLedger, TurnOutcome};
/// use std::time::Duration;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let (s1, t1) = (SessionId::new("s1").unwrap(), TurnId::new("t1").unwrap());
/// let lease = Lease(Duration::from_secs(60));
/// assert_eq!(store.claim_turn(&s1, &t1, lease).await?, Claim::Claimed { reclaimed: false });
/// let messages = [Message::user_text("hi"), Message::assistant_text("hello")];
/// let outcome = TurnOutcome::Completed(None);
/// store.complete_turn(&s1, &t1, &messages, &outcome).await?;
/// // A redelivery of t1 does not run again.
/// assert!(matches!(store.claim_turn(&s1, &t1, lease).await?, Claim::Done(_)));
/// assert_eq!(store.load_history(&s1).await?.len(), 2);
/// # Ok::<_, agent_worker_core::session::StoreError>(())
/// # }).unwrap();
/// ```
///
/// Every store of sessions is the four roles ([`OwnerStore`], [`HistoryStore`], [`SignalStore`],
/// [`TurnLedger`]), each small enough to implement by hand; a type that implements them is one.
pub trait SessionStore: TurnLedger {}

impl<T: TurnLedger + ?Sized> SessionStore for T {}

/// Ids the unit tests name by literal.
#[cfg(test)]
pub(crate) mod test_ids {
    use super::{SessionId, TurnId};

    /// Session `id`, which a test knows is one.
    pub(crate) fn sid(id: &str) -> SessionId {
        SessionId::new(id).expect("a test's session id")
    }

    /// Turn `id`, which a test knows is one.
    pub(crate) fn tid(id: &str) -> TurnId {
        TurnId::new(id).expect("a test's turn id")
    }
}

//! [`MemoryStore`]: a [`SessionStore`] in this process's memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;

use super::conversations::StoredMessage;
use super::fork::branch_point;
use super::history::check;
use super::{
    ActionAnswer, ActionAnswerStore, ActionAnswers, ApprovalStatus, ApprovalStore, CallResult, Checkpoint,
    Claim, CommandOutcome, ForkOutcome, HistoryStore, HistoryView, Journal, Lease, Message, Owner,
    OwnerCheck, OwnerStore, PendingApproval, SessionId, SignalStore, Stop, StopOutcome, StoreError, Summary,
    TurnCommand, TurnId, TurnLedger, TurnOutcome, TurnRecord, TurnSignals, TurnStatus, command_fits,
};
use crate::clock::now_ms;

mod conversations;
mod journal;

/// A session store held in memory: for tests, the command line and embedding.
///
/// It keeps the same rules as the DynamoDB store (claims are exclusive, histories are checked
/// on write), but its state lives and dies with the process, so an agent using it is not
/// portable. Clones share the same state.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    sessions: Arc<Mutex<HashMap<SessionId, SessionData>>>,
    approvals: Arc<Mutex<Approvals>>,
}

/// Approvals by (session, id), with their status.
type Approvals = HashMap<(SessionId, String), (PendingApproval, ApprovalStatus)>;

const POISONED: &str = "the in-memory store's lock was poisoned by a panic";

#[derive(Debug, Default)]
struct SessionData {
    messages: Vec<Message>,
    /// The turn that stored each message, by position (shorter for raw histories).
    message_turns: Vec<Option<TurnId>>,
    /// When it last had a turn, in milliseconds since the Unix epoch.
    last_active: u64,
    /// Deleted by its owner: a tombstone, so that no turn of it runs again.
    deleted: bool,
    summary: Option<Summary>,
    turns: HashMap<TurnId, TurnRecord>,
    stops: HashMap<TurnId, Stop>,
    /// The commands sent to each turn, in the order accepted.
    commands: HashMap<TurnId, Vec<TurnCommand>>,
    owner: Option<Owner>,
    /// The turn that holds the conversation's run, and until when.
    run: Option<(TurnId, SystemTime)>,
    /// What the tab answered to UI actions, by (turn, call).
    ui_answers: HashMap<(TurnId, String), ActionAnswer>,
    /// Each turn's journal: its last checkpoint and the results recorded after it.
    journals: HashMap<TurnId, (Checkpoint, Vec<CallResult>)>,
}

impl SessionData {
    /// Gives the run back, if `turn_id` holds it.
    fn end_run(&mut self, turn_id: &TurnId) {
        if self.run.as_ref().is_some_and(|(holder, _)| holder == turn_id) {
            self.run = None;
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores a turn's end; with `seen`, only when the turn has no more commands than that.
    fn complete(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        messages: &[Message],
        outcome: &TurnOutcome,
        seen: Option<usize>,
    ) -> Result<(), StoreError> {
        check(messages)?;
        let mut sessions = self.lock()?;
        let data = sessions.entry(session.clone()).or_default();
        if data.deleted {
            return Err(StoreError::Deleted(format!("turn {turn_id} was not stored")));
        }
        let sent = data.commands.get(turn_id).map_or(0, Vec::len);
        if seen.is_some_and(|seen| sent > seen) {
            return Err(StoreError::CommandsPending(sent));
        }
        let Some(record) = data.turns.get_mut(turn_id) else {
            return Err(StoreError::LostLease(format!("turn {turn_id} was never claimed")));
        };
        if record.status.is_done() {
            return Err(StoreError::LostLease(format!("turn {turn_id} already ended")));
        }
        record.status = outcome.status();
        record.outcome = Some(outcome.clone());
        data.message_turns.resize(data.messages.len(), None);
        data.messages.extend_from_slice(messages);
        data.message_turns
            .extend(std::iter::repeat_n(Some(turn_id.clone()), messages.len()));
        data.last_active = now_ms();
        data.end_run(turn_id);
        Ok(())
    }

    fn lock(&self) -> Result<MutexGuard<'_, HashMap<SessionId, SessionData>>, StoreError> {
        self.sessions
            .lock()
            .map_err(|_| StoreError::Backend(POISONED.into()))
    }

    fn approvals(&self) -> Result<MutexGuard<'_, Approvals>, StoreError> {
        self.approvals
            .lock()
            .map_err(|_| StoreError::Backend(POISONED.into()))
    }

    /// Writes `messages` as a session's history, unchecked: for tests that need older or
    /// broken data in the store.
    pub fn put_raw_history(&self, session: &SessionId, messages: Vec<Message>) {
        if let Ok(mut sessions) = self.lock() {
            sessions.entry(session.clone()).or_default().messages = messages;
        }
    }
}

#[async_trait]
impl OwnerStore for MemoryStore {
    async fn claim_owner(
        &self,
        session: &SessionId,
        _turn_id: Option<&TurnId>,
        owner: &Owner,
    ) -> Result<OwnerCheck, StoreError> {
        let mut sessions = self.lock()?;
        let data = sessions.entry(session.clone()).or_default();
        if data.deleted {
            return Ok(OwnerCheck::Deleted);
        }
        let check = match &data.owner {
            None => {
                data.owner = Some(owner.clone());
                OwnerCheck::Claimed
            }
            Some(known) if known == owner => OwnerCheck::Same,
            Some(other) => return Ok(OwnerCheck::Other(other.clone())),
        };
        data.last_active = now_ms();
        Ok(check)
    }

    async fn owner(&self, session: &SessionId) -> Result<Option<Owner>, StoreError> {
        Ok(self
            .lock()?
            .get(session.as_str())
            .and_then(|data| data.owner.clone()))
    }

    async fn active_turn(&self, session: &SessionId) -> Result<Option<TurnId>, StoreError> {
        let sessions = self.lock()?;
        Ok(sessions.get(session.as_str()).and_then(|d| {
            d.turns
                .iter()
                .filter(|(_, t)| !t.status.is_done() && t.lease_until > SystemTime::now())
                .map(|(id, _)| id.clone())
                .next()
        }))
    }

    async fn claim_run(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        lease: Lease,
    ) -> Result<Option<TurnId>, StoreError> {
        let now = SystemTime::now();
        let mut sessions = self.lock()?;
        let data = sessions.entry(session.clone()).or_default();
        match &data.run {
            Some((holder, until)) if holder != turn_id && *until > now => Ok(Some(holder.clone())),
            _ => {
                data.run = Some((turn_id.clone(), now + lease.0));
                Ok(None)
            }
        }
    }

    async fn end_run(&self, session: &SessionId, turn_id: &TurnId) -> Result<(), StoreError> {
        if let Some(data) = self.lock()?.get_mut(session.as_str()) {
            data.end_run(turn_id);
        }
        Ok(())
    }

    async fn running_turn(&self, session: &SessionId) -> Result<Option<TurnId>, StoreError> {
        let now = SystemTime::now();
        Ok(self
            .lock()?
            .get(session.as_str())
            .and_then(|data| data.run.as_ref())
            .filter(|(_, until)| *until > now)
            .map(|(holder, _)| holder.clone()))
    }
}

#[async_trait]
impl HistoryStore for MemoryStore {
    async fn load_history(&self, session: &SessionId) -> Result<Vec<Message>, StoreError> {
        Ok(self
            .lock()?
            .get(session.as_str())
            .map(|d| d.messages.clone())
            .unwrap_or_default())
    }

    async fn load_view(&self, session: &SessionId) -> Result<HistoryView, StoreError> {
        let sessions = self.lock()?;
        let Some(data) = sessions.get(session.as_str()) else {
            return Ok(HistoryView::default());
        };
        let first = data.summary.as_ref().map_or(0, |s| s.upto);
        let from = usize::try_from(first)
            .unwrap_or(usize::MAX)
            .min(data.messages.len());
        Ok(HistoryView {
            summary: data.summary.clone(),
            messages: data.messages[from..].to_vec(),
        })
    }

    async fn save_summary(&self, session: &SessionId, summary: &Summary) -> Result<bool, StoreError> {
        let mut sessions = self.lock()?;
        let Some(data) = sessions.get_mut(session.as_str()) else {
            return Ok(false);
        };
        let newer = data.summary.as_ref().is_none_or(|s| s.upto < summary.upto);
        if !newer || (data.messages.len() as u64) < summary.upto {
            return Ok(false);
        }
        data.summary = Some(summary.clone());
        Ok(true)
    }

    async fn fork(
        &self,
        session: &SessionId,
        parent: &SessionId,
        hints: &[String],
        asking: Option<&Owner>,
    ) -> Result<ForkOutcome, StoreError> {
        let mut sessions = self.lock()?;
        if sessions
            .get(session.as_str())
            .is_some_and(|d| d.deleted || !d.messages.is_empty())
        {
            return Ok(ForkOutcome::Exists);
        }
        let Some(from) = sessions
            .get(parent.as_str())
            .filter(|d| !d.deleted && !d.messages.is_empty())
        else {
            return Ok(ForkOutcome::NoParent);
        };
        if from.owner.as_ref().is_some_and(|owner| Some(owner) != asking) {
            return Ok(ForkOutcome::NotOwner);
        }
        let turns: Vec<Option<&str>> = (0..from.messages.len())
            .map(|i| from.message_turns.get(i).and_then(|t| t.as_deref()))
            .collect();
        let upto = branch_point(&turns, hints);
        // One process's memory: the branch holds a copy (DynamoDB's refers to the parent).
        let messages = from.messages[..upto].to_vec();
        let mut message_turns = from.message_turns.clone();
        message_turns.resize(upto, None);
        let child = sessions.entry(session.clone()).or_default();
        child.messages = messages;
        child.message_turns = message_turns;
        Ok(ForkOutcome::Forked { upto: upto as u64 })
    }

    async fn entries(
        &self,
        session: &SessionId,
        since: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let sessions = self.lock()?;
        let Some(data) = sessions.get(session.as_str()) else {
            return Ok(Vec::new());
        };
        Ok(data
            .messages
            .iter()
            .enumerate()
            .skip(usize::try_from(since).unwrap_or(usize::MAX))
            .take(limit)
            .map(|(seq, message)| StoredMessage {
                seq: seq as u64,
                turn_id: data.message_turns.get(seq).cloned().flatten(),
                message: message.clone(),
            })
            .collect())
    }
}

#[async_trait]
impl SignalStore for MemoryStore {
    async fn add_command(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        command: &TurnCommand,
    ) -> Result<CommandOutcome, StoreError> {
        let mut sessions = self.lock()?;
        let Some(data) = sessions.get_mut(session.as_str()) else {
            return Ok(CommandOutcome::NotRunning);
        };
        // Under a live lease: a turn that gave up its claim, or whose worker is gone, takes nothing.
        let running = data
            .turns
            .get(turn_id.as_str())
            .is_some_and(|t| !t.status.is_done() && t.lease_until > SystemTime::now());
        if !running || data.stops.contains_key(turn_id.as_str()) {
            return Ok(CommandOutcome::NotRunning);
        }
        let commands = data.commands.entry(turn_id.clone()).or_default();
        let held = commands.iter().map(|c| c.text().len()).sum();
        if !command_fits(held, command.text().len()) {
            return Ok(CommandOutcome::Full);
        }
        commands.push(command.clone());
        Ok(CommandOutcome::Accepted {
            position: commands.len() - 1,
        })
    }

    async fn turn_signals(&self, session: &SessionId, turn_id: &TurnId) -> Result<TurnSignals, StoreError> {
        let sessions = self.lock()?;
        let data = sessions.get(session.as_str());
        Ok(TurnSignals {
            stop: data.and_then(|d| d.stops.get(turn_id.as_str()).copied()),
            commands: data
                .and_then(|d| d.commands.get(turn_id.as_str()).cloned())
                .unwrap_or_default(),
        })
    }

    async fn request_stop(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        stop: Stop,
    ) -> Result<StopOutcome, StoreError> {
        let mut sessions = self.lock()?;
        let data = sessions.entry(session.clone()).or_default();
        if data
            .turns
            .get(turn_id.as_str())
            .is_some_and(|t| t.status.is_done())
        {
            return Ok(StopOutcome::AlreadyEnded);
        }
        data.stops.entry(turn_id.clone()).or_insert(stop);
        Ok(StopOutcome::Recorded)
    }

    async fn stop_requested(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<Option<Stop>, StoreError> {
        Ok(self
            .lock()?
            .get(session.as_str())
            .and_then(|d| d.stops.get(turn_id.as_str()).copied()))
    }
}

#[async_trait]
impl TurnLedger for MemoryStore {
    async fn claim_turn(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        lease: Lease,
    ) -> Result<Claim, StoreError> {
        let now = SystemTime::now();
        let mut sessions = self.lock()?;
        let data = sessions.entry(session.clone()).or_default();
        let lease_until = now + lease.0;
        match data.turns.get_mut(turn_id.as_str()) {
            Some(record) if record.status.is_done() => Ok(Claim::Done(record.clone())),
            Some(record) if record.lease_until > now => Ok(Claim::Running(record.clone())),
            Some(record) => {
                record.lease_until = lease_until;
                record.attempts += 1;
                Ok(Claim::Claimed { reclaimed: true })
            }
            None => {
                data.turns.insert(
                    turn_id.clone(),
                    TurnRecord {
                        turn_id: turn_id.clone(),
                        status: TurnStatus::Running,
                        lease_until,
                        attempts: 1,
                        outcome: None,
                        stop: None,
                    },
                );
                Ok(Claim::Claimed { reclaimed: false })
            }
        }
    }

    async fn complete_turn(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        messages: &[Message],
        outcome: &TurnOutcome,
    ) -> Result<(), StoreError> {
        self.complete(session, turn_id, messages, outcome, None)
    }

    async fn complete_turn_seen(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        messages: &[Message],
        outcome: &TurnOutcome,
        seen: usize,
    ) -> Result<(), StoreError> {
        self.complete(session, turn_id, messages, outcome, Some(seen))
    }

    async fn release_turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<(), StoreError> {
        let mut sessions = self.lock()?;
        let Some(data) = sessions.get_mut(session.as_str()) else {
            return Ok(());
        };
        if let Some(record) = data.turns.get_mut(turn_id.as_str())
            && !record.status.is_done()
        {
            record.lease_until = SystemTime::UNIX_EPOCH;
        }
        data.end_run(turn_id);
        Ok(())
    }

    fn keeps_journal(&self) -> bool {
        true
    }

    async fn write_checkpoint(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        self.checkpoint(session, turn_id, checkpoint)
    }

    async fn record_result(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        result: &CallResult,
    ) -> Result<(), StoreError> {
        self.result(session, turn_id, result)
    }

    async fn read_journal(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<Option<Journal>, StoreError> {
        self.journal(session, turn_id)
    }

    async fn hand_over_turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<(), StoreError> {
        self.hand_over(session, turn_id)
    }

    async fn turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<Option<TurnRecord>, StoreError> {
        let sessions = self.lock()?;
        let Some(data) = sessions.get(session.as_str()) else {
            return Ok(None);
        };
        Ok(data.turns.get(turn_id.as_str()).cloned().map(|mut record| {
            record.stop = data.stops.get(turn_id.as_str()).copied();
            record
        }))
    }
}

#[async_trait]
impl ActionAnswers for MemoryStore {
    async fn look(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        call_id: &str,
    ) -> Result<Option<ActionAnswer>, StoreError> {
        let sessions = self.lock()?;
        Ok(sessions
            .get(session.as_str())
            .and_then(|data| data.ui_answers.get(&(turn_id.clone(), call_id.to_owned())))
            .cloned())
    }
}

#[async_trait]
impl ActionAnswerStore for MemoryStore {
    async fn record(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        call_id: &str,
        answer: &ActionAnswer,
    ) -> Result<bool, StoreError> {
        let mut sessions = self.lock()?;
        let answers = &mut sessions.entry(session.clone()).or_default().ui_answers;
        let key = (turn_id.clone(), call_id.to_owned());
        let replaces = match answers.get(&key) {
            None => true,
            Some(kept) => answer.is_final() && !kept.is_final(),
        };
        if replaces {
            answers.insert(key, answer.clone());
        }
        Ok(replaces)
    }
}

#[async_trait]
impl ApprovalStore for MemoryStore {
    async fn put_approval(&self, approval: &PendingApproval) -> Result<(), StoreError> {
        let mut approvals = self.approvals()?;
        let key = (approval.session.clone(), approval.id.clone());
        if approvals.contains_key(&key) {
            return Err(StoreError::Backend(
                format!("approval {} exists already", approval.id).into(),
            ));
        }
        approvals.insert(key, (approval.clone(), ApprovalStatus::Pending));
        Ok(())
    }

    async fn get_approval(
        &self,
        session: &SessionId,
        id: &str,
    ) -> Result<Option<(PendingApproval, ApprovalStatus)>, StoreError> {
        let approvals = self.approvals()?;
        Ok(approvals.get(&(session.clone(), id.to_owned())).cloned())
    }

    async fn settle_approval(
        &self,
        session: &SessionId,
        id: &str,
        to: ApprovalStatus,
    ) -> Result<bool, StoreError> {
        let mut approvals = self.approvals()?;
        match approvals.get_mut(&(session.clone(), id.to_owned())) {
            Some((_, status)) if *status == ApprovalStatus::Pending => {
                *status = to;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn withdraw_turn_approvals(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<usize, StoreError> {
        let mut approvals = self.approvals()?;
        let mut withdrawn = 0;
        for ((of, _), (approval, status)) in approvals.iter_mut() {
            if of == session && approval.turn_id == *turn_id && *status == ApprovalStatus::Pending {
                *status = ApprovalStatus::Expired;
                withdrawn += 1;
            }
        }
        Ok(withdrawn)
    }
}

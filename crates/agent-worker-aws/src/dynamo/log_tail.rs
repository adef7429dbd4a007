//! The unwritten end of each turn's event log in this process, shared by the log's writer
//! ([`DynamoEventLog`](super::DynamoEventLog)) and the store's commit: a turn that says what it
//! will say last ([`TurnLedger::ending_next`]) has the log's queue and that terminal written in
//! its commit's own transaction, so the log's last window costs no request of its own.
//!
//! The commit takes the log's queue only when the log has been given every event the turn
//! emitted before its terminal and is not writing: a host that handed the log fewer events, or
//! other ones, leaves the log to write its end itself, as it always could.
//!
//! [`TurnLedger::ending_next`]: agent_worker_core::session::TurnLedger::ending_next

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use agent_worker_core::protocol::AgentEvent;
use agent_worker_core::session::{CallResult, TurnEnding};
use agent_worker_core::sinks::PendingEvents;

/// The tails of the turns whose logs are open in this process. A store keeps one and shares it
/// between its clones; a tail lives while its turn's log holds it.
#[derive(Debug, Clone, Default)]
pub(crate) struct LogTails(Arc<Mutex<Held>>);

/// Each open log's tail, by session and turn, held by the log alone.
type Held = HashMap<(String, String), Weak<Mutex<Tail>>>;

/// One turn's log, as far as it is not written.
#[derive(Debug)]
pub(crate) struct Tail {
    /// How many events the log was given.
    pub(crate) received: usize,
    /// Events not written yet, oldest first, consecutive deltas merged.
    pub(crate) pending: PendingEvents,
    /// The next position; `None` until a write finds it.
    pub(crate) next: Option<u64>,
    /// A write of the log is under way: the commit leaves the queue to it.
    pub(crate) writing: bool,
    /// A commit that writes the queue is under way: the log leaves the queue to it (a host may
    /// flush the log on a timer while the turn commits).
    pub(crate) committing: bool,
    /// The terminal a commit wrote at the log's end: when it comes, there is nothing to write.
    pub(crate) written_terminal: Option<AgentEvent>,
    /// What the turn said it says last, for its next commit.
    ending: Option<TurnEnding>,
    /// Results of the turn's calls handed to the log's next write, to record in the turn's
    /// journal with it ([`TurnLedger::record_result_later`]), oldest first.
    ///
    /// [`TurnLedger::record_result_later`]: agent_worker_core::session::TurnLedger::record_result_later
    pub(crate) results: Vec<CallResult>,
}

/// What a commit writes of a turn's log: the events from position `seq` on, the terminal last.
/// While it is held, the log leaves its queue to the commit.
#[derive(Debug)]
pub(crate) struct Rider {
    /// The log's queue, then the terminal.
    pub(crate) events: Vec<AgentEvent>,
    /// The position of the first.
    pub(crate) seq: u64,
    /// Whether the log never wrote: position `seq` (0) must then be free, or an earlier run of
    /// the turn logged there and the log finds its place itself.
    pub(crate) first: bool,
    tail: Arc<Mutex<Tail>>,
}

/// A tail's lock. A writer that panicked left it whole (each change is one assignment).
pub(crate) fn lock(tail: &Mutex<Tail>) -> MutexGuard<'_, Tail> {
    tail.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LogTails {
    fn tails(&self) -> MutexGuard<'_, Held> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn find(&self, session: &str, turn_id: &str) -> Option<Arc<Mutex<Tail>>> {
        self.tails()
            .get(&(session.to_owned(), turn_id.to_owned()))
            .and_then(Weak::upgrade)
    }

    /// A new tail for `turn_id`'s log, queueing up to `max_text_bytes` of text in one event.
    /// Tails no log holds any more are dropped here.
    pub(crate) fn open(&self, session: &str, turn_id: &str, max_text_bytes: usize) -> Arc<Mutex<Tail>> {
        let tail = Arc::new(Mutex::new(Tail {
            received: 0,
            pending: PendingEvents::new(max_text_bytes),
            next: None,
            writing: false,
            committing: false,
            written_terminal: None,
            ending: None,
            results: Vec::new(),
        }));
        let mut tails = self.tails();
        tails.retain(|_, held| held.strong_count() > 0);
        tails.insert((session.to_owned(), turn_id.to_owned()), Arc::downgrade(&tail));
        tail
    }

    /// Keeps what `turn_id` says it says last, for its next commit.
    pub(crate) fn announce(&self, session: &str, turn_id: &str, ending: TurnEnding) {
        if let Some(tail) = self.find(session, turn_id) {
            lock(&tail).ending = Some(ending);
        }
    }

    /// Hands `result` to the next write of `turn_id`'s log: `false` when no log of the turn is
    /// open here, or it has written its end.
    pub(crate) fn hand_result(&self, session: &str, turn_id: &str, result: CallResult) -> bool {
        let Some(tail) = self.find(session, turn_id) else {
            return false;
        };
        let mut held = lock(&tail);
        if held.written_terminal.is_some() {
            return false;
        }
        held.results.push(result);
        true
    }

    /// What `turn_id` said it says last, taken for the commit under way.
    pub(crate) fn take_ending(&self, session: &str, turn_id: &str) -> Option<TurnEnding> {
        self.find(session, turn_id)
            .and_then(|tail| lock(&tail).ending.take())
    }

    /// What the commit of `turn_id`, ending with `ending`, writes of its log: `None` while the
    /// log was not given every event before the terminal, or writes.
    pub(crate) fn rider(&self, session: &str, turn_id: &str, ending: &TurnEnding) -> Option<Rider> {
        let tail = self.find(session, turn_id)?;
        let mut held = lock(&tail);
        if held.received != ending.emitted
            || held.writing
            || held.committing
            || held.written_terminal.is_some()
        {
            return None;
        }
        held.committing = true;
        let mut events: Vec<AgentEvent> = held.pending.front(held.pending.len()).cloned().collect();
        events.push(ending.terminal.clone());
        let (seq, first) = match held.next {
            Some(next) => (next, false),
            None => (0, true),
        };
        drop(held);
        Some(Rider {
            events,
            seq,
            first,
            tail,
        })
    }
}

impl Rider {
    /// The commit landed with the rider: the log's queue is written, and so is the terminal.
    pub(crate) fn landed(self) {
        let mut tail = lock(&self.tail);
        let queued = self.events.len() - 1;
        tail.pending.discard(queued);
        tail.next = Some(self.seq + self.events.len() as u64);
        tail.written_terminal = self.events.last().cloned();
    }
}

impl Drop for Rider {
    /// The commit is over, landed or not: the queue is the log's again.
    fn drop(&mut self) {
        lock(&self.tail).committing = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ending(emitted: usize) -> TurnEnding {
        TurnEnding {
            emitted,
            terminal: AgentEvent::completed(),
        }
    }

    fn given(tail: &Mutex<Tail>, events: &[AgentEvent]) {
        let mut held = lock(tail);
        for event in events {
            held.received += 1;
            held.pending.push(event.clone());
        }
    }

    #[test]
    fn a_commit_takes_the_queue_only_when_the_log_was_given_every_event() {
        let tails = LogTails::default();
        let tail = tails.open("s", "t", 2048);
        given(&tail, &[AgentEvent::text("a"), AgentEvent::usage(1, 1)]);
        assert!(tails.rider("s", "t", &ending(3)).is_none(), "one event missing");
        assert!(tails.rider("s", "other", &ending(2)).is_none(), "no log open");
        let rider = tails.rider("s", "t", &ending(2)).expect("every event given");
        assert_eq!(
            rider.events,
            [
                AgentEvent::text("a"),
                AgentEvent::usage(1, 1),
                AgentEvent::completed()
            ]
        );
        assert_eq!((rider.seq, rider.first), (0, true));
        // While one commit holds the queue, nothing else takes it.
        assert!(lock(&tail).committing);
        assert!(tails.rider("s", "t", &ending(2)).is_none());
        drop(rider);
        assert!(
            !lock(&tail).committing,
            "a commit that did not land gives it back"
        );
        assert_eq!(lock(&tail).pending.len(), 2, "untouched");
    }

    #[test]
    fn a_landed_commit_leaves_the_log_its_next_position_and_the_terminal_to_skip() {
        let tails = LogTails::default();
        let tail = tails.open("s", "t", 2048);
        lock(&tail).next = Some(7);
        given(&tail, &[AgentEvent::text("a")]);
        tails.announce("s", "t", ending(1));
        let announced = tails.take_ending("s", "t").expect("announced");
        assert!(tails.take_ending("s", "t").is_none(), "for one commit");
        let rider = tails.rider("s", "t", &announced).expect("taken");
        assert_eq!((rider.seq, rider.first), (7, false));
        rider.landed();
        let held = lock(&tail);
        assert!(held.pending.is_empty());
        assert_eq!(held.next, Some(9));
        assert_eq!(held.written_terminal, Some(AgentEvent::completed()));
        assert!(!held.committing);
    }

    #[test]
    fn a_log_no_one_holds_is_forgotten() {
        let tails = LogTails::default();
        drop(tails.open("s", "t", 2048));
        tails.announce("s", "t", ending(0));
        assert!(tails.take_ending("s", "t").is_none());
        assert!(tails.rider("s", "t", &ending(0)).is_none());
    }
}

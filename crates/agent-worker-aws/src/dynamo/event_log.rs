//! [`DynamoEventLog`]: a turn's events in the session table, read back from a cursor.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};

use agent_worker_core::protocol::AgentEvent;
use agent_worker_core::session::CallResult;
use agent_worker_core::sinks::{Sink, SinkError, TurnRef, TurnSink};

use super::DynamoStore;
use super::codec::write_token;
use super::commands::{Look, SignalsLook};
use super::event_items::{EVENTS_PER_WRITE, event_item, events_that_fit, riding};
use super::keys::{LOGGED_AT, SK, WRITE_TOKEN, event_prefix, event_sk, is_event_of, session_pk};
use super::log_tail::{Tail, lock};
use super::sdk_error::{cancellation_reasons, is_condition_reason};
use super::transact::MAX_TRANSACTION_BYTES;

/// Consecutive text (or thinking) deltas are merged into one event of at most this many bytes.
pub const TEXT_COALESCE_BYTES: usize = 2048;
/// How long gathered events may wait for more before they are written together: a reader
/// following the log sees the turn move at least this often.
pub const TEXT_COALESCE_WINDOW: std::time::Duration = std::time::Duration::from_millis(250);

/// How long before the turn's watch would next read its signals a write of the log looks at them
/// instead, by default: while events stream, the next write comes a window after the oldest event
/// held, and that event may come up to a window after this write.
pub const LOOK_AHEAD: std::time::Duration = TEXT_COALESCE_WINDOW.saturating_mul(2);

/// Events a turn's log keeps queued while the table refuses writes; past it the oldest go.
const MAX_PENDING_EVENTS: usize = 1000;

/// Writes each turn's events to the session's table as `event#<turnId>#<seq>` items, so a client
/// can read them from a cursor ([`read`](Self::read)). Consecutive deltas are merged, so
/// a long answer is a handful of items, not one per token, and the events of a window
/// ([`TEXT_COALESCE_WINDOW`]) are written together. What is left at the turn's end is written
/// by the turn's commit, in its transaction, when the log shares its store with the engine and
/// was given every event the turn emitted: a short turn's log costs no write of its own. An event
/// whose write fails (after the SDK's retries) stays queued and is written, in order, with the
/// next: a table that recovers within the turn loses nothing of its log.
#[derive(Debug, Clone)]
pub struct DynamoEventLog {
    store: DynamoStore,
    look_ahead: std::time::Duration,
    /// How long gathered events wait for more ([`TEXT_COALESCE_WINDOW`] by default).
    window: std::time::Duration,
}

/// One logged event and its position, the cursor to read after it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedEvent {
    /// Its position in the turn's log.
    pub seq: u64,
    /// The event.
    pub event: AgentEvent,
    /// When it was written to the log, in epoch milliseconds (within the log's gathering window,
    /// [`TEXT_COALESCE_WINDOW`] by default, of when the turn emitted it); `None` for an event
    /// logged before the log kept the time.
    pub logged_at_ms: Option<u64>,
}

impl DynamoEventLog {
    /// A log in `store`'s table.
    pub fn new(store: DynamoStore) -> Self {
        Self {
            store,
            look_ahead: LOOK_AHEAD,
            window: TEXT_COALESCE_WINDOW,
        }
    }

    /// The store it writes to.
    pub fn store(&self) -> &DynamoStore {
        &self.store
    }

    /// Looks at a turn's signals with any write that comes within `ahead` of the turn's watch's
    /// next read ([`LOOK_AHEAD`] by default); at the watch's interval or more, with every write.
    #[must_use]
    pub fn looking_ahead(mut self, ahead: std::time::Duration) -> Self {
        self.look_ahead = ahead;
        self
    }

    /// Gathers events for `window` before writing them ([`TEXT_COALESCE_WINDOW`] by default): a
    /// reader following the log sees the turn move at least this often. A test that counts a
    /// turn's requests sets it past the turn's length, so that moto's pace cannot add a write.
    #[must_use]
    pub fn gathering_for(mut self, window: std::time::Duration) -> Self {
        self.window = window;
        self
    }

    /// The events of a turn after position `after` (all of them for `None`), in order.
    pub async fn read(
        &self,
        session: &str,
        turn_id: &str,
        after: Option<u64>,
    ) -> Result<Vec<LoggedEvent>, SinkError> {
        let from = match after.map(|seq| seq.checked_add(1)) {
            Some(Some(next)) => event_sk(turn_id, next),
            // Nothing comes after the last position there is.
            Some(None) => return Ok(Vec::new()),
            None => event_prefix(turn_id),
        };
        let mut pages = self
            .store
            .client()
            .query()
            .table_name(self.store.table())
            .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
            .expression_attribute_values(":pk", AttributeValue::S(session_pk(session)))
            .expression_attribute_values(":from", AttributeValue::S(from))
            .expression_attribute_values(":to", AttributeValue::S(format!("{}~", event_prefix(turn_id))))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let mut events = Vec::new();
        while let Some(item) = pages.next().await {
            let item = item.map_err(|e| SinkError::caused_by("reading the event log", e))?;
            // The range also holds the events of turns whose ids begin with this one's and `#`.
            if item
                .get(SK)
                .and_then(|sk| sk.as_s().ok())
                .is_some_and(|sk| is_event_of(sk, turn_id))
            {
                events.push(decode(&item)?);
            }
        }
        Ok(events)
    }

    /// The last position of the turn's log. The prefix also begins other turns' keys (`t` begins
    /// `t#2`'s), and those may sort after this turn's: keys are read newest first until one of
    /// this turn's comes, so the log never continues from another turn's position (and
    /// overwrites its own events).
    async fn last_seq(&self, turn: &TurnRef) -> Result<Option<(u64, Option<String>)>, SinkError> {
        let mut pages = self
            .store
            .client()
            .query()
            .table_name(self.store.table())
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", AttributeValue::S(session_pk(&turn.session)))
            .expression_attribute_values(":prefix", AttributeValue::S(event_prefix(&turn.turn_id)))
            .projection_expression("sk, seq, #token")
            .expression_attribute_names("#token", WRITE_TOKEN)
            .scan_index_forward(false)
            .limit(LAST_SEQ_PAGE)
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        while let Some(item) = pages.next().await {
            let item = item.map_err(|e| SinkError::caused_by("reading the event log", e))?;
            if item
                .get(SK)
                .and_then(|sk| sk.as_s().ok())
                .is_some_and(|sk| is_event_of(sk, &turn.turn_id))
            {
                let token = item.get(WRITE_TOKEN).and_then(|v| v.as_s().ok()).cloned();
                return seq_of(&item).map(|seq| Some((seq, token)));
            }
        }
        Ok(None)
    }
}

/// How many keys a look for the last position reads at a time.
const LAST_SEQ_PAGE: i32 = 25;

fn seq_of(item: &HashMap<String, AttributeValue>) -> Result<u64, SinkError> {
    item.get("seq")
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| SinkError::new("an event item has no seq"))
}

fn decode(item: &HashMap<String, AttributeValue>) -> Result<LoggedEvent, SinkError> {
    let seq = seq_of(item)?;
    let json = item
        .get("event")
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| SinkError::new("an event item has no event"))?;
    let event = serde_json::from_str(json)
        .map_err(|e| SinkError::caused_by(format!("event {seq} does not decode"), e))?;
    let logged_at_ms = item
        .get(LOGGED_AT)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok());
    Ok(LoggedEvent {
        seq,
        event,
        logged_at_ms,
    })
}

impl Sink for DynamoEventLog {
    fn open(&self, turn: &TurnRef) -> Box<dyn TurnSink> {
        Box::new(TurnLog {
            log: self.clone(),
            turn: turn.clone(),
            tail: self
                .store
                .log_tails
                .open(&turn.session, &turn.turn_id, TEXT_COALESCE_BYTES),
            since: None,
            dropped: 0,
            deleted: false,
        })
    }
}

#[derive(Debug)]
struct TurnLog {
    log: DynamoEventLog,
    turn: TurnRef,
    /// What is not written yet, and the next position (found on the first write, after what an
    /// earlier run of the same turn, a reclaimed one, logged): shared with the store, whose
    /// commit may write them ([`LogTails`](super::log_tail::LogTails)).
    tail: Arc<Mutex<Tail>>,
    /// When the oldest event not written yet (gathered text included) came, or a failed write
    /// was last tried: what is held goes out a window ([`DynamoEventLog::gathering_for`]) after it.
    since: Option<Instant>,
    /// Events dropped because the queue was full.
    dropped: usize,
    /// The conversation was deleted while the turn ran: nothing more is written.
    deleted: bool,
}

impl TurnLog {
    fn tail(&self) -> MutexGuard<'_, Tail> {
        lock(&self.tail)
    }

    /// Writes what is queued, oldest first, [`EVENTS_PER_WRITE`] at a time, until a write
    /// fails; then what is left waits a window before it is tried again.
    async fn drain(&mut self) -> Result<(), SinkError> {
        loop {
            let (batch, results): (Vec<AgentEvent>, Vec<CallResult>) = {
                let mut tail = self.tail();
                let (results, bytes) = riding(&tail.results);
                let room = MAX_TRANSACTION_BYTES.saturating_sub(bytes);
                let queued = tail.pending.len().min(EVENTS_PER_WRITE);
                let count = events_that_fit(tail.pending.front(queued), room);
                if count == 0 {
                    break;
                }
                if tail.committing {
                    // The turn's commit is writing the queue: look again a window from now.
                    drop(tail);
                    self.since = Some(Instant::now());
                    return Ok(());
                }
                tail.writing = true;
                (
                    tail.pending.front(count).cloned().collect(),
                    tail.results[..results].to_vec(),
                )
            };
            let written = self.write(&batch, &results).await;
            let mut tail = self.tail();
            tail.writing = false;
            if let Err(PutError::Deleted) = written {
                // Nothing of a deleted conversation is kept: what is queued, and what comes.
                let dropped = tail.pending.len();
                tail.pending.discard(dropped);
                drop(tail);
                self.deleted = true;
                self.since = None;
                tracing::info!(turn_id = %self.turn.turn_id, dropped, "the conversation was deleted; its turn's events are no longer logged");
                return Ok(());
            }
            if let Err(e) = written.map_err(SinkError::from) {
                let kept = tail.pending.len();
                drop(tail);
                self.since = Some(Instant::now());
                return Err(SinkError::caused_by(
                    format!("{kept} event(s) kept to write with the next"),
                    e,
                ));
            }
            tail.pending.discard(batch.len());
            // Recorded with the events, or not this worker's turn any more: gone either way.
            tail.results.drain(..results.len());
        }
        self.since = None;
        if self.dropped > 0 {
            let dropped = std::mem::take(&mut self.dropped);
            return Err(SinkError::new(format!(
                "{dropped} event(s) were dropped while the table refused writes"
            )));
        }
        Ok(())
    }

    /// Writes `events` at the log's next positions, together. The first write of a turn goes
    /// to position 0 only if nothing is there: a turn that ran before (a reclaimed one) finds
    /// the last position it logged then and goes on after it, so a first run reads nothing
    /// first.
    async fn write(&mut self, events: &[AgentEvent], results: &[CallResult]) -> Result<(), PutError> {
        // Each write's items carry a token of their own: when the SDK retries a first write
        // whose answer was lost, the retry finds the position taken, and the token tells that
        // it was by this very write.
        let token = write_token();
        let next = self.tail().next;
        if let Some(seq) = next {
            return self.put(events, results, seq, false, &token).await;
        }
        match self.put(events, results, 0, true, &token).await {
            Err(PutError::Taken) => match self.log.last_seq(&self.turn).await? {
                Some((last, Some(landed))) if landed == token => {
                    self.tail().next = Some(last + 1);
                    Ok(())
                }
                last => {
                    let seq = last.map_or(0, |(seq, _)| seq + 1);
                    self.put(events, results, seq, false, &token).await
                }
            },
            other => other,
        }
    }

    /// One write of `events` from position `seq`: a transaction ([`TurnLog::transact`]), so that
    /// a reader following the log sees all of them or none (never a later one without those
    /// before it). With `first`, position `seq` must be free. When the turn's watch is due
    /// a look at its signals, the write is a transaction that takes it ([`DynamoStore::signals_look`]):
    /// the stop and commands are heard at no extra request while the log is written. `results`
    /// handed to the log ride along into the turn's journal while the turn is this worker's
    /// (such a write takes no look: both check the turn's item); when it is not, the events go
    /// without them.
    async fn put(
        &mut self,
        events: &[AgentEvent],
        results: &[CallResult],
        seq: u64,
        first: bool,
        token: &str,
    ) -> Result<(), PutError> {
        let (store, session, turn_id) = (&self.log.store, &self.turn.session, &self.turn.turn_id);
        let items = events
            .iter()
            .zip(seq..)
            .map(|(event, seq)| event_item(store, session, turn_id, event, seq, token))
            .collect::<Result<Vec<_>, _>>()?;
        let last = seq + events.len() as u64 - 1;
        // Results carry a check on the turn's item, which a transaction may touch once: a write
        // with results takes no look (the watch reads on its own).
        let mut look = if results.is_empty() {
            self.log
                .store
                .signals_look(&self.turn.session, &self.turn.turn_id, self.log.look_ahead)
        } else {
            None
        };
        let mut results = results;
        loop {
            match self
                .transact(&items, first, look.take(), results, seq, last)
                .await
            {
                // Only the look failed: the events go again, without it.
                Err(PutError::Looked) => {}
                // The turn is not this worker's: the events go again, without its results.
                Err(PutError::NotOurs) => results = &[],
                other => break other,
            }
        }?;
        self.tail().next = Some(last + 1);
        Ok(())
    }

    /// Events together, in one transaction with the check that the conversation was not
    /// deleted (so that no event of a deleted conversation is written after its tombstone,
    /// whatever its turn is still doing), the look at the turn's signals when one is due, and the
    /// results riding along with the check that the turn is still this worker's.
    async fn transact(
        &self,
        items: &[HashMap<String, AttributeValue>],
        first: bool,
        look: Option<SignalsLook>,
        results: &[CallResult],
        seq: u64,
        last: u64,
    ) -> Result<(), PutError> {
        let store = &self.log.store;
        let mut writes = items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let put = Put::builder()
                    .table_name(store.table())
                    .set_item(Some(item.clone()));
                let put = if first && i == 0 {
                    put.condition_expression("attribute_not_exists(sk)")
                } else {
                    put
                };
                put.build()
                    .map(|put| TransactWriteItem::builder().put(put).build())
                    .map_err(|e| SinkError::caused_by("an event's write does not build", e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let looked_at = look.map(|look| {
            writes.push(look.check);
            look.at
        });
        let (session, turn_id) = (&self.turn.session, &self.turn.turn_id);
        let tombstone_at = writes.len();
        writes.push(
            store
                .not_deleted(session)
                .map_err(|e| SinkError::caused_by("the tombstone check does not build", e))?,
        );
        let fence_at = writes.len();
        if !results.is_empty() {
            let riding = store
                .result_writes(session, turn_id, results)
                .map_err(|e| SinkError::caused_by("a call's result does not build", e))?;
            writes.extend(riding);
        }
        match store
            .client()
            .transact_write_items()
            .set_transact_items(Some(writes))
            .send()
            .await
        {
            Ok(_) => {
                if let Some(at) = looked_at {
                    store.looked(session, turn_id, at, Look::Held).await;
                }
                Ok(())
            }
            Err(e) => {
                let reasons = cancellation_reasons(&e);
                let look_failed = looked_at.is_some() && is_condition_reason(reasons.get(items.len()));
                if let (Some(at), true) = (looked_at, look_failed) {
                    let item = reasons.get(items.len()).and_then(|r| r.item());
                    store.looked(session, turn_id, at, Look::Failed(item)).await;
                }
                let events_failed = reasons
                    .iter()
                    .take(items.len())
                    .any(|r| r.code().is_some_and(|code| code != "None"));
                if is_condition_reason(reasons.get(tombstone_at)) {
                    Err(PutError::Deleted)
                } else if !results.is_empty() && is_condition_reason(reasons.get(fence_at)) {
                    Err(PutError::NotOurs)
                } else if look_failed && !events_failed {
                    Err(PutError::Looked)
                } else if first && e.code() == Some("TransactionCanceledException") {
                    Err(PutError::Taken)
                } else {
                    Err(SinkError::caused_by(format!("writing events {seq} to {last}"), e).into())
                }
            }
        }
    }
}

/// Why events were not written.
#[derive(Debug)]
enum PutError {
    /// The first write found the position taken: the turn logged events before.
    Taken,
    /// Only the look at the turn's signals failed: they changed, and what they are now is on
    /// the turn's board; the events were not written.
    Looked,
    /// The conversation was deleted: nothing of it is written any more.
    Deleted,
    /// The turn is no longer this worker's: the results riding along are not written.
    NotOurs,
    /// The write failed.
    Failed(SinkError),
}

impl From<SinkError> for PutError {
    fn from(e: SinkError) -> Self {
        Self::Failed(e)
    }
}

impl From<PutError> for SinkError {
    fn from(e: PutError) -> Self {
        match e {
            PutError::Taken => SinkError::new("the event log's first position was taken twice"),
            PutError::Looked => SinkError::new("the turn's signals changed while its events were written"),
            PutError::Deleted => SinkError::new("the conversation was deleted; its events are not written"),
            PutError::NotOurs => {
                SinkError::new("the turn is no longer this worker's; its calls' results were not written")
            }
            PutError::Failed(e) => e,
        }
    }
}

#[async_trait]
impl TurnSink for TurnLog {
    /// Gathers events: consecutive deltas into one event of at most [`TEXT_COALESCE_BYTES`],
    /// and every event into one write until a window ([`TEXT_COALESCE_WINDOW`] by default) after
    /// the oldest not written yet, [`EVENTS_PER_WRITE`] events, or the terminal. A reader following the log sees
    /// the turn at least once a window; the host flushes a window that passes with no event.
    async fn event(&mut self, event: &AgentEvent) -> Result<(), SinkError> {
        let queued = {
            let mut tail = lock(&self.tail);
            tail.received += 1;
            // The turn's commit wrote its terminal, and every event before it; or the
            // conversation is gone.
            if self.deleted || tail.written_terminal.as_ref() == Some(event) {
                None
            } else {
                tail.pending.push(event.clone());
                if tail.pending.len() > MAX_PENDING_EVENTS {
                    tail.pending.discard(1);
                    self.dropped += 1;
                }
                Some(tail.pending.len())
            }
        };
        let Some(queued) = queued else {
            self.since = None;
            return Ok(());
        };
        self.since.get_or_insert_with(Instant::now);
        let due = self.flush_due().is_some_and(|due| due <= Instant::now());
        if event.is_terminal() || due || queued >= EVENTS_PER_WRITE {
            return self.drain().await;
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.drain().await
    }

    fn flush_due(&self) -> Option<Instant> {
        self.since.map(|since| since + self.log.window)
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        self.drain().await
    }
}

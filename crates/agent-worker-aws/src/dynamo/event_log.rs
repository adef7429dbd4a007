//! [`DynamoEventLog`]: a turn's events in the session table, read back from a cursor.

use std::collections::{HashMap, VecDeque};

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use agent_worker_core::protocol::AgentEvent;
use agent_worker_core::sinks::{Sink, SinkError, TurnRef, TurnSink};

use super::DynamoStore;
use super::keys::{EXPIRES_AT, PK, SK, event_prefix, event_sk, is_event_of, session_pk};

/// Text deltas are gathered into one item until this many bytes, until another event comes, or
/// until the first of them has waited [`TEXT_COALESCE_WINDOW`].
pub const TEXT_COALESCE_BYTES: usize = 2048;
/// How long gathered text may wait for more before it is written: a reader following the log
/// sees the answer grow at least this often while the model streams.
pub const TEXT_COALESCE_WINDOW: std::time::Duration = std::time::Duration::from_millis(250);

/// Events a turn's log keeps queued while the table refuses writes; past it the oldest go.
const MAX_PENDING_EVENTS: usize = 1000;

/// Writes each turn's events to the session's table as `event#<turnId>#<seq>` items, so a client
/// can read them from a cursor ([`read`](Self::read)). Consecutive text deltas are coalesced, so
/// a long answer is a handful of items, not one per token. An event whose write fails (after the
/// SDK's retries) stays queued and is written, in order, before the next one: a table that
/// recovers within the turn loses nothing of its log.
#[derive(Debug, Clone)]
pub struct DynamoEventLog {
    store: DynamoStore,
}

/// One logged event and its position, the cursor to read after it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedEvent {
    /// Its position in the turn's log.
    pub seq: u64,
    /// The event.
    pub event: AgentEvent,
}

impl DynamoEventLog {
    /// A log in `store`'s table.
    pub fn new(store: DynamoStore) -> Self {
        Self { store }
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
    async fn last_seq(&self, turn: &TurnRef) -> Result<Option<u64>, SinkError> {
        let mut pages = self
            .store
            .client()
            .query()
            .table_name(self.store.table())
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", AttributeValue::S(session_pk(&turn.session)))
            .expression_attribute_values(":prefix", AttributeValue::S(event_prefix(&turn.turn_id)))
            .projection_expression("sk, seq")
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
                return seq_of(&item).map(Some);
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
    Ok(LoggedEvent { seq, event })
}

impl Sink for DynamoEventLog {
    fn open(&self, turn: &TurnRef) -> Box<dyn TurnSink> {
        Box::new(TurnLog {
            log: self.clone(),
            turn: turn.clone(),
            next: None,
            text: String::new(),
            text_since: None,
            pending: VecDeque::new(),
            dropped: 0,
        })
    }
}

#[derive(Debug)]
struct TurnLog {
    log: DynamoEventLog,
    turn: TurnRef,
    /// The next position; found on the first write, after what an earlier run of the same turn
    /// (a reclaimed one) logged.
    next: Option<u64>,
    text: String,
    /// When the gathered text's first delta came.
    text_since: Option<std::time::Instant>,
    /// Events not written yet, oldest first.
    pending: VecDeque<AgentEvent>,
    /// Events dropped because the queue was full.
    dropped: usize,
}

impl TurnLog {
    async fn write(&mut self, event: &AgentEvent) -> Result<(), SinkError> {
        let seq = match self.next {
            Some(seq) => seq,
            None => self.log.last_seq(&self.turn).await?.map_or(0, |s| s + 1),
        };
        let json =
            serde_json::to_string(event).map_err(|e| SinkError::caused_by("an event does not encode", e))?;
        let item = HashMap::from([
            (PK.to_owned(), AttributeValue::S(session_pk(&self.turn.session))),
            (
                SK.to_owned(),
                AttributeValue::S(event_sk(&self.turn.turn_id, seq)),
            ),
            ("seq".to_owned(), AttributeValue::N(seq.to_string())),
            ("event".to_owned(), AttributeValue::S(json)),
            (
                EXPIRES_AT.to_owned(),
                AttributeValue::N(self.log.store.expires_at().to_string()),
            ),
        ]);
        self.log
            .store
            .client()
            .put_item()
            .table_name(self.log.store.table())
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| SinkError::caused_by(format!("writing event {seq}"), e))?;
        self.next = Some(seq + 1);
        Ok(())
    }

    /// Queues the gathered text as one event.
    fn queue_text(&mut self) {
        self.text_since = None;
        if !self.text.is_empty() {
            let text = AgentEvent::text(std::mem::take(&mut self.text));
            self.queue(text);
        }
    }

    fn queue(&mut self, event: AgentEvent) {
        if self.pending.len() >= MAX_PENDING_EVENTS {
            self.pending.pop_front();
            self.dropped += 1;
        }
        self.pending.push_back(event);
    }

    /// Writes what is queued, oldest first, until a write fails.
    async fn drain(&mut self) -> Result<(), SinkError> {
        while let Some(event) = self.pending.front().cloned() {
            self.write(&event).await.map_err(|e| {
                SinkError::new(format!(
                    "{e}; {} event(s) kept to write with the next",
                    self.pending.len()
                ))
            })?;
            self.pending.pop_front();
        }
        if self.dropped > 0 {
            let dropped = std::mem::take(&mut self.dropped);
            return Err(SinkError::new(format!(
                "{dropped} event(s) were dropped while the table refused writes"
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl TurnSink for TurnLog {
    async fn event(&mut self, event: &AgentEvent) -> Result<(), SinkError> {
        if let AgentEvent::Text { delta } = event {
            self.text.push_str(delta);
            let since = *self.text_since.get_or_insert_with(std::time::Instant::now);
            if self.text.len() < TEXT_COALESCE_BYTES && since.elapsed() < TEXT_COALESCE_WINDOW {
                return Ok(());
            }
            self.queue_text();
        } else {
            self.queue_text();
            self.queue(event.clone());
        }
        self.drain().await
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.queue_text();
        self.drain().await
    }
}

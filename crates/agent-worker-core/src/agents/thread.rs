//! A two-sided session's state between turns: whose turn it is, what each side said, and how
//! it ended. Kept in a [`ThreadStore`], so any worker resumes any parked session.

use crate::Failure;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::session::{SessionId, TurnId};

/// One side of an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Side {
    /// Side A: its messages are `assistant`.
    #[serde(rename = "sideA")]
    A,
    /// Side B: its messages are `user`.
    #[serde(rename = "sideB")]
    B,
}

impl Side {
    /// The other side.
    pub const fn other(self) -> Self {
        match self {
            Self::A => Self::B,
            Self::B => Self::A,
        }
    }

    /// `sideA` or `sideB`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::A => "sideA",
            Self::B => "sideB",
        }
    }
}

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// A turn is running (or was, until its lease ran out).
    Running,
    /// Parked: a person's message on the human side is awaited.
    AwaitingHuman,
    /// Parked: a child session it started waits for a person; it resumes when the child settles.
    AwaitingChild,
    /// Ended successfully (a session stop, or the turn cap).
    Completed,
    /// Ended with a failure (a session fail).
    Failed,
}

impl SessionStatus {
    /// Its wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::AwaitingHuman => "awaiting_human",
            Self::AwaitingChild => "awaiting_child",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    /// Whether the session is over.
    pub const fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }
}

/// One message of the conversation between the sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadMessage {
    /// Who said it.
    pub side: Side,
    /// What was said.
    pub text: String,
    /// Where it came from when not from the side itself: `subagent:<as>` for a child's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl ThreadMessage {
    /// What `side` said.
    pub fn new(side: Side, text: impl Into<String>) -> Self {
        Self {
            side,
            text: text.into(),
            source: None,
        }
    }
}

/// Where a child session reports when it settles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentLink {
    /// The parent session.
    pub session: SessionId,
    /// The parent's side that started the child.
    pub side: Side,
    /// The relationship's name (`as`).
    pub relationship: String,
}

/// A child session a session started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildLink {
    /// The relationship's name (`as`).
    pub relationship: String,
    /// The child session.
    pub session: SessionId,
    /// Whether it has ended.
    pub ended: bool,
}

/// How a session ended, and with what (the child → parent payload when composed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionEnd {
    /// The binding's message, or the last answer.
    pub message: Option<String>,
    /// The binding's attachment paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Value>,
    /// Why it ended: `session_stop`, `session_fail`, `handler`, `max_session_turns`.
    pub reason: String,
}

/// A session's state between turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadRecord {
    /// The session.
    pub session: SessionId,
    /// The agent definition it runs.
    pub agent: String,
    /// Where it stands.
    pub status: SessionStatus,
    /// Whose turn is next.
    pub next_side: Side,
    /// Side turns taken so far (each side's turn counts one, whatever backs it).
    pub side_turns: u32,
    /// What the sides said, in order.
    pub transcript: Vec<ThreadMessage>,
    /// The last status a side published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_text: Option<String>,
    /// How it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<SessionEnd>,
    /// The turn running now (so that its redelivery resumes rather than repeats it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_turn: Option<TurnId>,
    /// Until when (epoch ms) the running turn holds the session.
    #[serde(default)]
    pub lease_until_ms: u64,
    /// Turns already handled, newest last (the last [`HANDLED_TURNS_KEPT`]).
    #[serde(default)]
    pub handled_turns: Vec<TurnId>,
    /// The session that started this one, for a child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// The child sessions this one started, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildLink>,
    /// The children it waits for while `awaiting_child`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_on: Vec<SessionId>,
    /// The agents that handed the thread on, oldest first; `agent` has it now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handed_off_from: Vec<String>,
    /// The person's messages that came while a turn ran, oldest first: the running turn takes
    /// them when the person's side is next.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub follow_ups: Vec<QueuedMessage>,
    /// Bumped by every save; a save expects the version it read.
    #[serde(default)]
    pub version: u64,
}

/// A message queued on a running session: a follow-up of its turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedMessage {
    /// The turn that carried it (marked handled once taken).
    pub turn_id: TurnId,
    /// The person's words.
    pub text: String,
}

/// How many handled turn ids a record keeps for redelivery checks.
pub const HANDLED_TURNS_KEPT: usize = 64;

/// The most text a record keeps of the transcript; older messages are dropped first, so the
/// record stays well inside DynamoDB's 400 KB item limit. Prompt sides keep their whole
/// conversation in their own sessions; a handler sees the kept part.
pub const MAX_TRANSCRIPT_BYTES: usize = 256 * 1024;

impl ThreadRecord {
    /// A new session of `agent`, `first` side to act.
    pub fn new(session: SessionId, agent: impl Into<String>, first: Side) -> Self {
        Self {
            session,
            agent: agent.into(),
            status: SessionStatus::Running,
            next_side: first,
            side_turns: 0,
            transcript: Vec::new(),
            status_text: None,
            end: None,
            running_turn: None,
            lease_until_ms: 0,
            handled_turns: Vec::new(),
            parent: None,
            children: Vec::new(),
            waiting_on: Vec::new(),
            handed_off_from: Vec::new(),
            follow_ups: Vec::new(),
            version: 0,
        }
    }

    /// What the other side said since `side` last spoke, oldest first.
    pub fn inbound(&self, side: Side) -> Vec<&ThreadMessage> {
        let since = self
            .transcript
            .iter()
            .rposition(|m| m.side == side)
            .map_or(0, |i| i + 1);
        self.transcript[since..]
            .iter()
            .filter(|m| m.side != side)
            .collect()
    }

    /// Drops the oldest messages past [`MAX_TRANSCRIPT_BYTES`], always keeping the newest.
    pub fn trim_transcript(&mut self) {
        let mut total: usize = self.transcript.iter().map(|m| m.text.len()).sum();
        let mut drop = 0;
        while total > MAX_TRANSCRIPT_BYTES && drop + 1 < self.transcript.len() {
            total -= self.transcript[drop].text.len();
            drop += 1;
        }
        self.transcript.drain(..drop);
    }

    /// Marks `turn_id` handled.
    pub fn handled(&mut self, turn_id: &TurnId) {
        self.handled_turns.push(turn_id.clone());
        let excess = self.handled_turns.len().saturating_sub(HANDLED_TURNS_KEPT);
        self.handled_turns.drain(..excess);
    }
}

/// A thread store that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThreadStoreError {
    /// Another writer saved the session since it was read.
    #[error("the session changed since it was read")]
    Conflict,
    /// The store could not be read or written.
    #[error("the thread store failed")]
    Unavailable(#[source] Failure),
}

/// Keeps [`ThreadRecord`]s.
#[async_trait]
pub trait ThreadStore: Send + Sync + 'static {
    /// The session's record.
    async fn load(&self, session: &SessionId) -> Result<Option<ThreadRecord>, ThreadStoreError>;
    /// Saves `record` if the stored one still has `record.version`; the stored copy gets the
    /// next version, which is returned.
    async fn save(&self, record: &ThreadRecord) -> Result<u64, ThreadStoreError>;
}

/// Records in this process's memory. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct MemoryThreadStore {
    records: Arc<Mutex<HashMap<SessionId, ThreadRecord>>>,
}

impl MemoryThreadStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl ThreadStore for MemoryThreadStore {
    async fn load(&self, session: &SessionId) -> Result<Option<ThreadRecord>, ThreadStoreError> {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(records.get(session).cloned())
    }

    async fn save(&self, record: &ThreadRecord) -> Result<u64, ThreadStoreError> {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let stored = records.get(&record.session).map_or(0, |r| r.version);
        if stored != record.version {
            return Err(ThreadStoreError::Conflict);
        }
        let mut next = record.clone();
        next.version += 1;
        records.insert(record.session.clone(), next);
        Ok(record.version + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbound_is_what_the_other_side_said_since() {
        let mut record = ThreadRecord::new(crate::session::test_ids::sid("s"), "a", Side::A);
        for (side, text) in [(Side::B, "1"), (Side::A, "2"), (Side::B, "3"), (Side::B, "4")] {
            record.transcript.push(ThreadMessage::new(side, text));
        }
        let texts: Vec<&str> = record.inbound(Side::A).iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["3", "4"]);
        assert!(record.inbound(Side::B).iter().all(|m| m.side == Side::A));
    }

    #[test]
    fn the_transcript_keeps_its_newest_messages_within_the_bound() {
        let mut record = ThreadRecord::new(crate::session::test_ids::sid("s"), "a", Side::A);
        let big = "x".repeat(MAX_TRANSCRIPT_BYTES / 3 + 1);
        for side in [Side::A, Side::B, Side::A, Side::B] {
            record.transcript.push(ThreadMessage::new(side, big.clone()));
            record.trim_transcript();
        }
        assert_eq!(record.transcript.len(), 2);
        assert_eq!(record.transcript.last().unwrap().side, Side::B);
        record.transcript = vec![ThreadMessage::new(Side::A, "y".repeat(MAX_TRANSCRIPT_BYTES * 2))];
        record.trim_transcript();
        assert_eq!(
            record.transcript.len(),
            1,
            "the newest message stays, whatever its size"
        );
    }

    #[tokio::test]
    async fn a_save_from_a_stale_read_is_a_conflict() {
        let store = MemoryThreadStore::new();
        let mut record = ThreadRecord::new(crate::session::test_ids::sid("s"), "a", Side::A);
        record.version = store.save(&record).await.unwrap();
        let stale = record.clone();
        record.version = store.save(&record).await.unwrap();
        assert_eq!(store.save(&stale).await, Err(ThreadStoreError::Conflict));
        assert_eq!(
            store
                .load(&crate::session::test_ids::sid("s"))
                .await
                .unwrap()
                .unwrap()
                .version,
            2
        );
    }
}

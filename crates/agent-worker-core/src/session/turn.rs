//! Turn records: how a turn is claimed once and how it ended.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a turn is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// Claimed by a worker whose lease has not run out.
    Running,
    /// Ended with `completed`; its messages are stored.
    Completed,
    /// Ended with `failed`; what it produced is stored.
    Failed,
}

impl TurnStatus {
    /// Whether the turn has ended, so a redelivery of it must not run.
    pub fn is_done(self) -> bool {
        !matches!(self, Self::Running)
    }
}

/// How a turn ended, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnOutcome {
    /// `Completed` or `Failed`.
    pub status: TurnStatus,
    /// The terminal event's `data` (for `Completed`) or `{details, retryable, code}` (for
    /// `Failed`), as the caller was told.
    pub terminal: Value,
}

/// What a turn says last, told to its store just before the commit it follows: the terminal the
/// turn emits once that commit lands, and how many events it emitted before it. A store that
/// keeps the turn's event log as well can write the log's unwritten events and this terminal in
/// the commit's own transaction, so that the log's last window costs no request of its own.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnding {
    /// The events the turn emitted before its terminal.
    pub emitted: usize,
    /// The terminal it emits once the commit lands.
    pub terminal: crate::protocol::AgentEvent,
}

/// A turn as its record stands.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRecord {
    /// The turn's id.
    pub turn_id: String,
    /// Where it is.
    pub status: TurnStatus,
    /// Until when the claiming worker holds it.
    pub lease_until: SystemTime,
    /// How many times it was claimed (1 on the first run).
    pub attempts: u32,
    /// How it ended, once it has.
    pub outcome: Option<TurnOutcome>,
    /// The stop asked of it, if any.
    pub stop: Option<Stop>,
}

/// The answer to [`SessionStore::claim_turn`](super::SessionStore::claim_turn).
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// This worker now holds the turn and runs it. `reclaimed` is set when an earlier worker's
    /// lease ran out before it finished.
    Claimed {
        /// Whether an earlier worker had claimed it.
        reclaimed: bool,
    },
    /// The turn already ended: nothing runs again.
    Done(TurnRecord),
    /// Another worker holds a live lease on the turn.
    Running(TurnRecord),
}

/// The lease a claim asks for: how long the worker may hold the turn before another may take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease(pub Duration);

impl Lease {
    /// When a lease taken at `now_ms` (milliseconds since the Unix epoch) runs out.
    pub fn ends_at_ms(self, now_ms: u64) -> u64 {
        now_ms.saturating_add(u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX))
    }
}

/// Why a turn was stopped before its own end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    /// The person pressed stop.
    UserStop,
    /// The person's next message replaced it.
    Superseded,
    /// It ran out of time.
    Deadline,
}

impl StopCause {
    /// The reason's name, as `completed.data.stopReason` carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UserStop => "user_stop",
            Self::Superseded => "superseded",
            Self::Deadline => "deadline",
        }
    }
}

/// A stop: why, and when (milliseconds since the Unix epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stop {
    /// Why.
    pub reason: StopCause,
    /// When, in milliseconds since the Unix epoch.
    pub at: u64,
}

impl Stop {
    /// A stop for `reason`, now.
    pub fn now(reason: StopCause) -> Self {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or_default();
        Self { reason, at }
    }
}

/// What became of a stop request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// Recorded: the turn sees it before it starts or while it runs.
    Recorded,
    /// The turn had already ended; nothing changed.
    AlreadyEnded,
}

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

/// How a turn ended, as its record keeps it: what its terminal told the caller. Kept as
/// `{"status": "completed" | "failed", "terminal": …}`.
///
/// ```
/// use agent_worker_core::session::{FailedOutcome, TurnOutcome, TurnStatus};
///
/// let done = TurnOutcome::Completed(None);
/// assert_eq!(serde_json::to_string(&done).unwrap(), r#"{"status":"completed","terminal":null}"#);
/// let failed = TurnOutcome::Failed(FailedOutcome::new("the model refused it", false, "model_rejected"));
/// assert_eq!(failed.status(), TurnStatus::Failed);
/// assert_eq!(
///     serde_json::to_string(&failed).unwrap(),
///     r#"{"status":"failed","terminal":{"details":"the model refused it","retryable":false,"code":"model_rejected"}}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", content = "terminal", rename_all = "snake_case")]
pub enum TurnOutcome {
    /// Ended with `completed`: the terminal event's `data`, when it had any.
    Completed(Option<Value>),
    /// Ended with `failed`.
    Failed(FailedOutcome),
}

impl TurnOutcome {
    /// `Completed` or `Failed`.
    pub fn status(&self) -> TurnStatus {
        match self {
            Self::Completed(_) => TurnStatus::Completed,
            Self::Failed(_) => TurnStatus::Failed,
        }
    }

    /// The failure, for a turn that failed.
    pub fn failure(&self) -> Option<&FailedOutcome> {
        match self {
            Self::Completed(_) => None,
            Self::Failed(failed) => Some(failed),
        }
    }
}

/// A failed turn's terminal, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedOutcome {
    /// What the caller was told.
    #[serde(default)]
    pub details: String,
    /// Whether the caller was told a retry may help.
    #[serde(default)]
    pub retryable: bool,
    /// The failure's code.
    #[serde(default)]
    pub code: Option<String>,
    /// Whether what the turn did was stored (`false` only for a turn that reached its deadline
    /// and whose store failed: nothing of it was kept).
    #[serde(default = "kept", skip_serializing_if = "is_kept")]
    pub stored: bool,
}

/// What a failed outcome read without `stored` says: it was (every outcome but one says so).
fn kept() -> bool {
    true
}

/// Whether what a failed turn did was stored (serde's `skip_serializing_if` passes a reference).
fn is_kept(stored: &bool) -> bool {
    *stored
}

#[cfg(test)]
mod outcome_tests {
    use super::*;

    #[test]
    fn outcomes_stored_before_the_typed_terminal_still_decode() {
        let read = |text: &str| serde_json::from_str::<TurnOutcome>(text).unwrap();
        assert_eq!(
            read(r#"{"status":"completed","terminal":null}"#),
            TurnOutcome::Completed(None)
        );
        assert_eq!(
            read(r#"{"status":"completed","terminal":{"stopReason":"superseded","ran":false}}"#),
            TurnOutcome::Completed(Some(
                serde_json::json!({"stopReason": "superseded", "ran": false})
            ))
        );
        assert_eq!(
            read(
                r#"{"status":"failed","terminal":{"details":"no","retryable":false,"code":"model_rejected"}}"#
            ),
            TurnOutcome::Failed(FailedOutcome::new("no", false, "model_rejected"))
        );
        let deadline =
            read(r#"{"status":"failed","terminal":{"code":"turn_deadline_exceeded","stored":false}}"#);
        let failed = deadline.failure().unwrap();
        assert_eq!(
            (failed.code.as_deref(), failed.stored, failed.details.as_str()),
            (Some("turn_deadline_exceeded"), false, "")
        );
    }
}

impl FailedOutcome {
    /// A failure told as `details`, `retryable` or not, with `code`; what the turn did was stored.
    pub fn new(details: impl Into<String>, retryable: bool, code: impl Into<String>) -> Self {
        Self {
            details: details.into(),
            retryable,
            code: Some(code.into()),
            stored: true,
        }
    }
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
    pub turn_id: super::TurnId,
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

/// The answer to [`TurnLedger::claim_turn`](super::TurnLedger::claim_turn).
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    /// The person pressed stop.
    UserStop,
    /// The person's next message replaced it.
    Superseded,
    /// It ran out of time.
    Deadline,
    /// Its account or person was blocked ([`super::blocks`]).
    Blocked,
}

impl StopCause {
    /// The reason's name, as `completed.data.stopReason` carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UserStop => "user_stop",
            Self::Superseded => "superseded",
            Self::Deadline => "deadline",
            Self::Blocked => "blocked",
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

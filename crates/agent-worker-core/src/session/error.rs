//! [`StoreError`]: what a [`SessionStore`](super::SessionStore) call can fail with.

use super::history::HistoryError;
use crate::Failure;

/// A session store call that failed. Nothing was half-written: a write either happened whole
/// or not at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend throttled the call, and kept doing so through the store's own retries.
    #[error("the session store is throttling")]
    Throttled(#[source] Failure),
    /// The backend could not be reached or failed.
    #[error("the session store failed")]
    Backend(#[source] Failure),
    /// What was stored cannot be read back.
    #[error("stored session data is corrupt")]
    Corrupt(#[source] Failure),
    /// A write was refused because it would break a history invariant.
    #[error("refused to store a broken history")]
    InvalidHistory(#[from] HistoryError),
    /// A conditional write lost: someone else holds or finished the turn.
    #[error("the turn is no longer held by this worker: {0}")]
    LostLease(String),
    /// The conversation was deleted while the turn ran: nothing of the turn is kept.
    #[error("the conversation was deleted: {0}")]
    Deleted(String),
    /// A turn tried to complete while commands it has not seen wait for it: nothing was written,
    /// and the turn runs them first.
    #[error("commands wait for the turn: {0} in all")]
    CommandsPending(usize),
}

impl StoreError {
    /// What a client is told: the kind of failure, without the backend's words (which may name
    /// tables, keys or accounts). The worker's log has the whole error.
    pub fn client_message(&self) -> String {
        match self {
            Self::Throttled(_) => "the session store is throttling requests".into(),
            Self::Backend(_) => "the session store failed".into(),
            Self::Corrupt(_) => "the stored session could not be read".into(),
            Self::InvalidHistory(e) => format!("refused to store a broken history: {e}"),
            Self::LostLease(_) => "the turn is no longer held by this worker".into(),
            Self::Deleted(_) => "the conversation was deleted".into(),
            Self::CommandsPending(_) => "commands wait for the turn".into(),
        }
    }
}

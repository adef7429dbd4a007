//! [`StoreError`]: what a [`SessionStore`](super::SessionStore) call can fail with.

use super::history::HistoryError;

/// A session store call that failed. Nothing was half-written: a write either happened whole
/// or not at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend throttled the call, and kept doing so through the store's own retries.
    #[error("the session store is throttling: {0}")]
    Throttled(String),
    /// The backend could not be reached or failed.
    #[error("the session store failed: {0}")]
    Backend(String),
    /// What was stored cannot be read back.
    #[error("stored session data is corrupt: {0}")]
    Corrupt(String),
    /// A write was refused because it would break a history invariant.
    #[error("refused to store a broken history: {0}")]
    InvalidHistory(#[from] HistoryError),
    /// A conditional write lost: someone else holds or finished the turn.
    #[error("the turn is no longer held by this worker: {0}")]
    LostLease(String),
}

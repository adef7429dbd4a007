//! [`ActionAnswers`]: where a UI action's answer from the person's tab is read. The tab (or the
//! product's API for it) records that it took a request and then what the action did; a call
//! waiting on any worker reads it.

use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{SessionId, StoreError, TurnId};

/// What the tab has said of one UI action request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ActionAnswer {
    /// A tab took the request and is running the action.
    Taken,
    /// The action ran: what it gave back.
    Done {
        /// Its result, as the model reads it.
        #[serde(default)]
        result: Value,
        /// Whether the action failed.
        #[serde(default, rename = "isError")]
        is_error: bool,
    },
    /// The tab did not run it: a request of a turn that is no longer the current one, or one
    /// the page could not take.
    Refused {
        /// Why.
        reason: String,
    },
}

impl ActionAnswer {
    /// Whether it is the action's last word (not just taken).
    pub fn is_final(&self) -> bool {
        !matches!(self, Self::Taken)
    }
}

/// Reads what the tab answered to call `call_id` of turn `turn_id`.
#[async_trait]
pub trait ActionAnswers: Send + Sync + fmt::Debug {
    /// What the tab has said so far, if anything.
    async fn look(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        call_id: &str,
    ) -> Result<Option<ActionAnswer>, StoreError>;
}

/// Keeps what the tab answers: a final answer replaces "taken" and is kept once; "taken" never
/// replaces anything.
#[async_trait]
pub trait ActionAnswerStore: ActionAnswers {
    /// Records `answer` to call `call_id` of turn `turn_id` of `session`: `false` when an
    /// answer already there stays (a final one, or any for "taken").
    async fn record(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        call_id: &str,
        answer: &ActionAnswer,
    ) -> Result<bool, StoreError>;
}

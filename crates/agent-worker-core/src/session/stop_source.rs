//! [`StopSource`]: where a running turn's stop may be asked for besides its session store (the
//! realtime server of seed 004 keeps the stops a product's API asks for). The turn asks it
//! before it starts, beside its claim, and then for as long as it runs, beside the store's own
//! reads; asking never holds a turn up or fails it.

use std::fmt;

use async_trait::async_trait;

use super::{SessionId, Stop, StoreError, TurnId};

/// Answers whether someone asked turn `turn_id` to stop.
#[async_trait]
pub trait StopSource: Send + Sync + fmt::Debug {
    /// The stop asked for the turn, if one was. An error is logged by the turn, which runs on
    /// and asks again later.
    async fn stop_for(&self, session: &SessionId, turn_id: &TurnId) -> Result<Option<Stop>, StoreError>;
}

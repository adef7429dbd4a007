//! Turns a host sent to the queue for an A2A caller, not yet claimed by a worker
//! (`submitted#<turnId>` in the conversation's partition): so that the task exists for its caller
//! from the moment it is answered, before any worker has written the turn's record.

use std::collections::HashMap;

use agent_worker_core::session::{SessionId, StoreError, TurnId};
use aws_sdk_dynamodb::types::AttributeValue;

use super::DynamoStore;
use super::codec::{n, s};
use super::keys::{EXPIRES_AT, PK, SK, session_pk};
use super::sdk_error::store_error;

fn key(session: &SessionId, turn: &TurnId) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (PK.to_owned(), s(session_pk(session))),
        (SK.to_owned(), s(format!("submitted#{turn}"))),
    ])
}

impl DynamoStore {
    /// Notes that turn `turn` of `session` was sent to the queue.
    pub async fn mark_submitted(&self, session: &SessionId, turn: &TurnId) -> Result<(), StoreError> {
        let mut item = key(session, turn);
        item.insert(EXPIRES_AT.into(), n(self.expires_at()));
        self.client()
            .put_item()
            .table_name(self.table())
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| store_error("noting a turn sent to the queue", e))?;
        Ok(())
    }

    /// Whether turn `turn` of `session` was sent to the queue ([`mark_submitted`](Self::mark_submitted)).
    pub async fn submitted(&self, session: &SessionId, turn: &TurnId) -> Result<bool, StoreError> {
        let out = self
            .client()
            .get_item()
            .table_name(self.table())
            .set_key(Some(key(session, turn)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("looking for a turn sent to the queue", e))?;
        Ok(out.item().is_some())
    }
}

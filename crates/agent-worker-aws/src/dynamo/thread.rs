//! [`DynamoThreadStore`]: a Standard Agents session's thread record in the session table.

use agent_worker_core::Failure;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use super::DynamoStore;
use super::keys::{EXPIRES_AT, PK, SK, THREAD_SK, session_pk};
use super::sdk_error::store_error;
use agent_worker_core::agents::{ThreadRecord, ThreadStore, ThreadStoreError};
use agent_worker_core::session::{SessionId, StoreError};

/// Records in the session table: `session#<id>` / `thread`, the record's JSON in `doc`, saved
/// with a condition on its version. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DynamoThreadStore {
    store: DynamoStore,
}

impl DynamoThreadStore {
    /// Records in `store`'s table.
    pub fn new(store: DynamoStore) -> Self {
        Self { store }
    }
}

#[async_trait]
impl ThreadStore for DynamoThreadStore {
    async fn load(&self, session: &SessionId) -> Result<Option<ThreadRecord>, ThreadStoreError> {
        let out = self
            .store
            .client()
            .get_item()
            .table_name(self.store.table())
            .key(PK, AttributeValue::S(session_pk(session)))
            .key(SK, AttributeValue::S(THREAD_SK.into()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable(store_error("reading a session's thread", e)))?;
        let Some(doc) = out.item().and_then(|i| i.get("doc")).and_then(|d| d.as_s().ok()) else {
            return Ok(None);
        };
        serde_json::from_str(doc).map(Some).map_err(|e| {
            ThreadStoreError::Unavailable(Failure::caused_by("a thread record does not decode", e))
        })
    }

    async fn save(&self, record: &ThreadRecord) -> Result<u64, ThreadStoreError> {
        let mut next = record.clone();
        next.version += 1;
        let doc = serde_json::to_string(&next).map_err(|e| {
            ThreadStoreError::Unavailable(Failure::caused_by("a thread record does not encode", e))
        })?;
        let mut request = self
            .store
            .client()
            .put_item()
            .table_name(self.store.table())
            .item(PK, AttributeValue::S(session_pk(&record.session)))
            .item(SK, AttributeValue::S(THREAD_SK.into()))
            .item("doc", AttributeValue::S(doc))
            .item("version", AttributeValue::N(next.version.to_string()))
            .item(EXPIRES_AT, AttributeValue::N(self.store.expires_at().to_string()));
        request = if record.version == 0 {
            request.condition_expression("attribute_not_exists(pk)")
        } else {
            request
                .condition_expression("version = :v")
                .expression_attribute_values(":v", AttributeValue::N(record.version.to_string()))
        };
        match request.send().await {
            Ok(_) => Ok(next.version),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Err(ThreadStoreError::Conflict)
            }
            Err(e) => Err(unavailable(store_error("saving a session's thread", e))),
        }
    }
}

/// The thread store could not reach the table: the store's error, kept as the source.
fn unavailable(error: StoreError) -> ThreadStoreError {
    ThreadStoreError::Unavailable(Failure::caused_by("the session table failed", error))
}

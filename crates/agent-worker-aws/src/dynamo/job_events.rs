//! [`DynamoJobEvents`]: the events that settle jobs, in the table, so that a call waiting for a
//! job on one worker sees the completion the product reported to any other (`jobevent#<jobId>`,
//! the event's name as the sort key).

use std::collections::HashMap;
use std::time::Duration;

use agent_worker_core::Failure;
use agent_worker_core::engine::tools::openapi::{EventWaiter, JobWait, Settled};
use agent_worker_core::session::StoreError;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;

use super::DynamoStore;
use super::codec::{get_s, n, s};
use super::keys::{EXPIRES_AT, PK, SK, job_event_pk};
use super::sdk_error::store_error;

/// How often a waiting call looks for its job's event, by default.
pub const DEFAULT_JOB_POLL: Duration = Duration::from_millis(500);
/// How long a reported event is kept.
const KEEP_EVENTS: Duration = Duration::from_secs(24 * 3600);

/// Jobs' events on the table. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DynamoJobEvents {
    store: DynamoStore,
    poll: Duration,
}

impl DynamoJobEvents {
    /// Events in `store`'s table, looked for every [`DEFAULT_JOB_POLL`].
    pub fn new(store: DynamoStore) -> Self {
        Self {
            store,
            poll: DEFAULT_JOB_POLL,
        }
    }

    /// Looks for a waited job's event every `poll`.
    #[must_use]
    pub fn poll_every(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// Records that `event` happened to job `job_id`, with `payload` (as the product reported
    /// it). A second report of the same event of the same job replaces the first.
    pub async fn record(&self, job_id: &str, event: &str, payload: &Value) -> Result<(), StoreError> {
        let expires = (agent_worker_core::clock::now_ms() / 1000).saturating_add(KEEP_EVENTS.as_secs());
        let json = serde_json::to_string(payload)
            .map_err(|e| StoreError::Corrupt(Failure::caused_by(e.to_string(), e)))?;
        self.store
            .client()
            .put_item()
            .table_name(self.store.table())
            .set_item(Some(HashMap::from([
                (PK.to_owned(), s(job_event_pk(job_id))),
                (SK.to_owned(), s(event)),
                ("payload".to_owned(), s(json)),
                (EXPIRES_AT.to_owned(), n(expires)),
            ])))
            .send()
            .await
            .map_err(|e| store_error("recording a job's event", e))?;
        Ok(())
    }

    /// How `job` came out, if one of its events is there: one strongly consistent query.
    async fn settled(&self, job: &JobWait) -> Result<Option<Settled>, StoreError> {
        let out = self
            .store
            .client()
            .query()
            .table_name(self.store.table())
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(job_event_pk(&job.id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("looking for a job's event", e))?;
        let payload_of = |event: &str| {
            out.items()
                .iter()
                .find(|item| get_s(item, SK) == Some(event))
                .map(|item| {
                    get_s(item, "payload")
                        .and_then(|json| serde_json::from_str(json).ok())
                        .unwrap_or(Value::Null)
                })
        };
        if let Some(payload) = payload_of(&job.completion) {
            return Ok(Some(Settled::Completed(payload)));
        }
        Ok(job.failure.as_deref().and_then(payload_of).map(Settled::Failed))
    }
}

#[async_trait]
impl EventWaiter for DynamoJobEvents {
    async fn wait(&self, job: &JobWait) -> Settled {
        let waiting = async {
            loop {
                match self.settled(job).await {
                    Ok(Some(settled)) => return settled,
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, job = %job.id, "could not look for a job's event; looking again")
                    }
                }
                tokio::time::sleep(self.poll).await;
            }
        };
        tokio::time::timeout(job.timeout, waiting)
            .await
            .unwrap_or(Settled::TimedOut)
    }
}

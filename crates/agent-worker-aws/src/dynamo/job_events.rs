//! [`DynamoJobEvents`]: the jobs calls wait for, and the events that settle them, in the table,
//! so that a call waiting for a job on one worker sees the completion the product reported to
//! any other. A job is an item of the conversation whose call started it (`job#<jobId>` in its
//! partition), written when the call begins to wait; a report is one conditional update of that
//! item, so a report for a job no call of that conversation waits for is refused and kept
//! nowhere (the item goes when the wait ends, settled or timed out, so a late report is refused
//! too), and a conversation's delete takes its jobs with it.

use std::collections::HashMap;
use std::time::Duration;

use agent_worker_core::Failure;
use agent_worker_core::engine::tools::openapi::{EventWaiter, JobKey, JobWait, NoSuchJob, Settled};
use agent_worker_core::session::StoreError;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;

use super::DynamoStore;
use super::codec::{n, s};
use super::keys::{EXPIRES_AT, job_sk};
use super::sdk_error::{is_conditional_failure, store_error};
use agent_worker_core::protocol::ErrorChain;

/// How often a waiting call looks for its job's event, by default.
pub const DEFAULT_JOB_POLL: Duration = Duration::from_millis(500);
/// How long a job's item is kept after its wait began, beyond the wait itself.
const KEEP_JOBS: Duration = Duration::from_secs(24 * 3600);
/// The attribute holding a job's reported events: a map of event name to payload (JSON).
const EVENTS: &str = "events";

/// A report that was not recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// No call of the conversation waits for the job.
    #[error(transparent)]
    NoSuchJob(#[from] NoSuchJob),
    /// The table failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

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

    /// Records that `event` happened to `job`, with `payload` (as the product reported it): one
    /// conditional update of the job's item, refused ([`RecordError::NoSuchJob`]) when no call
    /// of that conversation waits for that job (none has begun to, or its wait has ended). A
    /// second report of the same event while the call waits replaces the first.
    pub async fn record(&self, job: &JobKey, event: &str, payload: &Value) -> Result<(), RecordError> {
        let json = serde_json::to_string(payload)
            .map_err(|e| StoreError::Corrupt(Failure::caused_by("the job's payload does not encode", e)))?;
        let written = self
            .store
            .client()
            .update_item()
            .table_name(self.store.table())
            .set_key(Some(self.store.key(&job.conversation, job_sk(&job.id))))
            .update_expression("SET #events.#event = :payload")
            .condition_expression("attribute_exists(#events)")
            .expression_attribute_names("#events", EVENTS)
            .expression_attribute_names("#event", event)
            .expression_attribute_values(":payload", s(json))
            .send()
            .await;
        match written {
            Ok(_) => Ok(()),
            Err(e) if is_conditional_failure(&e) => Err(NoSuchJob(job.clone()).into()),
            Err(e) => Err(store_error("recording a job's event", e).into()),
        }
    }

    /// Writes `job`'s item, with no event yet: from here a report of it is taken. A job started
    /// again under the same id begins with no event.
    async fn begin(&self, job: &JobWait) -> Result<(), StoreError> {
        let keep = job.timeout.saturating_add(KEEP_JOBS).as_secs();
        let expires = (agent_worker_core::clock::now_ms() / 1000).saturating_add(keep);
        let mut item = self.store.key(&job.conversation, job_sk(&job.id));
        item.insert(EVENTS.to_owned(), AttributeValue::M(HashMap::new()));
        item.insert(EXPIRES_AT.to_owned(), n(expires));
        self.store
            .client()
            .put_item()
            .table_name(self.store.table())
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| store_error("recording a job a call waits for", e))?;
        Ok(())
    }

    /// Ends the wait for `job`: its item goes, so a report of it from here on is
    /// [`RecordError::NoSuchJob`].
    async fn end(&self, job: &JobWait) -> Result<(), StoreError> {
        self.store
            .client()
            .delete_item()
            .table_name(self.store.table())
            .set_key(Some(self.store.key(&job.conversation, job_sk(&job.id))))
            .send()
            .await
            .map_err(|e| store_error("ending the wait for a job", e))?;
        Ok(())
    }

    /// How `job` came out, if one of its events is there: one strongly consistent read.
    async fn settled(&self, job: &JobWait) -> Result<Option<Settled>, StoreError> {
        let out = self
            .store
            .client()
            .get_item()
            .table_name(self.store.table())
            .set_key(Some(self.store.key(&job.conversation, job_sk(&job.id))))
            .projection_expression("#events")
            .expression_attribute_names("#events", EVENTS)
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("looking for a job's event", e))?;
        let events = out
            .item()
            .and_then(|item| item.get(EVENTS))
            .and_then(|events| events.as_m().ok());
        let payload_of = |event: &str| {
            events.and_then(|events| events.get(event)).map(|payload| {
                payload
                    .as_s()
                    .ok()
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
            while let Err(e) = self.begin(job).await {
                tracing::warn!(error = %ErrorChain(&e), job = %job.id, "could not record the job a call waits for; trying again");
                tokio::time::sleep(self.poll).await;
            }
            loop {
                match self.settled(job).await {
                    Ok(Some(settled)) => return settled,
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = %ErrorChain(&e), job = %job.id, "could not look for a job's event; looking again")
                    }
                }
                tokio::time::sleep(self.poll).await;
            }
        };
        let settled = tokio::time::timeout(job.timeout, waiting)
            .await
            .unwrap_or(Settled::TimedOut);
        // No call waits for it now: a later report of it is refused, not kept.
        if let Err(e) = self.end(job).await {
            tracing::warn!(error = %e, job = %job.id, "could not end the job's wait; its item expires by itself");
        }
        settled
    }
}

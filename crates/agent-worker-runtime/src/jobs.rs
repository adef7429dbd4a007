//! [`JobReports`]: the product reports the event that settles a job (a report is ready, a refund
//! failed), and a call waiting for that job on any worker sees it. The event must be one the
//! configuration's documents declare, with the job's id in its declared correlation field; the
//! report names the conversation whose call started the job (the call carried it to the product
//! in [`CONVERSATION_HEADER`](agent_worker_core::engine::tools::openapi::CONVERSATION_HEADER)), and it is
//! taken only while a call of that conversation waits for that job.

use serde_json::Value;

use agent_worker_aws::dynamo::{DynamoJobEvents, RecordError};
use agent_worker_core::engine::tools::openapi::{
    EventDeclarations, JobKey, MAX_JOB_PAYLOAD_BYTES, NoSuchJob, NotAJobEvent,
};
use agent_worker_core::session::{SessionId, StoreError};

/// A report that cannot be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The event is not declared, ends no job, or its payload lacks the job's id.
    #[error(transparent)]
    NotAJobEvent(#[from] NotAJobEvent),
    /// No call of the conversation waits for the job (it never began, or it is another
    /// conversation's): nothing was recorded.
    #[error(transparent)]
    NoSuchJob(#[from] NoSuchJob),
    /// The payload is larger than a report may carry.
    #[error("the payload is {bytes} bytes as JSON; a report carries at most {MAX_JOB_PAYLOAD_BYTES}")]
    TooLarge {
        /// Its size, as JSON.
        bytes: usize,
    },
    /// The table failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<RecordError> for ReportError {
    fn from(e: RecordError) -> Self {
        match e {
            RecordError::NoSuchJob(none) => Self::NoSuchJob(none),
            RecordError::Store(e) => Self::Store(e),
            other => Self::Store(StoreError::Backend(other.to_string().into())),
        }
    }
}

/// Reports of the events that settle jobs, checked and recorded in the table.
#[derive(Debug, Clone)]
pub struct JobReports {
    declarations: EventDeclarations,
    events: DynamoJobEvents,
}

impl JobReports {
    /// Reports checked against `declarations`, recorded in `events`.
    pub fn new(declarations: EventDeclarations, events: DynamoJobEvents) -> Self {
        Self { declarations, events }
    }

    /// Records that `event` happened with `payload` to the job of `conversation` the payload
    /// names; returns the job's id.
    pub async fn report(
        &self,
        conversation: &SessionId,
        event: &str,
        payload: &Value,
    ) -> Result<String, ReportError> {
        let bytes = payload.to_string().len();
        if bytes > MAX_JOB_PAYLOAD_BYTES {
            return Err(ReportError::TooLarge { bytes });
        }
        let id = self.declarations.job_of(event, payload)?;
        let job = JobKey {
            conversation: conversation.clone(),
            id,
        };
        self.events.record(&job, event, payload).await?;
        tracing::info!(event, job = %job.id, session = %conversation, "a job's event was reported");
        Ok(job.id)
    }
}

//! [`JobReports`]: the product reports the event that settles a job (a report is ready, a refund
//! failed), and a call waiting for that job on any worker sees it. The event must be one the
//! configuration's documents declare, with the job's id in its declared correlation field.

use serde_json::Value;

use crate::engine::tools::openapi::{EventDeclarations, NotAJobEvent};
use crate::session::StoreError;
use crate::session::dynamo::DynamoJobEvents;

/// A report that cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The event is not declared, ends no job, or its payload lacks the job's id.
    #[error(transparent)]
    NotAJobEvent(#[from] NotAJobEvent),
    /// The table failed.
    #[error(transparent)]
    Store(#[from] StoreError),
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

    /// Records that `event` happened with `payload`; returns the job it settles.
    pub async fn report(&self, event: &str, payload: &Value) -> Result<String, ReportError> {
        let job = self.declarations.job_of(event, payload)?;
        self.events.record(&job, event, payload).await?;
        tracing::info!(event, job = %job, "a job's event was reported");
        Ok(job)
    }
}

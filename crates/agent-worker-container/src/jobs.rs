//! `POST /jobs/events` with `{"event": "report:ready", "conversationId": "…", "payload": {...}}`:
//! the product's backend reports the event that settles a job of a conversation (the call that
//! started it carried the conversation to the product), and the call waiting for it on any
//! worker sees it. 202 with the job's id; 400 an event that is not declared, ends no job, or
//! lacks the job's id, or a conversation id that is none; 403 a person's own credential (a
//! person's token, the console's): only the backend's credential reports jobs; 404 no call of
//! that conversation waits for that job (it never began, or it is another conversation's: send
//! it again once the job has begun), or this host takes no reports; 413 a payload past
//! [`MAX_JOB_PAYLOAD_BYTES`](agent_worker_core::engine::tools::openapi::MAX_JOB_PAYLOAD_BYTES).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use super::ContainerHost;
use super::access::{Authority, checked_id};
use super::answers::{JobReport, JobReported};
use super::error::HostError;
use super::extract::JsonBody;
use agent_worker_core::session::SessionId;
use agent_worker_runtime::jobs::ReportError;

/// `POST /jobs/events`.
pub(super) async fn report(
    State(host): State<ContainerHost>,
    authority: Authority,
    JsonBody(report): JsonBody<JobReport>,
) -> Result<(StatusCode, Json<JobReported>), HostError> {
    if authority.own_person().is_some() {
        return Err(HostError::new(
            StatusCode::FORBIDDEN,
            "only the product's backend reports jobs' events; a person's credential does not",
        ));
    }
    let jobs = host
        .job_reports()
        .ok_or_else(|| HostError::not_found("this host takes no job reports"))?;
    let conversation: SessionId = checked_id("conversationId", report.conversation_id)?;
    match jobs.report(&conversation, &report.event, &report.payload).await {
        Ok(job) => Ok((
            StatusCode::ACCEPTED,
            Json(JobReported {
                job,
                event: report.event,
                conversation_id: conversation,
            }),
        )),
        Err(ReportError::NotAJobEvent(why)) => Err(HostError::field("event", why.to_string())),
        Err(ReportError::NoSuchJob(none)) => Err(HostError::not_found(none.to_string())),
        Err(too_large @ ReportError::TooLarge { .. }) => {
            Err(HostError::too_large("payload", too_large.to_string()))
        }
        Err(ReportError::Store(e)) => Err(HostError::store("recording a job's event", &e)),
        Err(other) => Err(HostError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            other.to_string(),
        )),
    }
}

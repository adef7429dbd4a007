//! `POST /jobs/events` with `{"event": "report:ready", "payload": {...}}`: the product reports the
//! event that settles a job, and a call waiting for it on any worker sees it. 202 with the job's
//! id; 400 an event that is not declared, ends no job, or lacks the job's id; 404 when this host
//! takes no reports.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::ContainerHost;
use super::error::HostError;
use super::extract::JsonBody;
use crate::hosts::jobs::ReportError;

/// A report, as the product sends it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Report {
    event: String,
    payload: Value,
}

/// `POST /jobs/events`.
pub(super) async fn report(
    State(host): State<ContainerHost>,
    JsonBody(report): JsonBody<Report>,
) -> Result<(StatusCode, Json<Value>), HostError> {
    let jobs = host
        .inner
        .jobs
        .get()
        .ok_or_else(|| HostError::not_found("this host takes no job reports"))?;
    match jobs.report(&report.event, &report.payload).await {
        Ok(job) => Ok((
            StatusCode::ACCEPTED,
            Json(json!({ "job": job, "event": report.event })),
        )),
        Err(ReportError::NotAJobEvent(why)) => Err(HostError::field("event", why.to_string())),
        Err(ReportError::Store(e)) => Err(HostError::store("recording a job's event", &e)),
    }
}

//! `POST /jobs/events` with `{"event": "report:ready", "payload": {...}}`: the product reports the
//! event that settles a job, and a call waiting for it on any worker sees it. 202 with the job's
//! id; 400 an event that is not declared, ends no job, or lacks the job's id; 404 when this host
//! takes no reports.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ContainerHost, error};
use crate::hosts::jobs::ReportError;

/// A report, as the product sends it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Report {
    event: String,
    payload: Value,
}

/// `POST /jobs/events`.
pub(super) async fn report(State(host): State<ContainerHost>, Json(report): Json<Report>) -> Response {
    let Some(jobs) = host.inner.jobs.get() else {
        return error(StatusCode::NOT_FOUND, "this host takes no job reports");
    };
    match jobs.report(&report.event, &report.payload).await {
        Ok(job) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({ "job": job, "event": report.event })),
        )
            .into_response(),
        Err(ReportError::NotAJobEvent(why)) => error(StatusCode::BAD_REQUEST, why),
        Err(e) => {
            tracing::error!(error = %e, "could not record a job's event");
            error(StatusCode::SERVICE_UNAVAILABLE, "the table failed")
        }
    }
}

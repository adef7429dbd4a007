//! `POST /turns/{turnId}/actions/{callId}?session=S&userId=U&accountId=A`: the person's tab
//! answers a UI action (`ui_action_requested`), and the call waiting for it on any worker reads
//! it. The body is the answer: `{"status": "taken"}` when the tab takes the request, then
//! `{"status": "done", "result": …, "isError": false}`, or `{"status": "refused", "reason": …}`
//! for a request the tab will not run (one of a turn that is no longer current).
//!
//! 200 `{"recorded": true}`; 200 `{"recorded": false}` when the answer already kept stays (a
//! call keeps its first final answer); 400 not an answer; 404 not that person's conversation,
//! or this host takes no answers.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{ContainerHost, SessionQuery, error};
use crate::session::ActionAnswer;

/// `POST /turns/{turnId}/actions/{callId}`.
pub(super) async fn answer(
    State(host): State<ContainerHost>,
    Path((turn_id, call_id)): Path<(String, String)>,
    Query(query): Query<SessionQuery>,
    body: Bytes,
) -> Response {
    let Some(answers) = host.inner.answers.get() else {
        return error(StatusCode::NOT_FOUND, "this host takes no answers to UI actions");
    };
    if let Err(refused) = query.check_person(&host, &turn_id).await {
        return refused;
    }
    let answer: ActionAnswer = match serde_json::from_slice(&body) {
        Ok(answer) => answer,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("the body is not an answer: {e}")),
    };
    match answers.record(&query.session, &turn_id, &call_id, &answer).await {
        Ok(recorded) => (StatusCode::OK, axum::Json(json!({ "recorded": recorded }))).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "could not record a UI action's answer");
            error(StatusCode::SERVICE_UNAVAILABLE, e.client_message())
        }
    }
}

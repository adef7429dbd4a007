//! `POST /turns/{turnId}/stop?session=S&userId=U&accountId=A` with `{"reason":"user_stop"}` or
//! `"superseded"`: a stop recorded for a turn of the person's conversation, which its worker
//! sees at its next look (202); 409 when the turn had already ended.

use super::access::{Acting, TurnPath};
use super::answers::{StopBody, StopRecorded};
use super::{ContainerHost, HostError};
use agent_worker_core::session::{Stop, StopCause, StopOutcome};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;

/// `POST /turns/{turnId}/stop?session=S…`.
pub(super) async fn stop_turn(
    State(host): State<ContainerHost>,
    TurnPath(turn_id): TurnPath,
    conversation: Acting,
    body: Bytes,
) -> Result<(StatusCode, axum::Json<StopRecorded>), HostError> {
    let reason = if body.is_empty() {
        None
    } else {
        serde_json::from_slice::<StopBody>(&body)
            .map_err(|e| HostError::field("body", format!("the body is not a stop: {e}")))?
            .reason
    };
    let cause = match reason.as_deref() {
        None | Some("user_stop") => StopCause::UserStop,
        Some("superseded") => StopCause::Superseded,
        Some(other) => {
            let shown: String = other.chars().take(64).collect();
            let more = if shown.len() < other.len() { "…" } else { "" };
            return Err(HostError::field(
                "reason",
                format!("reason {shown:?}{more} is not user_stop or superseded"),
            ));
        }
    };
    match host
        .inner
        .store
        .request_stop(&conversation.id, &turn_id, Stop::now(cause))
        .await
    {
        Ok(StopOutcome::Recorded) => Ok((
            StatusCode::ACCEPTED,
            axum::Json(StopRecorded {
                turn_id: turn_id.clone(),
                stop: cause,
            }),
        )),
        Ok(StopOutcome::AlreadyEnded) => Err(HostError::new(
            StatusCode::CONFLICT,
            format!("turn {turn_id} had already ended"),
        )),
        Err(e) => Err(HostError::store("recording a stop", &e)),
    }
}

//! `POST /turns/{turnId}/actions/{callId}?session=S&userId=U&accountId=A`: the person's tab
//! answers a UI action (`ui_action_requested`), and the call waiting for it on any worker reads
//! it. The body is the answer: `{"status": "taken"}` when the tab takes the request, then
//! `{"status": "done", "result": …, "isError": false}`, or `{"status": "refused", "reason": …}`
//! for a request the tab will not run (one of a turn that is no longer current).
//!
//! 200 `{"recorded": true}`; 200 `{"recorded": false}` when the answer already kept stays (a
//! call keeps its first final answer); 400 not an answer, or an id that is not one; 404 not that
//! person's conversation, or this host takes no answers; 413 an answer larger than
//! [`MAX_ANSWER_BYTES`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;

use super::access::{Acting, CallPath};
use super::answers::ActionRecorded;
use super::{ContainerHost, HostError};
use agent_worker_core::session::{ActionAnswer, SessionId, TurnId};

/// The largest answer kept, in bytes of its JSON: what one table item holds with room to spare.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// `POST /turns/{turnId}/actions/{callId}`.
pub(super) async fn answer(
    State(host): State<ContainerHost>,
    call: CallPath,
    conversation: Acting,
    body: Bytes,
) -> Result<Json<ActionRecorded>, HostError> {
    let recorded = record(&host, &conversation.id, &call.turn_id, &call.call_id, &body).await?;
    Ok(Json(ActionRecorded { recorded }))
}

/// Records `body`, the answer to UI action `call_id` of turn `turn_id` of `conversation` (the
/// person's, checked by the caller): whether it was kept (a call keeps its first final answer).
/// 404 where this host takes no answers; 413 over [`MAX_ANSWER_BYTES`]; 400 not an answer.
pub(crate) async fn record(
    host: &ContainerHost,
    conversation: &SessionId,
    turn_id: &TurnId,
    call_id: &str,
    body: &[u8],
) -> Result<bool, HostError> {
    let answers = host
        .ui_answers()
        .ok_or_else(|| HostError::not_found("this host takes no answers to UI actions"))?;
    if body.len() > MAX_ANSWER_BYTES {
        return Err(HostError::too_large(
            "body",
            format!(
                "the answer is {} bytes; at most {MAX_ANSWER_BYTES} are kept",
                body.len()
            ),
        ));
    }
    let answer: ActionAnswer = serde_json::from_slice(body)
        .map_err(|e| HostError::field("body", format!("the body is not an answer: {e}")))?;
    answers
        .record(conversation, turn_id, call_id, &answer)
        .await
        .map_err(|e| HostError::store("recording a UI action's answer", &e))
}

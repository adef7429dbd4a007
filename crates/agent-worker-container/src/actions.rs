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
use serde_json::{Value, json};

use super::access::{Acting, CallPath};
use super::{ContainerHost, HostError};
use agent_worker_core::session::ActionAnswer;

/// The largest answer kept, in bytes of its JSON: what one table item holds with room to spare.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// `POST /turns/{turnId}/actions/{callId}`.
pub(super) async fn answer(
    State(host): State<ContainerHost>,
    call: CallPath,
    conversation: Acting,
    body: Bytes,
) -> Result<Json<Value>, HostError> {
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
    let answer: ActionAnswer = serde_json::from_slice(&body)
        .map_err(|e| HostError::field("body", format!("the body is not an answer: {e}")))?;
    let recorded = answers
        .record(&conversation.id, &call.turn_id, &call.call_id, &answer)
        .await
        .map_err(|e| HostError::store("recording a UI action's answer", &e))?;
    Ok(Json(json!({ "recorded": recorded })))
}

//! The session control plane over HTTP, behind the API key and the owner check:
//!
//! - `POST /sessions/{id}/commands?userId=U&accountId=A`, a body of `{"type": "steer", "prompt":
//!   …}`, `{"type": "follow_up", "prompt": …}` or `{"type": "abort"}`: 202 `{"ok": true,
//!   "runId"}` once the running turn keeps it; `{"ok": false, "error": {code, message,
//!   retryable}}` before, with 409 (`no_active_run`), 400 (`invalid_command`) or 503
//!   (`store_failed`).
//! - `GET /sessions/{id}/state?userId=U&accountId=A`: `{status, activeRunId?, commands}`.
//! - `GET /sessions/{id}/entries?since=N&limit=L&userId=U&accountId=A`: the durable history from
//!   place `N` (0 by default), at most `L` entries (100 by default, at most 1,000), each `{seq,
//!   turnId?, message}`, and `next`, the place to read on from.
//!
//! 404 for a conversation that is someone else's, as on every route of a person's conversations.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::access::{Acting, Owned};
use super::extract::Params;
use super::{ContainerHost, HostError};
use agent_worker_contract::control::refusals;
use agent_worker_contract::{CommandAnswer, Refused, SessionCommand, SessionControl};
use agent_worker_core::engine::StoreControl;

/// For `entries`: from where, and how many.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(super) struct Page {
    /// From this place (the last read's `next`); 0 by default.
    #[serde(default)]
    since: u64,
    /// How many entries (1 to 1,000, 100 by default).
    limit: Option<usize>,
}

/// Entries a read gives when it names no limit, and the most it may ask for.
const ENTRIES: (usize, usize) = (100, 1_000);

fn status_of(refused: &Refused) -> StatusCode {
    match refused.code.as_str() {
        refusals::NO_ACTIVE_RUN => StatusCode::CONFLICT,
        refusals::STORE_FAILED => StatusCode::SERVICE_UNAVAILABLE,
        refusals::TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// `POST /sessions/{id}/commands`.
pub(super) async fn command(
    State(host): State<ContainerHost>,
    conversation: Acting,
    body: Bytes,
) -> Response {
    let result = match serde_json::from_slice::<SessionCommand>(&body) {
        Ok(command) => {
            StoreControl::new(host.store().clone())
                .dispatch(&conversation.id, command)
                .await
        }
        Err(e) => Err(Refused::new(
            refusals::INVALID_COMMAND,
            format!("the body is not a command: {e}"),
            false,
        )),
    };
    let status = match &result {
        Ok(_) => StatusCode::ACCEPTED,
        Err(refused) => status_of(refused),
    };
    (status, Json(CommandAnswer::from(&result))).into_response()
}

/// `GET /sessions/{id}/entries`.
pub(super) async fn entries(
    State(host): State<ContainerHost>,
    conversation: Owned,
    Params(page): Params<Page>,
) -> Result<Response, HostError> {
    let limit = page.limit.unwrap_or(ENTRIES.0);
    if !(1..=ENTRIES.1).contains(&limit) {
        return Err(HostError::field(
            "limit",
            format!("limit must be from 1 to {}", ENTRIES.1),
        ));
    }
    StoreControl::new(host.store().clone())
        .entries(&conversation.id, page.since, limit)
        .await
        .map(|entries| Json(entries).into_response())
        .map_err(|refused| HostError::new(status_of(&refused), refused.message))
}

/// `GET /sessions/{id}/state`.
pub(super) async fn state(
    State(host): State<ContainerHost>,
    conversation: Owned,
) -> Result<Response, HostError> {
    StoreControl::new(host.store().clone())
        .state(&conversation.id)
        .await
        .map(|state| Json(state).into_response())
        .map_err(|refused| HostError::new(status_of(&refused), refused.message))
}

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
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{ContainerHost, check_owner, error};
use crate::engine::StoreControl;
use crate::protocol::control::{answer, refusals};
use crate::protocol::{Refused, SessionCommand, SessionControl};

/// Who asks, and for `entries` from where.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Person {
    user_id: Option<String>,
    account_id: Option<String>,
    #[serde(default)]
    since: u64,
    limit: Option<usize>,
}

/// Entries a read gives when it names no limit, and the most it may ask for.
const ENTRIES: (usize, usize) = (100, 1_000);

impl Person {
    async fn check(&self, host: &ContainerHost, session: &str) -> Result<(), Response> {
        check_owner(
            host,
            session,
            self.user_id.as_deref(),
            self.account_id.as_deref(),
            "no conversation of yours by that id",
        )
        .await
    }
}

fn status_of(refused: &Refused) -> StatusCode {
    match refused.code.as_str() {
        refusals::NO_ACTIVE_RUN => StatusCode::CONFLICT,
        refusals::STORE_FAILED => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// `POST /sessions/{id}/commands`.
pub(super) async fn command(
    State(host): State<ContainerHost>,
    Path(session): Path<String>,
    Query(person): Query<Person>,
    body: Bytes,
) -> Response {
    if let Err(refused) = person.check(&host, &session).await {
        return refused;
    }
    let result = match serde_json::from_slice::<SessionCommand>(&body) {
        Ok(command) => {
            StoreControl::new(host.inner.store.clone())
                .dispatch(&session, command)
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
    (status, Json(answer(&result))).into_response()
}

/// `GET /sessions/{id}/entries`.
pub(super) async fn entries(
    State(host): State<ContainerHost>,
    Path(session): Path<String>,
    Query(person): Query<Person>,
) -> Response {
    if let Err(refused) = person.check(&host, &session).await {
        return refused;
    }
    let limit = person.limit.unwrap_or(ENTRIES.0).clamp(1, ENTRIES.1);
    match StoreControl::new(host.inner.store.clone())
        .entries(&session, person.since, limit)
        .await
    {
        Ok(entries) => (StatusCode::OK, Json(entries)).into_response(),
        Err(refused) => error(status_of(&refused), refused.message),
    }
}

/// `GET /sessions/{id}/state`.
pub(super) async fn state(
    State(host): State<ContainerHost>,
    Path(session): Path<String>,
    Query(person): Query<Person>,
) -> Response {
    if let Err(refused) = person.check(&host, &session).await {
        return refused;
    }
    match StoreControl::new(host.inner.store.clone()).state(&session).await {
        Ok(state) => (StatusCode::OK, Json(state)).into_response(),
        Err(refused) => error(status_of(&refused), refused.message),
    }
}

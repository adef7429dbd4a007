//! Amazon Bedrock AgentCore Runtime's HTTP contract, served beside the product's routes by every
//! `serve`, so that its container runs as an AgentCore Runtime as it is (port 8080; nothing to
//! switch on; `docs/agentcore.md`):
//!
//! - `GET /ping`: `{"status": "Healthy"}`, or `"HealthyBusy"` while a turn runs here, with
//!   `time_of_last_update` (Unix seconds) the moment the status last changed: AgentCore keeps a
//!   busy session's microVM for as long as the status says so and its time is current.
//! - `POST /invocations`: `{"prompt": "…"}` (and, optionally, `turnId`) runs a turn of the
//!   conversation the `X-Amzn-Bedrock-AgentCore-Runtime-Session-Id` header names (a new one,
//!   answered in the same header, when it names none); the answer streams the turn's events as
//!   Server-Sent Events (`Accept: text/event-stream`, as `GET /turns/{id}/events` does), or is
//!   the turn's text and terminal as JSON once it ends. A body that is AG-UI's `RunAgentInput`
//!   (AgentCore's AG-UI protocol) runs as `POST /agui` does.
//!
//! - `GET /ws`: AgentCore's bidirectional WebSocket ([`ws`]).
//!
//! The person is the request's, as on every route ([`Asker`]): a person's token
//! (`--auth jwt`, with AgentCore's inbound JWT authorizer passing `Authorization` through, as
//! `deploy/agentcore.yaml` sets it), the user the runtime names for an IAM caller
//! (`--auth iam`), or (outside AgentCore) the API key and the ids the query names.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::access::{Asker, TakenUntil, checked_id};
use crate::events::{Followed, Heard, follow_turn, logged_sse, stream_place, takes_event_stream};
use crate::extract::adapted_turn;
use crate::{ContainerHost, HostError, agui, turns};

mod ws;

use agent_worker_contract::AgentEvent;
use agent_worker_core::session::{Owner, SessionId, TurnId};
use agent_worker_runtime::AgentTurnPayload;
pub(crate) use ws::upgrade;
pub use ws::{MAX_WS_MESSAGE_BYTES, PING_EVERY, SILENT_FOR};

/// The header that names the conversation (AgentCore's runtime session).
pub(crate) const SESSION_HEADER: &str = "x-amzn-bedrock-agentcore-runtime-session-id";

/// Whether turns run here, and since when that has been so: what `/ping` says.
#[derive(Debug)]
pub(crate) struct Activity {
    /// Busy, and since when (Unix seconds).
    state: Mutex<(bool, u64)>,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new((false, unix_seconds())),
        }
    }

    /// `running` turns run here now.
    pub(crate) fn turns(&self, running: usize) {
        let busy = running > 0;
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.0 != busy {
            *state = (busy, unix_seconds());
        }
    }

    fn now(&self) -> (bool, u64) {
        *self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `GET /ping`.
pub(crate) async fn ping(State(host): State<ContainerHost>) -> Response {
    let (busy, since) = host.activity().now();
    axum::Json(json!({
        "status": if busy { "HealthyBusy" } else { "Healthy" },
        "time_of_last_update": since,
    }))
    .into_response()
}

/// AgentCore's own body: the person's words, and the turn's id when the caller gives one (a
/// retried invocation with the same id runs once).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Invocation {
    prompt: String,
    #[serde(default)]
    turn_id: Option<String>,
}

impl Invocation {
    /// The turn it asks for in `session`: its id (the one named, or a new one) and its payload.
    fn turn(self, session: &SessionId, person: &Owner) -> Result<(TurnId, AgentTurnPayload), HostError> {
        let turn_id: TurnId = match self.turn_id {
            Some(named) => checked_id("turnId", named)?,
            None => TurnId::random(),
        };
        let turn = AgentTurnPayload::new(turn_id.clone(), session.clone(), person, self.prompt);
        Ok((turn_id, turn))
    }
}

/// The conversation a request's session header names, or a new one when it names none.
fn session_of(headers: &HeaderMap) -> Result<SessionId, HostError> {
    match headers.get(SESSION_HEADER) {
        Some(named) => checked_id(
            "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id",
            named.to_str().unwrap_or("\u{0}"),
        ),
        None => checked_id("session", uuid::Uuid::new_v4().to_string()),
    }
}

/// `POST /invocations`.
pub(crate) async fn invoke(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    token: Option<Extension<TakenUntil>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HostError> {
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| HostError::field("body", format!("the body is not JSON: {e}")))?;
    if value.get("threadId").is_some() && value.get("runId").is_some() {
        let input = serde_json::from_value(value)
            .map_err(|e| HostError::field("body", format!("the body is not AG-UI's RunAgentInput: {e}")))?;
        return Ok(agui::sse(agui::start_run(&host, &person, input).await?));
    }
    let invocation: Invocation = serde_json::from_value(value).map_err(|e| {
        HostError::field(
            "body",
            format!("the body is not an invocation ({{\"prompt\": \"…\"}}): {e}"),
        )
    })?;
    let session = session_of(&headers)?;
    let (turn_id, turn) = invocation.turn(&session, &person)?;
    let turn = adapted_turn(&host, turn)?;
    // The answer's stream first: no turn starts whose answer cannot be given.
    let place = stream_place(&host, &person)?;
    turns::start(&host, &person, turn).await?;
    let followed = follow_turn(&host, place, &session, &turn_id, None);
    let streamed = takes_event_stream(&headers);
    let mut response = if streamed {
        logged_sse(followed, turn_id, token.map(|Extension(until)| until))
    } else {
        axum::Json(collected(followed, &session, &turn_id).await).into_response()
    };
    if let Ok(named) = HeaderValue::from_str(session.as_str()) {
        response.headers_mut().insert(SESSION_HEADER, named);
    }
    Ok(response)
}

/// The turn's answer once it has ended: its text and its terminal event.
pub(crate) async fn collected(
    followed: impl futures_util::Stream<Item = Followed>,
    session: &SessionId,
    turn_id: &TurnId,
) -> Value {
    answer_of(crate::events::heard_to_end(followed).await, session, turn_id)
}

/// A turn's answer from what was heard of it to its end.
pub(crate) fn answer_of(heard: Heard, session: &SessionId, turn_id: &TurnId) -> Value {
    let terminal = match heard.not_started {
        true => Some(AgentEvent::failed(
            "the turn did not start: no worker took it in time",
            true,
            Some("not_started"),
        )),
        false => heard.terminal,
    };
    json!({ "sessionId": session, "turnId": turn_id, "text": heard.text, "terminal": terminal })
}

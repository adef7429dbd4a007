//! AgentCore Runtime's bidirectional WebSocket: `GET /ws` on the same port as `/invocations`,
//! one socket per conversation (the session header's, or a new one), authenticated as
//! `/invocations` is. A conversation the header names is claimed for the person as the socket
//! opens (another person's is 404, and nothing changes; a new one is claimed by its first turn);
//! each command and answer is checked again to be the person's before it is written. Then, one
//! JSON text message each way:
//!
//! | the client sends | what it does | the answer |
//! | --- | --- | --- |
//! | the `/invocations` body, `{"prompt", "turnId"?}` | a turn of the conversation | `{"type": "turn", "sessionId", "turnId"}`, then its events |
//! | `{"type": "steer" \| "follow_up", "prompt"}`, `{"type": "abort"}` | the session's command to the running turn, as `POST /sessions/{id}/commands` | `{"type": "command", "ok", …}` |
//! | `{"type": "approval", "decision": "approve" \| "decline"}` | answers the approval the socket's last turn waits for: the next turn of its chain | `{"type": "turn", …}`, then its events |
//! | `{"type": "action", "turnId", "callId", "answer"}` | a UI action's answer, as `POST /turns/{id}/actions/{callId}` | `{"type": "action", "recorded"}` |
//!
//! Each event a turn logs comes as `{"type": "event", "turnId", "seq", "event"}` (the turn's log,
//! read as `GET /turns/{id}/events` reads it). A message that is not one of these, or one that
//! is refused, is answered `{"type": "error", "error", "status"}` and the socket stays open. A
//! message over [`MAX_WS_MESSAGE_BYTES`] (or the host's body limit, when smaller) closes it
//! (1009), text that is not UTF-8 too (1007). The server pings every [`PING_EVERY`]; a client
//! silent for [`SILENT_FOR`] (no pong either) is gone, and its socket closed. A socket opened
//! with a token (`--auth jwt`: a person's, or the backend's) closes when the token does (its
//! `exp` and the verifier's leeway: 1008, "the token has expired"): the client opens another
//! with a new token. A socket that
//! closes mid-turn leaves the turn running: its events stay in the log, and the turn's result in
//! the conversation. At shutdown open sockets are cut as the process ends (their turns go on
//! as every running turn does, within the shutdown grace).

use std::pin::Pin;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures_util::{Stream, StreamExt as _};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Invocation, session_of};
use crate::access::{Asker, TakenUntil, theirs};
use crate::chain;
use crate::events::{Followed, follow_turn, stream_place};
use crate::extract::adapted_turn;
use crate::{ContainerHost, HostError, turns};
use agent_worker_contract::control::answer;
use agent_worker_contract::{ErrorChain, SessionCommand, SessionControl as _};
use agent_worker_core::engine::StoreControl;
use agent_worker_core::session::{Owner, SessionId, TurnId};

/// The largest message a client may send on the socket, in bytes (a frame, or a message of
/// frames): past it, the socket closes with 1009.
pub const MAX_WS_MESSAGE_BYTES: usize = 1024 * 1024;

/// How often the server pings an open socket.
pub const PING_EVERY: Duration = Duration::from_secs(30);

/// How long a socket may hear nothing from its client (a pong included) before it is closed.
pub const SILENT_FOR: Duration = Duration::from_secs(120);

/// `GET /ws`.
pub(crate) async fn upgrade(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    taken_until: Option<Extension<TakenUntil>>,
    headers: HeaderMap,
    socket: WebSocketUpgrade,
) -> Result<Response, HostError> {
    let token = taken_until.map(|Extension(until)| until);
    let session = session_of(&headers)?;
    // A conversation the header names is the person's, or no one's yet; a new one is claimed
    // by its first turn.
    if headers.contains_key(super::SESSION_HEADER) {
        theirs(&host, &person, &session, true).await?;
    }
    let limit = host.config().body_limit.min(MAX_WS_MESSAGE_BYTES);
    Ok(socket
        .max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |socket| {
            let talk = Talk {
                host,
                person,
                session,
                following: None,
                last_turn: None,
                token,
            };
            talk.run(socket)
        }))
}

/// A message from the client that names its kind.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Said {
    Steer {
        prompt: String,
    },
    FollowUp {
        prompt: String,
    },
    Abort,
    Approval {
        decision: String,
    },
    #[serde(rename_all = "camelCase")]
    Action {
        turn_id: String,
        call_id: String,
        answer: Value,
    },
}

type Followed_ = Pin<Box<dyn Stream<Item = Followed> + Send>>;

/// One socket's conversation, and the turn it follows.
struct Talk {
    host: ContainerHost,
    person: Owner,
    session: SessionId,
    /// The turn whose events the socket is sent, while it runs.
    following: Option<(TurnId, Followed_)>,
    /// The last turn the socket started: the one an approval answers.
    last_turn: Option<TurnId>,
    /// When the token the socket was opened with stops being taken, if it was opened with one.
    token: Option<TakenUntil>,
}

impl Talk {
    async fn run(mut self, mut socket: WebSocket) {
        let opened = json!({"type": "session", "sessionId": self.session});
        if send(&mut socket, &opened).await.is_err() {
            return;
        }
        let mut pings = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
        let mut last_heard = tokio::time::Instant::now();
        let token_ends = TakenUntil::ended(self.token);
        tokio::pin!(token_ends);
        loop {
            tokio::select! {
                () = &mut token_ends => {
                    let frame = CloseFrame { code: close_code::POLICY, reason: "the token has expired".into() };
                    let _closing = socket.send(Message::Close(Some(frame))).await;
                    return;
                }
                _ = pings.tick() => {
                    if last_heard.elapsed() >= SILENT_FOR {
                        let frame = CloseFrame { code: close_code::AWAY, reason: "the client went silent".into() };
                        let _closing = socket.send(Message::Close(Some(frame))).await;
                        return;
                    }
                    if socket.send(Message::Ping(Vec::new().into())).await.is_err() {
                        return;
                    }
                }
                heard = socket.recv() => match heard {
                    Some(Ok(Message::Text(text))) => {
                        last_heard = tokio::time::Instant::now();
                        let answer = self.take(text.as_str()).await;
                        if send(&mut socket, &answer).await.is_err() {
                            return;
                        }
                    }
                    Some(Ok(Message::Binary(_))) => {
                        last_heard = tokio::time::Instant::now();
                        let refused = refusal(StatusCode::BAD_REQUEST, "this socket takes JSON text messages");
                        if send(&mut socket, &refused).await.is_err() {
                            return;
                        }
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => last_heard = tokio::time::Instant::now(),
                    // Closed (or gone): the turn goes on; its events stay in its log.
                    Some(Ok(Message::Close(_))) | None => return,
                    Some(Err(e)) => {
                        let why = ErrorChain(&e).to_string();
                        tracing::info!(error = %why, "a WebSocket message could not be read");
                        let lower = why.to_ascii_lowercase();
                        let code = if lower.contains("too long") || lower.contains("too big") {
                            close_code::SIZE
                        } else if lower.contains("utf-8") || lower.contains("utf8") {
                            close_code::INVALID
                        } else {
                            close_code::PROTOCOL
                        };
                        let limit = self.host.config().body_limit.min(MAX_WS_MESSAGE_BYTES);
                        let reason = format!("a message is at most {limit} bytes, one JSON text each");
                        let frame = CloseFrame { code, reason: reason.into() };
                        let _closing = socket.send(Message::Close(Some(frame))).await;
                        return;
                    }
                },
                next = next_of(&mut self.following) => {
                    let Some(event) = self.told(next) else { continue };
                    if send(&mut socket, &event).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// What the followed turn's next item says to the client, if anything.
    fn told(&mut self, next: Option<Followed>) -> Option<Value> {
        let turn_id = self.following.as_ref().map(|(turn, _)| turn.clone())?;
        match next {
            Some(Followed::Logged(logged)) => Some(json!({
                "type": "event", "turnId": turn_id, "seq": logged.seq, "event": logged.event,
            })),
            Some(Followed::NotStarted) => {
                self.following = None;
                Some(json!({"type": "event", "turnId": turn_id,
                    "event": {"type": "stream_ended", "reason": "not_started"}}))
            }
            None => {
                self.following = None;
                None
            }
        }
    }

    /// Takes one message from the client: its answer.
    async fn take(&mut self, text: &str) -> Value {
        let Ok(message) = serde_json::from_str::<Value>(text) else {
            return refusal(StatusCode::BAD_REQUEST, "the message is not JSON");
        };
        let answered = match message.get("type") {
            None => match serde_json::from_value::<Invocation>(message) {
                Ok(invocation) => self.start(invocation).await,
                Err(e) => Err(HostError::field(
                    "message",
                    format!("not a turn ({{\"prompt\": \"…\"}}) nor a message with a type: {e}"),
                )),
            },
            Some(_) => match serde_json::from_value::<Said>(message) {
                Ok(said) => self.said(said).await,
                Err(e) => Err(HostError::field(
                    "type",
                    format!(
                        "not a message this socket takes (steer, follow_up, abort, approval, action): {e}"
                    ),
                )),
            },
        };
        answered.unwrap_or_else(|e| refusal(e.status(), e.message()))
    }

    /// Starts the turn `invocation` asks for and follows it.
    async fn start(&mut self, invocation: Invocation) -> Result<Value, HostError> {
        let (turn_id, turn) = invocation.turn(&self.session, &self.person)?;
        let turn = adapted_turn(&self.host, turn)?;
        let place = stream_place(&self.host, &self.person)?;
        turns::start(&self.host, &self.person, turn).await?;
        Ok(self.follow(turn_id, place))
    }

    fn follow(&mut self, turn_id: TurnId, place: crate::events::StreamPlace) -> Value {
        let followed = follow_turn(&self.host, place, &self.session, &turn_id, None);
        self.following = Some((turn_id.clone(), Box::pin(followed)));
        self.last_turn = Some(turn_id.clone());
        json!({"type": "turn", "sessionId": self.session, "turnId": turn_id})
    }

    async fn said(&mut self, said: Said) -> Result<Value, HostError> {
        let command = match said {
            // Checked where every approval's answer is (`chain::answer_approval`).
            Said::Approval { decision } => return self.approval(&decision).await,
            Said::Action {
                turn_id,
                call_id,
                answer,
            } => {
                self.still_theirs().await?;
                return self.action(turn_id, call_id, &answer).await;
            }
            Said::Steer { prompt } => SessionCommand::Steer { prompt },
            Said::FollowUp { prompt } => SessionCommand::FollowUp { prompt },
            Said::Abort => SessionCommand::Abort,
        };
        self.still_theirs().await?;
        let done = StoreControl::new(self.host.store().clone())
            .dispatch(&self.session, command)
            .await;
        let mut answered = answer(&done);
        answered["type"] = json!("command");
        Ok(answered)
    }

    /// The conversation is still the person's (it may have been deleted since the socket
    /// opened): checked before anything is written.
    async fn still_theirs(&mut self) -> Result<(), HostError> {
        theirs(&self.host, &self.person, &self.session, false)
            .await
            .map(drop)
    }

    /// Answers the approval the socket's last turn waits for.
    async fn approval(&mut self, decision: &str) -> Result<Value, HostError> {
        let approve = chain::decision_named(Some(decision))
            .ok_or_else(|| HostError::field("decision", "an approval's decision is approve or decline"))?;
        let turn = self.last_turn.clone().ok_or_else(|| {
            HostError::new(
                StatusCode::CONFLICT,
                "no turn of this socket waits for an approval",
            )
        })?;
        let place = stream_place(&self.host, &self.person)?;
        let next =
            chain::answer_approval(&self.host, &self.person, &self.session, turn.as_str(), approve).await?;
        Ok(self.follow(next, place))
    }

    /// Records a UI action's answer for a turn of the socket's conversation, as
    /// `POST /turns/{id}/actions/{callId}` does.
    async fn action(&mut self, turn_id: String, call_id: String, answer: &Value) -> Result<Value, HostError> {
        let turn_id: TurnId = crate::access::checked_id("turnId", turn_id)?;
        let call_id: String = crate::access::checked_text("callId", call_id)?;
        let body = answer.to_string();
        let recorded =
            crate::actions::record(&self.host, &self.session, &turn_id, &call_id, body.as_bytes()).await?;
        Ok(json!({"type": "action", "recorded": recorded}))
    }
}

/// The next item of the followed turn; never, while none is followed.
async fn next_of(following: &mut Option<(TurnId, Followed_)>) -> Option<Followed> {
    match following {
        Some((_, followed)) => followed.next().await,
        None => std::future::pending().await,
    }
}

fn refusal(status: StatusCode, message: &str) -> Value {
    json!({"type": "error", "error": message, "status": status.as_u16()})
}

async fn send(socket: &mut WebSocket, value: &Value) -> Result<(), axum::Error> {
    socket.send(Message::Text(value.to_string().into())).await
}

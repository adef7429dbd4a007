//! The agent as an MCP server: `POST /mcp`, MCP's Streamable HTTP transport, each request
//! answered as JSON or, for an `ask` with a progress token, as server-sent events (`GET /mcp`
//! is 405: no stream of the server's own, as the transport allows).
//!
//! - The stateless revision ([`STATELESS_VERSION`], 2026-07-28): `server/discover` names the
//!   revisions and capabilities, and each request carries its revision in `_meta`
//!   (`io.modelcontextprotocol/protocolVersion`); one this server does not speak is refused
//!   (-32022, naming those it does).
//! - The handshake revisions ([`HANDSHAKE_VERSIONS`]): `initialize` answers the client's when
//!   this server speaks it, else the newest; no session is kept (no `Mcp-Session-Id`).
//! - `tools/list`: `ask` (a message to a conversation of the person's, or a new one: the turn's
//!   answer, once it ends), `list_conversations` and `get_conversation` (as `GET /conversations`
//!   and `GET /conversations/{id}` answer them).
//! - `tools/call` runs one. An `ask` with a progress token, from a client that takes a stream,
//!   is answered as server-sent events: the turn's progress, then the answer. A turn that
//!   fails, or a conversation that is not the person's, is a result with `isError` (nothing
//!   written); wrong arguments or an unknown tool are JSON-RPC's invalid params. A body that is
//!   not JSON-RPC, a batch, or an unknown method get JSON-RPC's errors.
//!
//! - `notifications/cancelled` naming an `ask` of the person's under way here stops its turn,
//!   as `POST /turns/{id}/stop` does.
//!
//! The person is the request's, as on every route ([`Asker`]): their token, or the API key and
//! the ids the query names. Who may act on a conversation is decided where every route decides
//! it (`turns::start`, `Conversations`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::access::{Asker, checked_id};
use super::events::{Followed, Heard, follow_turn, stream_place};
use super::extract::adapted_turn;
use super::{ContainerHost, HostError, agentcore, agui, turns};
use agent_worker_contract::{AgentEvent, ErrorChain};
use agent_worker_core::session::{Owner, SessionId, TurnId};
use agent_worker_runtime::AgentTurnPayload;
use futures_util::StreamExt as _;

/// The stateless revision this server speaks: no handshake, the revision in each request.
pub const STATELESS_VERSION: &str = "2026-07-28";
/// The revisions reached through `initialize` this server speaks, newest first.
pub const HANDSHAKE_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// Where a stateless request names its revision.
const VERSION_META_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// The error of a request in a revision this server does not speak.
const UNSUPPORTED_VERSION: i64 = -32022;

/// JSON-RPC's error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

/// A JSON-RPC error, with its code (and its data, for some).
struct RpcError(i64, String);

fn error_answer(id: &Value, RpcError(code, message): RpcError) -> Value {
    let mut error = json!({"code": code, "message": message});
    if code == UNSUPPORTED_VERSION {
        error["data"] = json!({ "supported": supported() });
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// Every revision this server speaks, newest first.
fn supported() -> Vec<&'static str> {
    std::iter::once(STATELESS_VERSION)
        .chain(HANDSHAKE_VERSIONS)
        .collect()
}

/// `POST /mcp`.
pub(super) async fn post(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            let answer = error_answer(
                &Value::Null,
                RpcError(PARSE_ERROR, format!("the body is not JSON: {e}")),
            );
            return (StatusCode::BAD_REQUEST, axum::Json(answer)).into_response();
        }
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let method = request.get("method").and_then(Value::as_str);
    let (Some(method), Some("2.0")) = (method, request.get("jsonrpc").and_then(Value::as_str)) else {
        let why = "not a JSON-RPC 2.0 request (one object with jsonrpc \"2.0\" and a method; batches are not taken)";
        let answer = error_answer(&id, RpcError(INVALID_REQUEST, why.to_owned()));
        return (StatusCode::BAD_REQUEST, axum::Json(answer)).into_response();
    };
    // A notification (no id) is taken and not answered; a cancellation stops the `ask` it
    // names, when it is the person's and under way here.
    if request.get("id").is_none() {
        if method == "notifications/cancelled" {
            cancel(&host, &person, &request["params"]).await;
        }
        return StatusCode::ACCEPTED.into_response();
    }
    let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
    let revision = params["_meta"][VERSION_META_KEY].as_str();
    if let Some(revision) = revision.filter(|r| !supported().contains(r)) {
        let why = format!("protocol revision {revision:?} is not one this server speaks");
        return axum::Json(error_answer(&id, RpcError(UNSUPPORTED_VERSION, why))).into_response();
    }
    // An `ask` whose client takes a stream and gave a progress token: its progress, then its
    // answer, as server-sent events.
    let token = params["_meta"]["progressToken"].clone();
    if method == "tools/call" && params["name"] == "ask" && !token.is_null() && takes_stream(&headers) {
        let args = &params["arguments"];
        if let Some(message) = args["message"].as_str().filter(|m| !m.trim().is_empty()) {
            let conversation = args["conversationId"].as_str();
            let stateless = revision == Some(STATELESS_VERSION);
            return match start_ask(&host, &person, &id, conversation, message).await {
                Ok(asked) => agui::sse(progress_of(asked, id, token, stateless)),
                Err(e) => {
                    let mut result = refused(&e);
                    if stateless {
                        stateless_fields(&mut result, method);
                    }
                    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
                }
            };
        }
    }
    let answered = match method {
        "server/discover" => Ok(discovered()),
        "initialize" => Ok(initialized(&params)),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({ "tools": tools() })),
        "tools/call" => call(&host, &person, &id, &params).await,
        other => Err(RpcError(METHOD_NOT_FOUND, format!("no method {other:?}"))),
    };
    let answer = match answered {
        Ok(mut result) => {
            if revision == Some(STATELESS_VERSION) {
                stateless_fields(&mut result, method);
            }
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        }
        Err(error) => error_answer(&id, error),
    };
    axum::Json(answer).into_response()
}

/// The stateless revision's results say they are complete, and whether a list may be cached
/// (not: this server's answers are the person's).
fn stateless_fields(result: &mut Value, method: &str) {
    if method == "ping" {
        return;
    }
    result["resultType"] = json!("complete");
    if method == "tools/list" {
        result["ttlMs"] = json!(0);
        result["cacheScope"] = json!("private");
    }
}

/// The `ask` calls under way on this host, by the person and the request id that made each: the
/// turn each started, for a `notifications/cancelled` naming the request. A call is kept until
/// its answer is given, or, when its client went away first (a cancelling client may close its
/// stream before the cancellation arrives), for [`CALL_KEPT_FOR`].
#[derive(Debug, Default, Clone)]
pub(crate) struct Calls(Arc<Mutex<HashMap<CallKey, Call>>>);

/// A call, by the person and the request id (as JSON) that made it.
type CallKey = (Owner, String);

/// What a call started, and when.
#[derive(Debug, Clone)]
struct Call {
    session: SessionId,
    turn_id: TurnId,
    at: std::time::Instant,
}

/// How long a call whose client went away is kept for its cancellation.
const CALL_KEPT_FOR: std::time::Duration = std::time::Duration::from_secs(3600);

/// An `ask` call's place among [`Calls`]: given up once its answer is given ([`answered`]).
///
/// [`answered`]: Registered::answered
struct Registered {
    calls: Calls,
    key: CallKey,
}

impl Registered {
    /// The call's answer was given: it can no longer be cancelled.
    fn answered(self) {
        if let Ok(mut calls) = self.calls.0.lock() {
            calls.remove(&self.key);
        }
    }
}

impl Calls {
    fn register(&self, person: &Owner, request: &Value, session: &SessionId, turn_id: &TurnId) -> Registered {
        let key = (person.clone(), request.to_string());
        if let Ok(mut calls) = self.0.lock() {
            calls.retain(|_, call| call.at.elapsed() < CALL_KEPT_FOR);
            let call = Call {
                session: session.clone(),
                turn_id: turn_id.clone(),
                at: std::time::Instant::now(),
            };
            calls.insert(key.clone(), call);
        }
        Registered {
            calls: self.clone(),
            key,
        }
    }

    fn find(&self, person: &Owner, request: &Value) -> Option<(SessionId, TurnId)> {
        let calls = self.0.lock().ok()?;
        let call = calls.get(&(person.clone(), request.to_string()))?;
        Some((call.session.clone(), call.turn_id.clone()))
    }
}

/// Stops the turn of the person's `ask` that `params.requestId` names, through the stop every
/// route records; another person's request, or one not under way here, is not found.
async fn cancel(host: &ContainerHost, person: &Owner, params: &Value) {
    let Some((session, turn_id)) = host.inner.mcp_calls.find(person, &params["requestId"]) else {
        return;
    };
    let stop = agent_worker_core::session::Stop::now(agent_worker_core::session::StopCause::UserStop);
    if let Err(e) = host.inner.store.request_stop(&session, &turn_id, stop).await {
        tracing::warn!(error = %ErrorChain(&e), %turn_id, "could not record an MCP cancellation's stop");
    }
}

/// Whether the client takes server-sent events in answer.
fn takes_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"))
}

/// An `ask`'s turn, started: its conversation, its id, and its events as they are logged.
struct Asked {
    session: SessionId,
    turn_id: TurnId,
    followed: std::pin::Pin<Box<dyn futures_util::Stream<Item = Followed> + Send>>,
    /// Its place among the calls under way, until it ends.
    registered: Registered,
}

/// The turn's progress as `notifications/progress` for `token` (one for each event it logs:
/// its text as the message, or the event's kind), then the answer to request `id`.
fn progress_of(
    asked: Asked,
    id: Value,
    token: Value,
    stateless: bool,
) -> impl futures_util::Stream<Item = Value> + Send {
    let Asked {
        session,
        turn_id,
        followed,
        registered,
    } = asked;
    let start = Some((followed, Heard::default(), 0u64, registered));
    futures_util::stream::unfold(start, move |state| {
        let (id, token, session, turn_id) = (id.clone(), token.clone(), session.clone(), turn_id.clone());
        async move {
            let (mut followed, mut heard, mut told, registered) = state?;
            loop {
                match followed.next().await {
                    Some(Followed::Logged(logged)) => {
                        heard.take(&logged);
                        told += 1;
                        let message = match &logged.event {
                            AgentEvent::Text { delta } => delta.clone(),
                            event => event.type_name().to_owned(),
                        };
                        let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                            "params": {"progressToken": token, "progress": told, "message": message}});
                        return Some((note, Some((followed, heard, told, registered))));
                    }
                    Some(Followed::NotStarted) => heard.take_not_started(),
                    None => {
                        registered.answered();
                        let mut answer = answer_value(agentcore::answer_of(heard, &session, &turn_id));
                        if stateless {
                            stateless_fields(&mut answer, "tools/call");
                        }
                        return Some((json!({"jsonrpc": "2.0", "id": id, "result": answer}), None));
                    }
                }
            }
        }
    })
}

/// `GET /mcp`: no stream is offered.
pub(super) async fn get() -> Response {
    HostError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "this MCP server answers each request as JSON; it offers no stream",
    )
    .into_response()
}

/// What the server says of itself to a client.
const INSTRUCTIONS: &str =
    "Ask the agent with `ask`; read your conversations with `list_conversations` and `get_conversation`.";

fn capabilities() -> Value {
    json!({"tools": {"listChanged": false}})
}

/// `server/discover` (the stateless revision): not to be cached, or shared.
fn discovered() -> Value {
    json!({
        "supportedVersions": supported(),
        "capabilities": capabilities(),
        "instructions": INSTRUCTIONS,
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
    })
}

fn initialized(params: &Value) -> Value {
    let asked = params["protocolVersion"].as_str().unwrap_or_default();
    let version = HANDSHAKE_VERSIONS
        .into_iter()
        .find(|v| *v == asked)
        .unwrap_or(HANDSHAKE_VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": capabilities(),
        "serverInfo": {"name": "agent-worker", "version": env!("CARGO_PKG_VERSION")},
        "instructions": INSTRUCTIONS,
    })
}

fn tools() -> Value {
    let id = json!({"type": "string", "minLength": 1, "maxLength": 512});
    json!([
        {
            "name": "ask",
            "title": "Ask the agent",
            "description": "Sends a message to the agent in one of your conversations (a new one when conversationId is left out) and answers with its reply once the turn ends.",
            "inputSchema": {
                "type": "object",
                "properties": {"message": {"type": "string", "minLength": 1}, "conversationId": id},
                "required": ["message"],
                "additionalProperties": false
            }
        },
        {
            "name": "list_conversations",
            "title": "Your conversations",
            "description": "Lists your conversations with the agent, most recent first.",
            "inputSchema": {
                "type": "object",
                "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 100}, "cursor": {"type": "string"}},
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true}
        },
        {
            "name": "get_conversation",
            "title": "One conversation",
            "description": "One of your conversations with the agent: its messages, newest last.",
            "inputSchema": {
                "type": "object",
                "properties": {"conversationId": id, "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
                "required": ["conversationId"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true}
        }
    ])
}

/// A tool's result: its JSON as text and as structured content.
fn result(value: &Value, is_error: bool) -> Value {
    json!({
        "content": [{"type": "text", "text": value.to_string()}],
        "structuredContent": value,
        "isError": is_error,
    })
}

/// What a route refused, as a tool's error result: nothing was written.
fn refused(e: &HostError) -> Value {
    result(
        &json!({"error": e.message(), "status": e.status().as_u16()}),
        true,
    )
}

fn invalid(message: impl Into<String>) -> RpcError {
    RpcError(INVALID_PARAMS, message.into())
}

async fn call(
    host: &ContainerHost,
    person: &Owner,
    request: &Value,
    params: &Value,
) -> Result<Value, RpcError> {
    let args = &params["arguments"];
    if !(args.is_object() || args.is_null()) {
        return Err(invalid("arguments must be an object"));
    }
    let text = |name: &str| args.get(name).and_then(Value::as_str);
    let limit = args.get("limit").and_then(Value::as_u64).map(|n| n as usize);
    match params["name"].as_str() {
        Some("ask") => {
            let message = text("message")
                .filter(|m| !m.trim().is_empty())
                .ok_or_else(|| invalid("ask needs a message"))?;
            Ok(ask(host, person, request, text("conversationId"), message)
                .await
                .unwrap_or_else(|e| refused(&e)))
        }
        Some("list_conversations") => {
            let Some(conversations) = host.conversations() else {
                return Ok(refused(&HostError::not_found(
                    "this host serves no conversations",
                )));
            };
            Ok(match conversations.list(person, limit, text("cursor")).await {
                Ok(page) => result(&json!(page), false),
                Err(e) => result(&json!({"error": ErrorChain(&e).to_string()}), true),
            })
        }
        Some("get_conversation") => {
            let id =
                text("conversationId").ok_or_else(|| invalid("get_conversation needs a conversationId"))?;
            let Some(conversations) = host.conversations() else {
                return Ok(refused(&HostError::not_found(
                    "this host serves no conversations",
                )));
            };
            Ok(match conversations.get(person, id, limit, None).await {
                Ok(view) => result(&json!(view), false),
                Err(e) => result(&json!({"error": e.to_string()}), true),
            })
        }
        Some(other) => Err(invalid(format!("no tool {other:?}"))),
        None => Err(invalid("tools/call needs the tool's name")),
    }
}

/// Starts a turn of the person's conversation `conversation` (a new one when `None`), its
/// events followed.
async fn start_ask(
    host: &ContainerHost,
    person: &Owner,
    request: &Value,
    conversation: Option<&str>,
    message: &str,
) -> Result<Asked, HostError> {
    let session: SessionId = match conversation {
        Some(id) => checked_id("conversationId", id.to_owned())?,
        None => checked_id("conversationId", uuid::Uuid::new_v4().to_string())?,
    };
    let turn_id = TurnId::random();
    let turn = AgentTurnPayload::new(turn_id.clone(), session.clone(), person, message.to_owned());
    let turn = adapted_turn(host, turn)?;
    let place = stream_place(host, person)?;
    let registered = host.inner.mcp_calls.register(person, request, &session, &turn_id);
    turns::start(host, person, turn).await?;
    let followed = Box::pin(follow_turn(host, place, &session, &turn_id, None));
    Ok(Asked {
        session,
        turn_id,
        followed,
        registered,
    })
}

/// Runs a turn of the person's conversation `conversation` (a new one when `None`) and answers
/// with its text and terminal once it ends.
async fn ask(
    host: &ContainerHost,
    person: &Owner,
    request: &Value,
    conversation: Option<&str>,
    message: &str,
) -> Result<Value, HostError> {
    let Asked {
        session,
        turn_id,
        followed,
        registered,
    } = start_ask(host, person, request, conversation, message).await?;
    let answer = agentcore::collected(followed, &session, &turn_id).await;
    registered.answered();
    Ok(answer_value(answer))
}

/// A turn's answer as `ask`'s result: `{conversationId, turnId, text, terminal}`, an error
/// unless it completed.
fn answer_value(mut answer: Value) -> Value {
    // The conversation, by the name this door's tools give it.
    if let Some(fields) = answer.as_object_mut()
        && let Some(id) = fields.remove("sessionId")
    {
        fields.insert("conversationId".to_owned(), id);
    }
    let failed = !matches!(
        serde_json::from_value::<AgentEvent>(answer["terminal"].clone()),
        Ok(AgentEvent::Completed { .. })
    );
    result(&answer, failed)
}

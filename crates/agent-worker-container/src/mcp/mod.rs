//! The agent as an MCP server: `POST /mcp`, MCP's Streamable HTTP transport, each request
//! answered as JSON or, for a call that sends on its way (its progress, an elicitation), as
//! server-sent events (`GET /mcp` is 405: no stream of the server's own, as the transport
//! allows).
//!
//! - The stateless revision ([`STATELESS_VERSION`], 2026-07-28): `server/discover` names the
//!   revisions and capabilities, and each request carries its revision in `_meta`
//!   (`io.modelcontextprotocol/protocolVersion`); one this server does not speak is refused
//!   (-32022, naming those it does).
//! - The handshake revisions ([`HANDSHAKE_VERSIONS`]): `initialize` answers the client's when
//!   this server speaks it, else the newest. No session is kept: the only session id given
//!   ([`ELICITING_SESSION`]) says that the client takes elicitations, and keys its calls.
//! - `tools/list`: `ask` (a message to a conversation of the person's, or a new one: the turn's
//!   answer, once it ends), `answer_approval` (the person's decision on an approval a turn
//!   waits for), `list_conversations` and `get_conversation` (as `GET /conversations` and
//!   `GET /conversations/{id}` answer them).
//! - `tools/call` runs one. An `ask` with a progress token, from a client that takes a stream,
//!   is answered as server-sent events: the turn's progress, then the answer. A turn that
//!   fails, or a conversation that is not the person's, is a result with `isError` (nothing
//!   written); wrong arguments or an unknown tool are JSON-RPC's invalid params. A body that is
//!   not JSON-RPC, a batch, or an unknown method get JSON-RPC's errors.
//! - An approval the turn asks is elicited where the client declares elicitation, else named in
//!   the result for `answer_approval` ([`asking`]). A client that declares it in `initialize` is
//!   given a session id that says so ([`ELICITING_SESSION`]): the only thing a session id
//!   carries here, nothing kept behind it.
//! - `notifications/cancelled` naming an `ask` of the person's under way here stops its turn,
//!   as `POST /turns/{id}/stop` does.
//!
//! The person is the request's, as on every route ([`Asker`]): their token, or the API key and
//! the ids the query names. Who may act on a conversation is decided where every route decides
//! it (`turns::start`, `access::theirs`, `Conversations`).

mod asking;
mod calls;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use self::asking::{Asked, Asking, Elicits};
use super::access::Asker;
use super::events::takes_event_stream;
use super::{ContainerHost, HostError, agui};
use agent_worker_contract::ErrorChain;
use agent_worker_core::session::Owner;

pub(crate) use calls::Calls;

/// The stateless revision this server speaks: no handshake, the revision in each request.
pub const STATELESS_VERSION: &str = "2026-07-28";
/// The revisions reached through `initialize` this server speaks, newest first.
pub const HANDSHAKE_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// Where a stateless request names its revision.
const VERSION_META_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// Where a stateless request names what its client can do.
const CAPABILITIES_META_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
/// How the session id given to a handshake client that declared elicitation begins.
pub const ELICITING_SESSION: &str = "elicits-";
/// The session header of the handshake revisions.
const SESSION_HEADER: &str = "mcp-session-id";
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
    // A client's answer to what this server asked of it (an elicitation on a stream).
    if request.get("method").is_none()
        && !id.is_null()
        && (request.get("result").is_some() || request.get("error").is_some())
    {
        let answer = request
            .get("result")
            .cloned()
            .unwrap_or_else(|| request["error"].clone());
        return match host.inner.mcp_calls.answer(&person, &id, answer) {
            true => StatusCode::ACCEPTED.into_response(),
            false => HostError::field("id", "nothing of yours waits for that answer here").into_response(),
        };
    }
    let method = request.get("method").and_then(Value::as_str);
    let (Some(method), Some("2.0")) = (method, request.get("jsonrpc").and_then(Value::as_str)) else {
        let why = "not a JSON-RPC 2.0 request (one object with jsonrpc \"2.0\" and a method; batches are not taken)";
        let answer = error_answer(&id, RpcError(INVALID_REQUEST, why.to_owned()));
        return (StatusCode::BAD_REQUEST, axum::Json(answer)).into_response();
    };
    // A notification (no id) is taken and not answered; a cancellation stops the `ask` it
    // names, when it is the person's and under way here.
    let client = headers.get(SESSION_HEADER).and_then(|s| s.to_str().ok());
    if request.get("id").is_none() {
        if method == "notifications/cancelled" {
            asking::cancel(&host, &person, client, &request["params"]).await;
        }
        return StatusCode::ACCEPTED.into_response();
    }
    let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
    let revision = params["_meta"][VERSION_META_KEY].as_str();
    if let Some(revision) = revision.filter(|r| !supported().contains(r)) {
        let why = format!("protocol revision {revision:?} is not one this server speaks");
        return axum::Json(error_answer(&id, RpcError(UNSUPPORTED_VERSION, why))).into_response();
    }
    let stateless = revision == Some(STATELESS_VERSION);
    let finish = |answered: Result<Value, RpcError>| {
        let answer = match answered {
            Ok(mut result) => {
                if stateless {
                    stateless_fields(&mut result, method);
                }
                json!({"jsonrpc": "2.0", "id": id, "result": result})
            }
            Err(error) => error_answer(&id, error),
        };
        axum::Json(answer).into_response()
    };
    if method == "tools/call" && matches!(params["name"].as_str(), Some("ask" | "answer_approval")) {
        let asking = Asking {
            request: id.clone(),
            progress: Some(params["_meta"]["progressToken"].clone()).filter(|t| !t.is_null()),
            elicits: elicits(&host, &params, &headers, stateless),
            client: client.map(str::to_owned),
        };
        let asked = match turn_call(&host, &person, &asking, &params).await {
            Ok(Started::Asked(asked)) => asked,
            Ok(Started::Answered(result)) => return finish(Ok(result)),
            Err(e) => return finish(Err(e)),
        };
        // Its progress, or what it elicits on the way, needs a stream; else, the answer as JSON.
        let streamed = takes_event_stream(&headers)
            && (asking.progress.is_some() || asking.elicits == Elicits::OnStream);
        if !streamed {
            let answered = asking::answer(&host, &person, &asking, asked, None).await;
            return finish(
                answered.ok_or_else(|| RpcError(INVALID_REQUEST, "the call ended unanswered".to_owned())),
            );
        }
        return agui::sse(streamed_answer(host, person, asking, asked, stateless));
    }
    let mut session = None;
    let answered = match method {
        "server/discover" => Ok(discovered()),
        "initialize" => {
            let declared =
                params["capabilities"]["elicitation"].is_object() && host.config().stream_elicitation;
            session = declared.then(|| format!("{ELICITING_SESSION}{}", uuid::Uuid::new_v4()));
            Ok(initialized(&params))
        }
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({ "tools": tools() })),
        "tools/call" => call(&host, &person, &params).await,
        other => Err(RpcError(METHOD_NOT_FOUND, format!("no method {other:?}"))),
    };
    let mut response = finish(answered);
    if let Some(named) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
        response.headers_mut().insert(SESSION_HEADER, named);
    }
    response
}

/// How the client of a request takes an approval: in the stateless revision, by the
/// capabilities its request declares; in the handshake revisions, by those it declared in
/// `initialize`, as the session id given then says, on a stream it takes, where this host asks
/// on streams ([`ContainerConfig::stream_elicitation`](crate::ContainerConfig::stream_elicitation)).
fn elicits(host: &ContainerHost, params: &Value, headers: &HeaderMap, stateless: bool) -> Elicits {
    if stateless {
        return match params["_meta"][CAPABILITIES_META_KEY]["elicitation"].is_object() {
            true => Elicits::InputRequired,
            false => Elicits::No,
        };
    }
    let session = headers.get(SESSION_HEADER).and_then(|s| s.to_str().ok());
    let asks = host.config().stream_elicitation && takes_event_stream(headers);
    match session.is_some_and(|s| s.starts_with(ELICITING_SESSION)) && asks {
        true => Elicits::OnStream,
        false => Elicits::No,
    }
}

/// What a call of `ask` or `answer_approval` started: a turn to follow, or an answer already.
enum Started {
    Asked(Asked),
    Answered(Value),
}

/// Starts the turn an `ask` or `answer_approval` call asks for: `ask`'s message as a new turn;
/// `answer_approval`'s decision, or a retried `ask`'s answer to the approval its
/// `requestState` names, as the next turn of the chain that waits for it. A refusal is the
/// tool's error result, nothing written; wrong arguments are invalid params.
async fn turn_call(
    host: &ContainerHost,
    person: &Owner,
    asking: &Asking,
    params: &Value,
) -> Result<Started, RpcError> {
    let args = &params["arguments"];
    if !(args.is_object() || args.is_null()) {
        return Err(invalid("arguments must be an object"));
    }
    let text = |name: &str| args.get(name).and_then(Value::as_str);
    let started = match (params["name"].as_str(), params["requestState"].as_str()) {
        // Either tool retried with the answer to the approval its result asked.
        (Some("ask" | "answer_approval"), Some(state)) => {
            let (conversation, turn) =
                asking::state_of(state).ok_or_else(|| invalid("requestState is not one this server gave"))?;
            let answer = &params["inputResponses"][asking::APPROVAL_INPUT];
            if answer.is_null() {
                return Err(invalid("a retried call needs inputResponses.approval"));
            }
            match asking::decision(answer) {
                Some(approve) => {
                    asking::continue_ask(host, person, asking, &conversation, &turn, approve).await
                }
                None => return Ok(Started::Answered(asking::not_answered(&conversation, &turn))),
            }
        }
        (Some("ask"), None) => {
            let message = text("message")
                .filter(|m| !m.trim().is_empty())
                .ok_or_else(|| invalid("ask needs a message"))?;
            asking::start_ask(host, person, asking, text("conversationId"), message).await
        }
        _ => {
            let (Some(conversation), Some(turn)) = (text("conversationId"), text("turnId")) else {
                return Err(invalid("answer_approval needs a conversationId and a turnId"));
            };
            let approve = crate::chain::decision_named(text("decision"))
                .ok_or_else(|| invalid("answer_approval's decision is \"approve\" or \"decline\""))?;
            asking::continue_ask(host, person, asking, conversation, turn, approve).await
        }
    };
    Ok(match started {
        Ok(asked) => Started::Asked(asked),
        Err(e) => Started::Answered(tool_error(&e)),
    })
}

/// A call's answer as server-sent events: what it sends on the way (progress, elicitations),
/// then the answer. The call is followed on a task of its own, so that a client that goes away
/// leaves its turn running and its call registered for a cancellation.
fn streamed_answer(
    host: ContainerHost,
    person: Owner,
    asking: Asking,
    asked: Asked,
    stateless: bool,
) -> impl futures_util::Stream<Item = Value> + Send {
    let (out, sent) = mpsc::channel(16);
    tokio::spawn(async move {
        if let Some(mut result) = asking::answer(&host, &person, &asking, asked, Some(&out)).await {
            if stateless {
                stateless_fields(&mut result, "tools/call");
            }
            let _gone = out
                .send(json!({"jsonrpc": "2.0", "id": asking.request, "result": result}))
                .await;
        }
    });
    futures_util::stream::unfold(sent, |mut sent| async move {
        sent.recv().await.map(|value| (value, sent))
    })
}

/// The stateless revision's results say they are complete, and whether a list may be cached
/// (not: this server's answers are the person's).
fn stateless_fields(result: &mut Value, method: &str) {
    if method == "ping" {
        return;
    }
    if result.get("resultType").is_none() {
        result["resultType"] = json!("complete");
    }
    if method == "tools/list" {
        result["ttlMs"] = json!(0);
        result["cacheScope"] = json!("private");
    }
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
            "name": "answer_approval",
            "title": "Answer an approval",
            "description": "Gives your decision on an approval the agent waits for (named in an ask's result: its conversationId and turnId) and answers with the agent's reply once the turn that follows ends.",
            "inputSchema": {
                "type": "object",
                "properties": {"conversationId": id, "turnId": id, "decision": {"type": "string", "enum": ["approve", "decline"]}},
                "required": ["conversationId", "turnId", "decision"],
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
pub(super) fn result(value: &Value, is_error: bool) -> Value {
    json!({
        "content": [{"type": "text", "text": value.to_string()}],
        "structuredContent": value,
        "isError": is_error,
    })
}

/// What a route refused, as a tool's error result: nothing was written.
pub(super) fn tool_error(e: &HostError) -> Value {
    result(
        &json!({"error": e.message(), "status": e.status().as_u16()}),
        true,
    )
}

fn invalid(message: impl Into<String>) -> RpcError {
    RpcError(INVALID_PARAMS, message.into())
}

/// `tools/call` of a tool that reads the person's conversations.
async fn call(host: &ContainerHost, person: &Owner, params: &Value) -> Result<Value, RpcError> {
    let args = &params["arguments"];
    if !(args.is_object() || args.is_null()) {
        return Err(invalid("arguments must be an object"));
    }
    let text = |name: &str| args.get(name).and_then(Value::as_str);
    let limit = args.get("limit").and_then(Value::as_u64).map(|n| n as usize);
    match params["name"].as_str() {
        Some("list_conversations") => {
            let Some(conversations) = host.conversations() else {
                return Ok(tool_error(&HostError::not_found(
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
                return Ok(tool_error(&HostError::not_found(
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

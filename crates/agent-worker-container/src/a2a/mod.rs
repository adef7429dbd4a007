//! A2A (Agent2Agent, protocol 1.0, as `a2a-sdk` 1.3 speaks it): other agents call this one.
//!
//! - `GET /.well-known/agent-card.json`: the agent card (no credential): its name, what it
//!   does, the JSON-RPC interface at `/a2a`, streaming, and how callers authenticate.
//! - `POST /a2a`: the JSON-RPC binding (and under `/a2a/`, the HTTP+JSON binding on the same
//!   calls: [`rest`]). `SendMessage` runs a turn (the message's `contextId` is
//!   the conversation, a new one when it names none; its `messageId` is the turn, so a message
//!   sent twice runs once) and answers the task once it ends (at once with
//!   `returnImmediately`); `SendStreamingMessage` streams it; `GetTask`, `ListTasks`,
//!   `CancelTask` (the turn's stop) and `SubscribeToTask` read and act on tasks from the table,
//!   so any instance answers for any task.
//! - The caller is the request's person ([`Asker`]): a person's token, or the API key with the
//!   ids in the query. A task of someone else's conversation does not exist for them.
//!
//! - An approval the turn asks is the task's `INPUT_REQUIRED` (its status message says what, and
//!   how to answer); the next message naming the task (`taskId`) answers it, and the task goes
//!   on ([`continued`]).
//!
//! - File parts (`raw`) are files the person attaches ([`parts`]).
//!
//! - Push notifications ([`push`]): webhooks a caller sets for a task (with the task's
//!   message, or after), which the worker that runs the task's turn POSTs its updates to.

mod card;
mod continued;
mod list;
mod parts;
mod push;
pub(super) mod rest;
mod rpc;
mod stream;
mod task;

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use serde::Deserialize;
use serde_json::{Value, json};

use super::access::{self, Asker, checked_id};
use super::events::{StreamPlace, follow_turn, stream_place};
use super::extract::adapted_turn;
use super::{ContainerHost, HostError, turns};
use agent_worker_core::session::{Owner, SessionId, Stop, StopCause, StopOutcome, TurnId};
use agent_worker_runtime::AgentTurnPayload;
pub(super) use card::card;
pub use card::{PublicUrl, PublicUrlError};
use rpc::{Request, RpcError, answer};
use stream::Streamer;
use task::{Ids, Progress, parse_task_id, task_id};

/// The A2A protocol version served.
pub(super) const A2A_VERSION: &str = "1.0";
/// The path of the JSON-RPC binding.
pub(super) const A2A_PATH: &str = "/a2a";
/// The agent card's well-known path.
pub(super) const AGENT_CARD_PATH: &str = "/.well-known/agent-card.json";
/// The same card beside the interface (where a client given the interface's URL looks).
pub(super) const INTERFACE_CARD_PATH: &str = "/a2a/.well-known/agent-card.json";

/// `POST /a2a`.
pub(super) async fn jsonrpc(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request: Request = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) if serde_json::from_slice::<Value>(&body).is_ok() => {
            return json_answer(&Value::Null, Err(RpcError::invalid_request(e.to_string())));
        }
        Err(e) => return json_answer(&Value::Null, Err(RpcError::parse(e.to_string()))),
    };
    let id = request.id.clone();
    if !(id.is_string() || id.is_number() || id.is_null()) {
        let refused = RpcError::invalid_request("id must be a string, a number or null");
        return json_answer(&Value::Null, Err(refused));
    }
    let Some(method) = request
        .method
        .filter(|_| request.jsonrpc.as_deref() == Some("2.0"))
    else {
        return json_answer(&id, Err(RpcError::invalid_request("not a JSON-RPC 2.0 request")));
    };
    if let Some(refused) = refused_version(&headers) {
        return json_answer(&id, Err(refused));
    }
    let call = Call {
        host: &host,
        person: &person,
    };
    let params = request.params;
    match method.as_str() {
        "SendMessage" => json_answer(&id, call.send(params).await),
        "SendStreamingMessage" => match call.start_stream(params).await {
            Ok(updates) => sse(id, updates),
            Err(error) => json_answer(&id, Err(error)),
        },
        "GetTask" => json_answer(&id, call.get(params).await),
        "ListTasks" => json_answer(&id, call.list(params).await),
        "CancelTask" => json_answer(&id, call.cancel(params).await),
        "SubscribeToTask" => match call.subscribe(params).await {
            Ok(updates) => sse(id, updates),
            Err(error) => json_answer(&id, Err(error)),
        },
        "CreateTaskPushNotificationConfig" => json_answer(&id, call.create_push(params).await),
        "GetTaskPushNotificationConfig" => json_answer(&id, call.get_push(params).await),
        "ListTaskPushNotificationConfigs" => json_answer(&id, call.list_push(params).await),
        "DeleteTaskPushNotificationConfig" => json_answer(&id, call.delete_push(params).await),
        "GetExtendedAgentCard" => json_answer(&id, Err(RpcError::extended_card_not_configured())),
        _ => json_answer(&id, Err(RpcError::method_not_found())),
    }
}

/// The refusal of a caller that names another A2A version than the one spoken here; one that
/// names none is taken at its word in 1.0's names (a 0.3 caller's `message/send` is a method
/// not found).
fn refused_version(headers: &HeaderMap) -> Option<RpcError> {
    let version = headers.get("a2a-version").map(|v| v.to_str().unwrap_or("?"))?;
    (version.trim() != A2A_VERSION).then(|| RpcError::version_not_supported(version))
}

/// A request to an A2A path refused before any method ran (`refused`: a body over the limit, a
/// head past the server's bounds), in the binding's shape: a JSON-RPC error on `/a2a`, a
/// `google.rpc.Status` under `/a2a/`; `None` for any other path (the card's included).
pub(super) fn edge_refusal(path: &str, refused: &HostError) -> Option<Response> {
    let error = RpcError::refused_request(refused);
    if path == A2A_PATH {
        Some(json_answer(&Value::Null, Err(error)))
    } else if path.starts_with("/a2a/") && path != INTERFACE_CARD_PATH {
        Some(error.into_response())
    } else {
        None
    }
}

fn json_answer(id: &Value, result: Result<Value, RpcError>) -> Response {
    axum::Json(answer(id, result)).into_response()
}

/// Stream responses as Server-Sent Events, each a JSON-RPC answer to request `id`.
fn sse(id: Value, updates: impl futures_util::Stream<Item = Value> + Send + 'static) -> Response {
    let events = updates
        .map(move |update| Ok::<_, Infallible>(Event::default().data(answer(&id, Ok(update)).to_string())));
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

/// A message as A2A sends one.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InMessage {
    message_id: String,
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    task_id: Option<String>,
    role: String,
    #[serde(default)]
    parts: Vec<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendConfiguration {
    #[serde(default)]
    return_immediately: bool,
    /// A webhook for the task's updates ([`push`]).
    #[serde(default)]
    task_push_notification_config: Option<agent_worker_runtime::a2a_push::PushConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendParams {
    message: InMessage,
    #[serde(default)]
    configuration: Option<SendConfiguration>,
}

#[derive(Debug, Deserialize)]
struct TaskParams {
    id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GetParams {
    id: String,
    #[serde(default)]
    history_length: Option<i64>,
}

/// One call's host and person.
struct Call<'a> {
    host: &'a ContainerHost,
    person: &'a Owner,
}

impl Call<'_> {
    /// `SendMessage`: the task once it has ended (or, with `returnImmediately`, as it starts).
    async fn send(&self, params: Value) -> Result<Value, RpcError> {
        let send: SendParams = rpc::params(params)?;
        let configuration = send.configuration.unwrap_or_default();
        let immediately = configuration.return_immediately;
        // The answer's stream first: no turn starts whose answer cannot be given.
        let place = if immediately {
            None
        } else {
            Some(self.stream_place()?)
        };
        let push = configuration.task_push_notification_config;
        let (ids, turn, history) = self.start(send.message, push).await?;
        let Some(place) = place else {
            return Ok(json!({ "task": task::task(&Progress::submitted_now(), &ids, history) }));
        };
        let followed = follow_turn(self.host, place, &ids.context, &turn, None);
        let progress = crate::events::heard_to_end(followed).await;
        Ok(json!({ "task": task::task(&progress, &ids, history) }))
    }

    /// `SendStreamingMessage`: the task, then its updates.
    async fn start_stream(
        &self,
        params: Value,
    ) -> Result<impl futures_util::Stream<Item = Value> + use<>, RpcError> {
        let send: SendParams = rpc::params(params)?;
        let place = self.stream_place()?;
        let push = send.configuration.and_then(|c| c.task_push_notification_config);
        let (ids, turn, history) = self.start(send.message, push).await?;
        let first = json!({ "task": task::task(&Progress::submitted_now(), &ids, history) });
        Ok(self.updates(place, ids, &turn, first))
    }

    /// The turn `message` asks for, started: its task's ids, the turn, and the message as the
    /// task's history holds it. `push`, a webhook for the task's updates, is kept before the
    /// turn starts (checked before anything is written).
    async fn start(
        &self,
        message: InMessage,
        push: Option<agent_worker_runtime::a2a_push::PushConfig>,
    ) -> Result<(Ids, TurnId, Vec<Value>), RpcError> {
        if message.role != "ROLE_USER" {
            return Err(RpcError::invalid_params("message.role must be ROLE_USER"));
        }
        if let Some(task) = message.task_id.clone() {
            let push = self.sent_push(push, &task, &message.message_id)?;
            return self.continue_task(message, &task, push).await;
        }
        let (content, files) = parts::read(&message.parts)?;
        let session: SessionId = match &message.context_id {
            Some(context) => checked_id("contextId", context.as_str()),
            None => checked_id("contextId", uuid::Uuid::new_v4().to_string()),
        }
        .map_err(|e| RpcError::of_host(&e))?;
        let turn: TurnId =
            checked_id("messageId", message.message_id.as_str()).map_err(|e| RpcError::of_host(&e))?;
        if turn.contains(continued::CHAIN_JOIN) {
            // `<first>~<n>` names the turns that go on with a task: a message of the caller's
            // must never name one of another task's.
            return Err(RpcError::invalid_params(format!(
                "messageId must not hold '{}', which joins the turns of a task",
                continued::CHAIN_JOIN
            )));
        }
        let ids = Ids {
            task: task_id(&session, &turn),
            context: session.clone(),
        };
        let refused = |e: HostError| RpcError::of_host(&e).in_context(&session);
        let push = self.sent_push(push, &ids.task, &message.message_id)?;
        let turn_payload = AgentTurnPayload::new(turn.clone(), session.clone(), self.person, content);
        let mut turn_payload = adapted_turn(self.host, turn_payload).map_err(refused)?;
        let mut added = None;
        if !files.is_empty() || push.is_some() {
            // The turn may start before its files and webhook are kept: a refusal keeps nothing
            // (the webhook first: it can be taken back).
            turns::admit(self.host, self.person, &turn_payload)
                .await
                .map_err(refused)?;
            added = self.keep_sent_push(push.as_ref(), &session, &turn).await?;
            if !files.is_empty() {
                match self.keep_files(&session, files).await {
                    Ok(kept) => turn_payload.attachments = kept,
                    Err(e) => {
                        self.unkeep_sent_push(added, &session, &turn).await;
                        return Err(e);
                    }
                }
            }
        }
        match turns::start(self.host, self.person, turn_payload).await {
            Ok(turns::Started::Queued { .. }) => {
                // The task exists for its caller before a worker writes the turn's record.
                if let Some(table) = self.host.table()
                    && let Err(e) = table.mark_submitted(&session, &turn).await
                {
                    tracing::warn!(error = %agent_worker_contract::ErrorChain(&e), task = %ids.task, "a queued task was not noted; it is found once a worker takes it");
                }
            }
            Ok(turns::Started::Running) => {}
            Err(e) => {
                self.unkeep_sent_push(added, &session, &turn).await;
                return Err(refused(e));
            }
        }
        let history = vec![task::person_message(&message.message_id, message.parts, &ids)];
        Ok((ids, turn, history))
    }

    /// The updates of turn `turn`'s task after `first`, to its final status.
    fn updates(
        &self,
        place: StreamPlace,
        ids: Ids,
        turn: &TurnId,
        first: Value,
    ) -> impl futures_util::Stream<Item = Value> + use<> {
        let followed = follow_turn(self.host, place, &ids.context, turn, None);
        let rest = followed
            .scan(Streamer::new(ids), |streamer, item| {
                std::future::ready(Some(streamer.next(&item)))
            })
            .flat_map(futures_util::stream::iter);
        futures_util::stream::once(std::future::ready(first)).chain(rest)
    }

    /// A place for one event stream of the person's ([`stream_place`]).
    fn stream_place(&self) -> Result<StreamPlace, RpcError> {
        stream_place(self.host, self.person).map_err(|e| RpcError::of_host(&e))
    }

    /// The conversation and turn of task `id`, when it is the person's and exists (a later turn
    /// of a task's chain, `<first>~<n>`, names no task).
    async fn owned_task(&self, id: &str) -> Result<(SessionId, TurnId), RpcError> {
        let (session, turn) = parse_task_id(id)
            .filter(|(_, turn)| continued::chain_place(turn.as_str()).is_none())
            .ok_or_else(RpcError::task_not_found)?;
        access::theirs(self.host, self.person, &session, false)
            .await
            .map_err(|e| RpcError::of_host(&e))?;
        match self.host.store().turn(&session, &turn).await {
            Ok(Some(_)) => Ok((session, turn)),
            // Sent to the queue, and not yet taken by a worker.
            Ok(None) => match self.host.table() {
                Some(table) if table.submitted(&session, &turn).await.map_err(push::failed)? => {
                    Ok((session, turn))
                }
                _ => Err(RpcError::task_not_found()),
            },
            Err(e) => Err(RpcError::internal(e.client_message())),
        }
    }

    /// What the turn's logged events say of it now.
    async fn progress(&self, session: &SessionId, turn: &TurnId) -> Result<Progress, RpcError> {
        let log = self
            .host
            .event_log()
            .ok_or_else(|| RpcError::unsupported("this agent keeps no event log"))?;
        let events = log
            .read(session, turn, None)
            .await
            .map_err(|e| RpcError::internal(agent_worker_contract::chain(&e)))?;
        Ok(Progress::of(&events))
    }

    /// `GetTask`.
    async fn get(&self, params: Value) -> Result<Value, RpcError> {
        let GetParams { id, history_length } = rpc::params(params)?;
        let limit = match history_length {
            None => None,
            Some(n) => Some(
                usize::try_from(n)
                    .map_err(|_| RpcError::invalid_params("historyLength must not be negative"))?,
            ),
        };
        let (session, first) = self.owned_task(&id).await?;
        let (turn, place) = self.latest_turn(&session, &first).await?;
        let ids = Ids {
            task: id,
            context: session.clone(),
        };
        let turns: Vec<TurnId> = (0..=place)
            .filter_map(|n| continued::chain_turn(&first, n))
            .collect();
        let entries = self
            .host
            .store()
            .entries(&session, 0, 1000)
            .await
            .map_err(|e| RpcError::internal(e.client_message()))?;
        Ok(task::task(
            &self.progress(&session, &turn).await?,
            &ids,
            task::history(&entries, &turns, &ids, limit),
        ))
    }

    /// `CancelTask`: the turn's stop; the task once it has ended.
    async fn cancel(&self, params: Value) -> Result<Value, RpcError> {
        let TaskParams { id } = rpc::params(params)?;
        let (session, first) = self.owned_task(&id).await?;
        let (turn, _) = self.latest_turn(&session, &first).await?;
        let asked = self
            .host
            .store()
            .request_stop(&session, &turn, Stop::now(StopCause::UserStop))
            .await
            .map_err(|e| RpcError::internal(e.client_message()))?;
        if asked == StopOutcome::AlreadyEnded {
            return Err(RpcError::not_cancelable(format!("task {id} has already ended")));
        }
        let ids = Ids {
            task: id,
            context: session.clone(),
        };
        let followed = follow_turn(self.host, self.stream_place()?, &session, &turn, None);
        Ok(task::task(
            &crate::events::heard_to_end(followed).await,
            &ids,
            Vec::new(),
        ))
    }

    /// `SubscribeToTask`: a running task's updates, after its present state.
    async fn subscribe(
        &self,
        params: Value,
    ) -> Result<impl futures_util::Stream<Item = Value> + use<>, RpcError> {
        let TaskParams { id } = rpc::params(params)?;
        let (session, first) = self.owned_task(&id).await?;
        let (turn, _) = self.latest_turn(&session, &first).await?;
        let progress = self.progress(&session, &turn).await?;
        if progress.state().is_final() {
            return Err(RpcError::unsupported(format!(
                "task {id} has ended; there is nothing to subscribe to"
            )));
        }
        let ids = Ids {
            task: id,
            context: session,
        };
        let first = json!({ "task": task::task(&progress, &ids, Vec::new()) });
        Ok(self.updates(self.stream_place()?, ids, &turn, first))
    }
}

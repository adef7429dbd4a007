//! A2A's HTTP+JSON binding, under the JSON-RPC binding's path and on the same calls
//! ([`Call`]): `POST /a2a/message:send`, `POST /a2a/message:stream`, `GET /a2a/tasks`,
//! `GET /a2a/tasks/{id}`, `POST /a2a/tasks/{id}:cancel`, `POST` (or `GET`)
//! `/a2a/tasks/{id}:subscribe`, and a task's push configs (`POST` and `GET`
//! `/a2a/tasks/{id}/pushNotificationConfigs`, `GET` and `DELETE` `…/{configId}`). A body is the
//! method's request as JSON; an answer is its result, or a stream of results as Server-Sent
//! Events; a failure is A2A's HTTP status with a `google.rpc.Status` body. The person is the
//! request's, as on every route.

use std::collections::HashMap;
use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::{Call, RpcError, refused_version};
use crate::ContainerHost;
use crate::access::Asker;

/// `POST /a2a/message:send`.
pub(crate) async fn send(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    _: SpokenVersion,
    body: Bytes,
) -> Result<Response, RpcError> {
    let params = as_request(&body)?;
    answer(
        Call {
            host: &host,
            person: &person,
        }
        .send(params)
        .await,
    )
}

/// `POST /a2a/message:stream`.
pub(crate) async fn stream(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    _: SpokenVersion,
    body: Bytes,
) -> Result<Response, RpcError> {
    let call = Call {
        host: &host,
        person: &person,
    };
    let params = as_request(&body)?;
    Ok(sse(call.start_stream(params).await?))
}

/// `GET /a2a/tasks?contextId=…&pageSize=…&status=…&includeArtifacts=…`.
pub(crate) async fn list(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    _: SpokenVersion,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, RpcError> {
    let params = list_params(query)?;
    answer(
        Call {
            host: &host,
            person: &person,
        }
        .list(params)
        .await,
    )
}

/// `GET /a2a/tasks/{id}?historyLength=…` (or `{id}:subscribe`).
pub(crate) async fn task_get(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    _: SpokenVersion,
    Path(target): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, RpcError> {
    let call = Call {
        host: &host,
        person: &person,
    };
    match split_action(&target) {
        (id, None) => {
            let mut params = list_params(query)?;
            params["id"] = json!(id);
            answer(call.get(params).await)
        }
        (id, Some("subscribe")) => subscribe(&call, id).await,
        _ => Err(RpcError::method_not_found()),
    }
}

/// `POST /a2a/tasks/{id}:cancel` and `POST /a2a/tasks/{id}:subscribe`.
pub(crate) async fn task_post(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    _: SpokenVersion,
    Path(target): Path<String>,
) -> Result<Response, RpcError> {
    let call = Call {
        host: &host,
        person: &person,
    };
    match split_action(&target) {
        (id, Some("cancel")) => answer(call.cancel(json!({ "id": id })).await),
        (id, Some("subscribe")) => subscribe(&call, id).await,
        _ => Err(RpcError::method_not_found()),
    }
}

/// `POST /a2a/tasks/{id}/pushNotificationConfigs`: the body is the config, of the path's task.
pub(crate) async fn push_create(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    _: SpokenVersion,
    Path(task): Path<String>,
    body: Bytes,
) -> Result<Response, RpcError> {
    let mut params = as_request(&body)?;
    if !params.is_object() {
        return Err(RpcError::invalid_params("the body must be a push config object"));
    }
    params["taskId"] = json!(task);
    let call = Call {
        host: &host,
        person: &person,
    };
    answer(call.create_push(params).await)
}

/// `GET /a2a/tasks/{id}/pushNotificationConfigs?pageSize=…&pageToken=…`.
pub(crate) async fn push_list(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    _: SpokenVersion,
    Path(task): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, RpcError> {
    let mut params = list_params(query)?;
    params["taskId"] = json!(task);
    let call = Call {
        host: &host,
        person: &person,
    };
    answer(call.list_push(params).await)
}

/// `GET /a2a/tasks/{id}/pushNotificationConfigs/{configId}`.
pub(crate) async fn push_get(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    _: SpokenVersion,
    Path((task, id)): Path<(String, String)>,
) -> Result<Response, RpcError> {
    let call = Call {
        host: &host,
        person: &person,
    };
    answer(call.get_push(json!({ "taskId": task, "id": id })).await)
}

/// `DELETE /a2a/tasks/{id}/pushNotificationConfigs/{configId}`.
pub(crate) async fn push_delete(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    _: SpokenVersion,
    Path((task, id)): Path<(String, String)>,
) -> Result<Response, RpcError> {
    let call = Call {
        host: &host,
        person: &person,
    };
    answer(call.delete_push(json!({ "taskId": task, "id": id })).await)
}

/// `GET /a2a/extendedAgentCard`: there is none.
pub(crate) async fn extended_card() -> RpcError {
    RpcError::extended_card_not_configured()
}

async fn subscribe(call: &Call<'_>, id: &str) -> Result<Response, RpcError> {
    Ok(sse(call.subscribe(json!({ "id": id })).await?))
}

/// The body as the method's request.
fn as_request(body: &[u8]) -> Result<Value, RpcError> {
    serde_json::from_slice(body).map_err(|e| RpcError::parse(format!("the body is not JSON: {e}")))
}

/// A request whose A2A version (`A2A-Version`, when it names one) is the one spoken here; one
/// that names another is refused in the binding's shape before the method runs.
pub(crate) struct SpokenVersion;

impl<S: Send + Sync> FromRequestParts<S> for SpokenVersion {
    type Rejection = RpcError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, RpcError> {
        match refused_version(&parts.headers) {
            Some(refused) => Err(refused),
            None => Ok(Self),
        }
    }
}

/// A task id and the action after its last colon (`cancel`, `subscribe`), if any.
fn split_action(target: &str) -> (&str, Option<&str>) {
    match target.rsplit_once(':') {
        Some((id, action @ ("cancel" | "subscribe"))) => (id, Some(action)),
        _ => (target, None),
    }
}

/// A request from the query (`ListTasks`', `GetTask`'s): numbers and flags as JSON takes them.
fn list_params(query: HashMap<String, String>) -> Result<Value, RpcError> {
    let mut params = serde_json::Map::new();
    for (name, value) in query {
        let value =
            match name.as_str() {
                "pageSize" | "historyLength" => json!(value.parse::<i64>().map_err(|_| {
                    RpcError::invalid_params(format!("{name} {value:?} is not a number"))
                })?),
                "includeArtifacts" => json!(value == "true"),
                _ => json!(value),
            };
        params.insert(name, value);
    }
    Ok(Value::Object(params))
}

/// A method's result as the HTTP+JSON binding answers it (an error by [`RpcError`]'s
/// `IntoResponse`).
fn answer(result: Result<Value, RpcError>) -> Result<Response, RpcError> {
    Ok(axum::Json(result?).into_response())
}

/// Stream responses as Server-Sent Events, each one's JSON as an event's data.
fn sse(updates: impl futures_util::Stream<Item = Value> + Send + 'static) -> Response {
    let events = updates.map(|update| Ok::<_, Infallible>(Event::default().data(update.to_string())));
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_path_names_the_task_and_its_action() {
        assert_eq!(split_action("YWJj.t-1"), ("YWJj.t-1", None));
        assert_eq!(split_action("YWJj.t-1:cancel"), ("YWJj.t-1", Some("cancel")));
        assert_eq!(
            split_action("YWJj.t:1:subscribe"),
            ("YWJj.t:1", Some("subscribe"))
        );
        assert_eq!(split_action("YWJj.t:odd"), ("YWJj.t:odd", None));
    }

    #[test]
    fn list_parameters_come_from_the_query_typed() {
        let query = [
            ("pageSize", "5"),
            ("includeArtifacts", "true"),
            ("contextId", "c"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
        assert_eq!(
            list_params(query).unwrap(),
            json!({"pageSize": 5, "includeArtifacts": true, "contextId": "c"})
        );
        let bad = [("pageSize".to_owned(), "many".to_owned())].into();
        assert!(list_params(bad).is_err());
    }
}

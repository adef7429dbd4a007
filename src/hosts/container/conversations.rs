//! A person's conversations over HTTP, for a product's UI (through the product's backend, which
//! authenticates the person and passes their ids):
//!
//! | request | answers |
//! | --- | --- |
//! | `GET /conversations?userId=U&accountId=A&limit=&cursor=` | the person's conversations, most recent first; 400 a missing id, a limit outside 1–100, or a cursor that is not theirs |
//! | `GET /conversations/{id}?userId=U&accountId=A&limit=&before=` | one conversation in display form, its newest messages before `before`; 404 not the person's |
//! | `DELETE /conversations/{id}?userId=U&accountId=A` | every item of it, its files, a running turn stopped first: counts; 404 not the person's |
//!
//! A conversation of someone else is 404, never 403: the answer does not say that it exists.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::{ContainerHost, error};
use crate::conversations::Conversations;
use crate::session::{ConversationError, Owner};

/// The query of the conversations routes: the person, and the page.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PersonQuery {
    user_id: Option<String>,
    account_id: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
    before: Option<u64>,
}

/// A request refused before it reaches the store: its status, and why.
#[derive(Debug)]
pub(super) struct Refused(StatusCode, String);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

/// The asking person's ids, both given and not blank; the 400 to answer otherwise.
pub(super) fn person(user_id: Option<&str>, account_id: Option<&str>) -> Result<Owner, Refused> {
    for (field, value) in [("userId", user_id), ("accountId", account_id)] {
        if value.is_none_or(|v| v.trim().is_empty()) {
            return Err(Refused(
                StatusCode::BAD_REQUEST,
                format!("{field} must not be empty"),
            ));
        }
    }
    Ok(Owner::new(
        user_id.unwrap_or_default(),
        account_id.unwrap_or_default(),
    ))
}

fn asked(host: &ContainerHost, query: &PersonQuery) -> Result<(Conversations, Owner), Refused> {
    let owner = person(query.user_id.as_deref(), query.account_id.as_deref())?;
    let conversations = host
        .inner
        .conversations
        .get()
        .cloned()
        .ok_or_else(|| Refused(StatusCode::NOT_FOUND, "this host serves no conversations".into()))?;
    Ok((conversations, owner))
}

/// The answer to a conversations call: its value as JSON, or the status its error calls for.
fn answer<T: Serialize>(result: Result<T, ConversationError>) -> Response {
    let e = match result {
        Ok(value) => return axum::Json(value).into_response(),
        Err(e) => e,
    };
    let status = match e {
        ConversationError::NotFound(_) => StatusCode::NOT_FOUND,
        ConversationError::ForeignCursor | ConversationError::Limit(_) => StatusCode::BAD_REQUEST,
        _ => {
            tracing::error!(error = %e, "a conversations call failed");
            return error(StatusCode::SERVICE_UNAVAILABLE, "the conversation store failed");
        }
    };
    error(status, e.to_string())
}

/// `GET /conversations`.
pub(super) async fn list(State(host): State<ContainerHost>, Query(query): Query<PersonQuery>) -> Response {
    match asked(&host, &query) {
        Ok((conversations, owner)) => answer(
            conversations
                .list(&owner, query.limit, query.cursor.as_deref())
                .await,
        ),
        Err(refused) => refused.into_response(),
    }
}

/// `GET /conversations/{id}`.
pub(super) async fn get(
    State(host): State<ContainerHost>,
    Path(id): Path<String>,
    Query(query): Query<PersonQuery>,
) -> Response {
    match asked(&host, &query) {
        Ok((conversations, owner)) => answer(conversations.get(&owner, &id, query.limit, query.before).await),
        Err(refused) => refused.into_response(),
    }
}

/// `DELETE /conversations/{id}`.
pub(super) async fn delete(
    State(host): State<ContainerHost>,
    Path(id): Path<String>,
    Query(query): Query<PersonQuery>,
) -> Response {
    match asked(&host, &query) {
        Ok((conversations, owner)) => answer(conversations.delete(&owner, &id).await),
        Err(refused) => refused.into_response(),
    }
}

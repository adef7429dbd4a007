//! A person's conversations over HTTP, for a product's UI (through the product's backend, which
//! authenticates the person and passes their ids):
//!
//! | request | answers |
//! | --- | --- |
//! | `GET /conversations?userId=U&accountId=A&limit=&cursor=` | the person's conversations, most recent first; 400 a missing id, a limit outside 1–100, or a cursor that is not theirs |
//! | `GET /conversations/{id}?userId=U&accountId=A&limit=&before=` | one conversation in display form, its newest messages before `before`; 404 not the person's |
//! | `DELETE /conversations/{id}?userId=U&accountId=A` | every item of it, its files, a running turn stopped first: counts; 404 not the person's (or deleted already); 409 another delete of it is under way (one delete finishes a conversation's end) |
//!
//! A conversation of someone else is 404, never 403: the answer does not say that it exists.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::access::{Asker, Owned};
use super::extract::Params;
use super::{ContainerHost, HostError};
use agent_worker_contract::ErrorChain;
use agent_worker_core::conversations::Conversations;
use agent_worker_core::session::ConversationError;

/// The page a conversations route asks for.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(super) struct PageQuery {
    /// How many: conversations of the list, or messages of one (1 to 100, 20 by default).
    limit: Option<usize>,
    /// The list's page after the one whose `cursor` this is.
    cursor: Option<String>,
    /// One conversation's messages before this position (its `older` gives the next page's).
    before: Option<u64>,
}

fn served(host: &ContainerHost) -> Result<Conversations, HostError> {
    host.conversations()
        .cloned()
        .ok_or_else(|| HostError::not_found("this host serves no conversations"))
}

/// The answer to a conversations call: its value as JSON, or the status its error calls for.
fn answer<T: Serialize>(result: Result<T, ConversationError>) -> Result<Response, HostError> {
    let e = match result {
        Ok(value) => return Ok(Json(value).into_response()),
        Err(e) => e,
    };
    Err(match e {
        ConversationError::NotFound(_) => HostError::not_found(e.to_string()),
        ConversationError::DeleteUnderway(_) => {
            HostError::new(axum::http::StatusCode::CONFLICT, e.to_string())
        }
        ConversationError::ForeignCursor => HostError::field("cursor", e.to_string()),
        ConversationError::Limit(_) => HostError::field("limit", e.to_string()),
        _ => {
            tracing::error!(error = %ErrorChain(&e), "a conversations call failed");
            HostError::unavailable("the conversation store failed")
        }
    })
}

/// `GET /conversations`.
pub(super) async fn list(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    Params(page): Params<PageQuery>,
) -> Result<Response, HostError> {
    answer(
        served(&host)?
            .list(&person, page.limit, page.cursor.as_deref())
            .await,
    )
}

/// `GET /conversations/{id}`.
pub(super) async fn get(
    State(host): State<ContainerHost>,
    conversation: Owned,
    Params(page): Params<PageQuery>,
) -> Result<Response, HostError> {
    answer(
        served(&host)?
            .get(&conversation.person, &conversation.id, page.limit, page.before)
            .await,
    )
}

/// `DELETE /conversations/{id}`.
pub(super) async fn delete(
    State(host): State<ContainerHost>,
    conversation: Owned,
) -> Result<Response, HostError> {
    answer(
        served(&host)?
            .delete(&conversation.person, &conversation.id)
            .await,
    )
}

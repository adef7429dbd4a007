//! A request's body and query as typed values, refused in [`HostError`]'s one body shape (axum's
//! own extractors answer their rejections as plain text); and a turn's body ([`TurnBody`]).

use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::ContainerHost;
use super::access::Authority;
use super::error::HostError;
use agent_worker_core::session::Owner;
use agent_worker_runtime::AgentTurnPayload;

/// A JSON body of type `T`; a body that is not one is 400 (415 without a JSON content type)
/// naming `body`.
#[derive(Debug, Clone)]
pub(super) struct JsonBody<T>(pub(super) T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = HostError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        axum::Json::<T>::from_request(request, state)
            .await
            .map(|axum::Json(value)| Self(value))
            .map_err(|rejection| {
                // axum says 422 for JSON of the wrong shape; every route here says 400.
                let status = match rejection.status() {
                    StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
                    other => other,
                };
                HostError::new(status, rejection.body_text()).at("body")
            })
    }
}

/// The query string as `T`; a query that is not one is 400 naming `query`.
#[derive(Debug, Clone)]
pub(super) struct Params<T>(pub(super) T);

impl<T, S> FromRequestParts<S> for Params<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = HostError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| Self(value))
            .map_err(|rejection| HostError::new(rejection.status(), rejection.body_text()).at("query"))
    }
}

/// `body` with the person a request stands for as its `userId` and `accountId` where it names
/// none (a person's token, the console); `None` when there is nothing to fill (or it is not a
/// JSON object, which the payload's decoder then says).
fn with_person(body: &str, person: &Owner) -> Option<String> {
    let mut value: serde_json::Value = serde_json::from_str(body).ok()?;
    let object = value.as_object_mut()?;
    if object.contains_key("userId") && object.contains_key("accountId") {
        return None;
    }
    object
        .entry("userId")
        .or_insert_with(|| person.user_id.clone().into());
    object
        .entry("accountId")
        .or_insert_with(|| person.account_id.clone().into());
    Some(value.to_string())
}

/// The turn a `POST /turns` body holds (its person's ids filled in from a person's own token
/// where it names none): UTF-8, no larger than the host takes (413 naming
/// `body`), decoded as a payload (400 naming the field that is wrong), no command (those go to
/// `POST /sessions/{id}/commands`), and words the store can keep (413 naming `content`: the
/// engine would refuse them too, after the 202).
#[derive(Debug)]
pub(super) struct TurnBody(pub(super) AgentTurnPayload);

impl FromRequest<ContainerHost> for TurnBody {
    type Rejection = HostError;

    async fn from_request(request: Request, host: &ContainerHost) -> Result<Self, Self::Rejection> {
        let own = request
            .extensions()
            .get::<Authority>()
            .and_then(|authority| authority.own_person().cloned());
        let body =
            axum::body::Bytes::from_request(request, host)
                .await
                .map_err(|rejection| match rejection.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => HostError::too_large(
                        "body",
                        format!(
                            "the body is larger than the {} bytes a turn may be",
                            host.config().body_limit
                        ),
                    ),
                    status => HostError::new(status, rejection.body_text()),
                })?;
        let text =
            std::str::from_utf8(&body).map_err(|_| HostError::field("body", "the body is not UTF-8"))?;
        decode_turn(host, text, own.as_ref()).map(Self)
    }
}

/// A turn's body decoded and checked as `POST /turns` takes it, every protocol's way in: the
/// payload's own checks (the field named), no command (those go to the session's commands), and
/// content one stored message holds (413). With `own`, a request that stands for its own person
/// (the console, a person's token), the body's missing ids are that person's, and the page's
/// knowledge it sends is the page's state ([`knowledge_as_page_state`]).
pub(super) fn decode_turn(
    host: &ContainerHost,
    text: &str,
    own: Option<&Owner>,
) -> Result<AgentTurnPayload, HostError> {
    let filled = own.and_then(|person| with_person(text, person));
    let mut turn = AgentTurnPayload::decode(filled.as_deref().unwrap_or(text)).map_err(|e| {
        let field = if e.path.is_empty() {
            "body"
        } else {
            e.path.as_str()
        };
        HostError::field(field, e.to_string())
    })?;
    if own.is_some() {
        knowledge_as_page_state(&mut turn);
    }
    admit(host, turn)
}

/// A turn a protocol adapter built, typed (see [`AgentTurnPayload::new`]), checked as
/// [`decode_turn`] checks a body: its ids ([`AgentTurnPayload::checked`], the field named), then
/// what the host admits.
pub(super) fn adapted_turn(
    host: &ContainerHost,
    turn: AgentTurnPayload,
) -> Result<AgentTurnPayload, HostError> {
    let turn = turn
        .checked()
        .map_err(|e| HostError::field(&e.path, e.to_string()))?;
    admit(host, turn)
}

/// What the host admits of a checked turn: no command, content one stored message holds (413).
fn admit(host: &ContainerHost, turn: AgentTurnPayload) -> Result<AgentTurnPayload, HostError> {
    if turn.command.is_some() {
        return Err(HostError::field(
            "command",
            "a command goes to POST /sessions/{id}/commands, which answers whether the running turn took it",
        ));
    }
    if let Some(limit) = host.store().max_message_bytes()
        && turn.content.len() > limit
    {
        return Err(HostError::too_large(
            "content",
            format!(
                "content is {} bytes; a turn's message may hold at most {limit}",
                turn.content.len()
            ),
        ));
    }
    Ok(turn)
}

/// The key the page's knowledge goes under when a person sent it with their own credential.
const PERSONS_KNOWLEDGE_KEY: &str = "pageKnowledge";

/// A person's own credential writes no text of the system prompt's: the page's knowledge
/// (`context.uiKnowledge`, which seed 004 renders after the system prompt, as the product's
/// backend sends it) is taken as the page's state when the person sent it themselves, shown to
/// the model with their message, as data.
fn knowledge_as_page_state(turn: &mut AgentTurnPayload) {
    if let Some(context) = turn.context.as_mut()
        && let Some(knowledge) = context.remove("uiKnowledge")
    {
        context.insert(PERSONS_KNOWLEDGE_KEY.to_owned(), knowledge);
    }
}

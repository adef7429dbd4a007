//! Who asks, and whether the conversation is theirs: the one place the container's routes learn
//! both.
//!
//! [`authenticate`], a layer over the whole router, decides how a request is authenticated and
//! leaves its [`Authority`] in the request: the API key (the product's backend, which vouches for
//! the ids a request names), a person's own token (`--auth jwt`: a JWT of the configured issuer,
//! [`JwtVerifier`]), or the console's token; the last two stand for their person only, whatever
//! a request names. The extractors read it, so a handler cannot forget either check:
//! - [`Asker`]: the person, from the authority and the ids the query names;
//! - [`Acting`] / [`Owned`]: a conversation of theirs (the path's `{id}` or the query's
//!   `session`), its id checked;
//! - [`TurnPath`], [`CallPath`]: the turn and the UI call a path names, checked.
//!
//! The rule for a conversation no one owns yet: a person's first act on it (a turn, a stop, a
//! command, a UI answer, an upload, an event stream) makes it theirs, in one conditional write;
//! a read or a delete of it finds nothing (404). So nothing a stranger does on a conversation, even before
//! its owner's first turn, ever takes effect on it: the owner's turn is refused instead. Ids are
//! the product's to choose; unguessable ones (UUIDs) keep a stranger from taking one first.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{FromRequestParts, Query, RawPathParams, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::ContainerHost;
use super::error::HostError;
use crate::jwt::{Caller, JwtVerifier, TokenError};
use agent_worker_contract::ErrorChain;
use agent_worker_core::session::{IdError, Owner, OwnerCheck, SessionId, TurnId};
use agent_worker_http::api_key::{bearer_token, same_secret};

/// How a request was authenticated, and so whom it may act for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authority {
    /// The product's backend, with the API key: it vouches for the ids a request names.
    Backend,
    /// The console's page, with its token: it acts for the console's person alone.
    Console(Owner),
    /// A person, with their own token: it acts for that person alone.
    Bearer(Owner),
}

impl Authority {
    /// The person it stands for itself, if it stands for one (the console, a person's token).
    pub fn own_person(&self) -> Option<&Owner> {
        match self {
            Self::Backend => None,
            Self::Console(owner) | Self::Bearer(owner) => Some(owner),
        }
    }

    /// The person a request acts for, from the ids it names: both required and checked for the
    /// backend; for the console or a person's token, its person (a request that names another
    /// is refused, 403, and changes nothing).
    pub fn person(&self, user_id: Option<&str>, account_id: Option<&str>) -> Result<Owner, HostError> {
        match self {
            Self::Backend => {
                let user_id = user_id.unwrap_or_default();
                let account_id = account_id.unwrap_or_default();
                check_id("userId", user_id)?;
                check_id("accountId", account_id)?;
                Ok(Owner::new(user_id, account_id))
            }
            Self::Console(owner) | Self::Bearer(owner) => {
                for (field, named, own) in [
                    ("userId", user_id, &owner.user_id),
                    ("accountId", account_id, &owner.account_id),
                ] {
                    if named.is_some_and(|named| named != own) {
                        let message = match self {
                            Self::Console(_) => "the console's token acts for the console's person only",
                            _ => "a person's token acts for that person only",
                        };
                        return Err(HostError::new(StatusCode::FORBIDDEN, message).at(field));
                    }
                }
                Ok(owner.clone())
            }
        }
    }
}

impl Authority {
    /// The authority of a verified token: the backend's, or its person's.
    fn of_token(caller: Caller) -> Self {
        match caller {
            Caller::Person(person) => Self::Bearer(person),
            Caller::Backend(client) => {
                tracing::debug!(client = %client, "the backend's token");
                Self::Backend
            }
        }
    }
}

impl FromRequestParts<ContainerHost> for Authority {
    type Rejection = HostError;

    async fn from_request_parts(parts: &mut Parts, _host: &ContainerHost) -> Result<Self, HostError> {
        parts
            .extensions
            .get::<Authority>()
            .cloned()
            .ok_or_else(|| HostError::new(StatusCode::UNAUTHORIZED, "a missing or wrong x-api-key"))
    }
}

/// An id a route names, checked the same way everywhere: not blank, and one any store of this
/// crate can key ([`id_problem`](agent_worker_core::session::id_problem)); 400 naming `field` otherwise.
pub fn checked_id<I>(field: &str, id: impl Into<String>) -> Result<I, HostError>
where
    I: TryFrom<String, Error = IdError>,
{
    let id = id.into();
    check_id(field, &id)?;
    I::try_from(id).map_err(|problem| HostError::field(field, format!("{field} {problem}")))
}

/// [`checked_id`] for an id that stays text (a person's, an account's).
pub(crate) fn checked_text(field: &str, id: String) -> Result<String, HostError> {
    check_id(field, &id)?;
    Ok(id)
}

/// [`checked_id`] for a text that stays text (a UI call's id, keyed beside its turn's).
fn check_id(field: &str, id: &str) -> Result<(), HostError> {
    match agent_worker_core::session::id_problem(id, Some(agent_worker_aws::dynamo::keys::MAX_ID_BYTES)) {
        Some(IdError::Empty) => Err(HostError::field(field, format!("{field} must not be empty"))),
        Some(problem) => Err(HostError::field(field, format!("{field} {problem}"))),
        None => Ok(()),
    }
}

/// The ids a query may name.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct NamedIds {
    /// The person, with the product's backend key (which vouches for it). A person's own token or
    /// the console's stands for its own person: an id given here must be theirs.
    user_id: Option<String>,
    /// The person's account, as `userId`.
    account_id: Option<String>,
    /// The conversation, on a turn's routes (`/turns/{turn_id}/…`).
    session: Option<String>,
}

fn named_ids(parts: &Parts) -> Result<NamedIds, HostError> {
    Query::<NamedIds>::try_from_uri(&parts.uri)
        .map(|Query(ids)| ids)
        .map_err(|e| HostError::field("query", e.body_text()))
}

/// The person a request acts for (see [`Authority::person`]).
#[derive(Debug, Clone)]
pub struct Asker(pub Owner);

impl FromRequestParts<ContainerHost> for Asker {
    type Rejection = HostError;

    async fn from_request_parts(parts: &mut Parts, host: &ContainerHost) -> Result<Self, HostError> {
        let authority = Authority::from_request_parts(parts, host).await?;
        let ids = named_ids(parts)?;
        authority
            .person(ids.user_id.as_deref(), ids.account_id.as_deref())
            .map(Asker)
    }
}

/// What a route does with a conversation: act on it (claiming it when no one owns it), or use
/// one that is the person's already (read it, delete it).
pub trait Access: Send + Sync {
    /// Whether the route acts on the conversation.
    const ACTS: bool;
}

/// A route that acts on a conversation.
#[derive(Debug)]
pub enum Act {}
impl Access for Act {
    const ACTS: bool = true;
}

/// A route that uses a conversation the person owns already.
#[derive(Debug)]
pub enum Existing {}
impl Access for Existing {
    const ACTS: bool = false;
}

/// A conversation of the asking person's, its id checked: the path's `{id}`, or the query's
/// `session`. 404 when it is someone else's (or, for [`Owned`], no one's).
#[derive(Debug)]
pub struct Conversation<A> {
    /// The person.
    pub person: Owner,
    /// The conversation.
    pub id: SessionId,
    access: PhantomData<A>,
}

/// A conversation the route acts on: claimed for the person when no one owns it.
pub type Acting = Conversation<Act>;
/// A conversation the person owns already, which the route reads or deletes.
pub type Owned = Conversation<Existing>;

impl<A: Access> FromRequestParts<ContainerHost> for Conversation<A> {
    type Rejection = HostError;

    async fn from_request_parts(parts: &mut Parts, host: &ContainerHost) -> Result<Self, HostError> {
        let authority = Authority::from_request_parts(parts, host).await?;
        let ids = named_ids(parts)?;
        let person = authority.person(ids.user_id.as_deref(), ids.account_id.as_deref())?;
        let id = match path_param(parts, "id").await? {
            Some(id) => checked_id("conversationId", id)?,
            None => checked_id("session", ids.session.unwrap_or_default())?,
        };
        theirs(host, &person, &id, A::ACTS).await?;
        Ok(Self {
            person,
            id,
            access: PhantomData,
        })
    }
}

/// Whether `person` may act on (`acts`) or use `conversation`: the one decision. Acting on one
/// no one owns makes it theirs; anyone else's (or a deleted one) is 404, and nothing changes.
/// For an act, answers the turn running in the conversation when it was looked at.
pub async fn theirs(
    host: &ContainerHost,
    person: &Owner,
    conversation: &SessionId,
    acts: bool,
) -> Result<Option<TurnId>, HostError> {
    let store = &host.store();
    let found = if acts {
        store
            .claim_conversation(conversation, person)
            .await
            .map(|claim| match claim.owner {
                OwnerCheck::Claimed | OwnerCheck::Same => Found::Theirs(claim.running_turn),
                OwnerCheck::Other(owner) => Found::Other(owner),
                OwnerCheck::Deleted => Found::Nobody,
            })
    } else {
        store.owner(conversation).await.map(|owner| match owner {
            Some(owner) if &owner == person => Found::Theirs(None),
            // Deleted: no one's any more, whoever it was.
            Some(owner) if owner.is_of_deleted() => Found::Nobody,
            Some(owner) => Found::Other(owner),
            // No one's: nothing to read or delete, answered as for a conversation that is gone.
            None => Found::Nobody,
        })
    };
    match found.map_err(|e| HostError::store("the owner check", &e))? {
        Found::Theirs(running) => Ok(running),
        Found::Other(owner) => {
            person.warn_refused(&owner, if acts { "an act" } else { "a read or a delete" });
            Err(not_theirs(conversation))
        }
        Found::Nobody => Err(not_theirs(conversation)),
    }
}

/// Whose a conversation turned out to be, for [`theirs`].
enum Found {
    /// The person's (now, for an act on one no one owned), with the turn running in it.
    Theirs(Option<TurnId>),
    /// Someone else's.
    Other(Owner),
    /// No one's to use: deleted, or (for a read) never claimed.
    Nobody,
}

/// The 404 for a conversation that is not the person's: the same whether it exists or not.
pub fn not_theirs(conversation: &str) -> HostError {
    HostError::not_found(format!("no conversation {conversation} of yours"))
}

async fn path_param(parts: &mut Parts, name: &str) -> Result<Option<String>, HostError> {
    let params = RawPathParams::from_request_parts(parts, &())
        .await
        .map_err(|e| HostError::field("path", e.body_text()))?;
    Ok(params
        .iter()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_owned()))
}

async fn required_param<I>(parts: &mut Parts, name: &str, field: &str) -> Result<I, HostError>
where
    I: TryFrom<String, Error = IdError>,
{
    checked_id(field, path_param(parts, name).await?.unwrap_or_default())
}

/// The turn a path names (`{turn_id}`), checked.
#[derive(Debug, Clone)]
pub struct TurnPath(pub TurnId);

impl<S: Send + Sync> FromRequestParts<S> for TurnPath {
    type Rejection = HostError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, HostError> {
        required_param(parts, "turn_id", "turnId").await.map(TurnPath)
    }
}

/// The turn and the UI call a path names (`{turn_id}`, `{call_id}`), checked; a call id holds
/// no `#`, which would make its answer's key another call's.
#[derive(Debug, Clone)]
pub struct CallPath {
    /// The turn.
    pub turn_id: TurnId,
    /// The call.
    pub call_id: String,
}

impl<S: Send + Sync> FromRequestParts<S> for CallPath {
    type Rejection = HostError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, HostError> {
        let turn_id = required_param(parts, "turn_id", "turnId").await?;
        let call_id = path_param(parts, "call_id").await?.unwrap_or_default();
        check_id("callId", &call_id)?;
        if call_id.contains('#') {
            return Err(HostError::field("callId", "callId must not hold '#'"));
        }
        Ok(Self { turn_id, call_id })
    }
}

/// How the API knows the person (`AUTH`).
#[derive(Clone)]
pub(super) enum ApiAuth {
    /// The product's backend holds this key and vouches for the ids a request names.
    ApiKey(agent_worker_http::api_key::ApiKey),
    /// Each request carries its person's own token (`Authorization: Bearer`), verified here.
    Tokens(Arc<JwtVerifier>),
    /// As [`Tokens`](Self::Tokens), but a request that API Gateway's JWT authorizer verified
    /// comes with its claims ([`VerifiedCaller::Claims`]), which are taken as they are; one that
    /// did not come that way (the Function URL's event streams) has its token verified here.
    GatewayTokens(Arc<JwtVerifier>),
    /// The Function URL verified the caller's AWS signature (`AuthType: AWS_IAM`,
    /// [`VerifiedCaller::Iam`]): the product's backend, which vouches for the ids it names.
    Iam,
    /// Amazon Bedrock AgentCore Runtime verified the caller's AWS signature and passes the user
    /// the caller named ([`RUNTIME_USER_HEADER`]): that person, of this account. Only behind the
    /// runtime: whatever reaches the port can name any person.
    RuntimeUsers {
        /// The account every person the runtime names belongs to.
        account: String,
    },
}

/// The header in which AgentCore Runtime passes the user an IAM caller named
/// (`InvokeAgentRuntime`'s `runtimeUserId`).
pub const RUNTIME_USER_HEADER: &str = "x-amzn-bedrock-agentcore-runtime-user-id";

impl fmt::Debug for ApiAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ApiKey(_) => f.write_str("ApiKey(..)"),
            Self::Tokens(verifier) => f.debug_tuple("Tokens").field(&verifier.config().issuer).finish(),
            Self::GatewayTokens(verifier) => f
                .debug_tuple("GatewayTokens")
                .field(&verifier.config().issuer)
                .finish(),
            Self::Iam => f.write_str("Iam"),
            Self::RuntimeUsers { account } => {
                f.debug_struct("RuntimeUsers").field("account", account).finish()
            }
        }
    }
}

/// What the platform in front of the API verified of a request. The host that received the
/// request puts it in the request's extensions (the `api` function, from the Lambda event's
/// request context, which Lambda writes): it is never read from anything the caller sends, so
/// `agent-worker serve`, which has no such platform, never has one.
#[derive(Debug, Clone, PartialEq)]
pub enum VerifiedCaller {
    /// API Gateway's JWT authorizer verified the request's token: its claims.
    Claims(serde_json::Map<String, serde_json::Value>),
    /// The Function URL verified the request's AWS signature: the caller's ARN.
    Iam {
        /// The signing principal's ARN.
        caller: String,
    },
}

/// The one authentication, a layer over the whole router. With an API key: `x-api-key` is the
/// backend's key. With tokens: `Authorization: Bearer <JWT>` is the person's own token. Either
/// way `x-console-token` is the console's token. On an event stream alone, which a browser's
/// `EventSource` cannot give headers, the token may ride in the query instead
/// (`consoleToken=`, `accessToken=`), so that it stays out of other routes' access logs. The
/// paths [`OPEN_PATHS`](super::OPEN_PATHS) (and the console's assets) need none, and whatever
/// credential comes with them is not looked at. The
/// [`Authority`] found goes with the request.
pub async fn authenticate(State(host): State<ContainerHost>, mut request: Request, next: Next) -> Response {
    // An open path takes no credential, so none it comes with is checked: a token that is
    // expired, forged or unreadable, or an issuer that cannot be read, changes nothing there.
    if host.open(request.uri().path()) {
        return next.run(request).await;
    }
    let verified = request.extensions().get::<VerifiedCaller>();
    let found = authority(&host, request.headers(), request.uri(), verified).await;
    match found {
        Ok(Some((authority, until))) => {
            request.extensions_mut().insert(authority);
            if let Some(until) = until {
                request.extensions_mut().insert(TakenUntil(until));
            }
            next.run(request).await
        }
        Ok(None) => HostError::new(StatusCode::UNAUTHORIZED, host.config().auth.missing()).into_response(),
        Err(refused) => refused.into_response(),
    }
}

impl ApiAuth {
    /// How A2A callers authenticate, as an agent card declares it: its security schemes and
    /// the requirement that names them.
    pub(super) fn a2a_security(&self) -> (serde_json::Value, serde_json::Value) {
        use serde_json::json;
        match self {
            Self::ApiKey(_) => (
                json!({ "apiKey": { "apiKeySecurityScheme": {
                    "location": "header", "name": "x-api-key",
                    "description": "The product's backend key; the query names the person (userId, accountId)",
                }}}),
                json!({ "schemes": { "apiKey": { "list": [] } } }),
            ),
            Self::Iam | Self::RuntimeUsers { .. } => (
                json!({ "sigv4": { "httpAuthSecurityScheme": { "scheme": "AWS4-HMAC-SHA256" } } }),
                json!({ "schemes": { "sigv4": { "list": [] } } }),
            ),
            Self::Tokens(_) | Self::GatewayTokens(_) => (
                json!({ "bearer": { "httpAuthSecurityScheme": { "scheme": "Bearer", "bearerFormat": "JWT" } } }),
                json!({ "schemes": { "bearer": { "list": [] } } }),
            ),
        }
    }

    /// What a request without a credential is told.
    fn missing(&self) -> &'static str {
        match self {
            Self::ApiKey(_) => "a missing or wrong x-api-key",
            Self::Tokens(_) | Self::GatewayTokens(_) => {
                "a missing bearer token (Authorization: Bearer <JWT>)"
            }
            Self::Iam => "the request is not signed (AWS Signature Version 4, through the Function URL)",
            Self::RuntimeUsers { .. } => {
                "no user named: AgentCore Runtime passes it in X-Amzn-Bedrock-AgentCore-Runtime-User-Id (InvokeAgentRuntime's runtimeUserId)"
            }
        }
    }
}

/// When the credential of a request stops being taken: a token's `exp` and the verifier's
/// leeway. Left in the request beside its [`Authority`] when the credential was a token; what
/// outlives the request (a WebSocket, a turn's event stream) ends there. The other credentials
/// (the API key, the console's token, a signed request) carry no end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakenUntil(pub SystemTime);

impl TakenUntil {
    /// The furthest ahead a token's end is waited for: a token that ends later is as good as one
    /// that never does.
    pub const LONGEST_WAIT: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

    /// The end on the runtime's clock: now when it has passed; `None` past what the clock holds.
    pub fn deadline(self) -> Option<tokio::time::Instant> {
        let left = self.0.duration_since(SystemTime::now()).unwrap_or_default();
        tokio::time::Instant::now().checked_add(left.min(Self::LONGEST_WAIT))
    }

    /// Waits for the end of `token` (the request's, if it came with one); forever without one.
    pub(crate) async fn ended(token: Option<Self>) {
        match token.and_then(Self::deadline) {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

/// How `request` is authenticated, if it is, and until when (a token's end); a bearer token
/// that is not taken is 401 saying why (503 when the issuer's keys cannot be read).
async fn authority(
    host: &ContainerHost,
    headers: &axum::http::HeaderMap,
    uri: &axum::http::Uri,
    verified: Option<&VerifiedCaller>,
) -> Result<Option<(Authority, Option<SystemTime>)>, HostError> {
    let in_query = |name: &str| {
        is_event_stream(uri.path())
            .then(|| {
                uri.query().and_then(|query| {
                    query
                        .split('&')
                        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                })
            })
            .flatten()
    };
    // Claims API Gateway's authorizer verified: taken as they are.
    if let (ApiAuth::GatewayTokens(verifier), Some(VerifiedCaller::Claims(claims))) =
        (&host.config().auth, verified)
    {
        return match verifier.caller_of(claims) {
            Ok(caller) => Ok(Some((Authority::of_token(caller), verifier.taken_until(claims)))),
            Err(refused) => Err(HostError::new(StatusCode::UNAUTHORIZED, refused.to_string())),
        };
    }
    match &host.config().auth {
        ApiAuth::ApiKey(key) => {
            let given = headers.get("x-api-key").map(|v| v.as_bytes());
            if given.is_some_and(|given| key.matches(given)) {
                return Ok(Some((Authority::Backend, None)));
            }
        }
        ApiAuth::Iam => {
            if let Some(VerifiedCaller::Iam { caller }) = verified {
                tracing::debug!(caller = %caller, "a signed request");
                return Ok(Some((Authority::Backend, None)));
            }
        }
        ApiAuth::RuntimeUsers { account } => {
            if let Some(user) = headers.get(RUNTIME_USER_HEADER) {
                let field = "X-Amzn-Bedrock-AgentCore-Runtime-User-Id";
                let user = user
                    .to_str()
                    .map_err(|_| HostError::field(field, format!("{field} is not text")))?;
                check_id(field, user)?;
                return Ok(Some((
                    Authority::Bearer(Owner::new(user, account.as_str())),
                    None,
                )));
            }
        }
        ApiAuth::Tokens(verifier) | ApiAuth::GatewayTokens(verifier) => {
            let bearer = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(bearer_token)
                .or_else(|| in_query("accessToken"));
            if let Some(token) = bearer {
                return match verifier.verify_caller(token.trim()).await {
                    Ok(taken) => Ok(Some((Authority::of_token(taken.caller), taken.until))),
                    Err(TokenError::KeysUnavailable(why)) => {
                        // Logged once per failed fetch (`hosts::jwt`); here, per request.
                        tracing::debug!(error = %ErrorChain(&why), "the issuer's keys cannot be read");
                        Err(HostError::unavailable(
                            "the token cannot be checked now: the issuer's keys cannot be read",
                        ))
                    }
                    Err(refused) => {
                        tracing::info!(reason = %refused, "a bearer token was refused");
                        Err(HostError::new(StatusCode::UNAUTHORIZED, refused.to_string()))
                    }
                };
            }
        }
    }
    let Some(console) = host.console() else {
        return Ok(None);
    };
    let given = headers
        .get("x-console-token")
        .map(|v| v.as_bytes())
        .or_else(|| in_query("consoleToken").map(str::as_bytes));
    Ok(given
        .is_some_and(|given| same_secret(given, &console.token))
        .then(|| (Authority::Console(console.person()), None)))
}

impl ContainerHost {
    /// Whether `path` is served without a credential ([`OPEN_PATHS`](super::OPEN_PATHS), and
    /// the console's own assets when it has one).
    fn open(&self, path: &str) -> bool {
        super::open_path(path, self.inner.console.is_some())
    }
}

/// Whether `path` is a turn's event stream, the one route that takes the console's token in
/// its query.
pub fn is_event_stream(path: &str) -> bool {
    path.strip_prefix("/turns/")
        .and_then(|rest| rest.strip_suffix("/events"))
        .is_some_and(|turn| !turn.is_empty() && !turn.contains('/'))
}

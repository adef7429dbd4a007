//! What the container refuses before a route runs, answered in the shape of the route the
//! request was for: a request body over the host's limit (413, [`whole_body`]), one that does not
//! arrive within its deadline (408) or cannot be read (400), and a request head the server does
//! not take ([`refused_head`]: a target too long (414), a byte a URL may not hold (400), too
//! many or too large headers (431)). Every route answers [`HostError`]'s `{error, field}`; A2A's
//! routes answer in their binding's shape (a JSON-RPC error on `/a2a`, a `google.rpc.Status`
//! under `/a2a/`).

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;

use super::{ContainerHost, HostError, a2a, console};
use agent_worker_http::serve::RefusedHead;

/// A refusal of a request to `path`, in the shape of the route it was for.
fn refusal(path: &str, error: HostError) -> Response {
    a2a::edge_refusal(path, &error).unwrap_or_else(|| error.into_response())
}

/// A request head refused before it reached the router (`hosts::http_serve`), answered as the
/// router's own answers are: in the shape of the route it asked for, with the security headers.
pub(super) fn refused_head(refused: &RefusedHead) -> Response {
    let error = HostError::new(refused.status, refused.message.clone()).at(refused.field);
    console::with_security_headers(refusal(&refused.path, error))
}

/// Reads a request's body whole, within the host's limit, before any route runs: a body past it
/// is refused (413 naming `body`) without being read further, whatever the route does with a
/// body, so no extractor's plain-text rejection is ever the answer.
pub(super) async fn whole_body(State(host): State<ContainerHost>, request: Request, next: Next) -> Response {
    if axum::body::HttpBody::is_end_stream(request.body()) {
        return next.run(request).await;
    }
    let limit = host.config().body_limit;
    let path = request.uri().path().to_owned();
    let too_large = || {
        let message = format!("the body is larger than the {limit} bytes this server takes");
        refusal(&path, HostError::too_large("body", message))
    };
    if declared_length(request.headers()).is_some_and(|length| length > limit as u64) {
        return too_large();
    }
    let (parts, body) = request.into_parts();
    let mut data = body.into_data_stream();
    let mut whole = Vec::new();
    while let Some(chunk) = data.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(e) => return refusal(&path, unread(&e)),
        };
        if whole.len() + chunk.len() > limit {
            return too_large();
        }
        whole.extend_from_slice(&chunk);
    }
    next.run(Request::from_parts(parts, Body::from(Bytes::from(whole))))
        .await
}

/// The length a request's head declares for its body, if it declares one.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// The refusal of a body that could not be read: 408 when it did not arrive within its deadline
/// (the accept loop's body timeout), 400 otherwise.
fn unread(error: &axum::Error) -> HostError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return HostError::new(StatusCode::REQUEST_TIMEOUT, io.to_string()).at("body");
        }
        source = cause.source();
    }
    HostError::field("body", format!("the body could not be read: {error}"))
}

//! What the HTTP adapters share: the API key (never shown), failures classified by status, and a
//! response's server-sent events.

use std::fmt;
use std::time::Duration;

use agent_worker_core::engine::model::{ModelError, ModelErrorKind, ModelEvent, ModelStream};
use eventsource_stream::{Event, Eventsource as _};
use futures_util::stream::{self, BoxStream};
use futures_util::{Stream, StreamExt as _};

/// The largest PDF given as a document to the HTTP providers: their requests take 32 MB, which
/// the base64 of 24 MiB fills.
pub(crate) const MAX_REQUEST_DOCUMENT_BYTES: usize = 24 * 1024 * 1024;

/// A provider's API key: sent in its header, hidden from `Debug`, never logged.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// `key`, or why it cannot be one.
    pub fn new(key: impl Into<String>) -> Result<Self, EmptyApiKey> {
        let key = key.into();
        if key.trim().is_empty() {
            return Err(EmptyApiKey);
        }
        Ok(Self(key))
    }

    /// The key itself, for its header.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

/// An API key that is empty (or only blanks): no provider takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the API key is empty")]
pub struct EmptyApiKey;

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(…)")
    }
}

/// Where a provider's API is, the model asked for, and the key it is asked with: what every
/// HTTP model holds.
#[derive(Clone)]
pub(crate) struct Endpoint {
    http: reqwest::Client,
    base_url: String,
    api_key: ApiKey,
    pub(crate) model: String,
}

impl Endpoint {
    /// Model `model` at `base_url`, asked with `api_key`.
    pub(crate) fn new(api_key: ApiKey, model: String, base_url: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            base_url: base_url.to_owned(),
            api_key,
            model,
        }
    }

    /// Moves the API to `base_url` (a trailing `/` dropped).
    pub(crate) fn set_base_url(&mut self, base_url: String) {
        self.base_url = base_url.trim_end_matches('/').to_owned();
    }

    /// A POST of `body` to `path` below the base URL, asking for server-sent events.
    pub(crate) fn post(&self, path: &str, body: &serde_json::Value) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base_url))
            .header("accept", "text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string())
    }

    /// The key itself, for the provider's header.
    pub(crate) fn key(&self) -> &str {
        self.api_key.expose()
    }

    /// The model and where it is, for a model's `Debug` (never the key).
    pub(crate) fn debug<'a, 'b>(
        &self,
        f: &'a mut fmt::DebugStruct<'a, 'b>,
    ) -> &'a mut fmt::DebugStruct<'a, 'b> {
        f.field("model", &self.model).field("base_url", &self.base_url)
    }
}

/// The kind of failure an HTTP status says: 429 throttled, 529 and 5xx unavailable (overloaded),
/// 408 a timeout, 400 and 413 rejected (the engine compacts a "too long" one), 401 and 403
/// refused, 404 not found.
pub(crate) fn kind_of_status(status: u16) -> ModelErrorKind {
    match status {
        429 => ModelErrorKind::Throttled,
        408 => ModelErrorKind::Timeout,
        500..=599 => ModelErrorKind::Unavailable,
        400 | 413 | 422 => ModelErrorKind::Rejected,
        401 | 403 => ModelErrorKind::AccessDenied,
        404 => ModelErrorKind::NotFound,
        _ => ModelErrorKind::Other,
    }
}

/// The `retry-after` a response carries, in seconds.
pub(crate) fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// A failed response as a model error: its status's kind, the provider's own message (from
/// `{"error": {"message"}}` when the body has one) and its `retry-after`.
pub(crate) async fn failed_response(provider: &str, response: reqwest::Response) -> ModelError {
    let status = response.status().as_u16();
    let wait = retry_after(&response);
    let body = response.text().await.unwrap_or_default();
    let said = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            let error = v.get("error")?;
            let message = error
                .get("message")
                .and_then(|m| m.as_str())
                .or_else(|| error.as_str())?;
            let kind = error.get("type").and_then(|t| t.as_str());
            Some(match kind {
                Some(kind) => format!("{kind}: {message}"),
                None => message.to_owned(),
            })
        })
        .unwrap_or_else(|| body.chars().take(300).collect());
    ModelError::new(
        kind_of_status(status),
        format!("{provider} answered {status}: {said}"),
    )
    .retry_after(wait)
}

/// A request that could not be sent or answered at all.
pub(crate) fn unreachable(provider: &str, error: &reqwest::Error) -> ModelError {
    let kind = if error.is_timeout() {
        ModelErrorKind::Timeout
    } else {
        ModelErrorKind::Unavailable
    };
    ModelError::new(kind, format!("{provider} could not be reached: {error}"))
}

/// The server-sent events of a streaming response.
fn events(
    provider: &'static str,
    response: reqwest::Response,
) -> impl Stream<Item = Result<Event, ModelError>> + Send + 'static {
    response.bytes_stream().eventsource().map(move |event| {
        event.map_err(|e| {
            ModelError::new(
                ModelErrorKind::StreamInterrupted,
                format!("{provider}'s stream broke: {e}"),
            )
        })
    })
}

/// What a provider's stream assembles from its server-sent events: the engine's events made and
/// not yet handed on, and whether the stream has said its last.
pub(crate) trait Assembly: Default + Send + 'static {
    /// Takes one server-sent event.
    fn take(&mut self, event: &Event);
    /// The next event made, if any.
    fn next_ready(&mut self) -> Option<Result<ModelEvent, ModelError>>;
    /// Whether the stream has said its last.
    fn ended(&self) -> bool;
    /// Ends the stream with `error`.
    fn fail(&mut self, error: ModelError);
}

/// The engine's events from a response's server-sent events, assembled by `A`.
fn translated<A: Assembly>(
    events: impl Stream<Item = Result<Event, ModelError>> + Send + 'static,
) -> impl Stream<Item = Result<ModelEvent, ModelError>> + Send + 'static {
    let events = Box::pin(events);
    stream::unfold((events, A::default()), |(mut events, mut assembly)| async move {
        loop {
            if let Some(next) = assembly.next_ready() {
                return Some((next, (events, assembly)));
            }
            if assembly.ended() {
                return None;
            }
            match events.next().await {
                Some(Ok(event)) => assembly.take(&event),
                Some(Err(error)) => assembly.fail(error),
                // The stream ended: the engine tells a response without a stop reason as cut.
                None => return None,
            }
        }
    })
}

/// The model stream of `call`: a failed answer is one error, a streaming one `A`'s events.
pub(crate) fn model_stream<A: Assembly>(
    provider: &'static str,
    call: reqwest::RequestBuilder,
) -> ModelStream {
    let opened = async move {
        let response = call.send().await.map_err(|e| unreachable(provider, &e))?;
        if !response.status().is_success() {
            return Err(failed_response(provider, response).await);
        }
        Ok(events(provider, response))
    };
    Box::pin(
        stream::once(opened)
            .map(|opened| -> BoxStream<'static, Result<ModelEvent, ModelError>> {
                match opened {
                    Ok(events) => translated::<A>(events).boxed(),
                    Err(error) => stream::once(async move { Err(error) }).boxed(),
                }
            })
            .flatten(),
    )
}

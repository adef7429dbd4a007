//! [`HostError`]: what a route of the container answers when it refuses or fails, in one body
//! shape: `{"error": "<what was wrong>", "field": "<the field at fault>"}` (`field` only when one
//! is at fault; a 409 for a conversation that runs another turn adds `runningTurnId`).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::answers::ErrorBody;
use agent_worker_contract::ErrorChain;
use agent_worker_core::session::StoreError;

/// How long a caller refused at capacity or during shutdown should wait, in seconds.
pub const RETRY_AFTER_SECS: u64 = 1;

/// A route's refusal or failure: its status, what was wrong, and the field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    status: StatusCode,
    message: String,
    field: Option<String>,
    running_turn: Option<String>,
}

impl HostError {
    /// A refusal with `status` saying `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            field: None,
            running_turn: None,
        }
    }

    /// 409: the conversation runs turn `running`; one turn of a conversation runs at a time.
    pub fn conversation_busy(conversation: &str, running: &str) -> Self {
        let mut busy = Self::new(
            StatusCode::CONFLICT,
            format!(
                "conversation {conversation} is running turn {running}: steer it or send a follow-up \
                 (POST /sessions/{{id}}/commands), or supersede it (\"supersedes\": [\"{running}\"])"
            ),
        );
        busy.running_turn = Some(running.to_owned());
        busy
    }

    /// 400: `field` is wrong, as `message` says.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message).at(field)
    }

    /// 404: nothing of the asking person's by that id (never 403 for someone else's: that
    /// would say it exists).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 413: `field` is larger than what may be kept.
    pub fn too_large(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, message).at(field)
    }

    /// 429 with `Retry-After`: the asker holds as much as one person (or account) may.
    pub fn too_many(message: impl Into<String>) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, message)
    }

    /// 503 with `Retry-After`: at capacity or shutting down, try again shortly.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// 503: the store failed while `what` (logged whole; the client is told the kind only).
    pub fn store(what: &str, error: &StoreError) -> Self {
        tracing::error!(error = %ErrorChain(error), "{what} failed");
        Self::unavailable(error.client_message())
    }

    /// The same refusal, naming `field` as the one at fault.
    #[must_use]
    pub fn at(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// The status it answers with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// What was wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The field at fault, if one is.
    pub fn field_at_fault(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// The turn that runs in the conversation, for a 409 that refused another
    /// ([`conversation_busy`](Self::conversation_busy)).
    pub fn running_turn(&self) -> Option<&str> {
        self.running_turn.as_deref()
    }
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{} ({field}): {}", self.status, self.message),
            None => write!(f, "{}: {}", self.status, self.message),
        }
    }
}

impl std::error::Error for HostError {}

impl IntoResponse for HostError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.message,
            field: self.field,
            running_turn_id: self.running_turn,
        };
        let mut response = (self.status, Json(body)).into_response();
        if matches!(
            self.status,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        ) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        response
    }
}

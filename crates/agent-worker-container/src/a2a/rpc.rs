//! A2A's JSON-RPC binding: a request's envelope, its errors (the codes A2A and JSON-RPC give
//! them, with the `google.rpc.ErrorInfo` detail the official SDK adds; the HTTP+JSON binding's
//! status and body for each), and an answer.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::HostError;
use agent_worker_core::session::{SessionId, TurnId};

/// A JSON-RPC request.
#[derive(Debug, Deserialize)]
pub(super) struct Request {
    #[serde(default)]
    pub(super) jsonrpc: Option<String>,
    #[serde(default)]
    pub(super) id: Value,
    pub(super) method: Option<String>,
    #[serde(default)]
    pub(super) params: Value,
}

/// A failed call, as JSON-RPC says it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    code: i64,
    message: String,
    /// A2A's reason, for the `ErrorInfo` detail.
    reason: Option<&'static str>,
    /// The `ErrorInfo` detail's metadata: what a program reads of the failure (boxed: an error
    /// travels in every `Result` of a call).
    metadata: Box<Map<String, Value>>,
    /// The HTTP+JSON binding's status and `google.rpc` code, where they are not the code's own.
    http: Option<(StatusCode, &'static str)>,
}

impl RpcError {
    pub(super) fn parse(message: impl Into<String>) -> Self {
        Self::plain(-32700, message)
    }

    pub(super) fn invalid_request(message: impl Into<String>) -> Self {
        Self::plain(-32600, message)
    }

    pub(super) fn method_not_found() -> Self {
        Self::plain(-32601, "Method not found")
    }

    pub(super) fn invalid_params(message: impl Into<String>) -> Self {
        Self::a2a(-32602, "INVALID_PARAMS", message)
    }

    pub(super) fn internal(message: impl Into<String>) -> Self {
        Self::a2a(-32603, "INTERNAL", message)
    }

    pub(super) fn task_not_found() -> Self {
        Self::a2a(-32001, "TASK_NOT_FOUND", "Task not found")
    }

    /// A task's part that is not found (a push config), as A2A's SDK says it: task not found.
    pub(super) fn task_not_found_saying(message: impl Into<String>) -> Self {
        Self::a2a(-32001, "TASK_NOT_FOUND", message)
    }

    pub(super) fn not_cancelable(message: impl Into<String>) -> Self {
        Self::a2a(-32002, "TASK_NOT_CANCELABLE", message)
    }

    pub(super) fn push_not_supported() -> Self {
        Self::a2a(
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            "Push notifications are not supported",
        )
    }

    pub(super) fn unsupported(message: impl Into<String>) -> Self {
        Self::a2a(-32004, "UNSUPPORTED_OPERATION", message)
    }

    pub(super) fn extended_card_not_configured() -> Self {
        Self::a2a(
            -32007,
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            "This agent has no extended agent card",
        )
    }

    pub(super) fn version_not_supported(version: &str) -> Self {
        Self::a2a(
            -32009,
            "VERSION_NOT_SUPPORTED",
            format!("A2A version '{version}' is not supported; this agent speaks '1.0'"),
        )
    }

    /// A request refused before any method ran (a body over the host's limit, a head past the
    /// server's bounds), as `a2a-sdk`'s own server answers a body too large: an invalid
    /// request, naming the part at fault (`field`); on the HTTP+JSON binding, with the status
    /// the host refused it with.
    pub(super) fn refused_request(refused: &HostError) -> Self {
        let mut error = Self::a2a(-32600, "INVALID_REQUEST", refused.message());
        error.http = Some((refused.status(), "INVALID_ARGUMENT"));
        if let Some(field) = refused.field_at_fault() {
            error.metadata.insert("field".into(), json!(field));
        }
        error
    }

    fn plain(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            reason: None,
            metadata: Box::default(),
            http: None,
        }
    }

    fn a2a(code: i64, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason: Some(reason),
            ..Self::plain(code, message)
        }
    }

    /// The error of a refusal the host's routes would answer with a status: a conversation
    /// that is not the person's is a task that does not exist for them; a malformed value bad
    /// params; a conversation that runs another turn (409) a failed precondition, which names
    /// the running turn (`runningTurnId`; [`in_context`](Self::in_context) adds its task);
    /// a host at capacity or shutting down (503) unavailable, an asker past their share (429)
    /// resource exhausted (each with that status on the HTTP+JSON binding); the rest internal.
    pub(super) fn of_host(error: &HostError) -> Self {
        match error.status().as_u16() {
            404 => Self::task_not_found(),
            400 | 413 | 422 => Self::invalid_params(error.message()),
            409 => {
                let mut busy = Self::unsupported(error.message());
                busy.http = Some((StatusCode::CONFLICT, "FAILED_PRECONDITION"));
                if let Some(running) = error.running_turn() {
                    busy.metadata.insert("runningTurnId".into(), json!(running));
                }
                busy
            }
            503 => {
                let mut unavailable = Self::internal(error.message());
                unavailable.http = Some((StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE"));
                unavailable
            }
            429 => {
                let mut exhausted = Self::internal(error.message());
                exhausted.http = Some((StatusCode::TOO_MANY_REQUESTS, "RESOURCE_EXHAUSTED"));
                exhausted
            }
            _ => Self::internal(error.message()),
        }
    }

    /// The same error, its running turn (if it names one) also named as the task of `context`
    /// it is (`runningTaskId`): what an A2A caller knows.
    #[must_use]
    pub(super) fn in_context(mut self, context: &SessionId) -> Self {
        let running = self.metadata.get("runningTurnId").and_then(Value::as_str);
        if let Some(turn) = running.and_then(|t| TurnId::new(t).ok()) {
            self.metadata
                .insert("runningTaskId".into(), json!(super::task_id(context, &turn)));
        }
        self
    }

    /// The `ErrorInfo` detail, when the error has an A2A reason.
    fn detail(&self) -> Option<Value> {
        self.reason.map(|reason| {
            json!({
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": "a2a-protocol.org",
                "metadata": self.metadata,
            })
        })
    }

    /// The error object.
    pub(super) fn body(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(detail) = self.detail() {
            error["data"] = json!([detail]);
        }
        error
    }
}

/// The error as the HTTP+JSON binding answers it (see [`RpcError::rest`]); the JSON-RPC binding
/// answers it in its envelope instead ([`answer`]).
impl IntoResponse for RpcError {
    fn into_response(self) -> Response {
        let (status, body) = self.rest();
        (status, axum::Json(body)).into_response()
    }
}

impl RpcError {
    /// The error as the HTTP+JSON binding answers it: the HTTP status A2A maps its code to,
    /// and a `google.rpc.Status` body with the `ErrorInfo` detail.
    fn rest(&self) -> (StatusCode, Value) {
        let (status, name) = self.http.unwrap_or(match self.code {
            -32001 | -32601 => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            -32602 | -32600 | -32700 => (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT"),
            -32603 => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
            _ => (StatusCode::BAD_REQUEST, "FAILED_PRECONDITION"),
        });
        let reason = self.reason.unwrap_or(match self.code {
            -32601 => "METHOD_NOT_FOUND",
            _ => "INVALID_REQUEST",
        });
        let body = json!({ "error": {
            "code": status.as_u16(),
            "status": name,
            "message": self.message,
            "details": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": "a2a-protocol.org",
                "metadata": self.metadata,
            }],
        }});
        (status, body)
    }
}

/// The answer to request `id`: its result or its error.
pub(super) fn answer(id: &Value, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(error) => json!({ "jsonrpc": "2.0", "id": id, "error": error.body() }),
    }
}

/// `params` as `T`, or the invalid-params error naming what is wrong.
pub(super) fn params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|e| RpcError::invalid_params(format!("invalid params: {e}")))
}

//! The server's extractors and its one error type: path parameters, page queries and JSON bodies
//! are read here, and every failure becomes the protocol's error response in one place.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::{StatusCode, request::Parts};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::store::TaskStoreError;
use super::types::{MAX_PAGE_SIZE, PageRequest};
use agent_worker_contract::ErrorChain;

/// What a request came to, as the specification answers it.
#[derive(Debug)]
pub(super) enum ApiError {
    /// 404: no such task, step or artifact (or route).
    NotFound(String),
    /// 422: the path, query or body does not decode.
    Unprocessable(String),
    /// 413: the upload is larger than the server takes.
    TooLarge(String),
    /// 500: a handler failed; its message is the caller's to read.
    Internal(String),
    /// 401: the request does not carry the server's key.
    Unauthorized(String),
}

impl From<TaskStoreError> for ApiError {
    fn from(e: TaskStoreError) -> Self {
        match e {
            TaskStoreError::NoTask(id) => Self::NotFound(format!("no task {id}")),
            TaskStoreError::TooManyArtifacts { .. } => Self::Unprocessable(e.to_string()),
            TaskStoreError::Unavailable(_) => {
                tracing::error!(error = %ErrorChain(&e), "agent protocol: the task store failed");
                Self::Internal("the task store is unavailable; try again".into())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            Self::NotFound(m) => (StatusCode::NOT_FOUND, m),
            Self::Unprocessable(m) => (StatusCode::UNPROCESSABLE_ENTITY, m),
            Self::TooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, m),
            Self::Internal(m) => (StatusCode::INTERNAL_SERVER_ERROR, m),
            Self::Unauthorized(m) => (StatusCode::UNAUTHORIZED, m),
        };
        (status, axum::Json(json!({ "message": message }))).into_response()
    }
}

/// Lets a request through when it carries the server's key; 401 otherwise, before any handler.
pub(super) async fn key_required(
    axum::extract::State(key): axum::extract::State<std::sync::Arc<agent_worker_http::api_key::ApiKey>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if key.carried_by(request.headers()) {
        next.run(request).await
    } else {
        ApiError::Unauthorized("the API key is missing or wrong: send it in x-api-key".into()).into_response()
    }
}

/// A request head refused before it reached a route (`agent_worker_http::serve`), in the one error
/// shape.
pub(super) fn refused_head(refused: &agent_worker_http::serve::RefusedHead) -> Response {
    let message = format!("{} ({})", refused.message, refused.field);
    (refused.status, axum::Json(json!({ "message": message }))).into_response()
}

/// A path whose parameters failed to decode answers 422.
pub(super) struct ApiPath<T>(pub(super) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| Self(value))
            .map_err(|e| ApiError::Unprocessable(e.body_text()))
    }
}

/// `current_page` and `page_size` as sent; validated by [`PageQuery::page`].
#[derive(Debug, Deserialize)]
pub(super) struct PageQuery {
    current_page: Option<u32>,
    page_size: Option<u32>,
}

/// The page a list request asks for: 422 when a number does not decode or is below 1.
pub(super) struct ApiPage(pub(super) PageRequest);

impl<S: Send + Sync> FromRequestParts<S> for ApiPage {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Query(query) = Query::<PageQuery>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::Unprocessable(e.body_text()))?;
        let defaults = PageRequest::default();
        let page = PageRequest::new(
            query.current_page.unwrap_or(defaults.current_page),
            query.page_size.unwrap_or(defaults.page_size),
        );
        for (name, value) in [("current_page", page.current_page), ("page_size", page.page_size)] {
            if value < 1 {
                return Err(ApiError::Unprocessable(format!(
                    "{name} must be at least 1, not {value}"
                )));
            }
        }
        if page.page_size > MAX_PAGE_SIZE {
            return Err(ApiError::Unprocessable(format!(
                "page_size must be at most {MAX_PAGE_SIZE}, not {}",
                page.page_size
            )));
        }
        Ok(Self(page))
    }
}

/// A JSON body, whatever its content type says; `None` when the body is empty. 422 names the
/// field that does not decode.
pub(super) struct JsonBody<T>(pub(super) Option<T>);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::TooLarge(format!(
                    "the body is larger than the server takes: {}",
                    e.body_text()
                ))
            } else {
                ApiError::Unprocessable(e.body_text())
            }
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(None));
        }
        if bytes.trim_ascii_start().first() != Some(&b'{') {
            return Err(ApiError::Unprocessable("the body must be a JSON object".into()));
        }
        let mut decoder = serde_json::Deserializer::from_slice(&bytes);
        let value = serde_path_to_error::deserialize(&mut decoder).map_err(|e| {
            let path = e.path().to_string();
            let what = if path == "." || path.starts_with('?') {
                "the body".to_owned()
            } else {
                format!("field `{path}`")
            };
            ApiError::Unprocessable(format!("{what} does not decode: {}", e.into_inner()))
        })?;
        decoder
            .end()
            .map_err(|e| ApiError::Unprocessable(format!("the body does not decode: {e}")))?;
        Ok(Self(Some(value)))
    }
}

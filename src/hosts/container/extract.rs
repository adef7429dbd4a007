//! A request's body and query as typed values, refused in [`HostError`]'s one body shape (axum's
//! own extractors answer their rejections as plain text).

use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::HostError;

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

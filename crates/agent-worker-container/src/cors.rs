//! Calls from the product's web pages on other origins (`ALLOWED_ORIGINS`, `serve
//! --allowed-origins`): a preflight from a listed origin is answered before any route or the
//! person's check, and an answer to a listed origin names it; any other origin gets no CORS header,
//! so its pages cannot read the answers. With no origin listed, the API serves none.

use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, Method, header};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// How long a browser may keep a preflight's answer.
pub const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// An origin that cannot be listed.
#[derive(Debug, thiserror::Error)]
#[error("{origin:?} is not an origin: {why}")]
pub struct OriginError {
    /// What was given.
    pub origin: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// The web origins whose pages may call the API: each `scheme://host[:port]`, as a browser sends
/// it in `Origin`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedOrigins(Vec<String>);

impl AllowedOrigins {
    /// The origins of a comma-separated `list` (blank: none). `*` is refused: the API's answers
    /// are a person's own, never anyone's page's.
    pub fn parse(list: &str) -> Result<Self, OriginError> {
        let mut origins = Vec::new();
        for given in list.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let refused = |why| OriginError {
                origin: given.to_owned(),
                why,
            };
            if given == "*" {
                return Err(refused("name each origin; any origin is never allowed"));
            }
            let url = reqwest::Url::parse(given).map_err(|_| refused("not a URL"))?;
            if !matches!(url.scheme(), "https" | "http") {
                return Err(refused("the scheme is https or http"));
            }
            let origin = url.origin().ascii_serialization();
            if origin != given.trim_end_matches('/') {
                return Err(refused("it is scheme://host[:port], with no path, query or user"));
            }
            origins.push(origin);
        }
        Ok(Self(origins))
    }

    /// Whether no origin is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The layer that answers the listed origins, or none when none is listed.
    pub(super) fn layer(&self) -> Option<CorsLayer> {
        if self.0.is_empty() {
            return None;
        }
        let origins: Vec<HeaderValue> = self
            .0
            .iter()
            .filter_map(|origin| HeaderValue::from_str(origin).ok())
            .collect();
        Some(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(origins))
                .allow_methods([Method::GET, Method::POST, Method::DELETE])
                .allow_headers([
                    header::AUTHORIZATION,
                    header::CONTENT_TYPE,
                    HeaderName::from_static("x-api-key"),
                    HeaderName::from_static("last-event-id"),
                ])
                .expose_headers([header::RETRY_AFTER])
                .max_age(PREFLIGHT_MAX_AGE),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_named_exactly() {
        let listed = AllowedOrigins::parse(" https://app.example.com, http://localhost:5173/ ").unwrap();
        assert_eq!(
            listed,
            AllowedOrigins(vec![
                "https://app.example.com".into(),
                "http://localhost:5173".into()
            ])
        );
        assert!(AllowedOrigins::parse("").unwrap().is_empty());
        for refused in [
            "*",
            "app.example.com",
            "https://app.example.com/path",
            "https://user@app.example.com",
            "ftp://app.example.com",
            "https://app.example.com?x=1",
        ] {
            let e = AllowedOrigins::parse(refused).unwrap_err();
            assert_eq!(e.origin, refused);
        }
    }
}

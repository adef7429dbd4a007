//! The shared secrets a caller presents (an API key, the console's token), checked one way for
//! every host that takes one: compared as digests in constant time, and read from `x-api-key`
//! or an `Authorization` header of the `Bearer` scheme in any case.

use std::fmt;

/// The fewest characters an API key may have.
pub const MIN_API_KEY_CHARS: usize = 16;

/// An API key: at least [`MIN_API_KEY_CHARS`] characters, never printed.
#[derive(Clone)]
pub struct ApiKey(String);

/// A key shorter than [`MIN_API_KEY_CHARS`].
#[derive(Debug, thiserror::Error)]
#[error("an API key must be at least {MIN_API_KEY_CHARS} characters")]
pub struct ApiKeyTooShort;

impl ApiKey {
    /// `key`, when it is long enough.
    pub fn new(key: impl Into<String>) -> Result<Self, ApiKeyTooShort> {
        let key = key.into();
        if key.trim().chars().count() < MIN_API_KEY_CHARS {
            return Err(ApiKeyTooShort);
        }
        Ok(Self(key))
    }

    /// Whether `given` is this key (compared in constant time).
    pub fn matches(&self, given: &[u8]) -> bool {
        same_secret(given, &self.0)
    }

    /// Whether a request with `headers` carries this key, in `x-api-key` or as a bearer token.
    pub fn carried_by(&self, headers: &axum::http::HeaderMap) -> bool {
        let given = headers
            .get("x-api-key")
            .map(axum::http::HeaderValue::as_bytes)
            .or_else(|| {
                headers
                    .get(axum::http::header::AUTHORIZATION)
                    .and_then(|value| value.to_str().ok())
                    .and_then(bearer_token)
                    .map(str::as_bytes)
            });
        given.is_some_and(|given| self.matches(given))
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(…)")
    }
}

/// The token of an `Authorization` header's value of the `Bearer` scheme (in any case).
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once([' ', '\t'])?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Whether `given` is `expected`: digests of equal length compared in constant time, so that
/// neither the secret's bytes nor its length show in how long a refusal takes.
pub fn same_secret(given: &[u8], expected: &str) -> bool {
    use sha2::Digest as _;
    use subtle::ConstantTimeEq as _;
    let given = sha2::Sha256::digest(given);
    let expected = sha2::Sha256::digest(expected.as_bytes());
    bool::from(given.ct_eq(&expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_taken_from_either_header_and_nothing_else_opens() {
        let key = ApiKey::new("0123456789abcdef").unwrap();
        let with = |name: &str, value: &str| {
            let mut headers = axum::http::HeaderMap::new();
            headers.insert(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                axum::http::HeaderValue::from_str(value).unwrap(),
            );
            headers
        };
        assert!(key.carried_by(&with("x-api-key", "0123456789abcdef")));
        assert!(key.carried_by(&with("authorization", "BEARER 0123456789abcdef")));
        assert!(!key.carried_by(&with("x-api-key", "0123456789abcdeg")));
        assert!(!key.carried_by(&with("authorization", "Basic 0123456789abcdef")));
        assert!(!key.carried_by(&axum::http::HeaderMap::new()));
        assert!(ApiKey::new("short").is_err());
        assert_eq!(format!("{key:?}"), "ApiKey(…)");
    }
}

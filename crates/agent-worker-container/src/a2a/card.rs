//! The agent card (`GET /.well-known/agent-card.json`), and where it says the agent is.
//!
//! The card's interfaces are at a base URL taken from the deployment, never from what a request
//! merely says of itself: `PUBLIC_URL` ([`PublicUrl`]: `http` or `https`, a host, no user, query
//! or fragment; checked at start, a bad one names `PUBLIC_URL`). Without it the base is
//! `http://` and the request's `Host` when that is a plain `host[:port]` (a name, an IPv4 address
//! or a bracketed IPv6 one, and digits for the port), else `http://localhost`: `X-Forwarded-*`
//! headers are never read, so a deployment behind TLS or a proxy sets `PUBLIC_URL`.
//!
//! With a signing key (`AGENT_CARD_SIGNING_KEY`, which needs `PUBLIC_URL`), every card served
//! carries its signature (a JWS over the card's RFC 8785 form,
//! [`agent_worker_runtime::card_signature`]): the URL it names is part of what is signed, so it
//! is always the deployment's own, never a `Host` a request sends.

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{A2A_PATH, A2A_VERSION};
use crate::ContainerHost;

/// Where other agents reach this one (`PUBLIC_URL`, such as `https://agent.example.com`): an
/// `http` or `https` URL with a host, and no user, query or fragment. Its path, if any, is the
/// prefix the agent's routes are served under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl(String);

/// Why a text is not a [`PublicUrl`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PublicUrlError(String);

impl PublicUrl {
    /// `url`, checked.
    ///
    /// ```
    /// use agent_worker_container::PublicUrl;
    ///
    /// assert_eq!(PublicUrl::new("https://agent.example.com/").unwrap().as_str(), "https://agent.example.com");
    /// assert!(PublicUrl::new("javascript://evil.example").is_err());
    /// assert!(PublicUrl::new("https://user@agent.example.com").is_err());
    /// ```
    pub fn new(url: &str) -> Result<Self, PublicUrlError> {
        let refused = |why: &str| Err(PublicUrlError(format!("{url:?} {why}")));
        let Ok(parsed) = reqwest::Url::parse(url.trim()) else {
            return refused("is not a URL (such as https://agent.example.com)");
        };
        if !matches!(parsed.scheme(), "http" | "https") {
            return refused("is not an http or https URL");
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return refused("names no host");
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return refused("names a user: the card would show it");
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return refused("has a query or a fragment");
        }
        Ok(Self(parsed.as_str().trim_end_matches('/').to_owned()))
    }

    /// The URL, without a trailing `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PublicUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The host a card names when no `PUBLIC_URL` is set and the request's `Host` is not plain.
const FALLBACK_HOST: &str = "localhost";

/// The base URL of the card's interfaces: `PUBLIC_URL`, else `http://` and the request's plain
/// `Host` (see the module).
fn base_url(public: Option<&PublicUrl>, headers: &HeaderMap) -> String {
    if let Some(public) = public {
        return public.as_str().to_owned();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|host| is_plain_host(host))
        .unwrap_or(FALLBACK_HOST);
    format!("http://{host}")
}

/// Whether `host` is a plain `host[:port]`: a name of letters, digits, `-` and `.`, or a
/// bracketed IPv6 address, then at most a port of digits.
fn is_plain_host(host: &str) -> bool {
    let (name_ok, port) = match host.strip_prefix('[') {
        Some(rest) => {
            let Some((v6, after)) = rest.split_once(']') else {
                return false;
            };
            let port = match after {
                "" => None,
                after => match after.strip_prefix(':') {
                    Some(port) => Some(port),
                    None => return false,
                },
            };
            let v6_ok = !v6.is_empty() && v6.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
            (v6_ok, port)
        }
        None => {
            let (name, port) = match host.split_once(':') {
                Some((name, port)) => (name, Some(port)),
                None => (host, None),
            };
            let name_ok = !name.is_empty()
                && name.len() <= 253
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            (name_ok, port)
        }
    };
    let port_ok = port
        .is_none_or(|port| !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()));
    name_ok && port_ok
}

/// `GET /.well-known/agent-card.json`.
pub(crate) async fn card(State(host): State<ContainerHost>, headers: HeaderMap) -> Response {
    let config = &host.config();
    let interface = format!("{}{A2A_PATH}", base_url(config.public_url.as_ref(), &headers));
    let (schemes, requirement) = config.auth.a2a_security();
    let mut card = json!({
        "name": config.agent_name,
        "description": config.agent_description,
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [
            {
                "url": interface,
                "protocolBinding": "JSONRPC",
                "protocolVersion": A2A_VERSION,
            },
            {
                "url": interface,
                "protocolBinding": "HTTP+JSON",
                "protocolVersion": A2A_VERSION,
            },
        ],
        "capabilities": { "streaming": true, "pushNotifications": super::push::pushes(&host).is_some() },
        "securitySchemes": schemes,
        "securityRequirements": [requirement],
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [{
            "id": "converse",
            "name": config.agent_name,
            "description": config.agent_description,
            "tags": ["conversation"],
        }],
    });
    // Signed only where the card names the deployment's own URL (`PUBLIC_URL`): a card whose
    // URL came from a request's `Host` is never signed.
    if let (Some(signer), Some(_)) = (&config.card_signer, &config.public_url)
        && let Err(e) = signer.sign(&mut card)
    {
        tracing::warn!(error = %e, "the agent card could not be signed");
    }
    axum::Json(card).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_public_url_is_http_or_https_with_a_host_and_nothing_a_card_should_not_show() {
        for good in [
            "https://agent.example.com",
            "http://10.0.0.5:8080/",
            "https://example.com/agents/desk",
        ] {
            assert!(PublicUrl::new(good).is_ok(), "{good}");
        }
        for bad in [
            "javascript://evil.example",
            "ftp://agent.example.com",
            "agent.example.com",
            "https://",
            "https://me:pw@agent.example.com",
            "https://agent.example.com/?next=evil",
            "https://agent.example.com/#x",
        ] {
            assert!(PublicUrl::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn without_a_public_url_only_a_plain_host_is_named_and_forwarded_headers_are_ignored() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, value.parse().unwrap());
            }
            map
        };
        let spoofed = headers(&[
            ("host", "agent.example.com:8080"),
            ("x-forwarded-proto", "javascript"),
        ]);
        assert_eq!(base_url(None, &spoofed), "http://agent.example.com:8080");
        for hostile in [
            "evil.example/path",
            "a@evil.example",
            "evil.example:80x",
            "[::1",
            "x y",
            "",
        ] {
            let asked = headers(&[("host", hostile)]);
            assert_eq!(base_url(None, &asked), "http://localhost", "{hostile:?}");
        }
        assert_eq!(
            base_url(None, &headers(&[("host", "[::1]:8080")])),
            "http://[::1]:8080"
        );
        let public = PublicUrl::new("https://agent.example.com").unwrap();
        assert_eq!(base_url(Some(&public), &spoofed), "https://agent.example.com");
    }
}

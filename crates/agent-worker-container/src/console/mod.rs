//! The console: a single page, served by the container host at `/`, that is the person's tab. It
//! lists the person's conversations, streams a turn live (text, collapsed thinking, tool calls
//! with their status, retries, usage), shows approval cards, stops a turn or replaces it with the
//! next message, and offers a small task list of its own as UI actions (`context.oui`) that it
//! answers itself, so the model acts on the page.
//!
//! Its assets are embedded in the binary, with the typed client it calls the host through
//! (`/client.js`: `clients/typescript`'s build, kept in the repository). It is reached with a
//! token made at each start and printed in the terminal as a URL (`/?token=…`); the page sends it
//! as `x-console-token` on every call, its event streams included, and the API key never reaches
//! the browser.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde::Serialize;

use super::{ContainerHost, HostError};

/// The page.
const INDEX_HTML: &str = include_str!("index.html");
/// Its script.
const CONSOLE_JS: &str = include_str!("console.js");
/// Its styles.
const CONSOLE_CSS: &str = include_str!("console.css");
/// The typed client of the HTTP API (clients/typescript, built), which the script calls the host
/// with.
const CLIENT_JS: &str = include_str!("../../../../clients/typescript/dist/index.js");

/// The paths of the page's own assets, served without a key.
pub(super) const ASSET_PATHS: [&str; 4] = ["/", "/console.js", "/console.css", "/client.js"];

/// Who the console acts for, and the token that opens it.
#[derive(Clone)]
pub struct Console {
    pub(super) token: String,
    pub(super) user_id: String,
    pub(super) account_id: String,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("user_id", &self.user_id)
            .field("account_id", &self.account_id)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// A console for `user_id` of `account_id`, opened with a new random token.
    pub fn new(user_id: impl Into<String>, account_id: impl Into<String>) -> Self {
        Self {
            token: format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            ),
            user_id: user_id.into(),
            account_id: account_id.into(),
        }
    }

    /// The token the page is opened with.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The person the console acts for: every route reached with its token acts as them.
    pub fn person(&self) -> agent_worker_core::session::Owner {
        agent_worker_core::session::Owner::new(&self.user_id, &self.account_id)
    }
}

/// The page's content security policy: its own script and styles, requests to its own origin,
/// pictures it shows from its own data, nothing else, and no page may frame it.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data: blob:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// Adds the security headers to every answer of the host (the page, its assets and the API): the
/// content security policy, no framing, no sniffing of types, and no referrer (the page's URL
/// carries its token).
pub(super) async fn security_headers(response: axum::response::Response) -> axum::response::Response {
    with_security_headers(response)
}

/// [`security_headers`], for an answer made outside the router (a refused request head).
pub(super) fn with_security_headers(mut response: axum::response::Response) -> axum::response::Response {
    use axum::http::HeaderValue;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// `GET /`.
pub(super) async fn index() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX_HTML)
}

/// `GET /console.js`.
pub(super) async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        CONSOLE_JS,
    )
}

/// `GET /client.js`: the typed client (an ES module), as `clients/typescript` builds it.
pub(super) async fn client() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        CLIENT_JS,
    )
}

/// `GET /console.css`.
pub(super) async fn styles() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CONSOLE_CSS)
}

/// `GET /console/config`'s answer: whom the page acts for, and the model.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsoleConfig {
    /// The person the console acts for.
    pub user_id: String,
    /// Their account.
    pub account_id: String,
    /// The model turns run on (`null` where the host runs none itself).
    pub model: Option<String>,
}

/// `GET /console/config`: whom the page acts for, and the model (behind the token).
pub(super) async fn config(State(host): State<ContainerHost>) -> Result<Json<ConsoleConfig>, HostError> {
    let console = host
        .inner
        .console
        .as_ref()
        .ok_or_else(|| HostError::not_found("this host serves no console"))?;
    Ok(Json(ConsoleConfig {
        user_id: console.user_id.clone(),
        account_id: console.account_id.clone(),
        model: host.model().map(str::to_owned),
    }))
}

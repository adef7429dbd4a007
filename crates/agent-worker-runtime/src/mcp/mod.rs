//! Tools from MCP servers: how a server is configured ([`McpServer`]), and [`mcp_tools`], which
//! connects to one (feature `mcp`, on the official Rust SDK, `rmcp`: see `client.rs`) and makes
//! its tools.
//!
//! MCP's annotations become declarations, so that the approval rules hold for these tools too:
//! `readOnlyHint: true` is a read; `destructiveHint: true` (or `readOnlyHint: false` with no
//! `destructiveHint`, which MCP defines as destructive) needs the person's approval. Where the
//! server says nothing, the tool changes something, and the configuration may declare its effect,
//! title and consequence, or make it destructive (it cannot make a server's destructive tool
//! harmless).
//!
//! A server that cannot be reached at start-up is named and stops the start-up; one that fails
//! during a turn gives that call an error result, and the turn goes on.
//!
//! A server's tools are a [`ToolSource`]: listed at start-up, listed again when the server says
//! `notifications/tools/list_changed`, and each turn offers the list it started with.
//!
//! Headers go with every request: written in the file, or read from Secrets Manager or SSM at
//! start-up (`{ secret: … }`). A server that acts as the person (`personToken`) gets each call
//! on a session of its own that carries the turn's `userToken`; the list is read with the other
//! headers only, and a turn with no token gets an error result, never a call.

#[cfg(feature = "mcp")]
mod client;

use std::sync::Arc;

use serde::Deserialize;

use super::headers::{HeaderValue, SecretSource, TokenHeader};
use agent_worker_core::engine::tools::{Effect, ToolSource};

#[cfg(feature = "mcp")]
pub use client::{DEFAULT_MCP_TIMEOUT, IDEMPOTENCY_KEY_META, McpSource, McpTool};

/// One MCP server: Streamable HTTP (`url`), or a local process over stdio (`command`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpServer {
    /// Its name: its tools are named `<name>_<tool>`.
    pub name: String,
    /// Its Streamable HTTP endpoint.
    pub url: Option<String>,
    /// Or the command that starts it, speaking over stdio (for local use).
    pub command: Option<String>,
    /// The command's arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Headers sent with every request (Streamable HTTP): a text, or `{ secret: id }`.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, HeaderValue>,
    /// The payload's `userToken`, sent as this header with each call (Streamable HTTP).
    pub person_token: Option<TokenHeader>,
    /// How long connecting, listing or one call may take, in milliseconds (30000).
    pub timeout_ms: Option<u64>,
    /// Only these of its tools, by their own names.
    pub allow: Option<Vec<String>>,
    /// Declarations of its tools, by their own names, where the server says nothing.
    #[serde(default)]
    pub tools: std::collections::BTreeMap<String, McpToolDeclaration>,
}

/// How to reach an MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// Streamable HTTP.
    Http {
        /// The endpoint.
        url: String,
    },
    /// A local process over stdio.
    Stdio {
        /// The command.
        command: String,
        /// Its arguments.
        args: Vec<String>,
    },
}

impl McpServer {
    /// How to reach it: exactly one of `url` and `command`.
    pub fn transport(&self) -> Result<McpTransport, McpError> {
        match (&self.url, &self.command) {
            (Some(url), None) if url.starts_with("http://") || url.starts_with("https://") => {
                Ok(McpTransport::Http { url: url.clone() })
            }
            (Some(url), None) => Err(McpError::NotHttp(url.clone())),
            (None, Some(command)) if !command.trim().is_empty() => Ok(McpTransport::Stdio {
                command: command.clone(),
                args: self.args.clone(),
            }),
            _ => Err(McpError::NoTransport),
        }
    }
}

/// Why an MCP server's tools cannot be had: its configuration, or the server.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// `name` holds other than letters, digits, `_` and `-`.
    #[error("name: letters, digits, `_` and `-` only")]
    BadName,
    /// `url` is not an `http(s)://` one.
    #[error("url: {0:?} is not an http(s) URL")]
    NotHttp(String),
    /// Both or neither of `url` and `command`.
    #[error("url, command: give exactly one")]
    NoTransport,
    /// `personToken` on a server started as a process.
    #[error("personToken: only a server reached by url takes the person's token")]
    TokenOverStdio,
    /// A header's value could not be had.
    #[error(transparent)]
    Headers(#[from] super::headers::HeaderError),
    /// A header's name or value cannot be sent.
    #[error("headers.{0}: not a valid header name or value")]
    BadHeader(String),
    /// This build has no MCP client.
    #[error("this build has no MCP support (feature `mcp`)")]
    Unsupported,
    /// The server did not answer within its timeout.
    #[error("{0} did not answer in time")]
    NoAnswer(String),
    /// The server could not be reached, started or talked to.
    #[error("cannot reach {server}")]
    Connect {
        /// Its URL or command.
        server: String,
        /// What failed.
        #[source]
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Its tools could not be listed.
    #[error("cannot list its tools")]
    List(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// `allow` names tools the server does not have.
    #[error("allow names tools it does not have: {0:?}")]
    NotListed(Vec<String>),
}

/// What the configuration declares of one MCP tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpToolDeclaration {
    /// What calling it changes, where the server gives no hint.
    pub effect: Option<Effect>,
    /// A short title for an approval's preview.
    pub title: Option<String>,
    /// What happens when it runs, for an approval's preview.
    pub consequence: Option<String>,
    /// It removes or replaces something the person made: every call needs approval.
    #[serde(default)]
    pub destructive: bool,
    /// Whether the server takes the call's idempotency key (`_meta.idempotencyKey`), so that a
    /// call that may have run before its worker died is sent again (the default); `false`: it
    /// is not, and the model is told its outcome is unknown.
    #[serde(default = "takes_keys")]
    pub idempotent: bool,
}

/// What a declaration that says nothing of keys says: the server takes them.
fn takes_keys() -> bool {
    true
}

impl Default for McpToolDeclaration {
    fn default() -> Self {
        Self {
            effect: None,
            title: None,
            consequence: None,
            destructive: false,
            idempotent: true,
        }
    }
}

/// Connects to `server` (its secret headers read through `secrets`) and lists its tools (those
/// `allow` lets through), or says why not.
pub async fn mcp_tools(
    server: &McpServer,
    secrets: Option<&dyn SecretSource>,
) -> Result<Arc<dyn ToolSource>, McpError> {
    if !super::headers::is_source_name(&server.name) {
        return Err(McpError::BadName);
    }
    let transport = server.transport()?;
    if server.person_token.is_some() && !matches!(transport, McpTransport::Http { .. }) {
        return Err(McpError::TokenOverStdio);
    }
    let headers = super::headers::resolve(&server.headers, secrets).await?;
    #[cfg(feature = "mcp")]
    {
        Ok(client::McpSource::connect(server.clone(), headers).await? as Arc<dyn ToolSource>)
    }
    #[cfg(not(feature = "mcp"))]
    {
        let _ = headers;
        Err(McpError::Unsupported)
    }
}

//! The MCP client (feature `mcp`): a server's tools on the official Rust SDK, `rmcp`, over
//! Streamable HTTP or stdio.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value};

use super::{McpServer, McpToolDeclaration, McpTransport};
use crate::engine::tools::{Effect, Tool, ToolContext, ToolError, ToolSpec};

/// How long a call may take by default.
pub const DEFAULT_MCP_TIMEOUT: Duration = Duration::from_secs(30);

/// A connected server, shared by its tools.
type Connection = Arc<RunningService<RoleClient, ()>>;

/// One tool of an MCP server.
pub struct McpTool {
    spec: ToolSpec,
    server: String,
    remote_name: String,
    connection: Connection,
    timeout: Duration,
}

impl fmt::Debug for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.spec.name)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// Connects to `server` and makes its tools (those `allow` lets through), or says why not.
pub(super) async fn tools(server: &McpServer) -> Result<Vec<Arc<dyn Tool>>, String> {
    let connection: Connection = Arc::new(connect(server).await?);
    let listed = tokio::time::timeout(timeout_of(server), connection.list_all_tools())
        .await
        .map_err(|_| "did not list its tools in time".to_owned())?
        .map_err(|e| format!("cannot list its tools: {e}"))?;
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for listed in listed {
        let remote_name = listed.name.to_string();
        if let Some(allow) = &server.allow
            && !allow.iter().any(|a| a == &remote_name)
        {
            continue;
        }
        let declared = server.tools.get(&remote_name);
        let spec = spec_of(&server.name, &listed, declared);
        tools.push(Arc::new(McpTool {
            spec,
            server: server.name.clone(),
            remote_name,
            connection: connection.clone(),
            timeout: timeout_of(server),
        }));
    }
    if let Some(allow) = &server.allow {
        let missing: Vec<&String> = allow
            .iter()
            .filter(|a| !tools.iter().any(|t| t.spec().name == tool_name(&server.name, a)))
            .collect();
        if !missing.is_empty() {
            return Err(format!("allow names tools it does not have: {missing:?}"));
        }
    }
    Ok(tools)
}

fn timeout_of(server: &McpServer) -> Duration {
    server
        .timeout_ms
        .map_or(DEFAULT_MCP_TIMEOUT, Duration::from_millis)
}

async fn connect(server: &McpServer) -> Result<RunningService<RoleClient, ()>, String> {
    match server.transport()? {
        McpTransport::Http { url } => {
            let mut headers = std::collections::HashMap::new();
            for (name, value) in &server.headers {
                let name =
                    http::HeaderName::try_from(name.as_str()).map_err(|e| format!("headers.{name}: {e}"))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .map_err(|e| format!("headers.{name}: {e}"))?;
                headers.insert(name, value);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(headers);
            let transport = StreamableHttpClientTransport::from_config(config);
            tokio::time::timeout(timeout_of(server), ().serve(transport))
                .await
                .map_err(|_| format!("{url} did not answer in time"))?
                .map_err(|e| format!("cannot connect to {url}: {e}"))
        }
        McpTransport::Stdio { command, args } => {
            let mut child = tokio::process::Command::new(&command);
            child.args(&args);
            let transport =
                TokioChildProcess::new(child).map_err(|e| format!("cannot start {command}: {e}"))?;
            tokio::time::timeout(timeout_of(server), ().serve(transport))
                .await
                .map_err(|_| format!("{command} did not answer in time"))?
                .map_err(|e| format!("cannot talk to {command}: {e}"))
        }
    }
}

/// The tool's name here: the server's name, `_`, the tool's, in the characters model APIs take,
/// at most 64 of them.
fn tool_name(server: &str, tool: &str) -> String {
    format!("{server}_{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// The declaration of `listed`, from its annotations and what the configuration declares.
fn spec_of(server: &str, listed: &rmcp::model::Tool, declared: Option<&McpToolDeclaration>) -> ToolSpec {
    let hints = listed.annotations.as_ref();
    let read_only = hints.and_then(|h| h.read_only_hint);
    let destructive_hint = hints.and_then(|h| h.destructive_hint);
    let said = read_only.is_some() || destructive_hint.is_some();
    let mut effect = match read_only {
        Some(true) => Effect::View,
        _ => Effect::Mutate,
    };
    // MCP: destructiveHint is meaningful when the tool is not read-only, and defaults to true.
    let mut destructive = read_only == Some(false) && destructive_hint.unwrap_or(true)
        || read_only.is_none() && destructive_hint == Some(true);
    let mut spec = ToolSpec::new(
        tool_name(server, &listed.name),
        listed
            .description
            .as_deref()
            .unwrap_or("A tool of an MCP server.")
            .to_owned(),
        Value::Object(listed.input_schema.as_ref().clone()),
    );
    let mut title = listed
        .title
        .clone()
        .or_else(|| hints.and_then(|h| h.title.clone()));
    if let Some(declared) = declared {
        if let Some(declared_effect) = declared.effect
            && !said
        {
            effect = declared_effect;
        }
        destructive |= declared.destructive;
        if declared.title.is_some() {
            title.clone_from(&declared.title);
        }
        if let Some(consequence) = &declared.consequence {
            spec = spec.consequence(consequence.clone());
        }
    }
    if let Some(title) = title {
        spec = spec.title(title);
    }
    spec.effect(effect).destructive(destructive)
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        let arguments: Map<String, Value> = match input {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(ToolError::new(format!(
                    "the arguments must be an object, not {other}"
                )));
            }
        };
        let params = CallToolRequestParams::new(self.remote_name.clone()).with_arguments(arguments);
        let answered = tokio::time::timeout(self.timeout, self.connection.call_tool(params))
            .await
            .map_err(|_| {
                ToolError::new(format!(
                    "the MCP server {} did not answer within {} ms",
                    self.server,
                    self.timeout.as_millis()
                ))
            })?
            .map_err(|e| ToolError::new(format!("the MCP server {} failed: {e}", self.server)))?;
        result_value(answered)
    }
}

/// A call's result as the model reads it: its structured content, or its text; an error result
/// is the tool's error.
fn result_value(result: CallToolResult) -> Result<Value, ToolError> {
    let text: Vec<String> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect();
    let others = result.content.len() - text.len();
    if result.is_error == Some(true) {
        let message = if text.is_empty() {
            "the tool failed".to_owned()
        } else {
            text.join("\n")
        };
        return Err(ToolError::new(message));
    }
    let mut value = BTreeMap::new();
    if let Some(structured) = result.structured_content {
        value.insert("structured", structured);
    }
    if !text.is_empty() {
        value.insert("text", Value::String(text.join("\n")));
    }
    if others > 0 {
        value.insert("otherContent", Value::from(others));
    }
    Ok(serde_json::to_value(value).unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(hints: Option<(Option<bool>, Option<bool>)>) -> rmcp::model::Tool {
        let mut value = serde_json::json!({
            "name": "do it", "description": "Does it.", "inputSchema": { "type": "object" }
        });
        if let Some((read_only, destructive)) = hints {
            value["annotations"] = serde_json::json!({
                "readOnlyHint": read_only, "destructiveHint": destructive
            });
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn annotations_become_effects_and_approvals() {
        let spec = |hints, declared: Option<&McpToolDeclaration>| spec_of("srv", &listed(hints), declared);
        let read = spec(Some((Some(true), Some(false))), None);
        assert_eq!(
            (read.effect, read.destructive, read.name.as_str()),
            (Effect::View, false, "srv_do_it")
        );
        let write = spec(Some((Some(false), Some(false))), None);
        assert_eq!((write.effect, write.destructive), (Effect::Mutate, false));
        let unsaid_destructive = spec(Some((Some(false), None)), None);
        assert!(unsaid_destructive.destructive, "MCP's default for a write");
        let destroy = spec(Some((None, Some(true))), None);
        assert!(destroy.destructive);
        let silent = spec(None, None);
        assert_eq!((silent.effect, silent.destructive), (Effect::Mutate, false));
        let declared = McpToolDeclaration {
            effect: Some(Effect::View),
            title: Some("Look".into()),
            consequence: None,
            destructive: false,
        };
        let declared_read = spec(None, Some(&declared));
        assert_eq!(
            (declared_read.effect, declared_read.title.as_deref()),
            (Effect::View, Some("Look"))
        );
        let harmless = McpToolDeclaration {
            destructive: false,
            ..declared.clone()
        };
        assert!(
            spec(Some((None, Some(true))), Some(&harmless)).destructive,
            "a declaration cannot make a destructive tool harmless"
        );
    }

    #[test]
    fn names_are_what_model_apis_take() {
        assert_eq!(tool_name("everything", "get-sum"), "everything_get-sum");
        assert_eq!(tool_name("a.b", "c d"), "a_b_c_d");
        assert_eq!(tool_name("s", &"x".repeat(100)).len(), 64);
    }
}

//! The MCP client (feature `mcp`): a server's tools on the official Rust SDK, `rmcp`, over
//! Streamable HTTP or stdio, listed again when the server says its list changed.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use rmcp::model::{CallToolRequestParams, CallToolResult, MetaObject, RequestMetaObject};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt as _};
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::{McpError, McpServer, McpToolDeclaration, McpTransport};
use agent_worker_contract::{ErrorChain, chain};
use agent_worker_core::engine::tools::{Effect, Tool, ToolContext, ToolError, ToolSource, ToolSpec};

/// How long a call may take by default.
pub const DEFAULT_MCP_TIMEOUT: Duration = Duration::from_secs(30);

/// How to reach a server: its configuration and its headers' values.
struct Reach {
    server: McpServer,
    headers: Vec<(String, String)>,
}

impl Reach {
    fn timeout(&self) -> Duration {
        self.server
            .timeout_ms
            .map_or(DEFAULT_MCP_TIMEOUT, Duration::from_millis)
    }

    /// A session with the server, with `extra` headers besides the configured ones, whose
    /// notifications go to `handler`.
    async fn connect<H: ClientHandler>(
        &self,
        extra: Option<(String, String)>,
        handler: H,
    ) -> Result<RunningService<RoleClient, H>, McpError> {
        let failed = |server: &str| {
            let server = server.to_owned();
            move |cause: Box<dyn std::error::Error + Send + Sync>| McpError::Connect { server, cause }
        };
        match self.server.transport()? {
            McpTransport::Http { url } => {
                let mut headers = std::collections::HashMap::new();
                for (name, value) in self.headers.iter().chain(extra.iter()) {
                    let bad = || McpError::BadHeader(name.clone());
                    let name = http::HeaderName::try_from(name.as_str()).map_err(|_| bad())?;
                    let value = http::HeaderValue::try_from(value.as_str()).map_err(|_| bad())?;
                    headers.insert(name, value);
                }
                let config =
                    StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(headers);
                let transport = StreamableHttpClientTransport::from_config(config);
                tokio::time::timeout(self.timeout(), handler.serve(transport))
                    .await
                    .map_err(|_| McpError::NoAnswer(url.clone()))?
                    .map_err(|e| failed(&url)(Box::new(e)))
            }
            McpTransport::Stdio { command, args } => {
                let mut child = tokio::process::Command::new(&command);
                child.args(&args);
                let transport = TokioChildProcess::new(child).map_err(|e| failed(&command)(Box::new(e)))?;
                tokio::time::timeout(self.timeout(), handler.serve(transport))
                    .await
                    .map_err(|_| McpError::NoAnswer(command.clone()))?
                    .map_err(|e| failed(&command)(Box::new(e)))
            }
        }
    }
}

/// A server's tools as listed last, and how many times the list has changed.
struct Listed {
    reach: Arc<Reach>,
    tools: RwLock<Vec<Arc<dyn Tool>>>,
    generation: watch::Sender<u64>,
}

impl Listed {
    /// Lists the server's tools on `peer` and makes them (those `allow` lets through).
    async fn list(&self, peer: &Peer<RoleClient>) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        let server = &self.reach.server;
        let listed = tokio::time::timeout(self.reach.timeout(), peer.list_all_tools())
            .await
            .map_err(|_| McpError::NoAnswer(format!("{} (listing its tools)", server.name)))?
            .map_err(|e| McpError::List(Box::new(e)))?;
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for listed in listed {
            let remote_name = listed.name.to_string();
            if let Some(allow) = &server.allow
                && !allow.iter().any(|a| a == &remote_name)
            {
                continue;
            }
            let spec = spec_of(&server.name, &listed, server.tools.get(&remote_name));
            tools.push(Arc::new(McpTool {
                spec,
                remote_name,
                peer: peer.clone(),
                reach: self.reach.clone(),
            }));
        }
        Ok(tools)
    }
}

/// Lists the tools again when the server says its list changed.
#[derive(Clone)]
struct ListWatcher(Arc<Listed>);

impl ClientHandler for ListWatcher {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let server = &self.0.reach.server.name;
        match self.0.list(&context.peer).await {
            Ok(tools) => {
                let names: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
                *self.0.tools.write().unwrap_or_else(PoisonError::into_inner) = tools;
                self.0.generation.send_modify(|g| *g += 1);
                tracing::info!(server, tools = ?names, "the MCP server's tool list changed");
            }
            Err(error) => {
                tracing::warn!(server, error = %ErrorChain(&error), "the MCP server's tool list changed and cannot be read; the last one stays")
            }
        }
    }
}

/// A connected MCP server: its tools, kept as the server lists them.
pub struct McpSource {
    listed: Arc<Listed>,
    /// The session; dropping it closes it.
    _session: RunningService<RoleClient, ListWatcher>,
}

impl fmt::Debug for McpSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpSource")
            .field("server", &self.listed.reach.server.name)
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

impl McpSource {
    /// Connects to `server` with `headers` and lists its tools, or says why not.
    pub(super) async fn connect(
        server: McpServer,
        headers: Vec<(String, String)>,
    ) -> Result<Arc<Self>, McpError> {
        let reach = Arc::new(Reach { server, headers });
        let listed = Arc::new(Listed {
            reach: reach.clone(),
            tools: RwLock::new(Vec::new()),
            generation: watch::Sender::new(0),
        });
        let session = reach.connect(None, ListWatcher(listed.clone())).await?;
        let tools = listed.list(session.peer()).await?;
        if let Some(allow) = &reach.server.allow {
            let missing: Vec<String> = allow
                .iter()
                .filter(|a| {
                    !tools
                        .iter()
                        .any(|t| t.spec().name == tool_name(&reach.server.name, a))
                })
                .cloned()
                .collect();
            if !missing.is_empty() {
                return Err(McpError::NotListed(missing));
            }
        }
        *listed.tools.write().unwrap_or_else(PoisonError::into_inner) = tools;
        Ok(Arc::new(Self {
            listed,
            _session: session,
        }))
    }
}

impl ToolSource for McpSource {
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.listed
            .tools
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn generation(&self) -> u64 {
        *self.listed.generation.borrow()
    }

    fn changed(&self, seen: u64) -> BoxFuture<'_, ()> {
        let mut receiver = self.listed.generation.subscribe();
        Box::pin(async move {
            // The sender lives as long as `self`, so this ends only with a change.
            let _ = receiver.wait_for(|g| *g != seen).await;
        })
    }
}

/// One tool of an MCP server.
pub struct McpTool {
    spec: ToolSpec,
    remote_name: String,
    peer: Peer<RoleClient>,
    reach: Arc<Reach>,
}

impl fmt::Debug for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.spec.name)
            .field("server", &self.reach.server.name)
            .finish_non_exhaustive()
    }
}

/// The tool's name here: the server's name, `_`, the tool's, in the characters model APIs take,
/// at most 64 of them.
fn tool_name(server: &str, tool: &str) -> String {
    agent_worker_core::engine::tools::tool_name_from(&format!("{server}_{tool}"))
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
        spec = spec.idempotent(declared.idempotent);
    }
    if let Some(title) = title {
        spec = spec.title(title);
    }
    spec.effect(effect).destructive(destructive)
}

/// The `_meta` key a call that changes something carries its idempotency key under.
pub const IDEMPOTENCY_KEY_META: &str = "idempotencyKey";

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let arguments: Map<String, Value> = match input {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(ToolError::new(format!(
                    "the arguments must be an object, not {other}"
                )));
            }
        };
        let server = &self.reach.server.name;
        let mut params = CallToolRequestParams::new(self.remote_name.clone()).with_arguments(arguments);
        // A call that changes something carries its idempotency key, the same on every run of
        // the turn: one sent again after its worker died can take effect once.
        let reads = self.spec.effect == Effect::View && !self.spec.destructive;
        if !reads && self.spec.idempotent {
            let key = Value::String(ctx.idempotency_key());
            params.meta = Some(RequestMetaObject(MetaObject(Map::from_iter([(
                IDEMPOTENCY_KEY_META.to_owned(),
                key,
            )]))));
        }
        let call = async {
            match &self.reach.server.person_token {
                None => self.peer.call_tool(params).await.map_err(|e| chain(&e)),
                Some(header) => {
                    let token = ctx.user_token.as_ref().ok_or(NO_TOKEN)?;
                    let value = format!("{}{}", header.prefix, token.expose());
                    let session = self
                        .reach
                        .connect(Some((header.header.clone(), value)), ())
                        .await
                        .map_err(|e| chain(&e))?;
                    let answered = session.call_tool(params).await.map_err(|e| chain(&e));
                    let _ = session.cancel().await;
                    answered
                }
            }
        };
        let answered = tokio::time::timeout(self.reach.timeout(), call)
            .await
            .map_err(|_| {
                ToolError::new(format!(
                    "the MCP server {server} did not answer within {} ms",
                    self.reach.timeout().as_millis()
                ))
            })?
            .map_err(|e| match e.as_str() {
                NO_TOKEN => ToolError::new(format!(
                    "the MCP server {server} acts as the person, and this turn carries no userToken: the call was not made"
                )),
                _ => ToolError::new(format!("the MCP server {server} failed: {e}")),
            })?;
        result_value(answered)
    }
}

/// Why a call to a server that acts as the person was not made.
const NO_TOKEN: &str = "no userToken";

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
            idempotent: false,
        };
        let declared_read = spec(None, Some(&declared));
        assert_eq!(
            (declared_read.effect, declared_read.title.as_deref()),
            (Effect::View, Some("Look"))
        );
        // A server takes idempotency keys unless its declaration says not.
        assert!(silent.idempotent && !declared_read.idempotent);
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

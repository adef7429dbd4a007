//! Remote A2A agents as tools: each agent the configuration names (`a2a: [{name, url, headers}]`)
//! is offered to the model as one tool, described by its agent card (what it does, its skills),
//! whose call sends the agent a message over A2A 1.0's JSON-RPC binding and answers with its
//! task: the answer's text (and data), a question when the agent needs input, an error when it
//! failed.
//!
//! The message's id is the call's (conversation, turn and call), so a call retried after a lost
//! answer is the same message to the agent; its context is the conversation's, so the agent keeps
//! one thread per conversation.
//!
//! With `cardKey` (the signer's EC P-256 public key in PEM), the agent's card must carry a
//! signature of that key over the card as served ([`crate::card_signature`]), or the agent is not
//! offered: a card changed on its way, or served by another, is not believed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::card_signature::{CardKey, CardKeyError, SignatureError};
use super::headers::{HeaderError, HeaderValue, SecretSource, resolve};
use agent_worker_core::engine::tools::{Effect, Tool, ToolContext, ToolError, ToolSpec, tool_fn};

/// How long fetching the card or one call may take, by default.
pub const DEFAULT_A2A_TIMEOUT: Duration = Duration::from_secs(120);

/// A remote A2A agent, as the configuration names it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct A2aAgent {
    /// The tool's name (letters, digits, `_` and `-`).
    pub name: String,
    /// Where its card is: the agent's base URL (its card at `/.well-known/agent-card.json`).
    pub url: String,
    /// Headers sent with every request (its credential): a text, or `{ secret: id }`.
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    /// How long fetching the card or one call may take, in milliseconds (120000).
    pub timeout_ms: Option<u64>,
    /// The public key (EC P-256, PEM) whose signature the agent's card must carry.
    pub card_key: Option<String>,
}

/// Why a configured agent cannot be offered.
#[derive(Debug, thiserror::Error)]
pub enum A2aAgentError {
    /// The name cannot name a tool.
    #[error("the name must be letters, digits, '_' or '-'")]
    BadName,
    /// A header's secret could not be read.
    #[error(transparent)]
    Headers(#[from] HeaderError),
    /// The card could not be fetched.
    #[error("its agent card at {url} could not be read")]
    Card {
        /// Where it was looked for.
        url: String,
        /// Why.
        #[source]
        cause: reqwest::Error,
    },
    /// The card is not JSON.
    #[error("its agent card at {url} is not JSON")]
    CardShape {
        /// Where it was read.
        url: String,
        /// Why.
        #[source]
        cause: serde_json::Error,
    },
    /// The card offers no JSON-RPC interface of A2A 1.0.
    #[error("its agent card offers no JSON-RPC interface of A2A 1.0")]
    NoJsonRpc,
    /// `cardKey` is not a key.
    #[error("cardKey: {0}")]
    CardKey(#[from] CardKeyError),
    /// The card is not signed by `cardKey`.
    #[error("its agent card at {url} is not taken")]
    CardSignature {
        /// Where it was read.
        url: String,
        /// Why.
        #[source]
        cause: SignatureError,
    },
}

/// The tool that calls `agent`, described by its card (fetched now, with `http`).
pub async fn a2a_tool(
    agent: &A2aAgent,
    http: reqwest::Client,
    secrets: Option<&dyn SecretSource>,
) -> Result<Arc<dyn Tool>, A2aAgentError> {
    if !super::headers::is_source_name(&agent.name) {
        return Err(A2aAgentError::BadName);
    }
    let card_key = agent.card_key.as_deref().map(CardKey::from_pem).transpose()?;
    let headers = resolve(&agent.headers, secrets).await?;
    let timeout = agent
        .timeout_ms
        .map_or(DEFAULT_A2A_TIMEOUT, Duration::from_millis);
    let card_url = format!("{}/.well-known/agent-card.json", agent.url.trim_end_matches('/'));
    let fetched = with_headers(http.get(&card_url), &headers)
        .timeout(timeout)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status);
    let body = match fetched {
        Ok(response) => response.bytes().await,
        Err(cause) => Err(cause),
    }
    .map_err(|cause| A2aAgentError::Card {
        url: card_url.clone(),
        cause,
    })?;
    let card: Value = serde_json::from_slice(&body).map_err(|cause| A2aAgentError::CardShape {
        url: card_url.clone(),
        cause,
    })?;
    if let Some(key) = &card_key {
        key.verify(&card)
            .map_err(|cause| A2aAgentError::CardSignature { url: card_url, cause })?;
    }
    let endpoint = card["supportedInterfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["protocolBinding"] == "JSONRPC" && i["protocolVersion"] == "1.0")
        .and_then(|i| i["url"].as_str())
        .ok_or(A2aAgentError::NoJsonRpc)?
        .to_owned();
    let spec = ToolSpec::new(
        agent.name.clone(),
        description(&card),
        json!({
            "type": "object",
            "properties": { "message": { "type": "string", "description": "What to ask or tell the agent." } },
            "required": ["message"],
        }),
    )
    .effect(Effect::Mutate);
    let remote = Arc::new(Remote {
        http,
        endpoint,
        headers,
        timeout,
    });
    Ok(Arc::new(tool_fn(spec, move |input: Value, ctx: ToolContext| {
        let remote = remote.clone();
        async move { remote.ask(&input, &ctx).await }
    })))
}

/// What the tool tells the model of the agent: its card's description and skills.
fn description(card: &Value) -> String {
    let mut text = format!(
        "Ask the agent {:?}: {}",
        card["name"].as_str().unwrap_or("agent"),
        card["description"].as_str().unwrap_or("another agent")
    );
    for skill in card["skills"].as_array().into_iter().flatten() {
        text.push_str(&format!(
            "\n- {}: {}",
            skill["name"].as_str().unwrap_or_default(),
            skill["description"].as_str().unwrap_or_default()
        ));
    }
    text
}

fn with_headers(request: reqwest::RequestBuilder, headers: &[(String, String)]) -> reqwest::RequestBuilder {
    headers
        .iter()
        .fold(request, |request, (name, value)| request.header(name, value))
}

/// A remote agent's JSON-RPC endpoint and how to reach it.
struct Remote {
    http: reqwest::Client,
    endpoint: String,
    headers: Vec<(String, String)>,
    timeout: Duration,
}

impl Remote {
    /// Sends the call's message and reads the agent's answer.
    async fn ask(&self, input: &Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        let message = input["message"]
            .as_str()
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| ToolError::new("message: a text for the agent is required"))?;
        let request = json!({
            "jsonrpc": "2.0",
            "id": ctx.call_id,
            "method": "SendMessage",
            "params": { "message": {
                "messageId": format!("{}.{}.{}", ctx.session, ctx.turn_id, ctx.call_id),
                "contextId": ctx.session,
                "role": "ROLE_USER",
                "parts": [{ "text": message }],
            }},
        });
        let response = with_headers(self.http.post(&self.endpoint), &self.headers)
            .header("A2A-Version", "1.0")
            .header("content-type", "application/json")
            .timeout(self.timeout)
            .body(request.to_string())
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| ToolError::new(format!("the agent could not be reached: {e}")))?;
        let body = response
            .bytes()
            .await
            .map_err(|e| ToolError::new(format!("the agent's answer could not be read: {e}")))?;
        let answer: Value = serde_json::from_slice(&body)
            .map_err(|e| ToolError::new(format!("the agent's answer is not JSON-RPC: {e}")))?;
        if let Some(error) = answer.get("error") {
            return Err(ToolError::new(format!(
                "the agent refused ({}): {}",
                error["code"],
                error["message"].as_str().unwrap_or_default()
            )));
        }
        let result = &answer["result"];
        if let Some(message) = result.get("message") {
            return Ok(json!({ "answer": text_of(&message["parts"]) }));
        }
        let task = &result["task"];
        let state = task["status"]["state"].as_str().unwrap_or_default();
        let said = text_of(&task["status"]["message"]["parts"]);
        let answer: String = task["artifacts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|artifact| text_of(&artifact["parts"]))
            .collect::<Vec<_>>()
            .join("\n");
        match state {
            "TASK_STATE_COMPLETED" => Ok(json!({ "answer": answer, "task": task["id"] })),
            "TASK_STATE_INPUT_REQUIRED" | "TASK_STATE_AUTH_REQUIRED" => Ok(json!({
                "needsInput": true,
                "question": if said.is_empty() { answer } else { said },
                "task": task["id"],
            })),
            "TASK_STATE_FAILED" | "TASK_STATE_REJECTED" | "TASK_STATE_CANCELED" => {
                Err(ToolError::new(format!(
                    "the agent's task ended {}: {said}",
                    state.trim_start_matches("TASK_STATE_").to_lowercase()
                )))
            }
            other => Ok(json!({ "state": other, "answer": answer, "task": task["id"] })),
        }
    }
}

/// The text of parts: the text parts, and the data parts as JSON, a line each.
fn text_of(parts: &Value) -> String {
    parts
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|part| {
            part["text"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| part.get("data").map(Value::to_string))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

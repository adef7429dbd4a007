//! A2A's callers against `serve`'s router: the world the A2A tests share (people known by
//! their tokens, the official client run as one of them, JSON-RPC calls made by hand).

use std::sync::Arc;

use agent_worker::engine::tools::Tool;
use agent_worker::hosts::jwt::JwtVerifier;
use agent_worker_testkit::{JwksStandIn, SigningKey, run_a2a_client};
use serde_json::{Value, json};

use super::container::{Server, server_with_tokens_and_tools, token_issuer};

/// The audience of the callers' tokens.
pub const AUDIENCE: &str = "a2a-callers";

/// A token of `issuer` (signed with `key`) for `who`, for `audience`, good for an hour.
pub fn person_token(key: &SigningKey, issuer: &JwksStandIn, audience: &str, who: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    key.token(&json!({
        "iss": issuer.issuer(), "aud": audience, "sub": who, "iat": now, "exp": now + 3600,
    }))
}

/// `serve`'s router with people known by their tokens (the test kit's issuer), and the calls
/// the tests make of it.
pub struct World {
    pub server: Server,
    pub issuer: JwksStandIn,
    pub key: SigningKey,
}

impl World {
    pub async fn start() -> Self {
        Self::with_tools(Vec::new()).await
    }

    pub async fn with_tools(tools: Vec<Arc<dyn Tool>>) -> Self {
        let (key, issuer, config) = token_issuer("k-a2a", AUDIENCE, "agents").await;
        let server =
            server_with_tokens_and_tools(JwtVerifier::new(config, reqwest::Client::new()), tools).await;
        Self { server, issuer, key }
    }

    /// A token for caller `who`.
    pub fn token(&self, who: &str) -> String {
        person_token(&self.key, &self.issuer, AUDIENCE, who)
    }

    pub async fn client(&self, who: &str, scenario: &str, text: &str, context: Option<&str>) -> Value {
        self.client_with(
            who,
            json!({"scenario": scenario, "text": text, "contextId": context}),
        )
        .await
    }

    /// The client run on `plan` (its scenario and words) as `who`.
    pub async fn client_with(&self, who: &str, plan: Value) -> Value {
        let out = self.client_answer(who, plan).await;
        assert!(
            out.get("error").is_none(),
            "the client failed: {}",
            out["error"].as_str().unwrap_or_default()
        );
        out
    }

    /// A JSON-RPC call of `method` as `who`, with A2A's version header unless `version` is None.
    pub async fn rpc(&self, who: &str, body: &Value, version: Option<&str>) -> Value {
        let mut request = reqwest::Client::new()
            .post(format!("{}/a2a", self.server.url))
            .bearer_auth(self.token(who))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(version) = version {
            request = request.header("A2A-Version", version);
        }
        request.send().await.unwrap().json().await.unwrap()
    }

    /// What the client printed for `plan` as `who`, its failure (`{"error"}`) included.
    pub async fn client_answer(&self, who: &str, mut plan: Value) -> Value {
        plan["url"] = json!(self.server.url);
        plan["token"] = json!(self.token(who));
        run_a2a_client(plan).await.unwrap()
    }
}

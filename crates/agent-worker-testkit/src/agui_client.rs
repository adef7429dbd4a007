//! AG-UI's own client (`@ag-ui/client`'s `HttpAgent`, from the project's `.node/`), run once per
//! [`AguiRun`] by `agui/run-agent.cjs`: it checks every event it receives against AG-UI's schemas
//! and their order, so a run that comes back is one a real AG-UI application takes.

use serde_json::{Value, json};

/// What one run through the client gave.
#[derive(Debug)]
pub struct AguiRun {
    /// The events, as the client received and accepted them.
    pub events: Vec<Value>,
    /// The client's end: `{result, newMessages, pendingInterrupts}`, or `{error}` when the
    /// client refused the stream (or the request failed).
    pub end: Value,
}

impl AguiRun {
    /// The types of its events, in order.
    pub fn types(&self) -> Vec<&str> {
        self.events.iter().filter_map(|e| e["type"].as_str()).collect()
    }

    /// The client's error, if it refused the run.
    pub fn error(&self) -> Option<&str> {
        self.end["error"].as_str()
    }
}

/// Runs `plan` (`{url, headers, threadId, runId, messages, resume, abortAfter}`, see the
/// script) through `@ag-ui/client` in a Node process of its own.
pub async fn run_agui(plan: Value) -> std::io::Result<AguiRun> {
    let script = crate::workspace_root().join("crates/agent-worker-testkit/agui/run-agent.cjs");
    let client = crate::mcp_server::node_modules().join("@ag-ui/client");
    if !client.exists() {
        return Err(std::io::Error::other(format!(
            "@ag-ui/client is not installed at {}: run `make node-tools` (make test does)",
            client.display()
        )));
    }
    let output = tokio::process::Command::new("node")
        .arg(script)
        .arg(plan.to_string())
        .env("NODE_PATH", crate::mcp_server::node_modules())
        .env("NODE_ENV", "test")
        .output()
        .await?;
    let mut events = Vec::new();
    let mut end = json!({ "error": format!("the client said nothing; stderr: {}", String::from_utf8_lossy(&output.stderr)) });
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        match value.get("event") {
            Some(event) => events.push(event.clone()),
            None => end = value,
        }
    }
    Ok(AguiRun { events, end })
}

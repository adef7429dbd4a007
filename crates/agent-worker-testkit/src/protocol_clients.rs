//! The field's own clients, run against the agent as their users run them: AG-UI's
//! (`@ag-ui/client`'s `HttpAgent`, from the project's `.node/`, run once per [`AguiRun`] by
//! `agui/run-agent.cjs`: it checks every event it receives against AG-UI's schemas and their
//! order), A2A's (`a2a-sdk`, from the project's venv, by `a2a/client.py`: it parses the agent
//! card and every answer as the protocol's own types) and MCP's (`@modelcontextprotocol/sdk`'s
//! `Client` over Streamable HTTP, by `mcp/client.cjs`).

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
    let output = run_node_client(
        "crates/agent-worker-testkit/agui/run-agent.cjs",
        "@ag-ui/client",
        plan,
    )
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

/// The last line a client printed, as JSON: `{"error"}` saying what it wrote to stderr when
/// there is none.
fn last_json_line(output: &std::process::Output) -> Value {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .and_then(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| json!({ "error": format!("the client printed nothing; stderr: {}", String::from_utf8_lossy(&output.stderr)) }))
}

/// Runs `plan` (`{url, headers, calls: [{name, arguments}]}`, see `mcp/client.cjs`) through
/// the official MCP TypeScript SDK's client (`@modelcontextprotocol/sdk`, from the project's
/// `.node/`) in a Node process of its own: what it printed (`{server, protocol, tools,
/// results}`, or `{error}` when it could not connect).
pub async fn run_mcp_client(plan: Value) -> std::io::Result<Value> {
    let client = "crates/agent-worker-testkit/mcp/client.cjs";
    let output = run_node_client(client, "@modelcontextprotocol/sdk", plan).await?;
    Ok(last_json_line(&output))
}

/// Runs the Node `script` (from the workspace's root) with `plan`, on the project's `.node/`,
/// where `package` must be installed.
async fn run_node_client(script: &str, package: &str, plan: Value) -> std::io::Result<std::process::Output> {
    let installed = crate::mcp_server::node_modules().join(package);
    if !installed.exists() {
        return Err(std::io::Error::other(format!(
            "{package} is not installed at {}: run `make node-tools` (make test does)",
            installed.display()
        )));
    }
    tokio::process::Command::new("node")
        .arg(crate::workspace_root().join(script))
        .arg(plan.to_string())
        .env("NODE_PATH", crate::mcp_server::node_modules())
        .env("NODE_ENV", "test")
        .output()
        .await
}

/// Runs `plan` (`{url, token, scenario, text, contextId}`, see `a2a/client.py`) through the
/// official A2A client (`a2a-sdk`, from the project's venv) in a Python process of its own: the
/// one JSON object it printed (`{"error"}` when the client failed).
pub async fn run_a2a_client(plan: Value) -> std::io::Result<Value> {
    run_python_client("crates/agent-worker-testkit/a2a/client.py", plan).await
}

/// Runs `plan` (`{url, headers, mode, calls}`, see `mcp/client.py`) through the official MCP
/// Python SDK's client (`mcp`, from the project's venv) in a Python process of its own: what
/// it printed (`{protocol, tools, results}`, or `{error}`).
pub async fn run_mcp_python_client(plan: Value) -> std::io::Result<Value> {
    run_python_client("crates/agent-worker-testkit/mcp/client.py", plan).await
}

/// Runs `plan` (`{url, headers, steps}`, see `agentcore/ws_client.py`) through a WebSocket
/// client from the registry (`websockets`, from the project's venv) against AgentCore's
/// `GET /ws`: what it printed (`{frames, closed}`, or `{error}`).
pub async fn run_ws_client(plan: Value) -> std::io::Result<Value> {
    run_python_client("crates/agent-worker-testkit/agentcore/ws_client.py", plan).await
}

/// The test kit's key files (`keys/`, made for the tests alone): `card-signing.pem` (a private
/// key), `card-signing.pub.pem` (its public key), `other.pub.pem` (a key that signed nothing).
pub fn test_key(name: &str) -> std::path::PathBuf {
    crate::workspace_root()
        .join("crates/agent-worker-testkit/keys")
        .join(name)
}

/// Runs the Python `script` (from the workspace's root) with `plan`, on the project's venv.
async fn run_python_client(script: &str, plan: Value) -> std::io::Result<Value> {
    let root = crate::workspace_root();
    let python = root.join(".venv/bin/python");
    if !python.exists() {
        return Err(std::io::Error::other(
            "the project's venv is missing: run `make venv` (make test does)",
        ));
    }
    let output = tokio::process::Command::new(python)
        .arg(root.join(script))
        .arg(plan.to_string())
        .output()
        .await?;
    Ok(last_json_line(&output))
}

/// An A2A agent on the official SDK (`a2a/echo_agent.py`, from the project's venv) on a free port
/// of 127.0.0.1: it echoes, asks for input, or fails, as the message says, and takes only
/// `Authorization: Bearer <token>`. Dropping it stops it.
#[derive(Debug)]
pub struct A2aEchoAgent {
    child: tokio::process::Child,
    url: String,
    said: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl A2aEchoAgent {
    /// Starts it, taking `token`; returns once it listens.
    pub async fn start(token: &str) -> std::io::Result<Self> {
        Self::started(token, None).await
    }

    /// Starts it, taking `token`, its card signed with the private key in the PEM file
    /// `signing_key` (by the SDK's own signer); returns once it listens.
    pub async fn start_signed(token: &str, signing_key: &std::path::Path) -> std::io::Result<Self> {
        Self::started(token, Some(signing_key)).await
    }

    async fn started(token: &str, signing_key: Option<&std::path::Path>) -> std::io::Result<Self> {
        use tokio::io::AsyncBufReadExt as _;
        let root = crate::workspace_root();
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut command = tokio::process::Command::new(root.join(".venv/bin/python"));
        command
            .arg(root.join("crates/agent-worker-testkit/a2a/echo_agent.py"))
            .arg(port.to_string())
            .arg(token);
        if let Some(key) = signing_key {
            command.arg(key);
        }
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let url = format!("http://127.0.0.1:{port}");
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout"))?;
        for _ in 0..400 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Ok(Self {
                    child,
                    url,
                    said: tokio::io::BufReader::new(stdout).lines(),
                });
            }
            if let Some(status) = child.try_wait()? {
                return Err(std::io::Error::other(format!("the A2A agent exited: {status}")));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        Err(std::io::Error::other("the A2A agent did not answer within 20 s"))
    }

    /// Its base URL (its card at `/.well-known/agent-card.json`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The next message it received: `{messageId, contextId, words}`.
    pub async fn next_message(&mut self) -> std::io::Result<Value> {
        let line = self
            .said
            .next_line()
            .await?
            .ok_or_else(|| std::io::Error::other("the A2A agent stopped"))?;
        serde_json::from_str(&line).map_err(std::io::Error::other)
    }
}

impl Drop for A2aEchoAgent {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// A webhook for A2A push notifications (`a2a/push_receiver.py`, from the project's venv) on a
/// free port of 127.0.0.1: every POST it takes is parsed as the official SDK's `StreamResponse`,
/// and told ([`next_push`](Self::next_push)). Its path says how it answers: `/ok…` 200,
/// `/fail…` 500, `/redirect…` a 302 to the metadata address, `/hang…` nothing. Dropping it stops
/// it.
#[derive(Debug)]
pub struct A2aPushReceiver {
    child: tokio::process::Child,
    url: String,
    told: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl A2aPushReceiver {
    /// Starts it; returns once it listens.
    pub async fn start() -> std::io::Result<Self> {
        use tokio::io::AsyncBufReadExt as _;
        let root = crate::workspace_root();
        let mut child = tokio::process::Command::new(root.join(".venv/bin/python"))
            .arg(root.join("crates/agent-worker-testkit/a2a/push_receiver.py"))
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout"))?;
        let mut told = tokio::io::BufReader::new(stdout).lines();
        let first = told
            .next_line()
            .await?
            .ok_or_else(|| std::io::Error::other("the push receiver exited before it listened"))?;
        let url = first
            .strip_prefix("listening ")
            .ok_or_else(|| std::io::Error::other(format!("the push receiver said {first:?}")))?
            .to_owned();
        Ok(Self { child, url, told })
    }

    /// Its base URL: a webhook is this and a path.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The next POST it took: `{path, token, authorization, body, parsed}` (`parsed`: true, or
    /// why the SDK could not parse the body).
    pub async fn next_push(&mut self) -> std::io::Result<Value> {
        let line = self
            .told
            .next_line()
            .await?
            .ok_or_else(|| std::io::Error::other("the push receiver stopped"))?;
        serde_json::from_str(&line).map_err(std::io::Error::other)
    }
}

impl Drop for A2aPushReceiver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

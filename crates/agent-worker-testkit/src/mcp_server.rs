//! MCP servers over Streamable HTTP on a free port of 127.0.0.1, from the project's `.node/`
//! (which `make test` installs): [`EverythingServer::start`], the reference server
//! `@modelcontextprotocol/server-everything` from npm (or its stdio command,
//! [`everything_script`]); and [`EverythingServer::desk`], a small server on the official
//! TypeScript SDK (`mcp/desk-mcp.cjs`) that shows the headers a call arrives with and changes its
//! tool list while connected.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The server's entry point in the project's `.node/`.
pub fn everything_script() -> PathBuf {
    let path = node_modules().join("@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        path.exists(),
        "the MCP reference server is not installed at {}: run `make node-tools` (make test does)",
        path.display()
    );
    path
}

/// The project's `.node/node_modules`.
pub(crate) fn node_modules() -> PathBuf {
    crate::workspace_root().join(".node/node_modules")
}

/// A running MCP server over Streamable HTTP. Dropping it kills it.
#[derive(Debug)]
pub struct EverythingServer {
    child: Child,
    port: u16,
}

impl EverythingServer {
    /// Starts the reference server on a free port and returns once it says it listens.
    pub fn start() -> std::io::Result<Self> {
        let mut command = Command::new("node");
        command.arg(everything_script()).arg("streamableHttp");
        Self::launch(command)
    }

    /// Starts the desk server (`whoami`, `grow`) on a free port.
    pub fn desk() -> std::io::Result<Self> {
        let script = crate::workspace_root().join("crates/agent-worker-testkit/mcp/desk-mcp.cjs");
        let mut command = Command::new("node");
        command.arg(script).env("NODE_PATH", node_modules());
        Self::launch(command)
    }

    fn launch(mut command: Command) -> std::io::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut child = command
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| std::io::Error::other("no stderr"))?;
        let mut lines = BufReader::new(stderr).lines();
        loop {
            match lines.next() {
                Some(Ok(line)) if line.contains("listening on port") => break,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Err(std::io::Error::other("the MCP server ended before it listened")),
            }
        }
        // Keep reading its stderr so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(Self { child, port })
    }

    /// Its Streamable HTTP endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Kills it now, as a server that dies mid-turn.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for EverythingServer {
    fn drop(&mut self) {
        self.kill();
    }
}

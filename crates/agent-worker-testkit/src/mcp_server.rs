//! [`EverythingServer`]: the MCP reference server `@modelcontextprotocol/server-everything`
//! from npm (in the project's `.node/`, which `make test` installs), over Streamable HTTP on a
//! free port of 127.0.0.1, or its stdio command.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The server's entry point in the project's `.node/`.
pub fn everything_script() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../.node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        path.exists(),
        "the MCP reference server is not installed at {}: run `make node-tools` (make test does)",
        path.display()
    );
    path
}

/// A running reference server over Streamable HTTP. Dropping it kills it.
#[derive(Debug)]
pub struct EverythingServer {
    child: Child,
    port: u16,
}

impl EverythingServer {
    /// Starts it on a free port and returns once it says it listens.
    pub fn start() -> std::io::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut child = Command::new("node")
            .arg(everything_script())
            .arg("streamableHttp")
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

//! The protocol's official testing suite (a Postman collection, `spec/agent-protocol/`), run with
//! newman against the Bedrock engine served over Agent Protocol on 127.0.0.1, the model being
//! the wire-level stand-in.
//!
//! newman comes from the npm registry into `.node/` (`make test` installs it; so does
//! `make node-tools`). Every request must pass but the suite's first, which calls a public echo
//! service and cannot pass offline.

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use agent_worker::hosts::agent_protocol::{
    AgentProtocolServer, AgentTaskHandler, ServerConfig, Workspace, serve,
};
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{BedrockStandIn, Fallback};
use serde_json::Value;

/// The request that needs the internet.
const ONLINE_ONLY: &str = "Cleanup Previous Run Copy";

fn newman() -> PathBuf {
    if let Some(path) = std::env::var_os("NEWMAN") {
        return PathBuf::from(path);
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".node/node_modules/.bin/newman");
    assert!(
        path.exists(),
        "newman is not installed at {}: run `make node-tools` (make test does)",
        path.display()
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_suite_passes_against_the_engine() {
    let newman = newman();
    let bedrock = BedrockStandIn::bind("127.0.0.1:0".parse().unwrap(), Fallback::Echo)
        .await
        .unwrap();
    let store = MemoryStore::new();
    let engine = support::engine(&bedrock, &store, support::config(), Vec::new());
    let folder = std::env::temp_dir().join(format!("ap-suite-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("test_output.txt"), "Washington\n").unwrap();
    let server = AgentProtocolServer::new(
        AgentTaskHandler::new(engine),
        ServerConfig::new(Workspace::new(folder.join("workspace"))),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, server, async move {
        let _ = stopped.await;
    }));

    let report = folder.join("report.json");
    let collection = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/spec/agent-protocol/agent_protocol_v1.json"
    );
    let mut command = Command::new(&newman);
    command
        .current_dir(&folder)
        .args(["run", collection, "--env-var"])
        .arg(format!("url={url}"))
        .args(["--reporters", "cli,json", "--reporter-json-export"])
        .arg(&report)
        .args(["--timeout-request", "5000"]);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    let _ = stop.send(());
    let log = String::from_utf8_lossy(&output.stdout);

    let report: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let run = &report["run"];
    let failed_requests: Vec<String> = run["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            format!(
                "{}: {}",
                f["source"]["name"].as_str().unwrap_or("?"),
                f["error"]["message"].as_str().unwrap_or("?")
            )
        })
        .filter(|f| !f.starts_with(ONLINE_ONLY))
        .collect();
    assert!(
        failed_requests.is_empty(),
        "failures: {failed_requests:#?}\n{log}"
    );
    let executions = run["executions"].as_array().unwrap();
    assert_eq!(executions.len(), 13, "{log}");
    for execution in executions {
        let name = execution["item"]["name"].as_str().unwrap_or("?");
        if name == ONLINE_ONLY {
            continue;
        }
        let code = execution["response"]["code"].as_u64();
        assert_eq!(code, Some(200), "{name} answered {code:?}\n{log}");
    }
    let assertions = run["stats"]["assertions"]["total"].as_u64().unwrap();
    assert!(assertions >= 15, "the suite's checks ran: {assertions}\n{log}");
    // The uploaded file came back as uploaded.
    let download = executions
        .iter()
        .find(|e| e["item"]["name"] == "Download Artifact")
        .unwrap();
    let body: Vec<u8> = download["response"]["stream"]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap() as u8)
        .collect();
    assert_eq!(body, b"Washington\n");
    let _ = std::fs::remove_dir_all(&folder);
}

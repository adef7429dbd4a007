//! The Agent Protocol server behind its key (issue 54, item 2): the protocol knows no people, so
//! whoever reaches the server reaches every task. With a key configured, every operation's
//! request without it is 401 and does nothing; the OpenAPI document stays open. `agent-worker
//! agent-protocol` refuses an address other than loopback without a key.

use crate::support;

use agent_worker::hosts::agent_protocol::AgentTaskHandler;
use agent_worker::hosts::api_key::ApiKey;
use agent_worker::protocol::{AgentEvent, agent_fn};
use serde_json::{Value, json};
use support::agent_protocol::start;

const KEY: &str = "ap-key-0123456789";

#[tokio::test]
async fn without_its_key_no_operation_runs_and_with_it_every_one_does() {
    let agent = agent_fn(|_, prompt| {
        futures_util::stream::iter([
            AgentEvent::text(format!("heard {}", prompt.text)),
            AgentEvent::completed_with(json!({ "is_last": true })),
        ])
    });
    let server = start(AgentTaskHandler::new(agent), |config| {
        config.api_key = Some(ApiKey::new(KEY).unwrap());
    })
    .await;
    let http = reqwest::Client::new();
    let tasks = format!("{}/ap/v1/agent/tasks", server.url);
    let create = json!({ "input": "begin" });

    for request in [
        http.post(&tasks).json(&create),
        http.post(&tasks)
            .json(&create)
            .header("x-api-key", "ap-key-0123456780"),
        http.post(&tasks).json(&create).bearer_auth("not-the-key-at-all"),
        http.get(&tasks),
        http.get(format!("{tasks}/any-task/steps")),
    ] {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401);
        let body: Value = response.json().await.unwrap();
        assert!(body["message"].as_str().unwrap().contains("API key"), "{body}");
    }
    let document = http
        .get(format!("{}/openapi.json", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(document.status(), 200);

    // Nothing was created by the refused requests; with the key, the operations run.
    let listed: Value = http
        .get(&tasks)
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["tasks"], json!([]), "{listed}");
    let created = http
        .post(&tasks)
        .json(&create)
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    let task: Value = created.json().await.unwrap();
    let step = http
        .post(format!("{tasks}/{}/steps", task["task_id"].as_str().unwrap()))
        .json(&json!({}))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(step.status(), 200);
    let step: Value = step.json().await.unwrap();
    assert_eq!(step["output"], "heard begin", "{step}");
}

/// What `agent-worker agent-protocol <args>` says on its error stream when it refuses to start.
async fn refused_start(args: &[&str]) -> String {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
        .arg("agent-protocol")
        .args(args)
        .args([
            "--port",
            "0",
            "--region",
            "us-east-1",
            "--endpoint-url",
            "http://127.0.0.1:9",
        ])
        .env_remove("AGENT_WORKER_API_KEY")
        .env_remove("TABLE_NAME")
        .env("AWS_ACCESS_KEY_ID", "anything")
        .env("AWS_SECRET_ACCESS_KEY", "anything")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success(), "it started with {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn the_server_refuses_an_address_beyond_loopback_without_a_key() {
    let said = refused_start(&["--host", "0.0.0.0"]).await;
    assert!(said.contains("--api-key"), "{said}");
    let said = refused_start(&["--api-key", "short"]).await;
    assert!(said.contains("at least 16"), "{said}");
}

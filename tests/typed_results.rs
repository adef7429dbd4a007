//! Typed results where callers ask for them besides the payload (whose path, on both hosts and
//! each provider, is in `provider_matrix.rs`): an Agent Protocol task's `additional_input`, the
//! command line's `--result-schema`, the configuration file's `resultSchema`.

use crate::support;

use agent_worker::hosts::agent_protocol::{
    AgentProtocolClient, AgentProtocolServer, AgentTaskHandler, ServerConfig, StepRequestBody,
    TaskRequestBody, Workspace, serve,
};
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{BedrockStandIn, Reply};
use serde_json::{Value, json};

fn schema() -> Value {
    json!({"type": "object", "properties": {"queue": {"enum": ["billing", "bugs"]}}, "required": ["queue"]})
}

#[tokio::test]
async fn an_agent_protocol_task_asks_in_its_additional_input_and_each_step_answers_in_its_additional_output()
{
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = support::engine(&bedrock, &MemoryStore::new(), support::config(), Vec::new());
    let workspace = std::env::temp_dir().join(format!("ap-typed-{}", uuid::Uuid::new_v4().simple()));
    let server = AgentProtocolServer::new(
        AgentTaskHandler::new(engine),
        ServerConfig::new(Workspace::new(&workspace)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, server, async move {
        let _ = stopped.await;
    }));
    let client = AgentProtocolClient::new(&url).unwrap();

    bedrock.push(Reply::tool_call("r1", "final_result", r#"{"queue": "billing"}"#));
    bedrock.push(Reply::tool_call("r2", "final_result", r#"{"queue": "bugs"}"#));
    let mut task = TaskRequestBody::new("Charged twice: which queue?");
    task.additional_input = Some(json!({"resultSchema": schema()}).as_object().cloned().unwrap());
    let task = client.create_agent_task(&task).await.unwrap();
    let first = client.execute_agent_task_step(&task.task_id, None).await.unwrap();
    assert_eq!(
        first.additional_output.as_ref().map(|o| &o["result"]),
        Some(&json!({"queue": "billing"}))
    );
    // A later step of the task asks the same, without saying it again.
    let second = client
        .execute_agent_task_step(&task.task_id, Some(&StepRequestBody::new("And a crash?")))
        .await
        .unwrap();
    assert_eq!(
        second.additional_output.as_ref().map(|o| &o["result"]),
        Some(&json!({"queue": "bugs"}))
    );
    let offered = &bedrock.requests()[1].body["toolConfig"]["tools"];
    assert_eq!(offered[0]["toolSpec"]["name"], "final_result", "{offered}");
    let _ = std::fs::remove_dir_all(workspace);
}

#[tokio::test]
async fn invoke_takes_a_result_schema_and_prints_the_result_on_completed() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::tool_call("r1", "final_result", r#"{"queue": "billing"}"#));
    let file = std::env::temp_dir().join(format!("schema-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, schema().to_string()).unwrap();
    let invoke = |schema_arg: String| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
            .args(["invoke", "--session", "s1", "--text", "Charged twice?"])
            .args(["--result-schema", &schema_arg])
            .args(["--endpoint-url", &bedrock.endpoint_url(), "--region", "us-east-1"])
            .env_remove("TABLE_NAME")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output()
    };
    let output = invoke(format!("@{}", file.display())).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let last: Value =
        serde_json::from_str(String::from_utf8(output.stdout).unwrap().lines().last().unwrap()).unwrap();
    assert_eq!(
        last,
        json!({"type": "completed", "data": {"result": {"queue": "billing"}}})
    );

    // A schema that is not JSON is refused before anything runs, naming the flag.
    let output = invoke("{not json".to_owned()).await.unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--result-schema"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(bedrock.requests().len(), 1, "nothing ran for the bad schema");
    let _ = std::fs::remove_file(file);
}

#[tokio::test]
async fn the_configuration_files_result_schema_is_checked_when_it_is_read() {
    use agent_worker::hosts::config::{ConfigFile, Configured, Loader};
    let good: ConfigFile = serde_yaml::from_str(
        "resultSchema:\n  type: object\n  properties: { queue: { enum: [billing, bugs] } }\n  required: [queue]\n",
    )
    .unwrap();
    let configured = Configured::from_file(&good, std::path::Path::new("."), &Loader::default())
        .await
        .unwrap();
    assert_eq!(configured.result_schema, Some(schema()));
    let bad: ConfigFile = serde_yaml::from_str("resultSchema: { type: 7 }\n").unwrap();
    let problems = Configured::from_file(&bad, std::path::Path::new("."), &Loader::default())
        .await
        .unwrap_err();
    assert!(
        problems.iter().any(|p| p.starts_with("resultSchema: ")),
        "{problems:?}"
    );
}

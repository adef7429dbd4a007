//! The `agent-worker` binary: `invoke` against an in-process stand-in.

use agent_worker::session::HistoryStore as _;
use tokio::process::Command;

use agent_worker::protocol::AgentEvent;
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::{BedrockStandIn, Reply, sid};

/// `agent-worker invoke ARGS` against the stand-in, with sessions in memory.
async fn invoke_output(bedrock: &BedrockStandIn, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agent-worker"))
        .arg("invoke")
        .env_remove("TABLE_NAME")
        .args(["--endpoint-url", &bedrock.endpoint_url(), "--region", "us-east-1"])
        .args(args)
        .env("AWS_ACCESS_KEY_ID", "anything")
        .env("AWS_SECRET_ACCESS_KEY", "anything")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .expect("the binary runs")
}

async fn invoke(bedrock: &BedrockStandIn, args: &[&str]) -> (Vec<AgentEvent>, String, Option<i32>) {
    let output = invoke_output(bedrock, args).await;
    let events = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect();
    (
        events,
        String::from_utf8(output.stderr).unwrap(),
        output.status.code(),
    )
}

#[tokio::test]
async fn invoke_prints_each_event_as_a_json_line_and_exits_0() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::tool_call("t1", "current_time", "{}"));
    bedrock.push(Reply::text("It is now."));
    let (events, stderr, code) = invoke(
        &bedrock,
        &[
            "--session",
            "s1",
            "--text",
            "Time?",
            "--tool",
            "current_time",
            "--system",
            "Be brief.",
            "--model-id",
            "m-1",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(matches!(&events[0], AgentEvent::ToolStarted { name, .. } if name == "current_time"));
    assert!(matches!(
        &events[1],
        AgentEvent::ToolEnded { is_error: false, .. }
    ));
    assert_eq!(events.last(), Some(&AgentEvent::completed()));
    let request = &bedrock.requests()[0];
    assert_eq!(request.model_id, "m-1");
    assert_eq!(request.body["system"][0]["text"], "Be brief.");
}

#[tokio::test]
async fn invoke_repeat_runs_independent_turns_and_prints_a_summary_last() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    for i in 0..3 {
        bedrock.push(Reply::tool_call(&format!("c{i}"), "current_time", "{}"));
        bedrock.push(Reply::text("It is now."));
    }
    bedrock.push(Reply::http_error(400, "ValidationException", "too long"));
    let output = invoke_output(
        &bedrock,
        &[
            "--repeat",
            "4",
            "--session",
            "S",
            "--text",
            "Time?",
            "--tool",
            "current_time",
        ],
    )
    .await;
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut summary = lines.last().unwrap().clone();
    let peak = summary.as_object_mut().unwrap().remove("peak_rss_kib");
    assert!(peak.is_none_or(|kib| kib.as_u64().is_some_and(|kib| kib > 1_000)));
    assert_eq!(
        summary,
        serde_json::json!({"turns": 4, "tool_calls": 3, "failed_turns": 1})
    );
    let terminals = lines
        .iter()
        .filter(|l| l["type"] == "completed" || l["type"] == "failed")
        .count();
    assert_eq!(terminals, 4, "{stdout}");
    assert_eq!(output.status.code(), Some(1), "a failed turn fails the run");
    // Each turn ran in its own session: each first request carries one user message.
    let requests = bedrock.requests();
    for i in [0, 2, 4, 6] {
        assert_eq!(requests[i].body["messages"].as_array().unwrap().len(), 1);
    }
}

#[tokio::test]
async fn a_failed_turn_exits_1_with_the_details_on_stderr() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::http_error(403, "AccessDeniedException", "not for you"));
    let (events, stderr, code) = invoke(&bedrock, &["--session", "s1", "--text", "Hi"]).await;
    assert_eq!(code, Some(1));
    assert!(matches!(
        events.last(),
        Some(AgentEvent::Failed { retryable: false, .. })
    ));
    assert!(
        stderr.contains("model_rejected") && stderr.contains("not for you"),
        "{stderr}"
    );
}

#[tokio::test]
async fn bad_usage_exits_2_naming_the_argument() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let (events, stderr, code) =
        invoke(&bedrock, &["--session", "s1", "--text", "Hi", "--tool", "rm_rf"]).await;
    assert_eq!(code, Some(2));
    assert!(events.is_empty());
    assert!(stderr.contains("--tool rm_rf: no such example tool"), "{stderr}");
    let (_, stderr, code) = invoke(
        &bedrock,
        &["--session", "s1", "--text", "Hi", "--image", "photo.bmp"],
    )
    .await;
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--image photo.bmp"), "{stderr}");
    assert!(bedrock.requests().is_empty());
}

#[tokio::test]
async fn invoke_with_a_table_keeps_the_session_in_dynamodb() {
    let moto = agent_worker_testkit::moto();
    let table = format!("cli-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto.dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("Stored."));
    let output = Command::new(env!("CARGO_BIN_EXE_agent-worker"))
        .args([
            "invoke",
            "--session",
            "s1",
            "--text",
            "Keep this",
            "--table",
            &table,
        ])
        .args(["--endpoint-url", &bedrock.endpoint_url(), "--region", "us-east-1"])
        .env("AWS_ENDPOINT_URL_DYNAMODB", moto.endpoint())
        .env("AWS_ACCESS_KEY_ID", "anything")
        .env("AWS_SECRET_ACCESS_KEY", "anything")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let history = store.load_history(&sid("s1")).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].text(), "Stored.");
}

#[tokio::test]
async fn agent_protocol_serves_the_engine_over_http() {
    use agent_worker::hosts::agent_protocol::{AgentProtocolClient, TaskRequestBody};
    use tokio::io::{AsyncBufReadExt, BufReader};

    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("Washington."));
    let workspace = std::env::temp_dir().join(format!("ap-cli-{}", uuid::Uuid::new_v4().simple()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-worker"))
        .args(["agent-protocol", "--port", "0", "--region", "us-east-1"])
        .args(["--endpoint-url", &bedrock.endpoint_url()])
        .arg("--workspace")
        .arg(&workspace)
        .env_remove("TABLE_NAME")
        .env("AWS_ACCESS_KEY_ID", "anything")
        .env("AWS_SECRET_ACCESS_KEY", "anything")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary runs");
    // The server says where it listens once it is bound.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the server announces its address");
        if let Some(rest) = line.strip_prefix("Agent Protocol v1 on ") {
            break rest.split("/ap/v1").next().unwrap().to_owned();
        }
    };
    let client = AgentProtocolClient::new(&url).unwrap();
    let task = client
        .create_agent_task(&TaskRequestBody::new("Name a state."))
        .await
        .unwrap();
    let step = client.execute_agent_task_step(&task.task_id, None).await.unwrap();
    assert_eq!(step.output.as_deref(), Some("Washington."));
    let document = reqwest::get(format!("{url}/openapi.json"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(document.contains("executeAgentTaskStep"));
    child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(&workspace);
}

#[tokio::test]
async fn validate_prints_every_issue_and_exits_1_on_an_error() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/agents");
    let validate = |folder: std::path::PathBuf, json: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-worker"));
        command.arg("validate").arg(folder);
        if json {
            command.arg("--json");
        }
        command.output()
    };
    let clean = validate(examples.into(), false).await.unwrap();
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );
    assert!(String::from_utf8_lossy(&clean.stderr).contains("6 agents, 5 prompts, 0 errors"));

    let broken = std::env::temp_dir().join(format!("broken-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(broken.join("agents")).unwrap();
    std::fs::write(
        broken.join("agents/x.yaml"),
        "name: x\nsideA: {handler: nope}\nsideB: {human: true}\n",
    )
    .unwrap();
    let missing = validate(broken.clone(), true).await.unwrap();
    assert_eq!(missing.status.code(), Some(1));
    let issues: serde_json::Value = serde_json::from_slice(&missing.stdout).unwrap();
    assert_eq!(issues[0]["code"], "undefined_handler");
    assert_eq!(issues[0]["path"], "sideA.handler");
    assert_eq!(issues[0]["source"], "agents/x.yaml", "named by its file");
    let _ = std::fs::remove_dir_all(&broken);
}

/// Issue 53 (4): one `validate` run lists every problem of every file, each by its file and
/// path: structural and reference errors of one file together, each wrong entry of `subagents`
/// and `parentHooks`, and no false `undefined_prompt` for a prompt file with a problem.
#[tokio::test]
async fn validate_lists_every_problem_of_every_file_in_one_run() {
    use agent_worker::agents::{Catalog, Issue, Known};
    let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/agents/one_pass");
    let run = |json: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-worker"));
        command.args(["validate", folder, "--tool", "search", "--hook", "gmail_context"]);
        if json {
            command.arg("--json");
        }
        command.output()
    };
    let output = run(true).await.unwrap();
    assert_eq!(output.status.code(), Some(1));
    let listed: Vec<Issue> = serde_json::from_slice(&output.stdout).unwrap();
    let found: Vec<(&str, &str, &str)> = listed
        .iter()
        .map(|i| (i.source.as_str(), i.code.as_str(), i.path.as_str()))
        .collect();
    for expected in [
        // One file: a structural error, wrong entries of both lists, and its references.
        ("agents/broken.yaml", "unknown_property", "colour"),
        ("agents/broken.yaml", "missing_property", "parentHooks[0].reason"),
        ("agents/broken.yaml", "invalid_value", "parentHooks[1].stage"),
        (
            "agents/broken.yaml",
            "invalid_value",
            "sideA.subagents[0].maxInstances",
        ),
        (
            "agents/broken.yaml",
            "missing_property",
            "sideA.subagents[1].agent",
        ),
        (
            "agents/broken.yaml",
            "unknown_property",
            "sideA.subagents[2].colour",
        ),
        ("agents/broken.yaml", "undefined_hook", "hooks[0]"),
        (
            "agents/broken.yaml",
            "undefined_agent",
            "sideA.subagents[0].agent",
        ),
        (
            "agents/broken.yaml",
            "missing_parent_hook",
            "sideA.subagents[2].agent",
        ),
        (
            "agents/broken.yaml",
            "relationship_name_reserved",
            "sideA.subagents[2].as",
        ),
        (
            "agents/broken.yaml",
            "relationship_name_collides_with_tool",
            "sideA.subagents[3].as",
        ),
        ("agents/broken.yaml", "undefined_handler", "sideB.handler"),
        ("agents/dupe.yaml", "duplicate_name", "name"),
        ("agents/dupe.yaml", "undefined_prompt", "sideA.prompt"),
        ("agents/twins.yaml", "both_sides_human", "sideB"),
        ("prompts/flawed.yaml", "unknown_property", "modle"),
    ] {
        assert!(found.contains(&expected), "{expected:?} not in {found:#?}");
    }
    assert!(
        !listed
            .iter()
            .any(|i| i.code == "undefined_prompt" && i.message.contains("flawed")),
        "{found:#?}"
    );
    // Exactly what the library finds with what the command registers.
    let mut known = Known::with_builtins();
    known.tools.extend(
        agent_worker::engine::tools::examples::NAMES
            .iter()
            .map(|n| (*n).to_owned())
            .chain(["search".to_owned()]),
    );
    known.hooks.insert("gmail_context".into());
    let (_, loaded) = Catalog::load(std::path::Path::new(folder), &known).unwrap();
    assert_eq!(listed, loaded);
    // The lines for a person name each problem by file and path as well.
    let output = run(false).await.unwrap();
    let lines = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(lines.lines().count(), listed.len(), "{lines}");
    assert!(
        lines.contains("[undefined_handler] agents/broken.yaml at sideB.handler"),
        "{lines}"
    );
}

#[tokio::test]
async fn invoke_runs_a_standard_agent_from_a_folder() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("Shall I go ahead?"));
    let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/agents");
    let (events, stderr, code) = invoke(
        &bedrock,
        &[
            "--session",
            "g1",
            "--text",
            "Delete the bucket.",
            "--agents-dir",
            folder,
            "--agent",
            "approval_gate",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    match events.last() {
        Some(AgentEvent::Completed { data: Some(data) }) => {
            assert_eq!(data["sessionStatus"], "awaiting_human")
        }
        other => panic!("{other:?}"),
    }
    let (_, stderr, code) = invoke(
        &bedrock,
        &["--session", "g2", "--text", "x", "--agents-dir", folder],
    )
    .await;
    assert_eq!(code, Some(2), "--agents-dir needs --agent: {stderr}");
}

#[tokio::test]
async fn handle_returns_a_record_the_model_refuses_and_its_redelivery_calls_no_model() {
    let moto = agent_worker_testkit::moto();
    let table = format!("cli-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto.dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::http_error(
        400,
        "ValidationException",
        "The provided model identifier is invalid.",
    ));
    let event = std::env::temp_dir().join(format!("refused-{}.json", uuid::Uuid::new_v4().simple()));
    let body = serde_json::json!({"turnId": "t-refused", "conversationId": "c1", "userId": "u", "accountId": "a", "content": "Hi"});
    let record = serde_json::json!({"Records": [{
        "messageId": "m-1", "receiptHandle": "rh", "body": body.to_string(),
        "attributes": {"ApproximateReceiveCount": "1"}, "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:turns", "awsRegion": "us-east-1"
    }]});
    std::fs::write(&event, record.to_string()).unwrap();
    let handle = || {
        Command::new(env!("CARGO_BIN_EXE_agent-worker"))
            .args(["handle", event.to_str().unwrap(), "--table", &table])
            .env("SYSTEM_PROMPT", "You are a helpful assistant.")
            .args(["--endpoint-url", &bedrock.endpoint_url(), "--region", "us-east-1"])
            .env("AWS_ENDPOINT_URL_DYNAMODB", moto.endpoint())
            .env("AWS_ENDPOINT_URL_SQS", moto.endpoint())
            .env("AWS_ACCESS_KEY_ID", "anything")
            .env("AWS_SECRET_ACCESS_KEY", "anything")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output()
    };
    for delivery in 1..=2 {
        let output = handle().await.unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // The turn's events go to stdout as JSON lines (the default sink); the answer is last.
        let stdout = String::from_utf8_lossy(&output.stdout);
        let answer: serde_json::Value =
            serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
        assert_eq!(
            answer,
            serde_json::json!({"batchItemFailures": [{"itemIdentifier": "m-1"}]}),
            "delivery {delivery}"
        );
    }
    assert_eq!(bedrock.requests().len(), 1, "the redelivery called no model");
}

/// The failure `events` end with: (code, retryable, details).
fn failed_with(events: &[AgentEvent]) -> (String, bool, String) {
    match events.last() {
        Some(AgentEvent::Failed {
            details,
            retryable,
            code,
        }) => (code.clone().unwrap_or_default(), *retryable, details.clone()),
        other => panic!("not a failure: {other:?}"),
    }
}

#[tokio::test]
async fn through_the_binary_a_stream_without_message_stop_fails_retryable() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(
        agent_worker_testkit::StreamScript::new()
            .text("Half an answer", 2)
            .into_reply(),
    );
    let (events, _, code) = invoke(&bedrock, &["--session", "s1", "--text", "Hi"]).await;
    assert_eq!(code, Some(1));
    let (failure, retryable, details) = failed_with(&events);
    assert_eq!(failure, "model_stream_interrupted", "{details}");
    assert!(
        retryable && details.contains("without a stop reason"),
        "{details}"
    );
}

#[tokio::test]
async fn through_the_binary_an_unclosed_tool_call_is_named_not_dropped() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(
        agent_worker_testkit::StreamScript::new()
            .text("Let me check.", 1)
            .frame(agent_worker_testkit::Frame::event(
                "contentBlockStart",
                serde_json::json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t-open", "name": "current_time"}}}),
            ))
            .stop("tool_use")
            .into_reply(),
    );
    let (events, _, code) = invoke(
        &bedrock,
        &[
            "--session",
            "s1",
            "--text",
            "What time is it?",
            "--tool",
            "current_time",
        ],
    )
    .await;
    assert_eq!(code, Some(1));
    let (failure, _, details) = failed_with(&events);
    assert_eq!(failure, "model_stream_interrupted", "{details}");
    assert!(
        details.contains("`current_time`") && details.contains("t-open"),
        "{details}"
    );
    assert!(
        !events.iter().any(|e| matches!(e, AgentEvent::ToolStarted { .. })),
        "the call never ran"
    );
}

#[tokio::test]
async fn a_failed_aws_call_exits_1_and_a_usage_mistake_2() {
    let moto = agent_worker_testkit::moto();
    let history = |table: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-worker"));
        command
            .args(["history", "--session", "s1", "--table", table])
            .env("AWS_ENDPOINT_URL_DYNAMODB", moto.endpoint())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "anything")
            .env("AWS_SECRET_ACCESS_KEY", "anything")
            .env("AWS_EC2_METADATA_DISABLED", "true");
        command
    };
    let missing = history("no-such-table").output().await.unwrap();
    let said = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(1), "the work failed: {said}");
    assert!(said.contains("ResourceNotFound"), "{said}");
    let bad = history("").output().await.unwrap();
    let said = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "a table name that cannot be one: {said}"
    );
    assert!(said.contains("--table"), "{said}");
}

#[tokio::test]
async fn a_turn_without_aws_credentials_says_how_to_give_them_in_one_line() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let home = std::env::temp_dir().join(format!("no-aws-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&home).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-worker"));
    command
        .args(["invoke", "--session", "s1", "--text", "Hi"])
        .args(["--endpoint-url", &bedrock.endpoint_url(), "--region", "us-east-1"])
        .env_remove("TABLE_NAME")
        .env("HOME", &home)
        .env("AWS_CONFIG_FILE", home.join("config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", home.join("credentials"))
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for name in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ] {
        command.env_remove(name);
    }
    let output = command.output().await.unwrap();
    std::fs::remove_dir_all(&home).ok();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let failed = stdout
        .lines()
        .map(|line| serde_json::from_str::<AgentEvent>(line).unwrap())
        .next_back()
        .expect("a terminal");
    let AgentEvent::Failed { code, details, .. } = &failed else {
        panic!("{failed:?}");
    };
    assert_eq!(code.as_deref(), Some("model_rejected"), "not retried: {failed:?}");
    assert!(
        details.contains("no AWS credentials were found: set AWS_PROFILE"),
        "{details}"
    );
    assert!(
        !details.contains("IMDS") && !details.contains("dispatch failure"),
        "{details}"
    );
    assert!(bedrock.requests().is_empty(), "nothing reached the model");
}

//! Tools from MCP servers, against the reference server `@modelcontextprotocol/server-everything`
//! from npm, over Streamable HTTP and stdio, through turns on the Bedrock stand-in.

use crate::support;

use std::path::PathBuf;

use agent_worker::engine::{ApprovalSigner, BedrockModel, Engine};
use agent_worker::hosts::config::{ConfigFile, Configured, Loader};
use agent_worker::protocol::{Agent as _, AgentEvent, Prompt, Scope};
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{BedrockStandIn, EverythingServer, Reply, everything_script, sid, tid};
use futures_util::StreamExt as _;
use support::{MODEL_ID, approval_event, config};

/// What `yaml` configures, its paths starting in the temporary folder.
async fn configured(yaml: &str) -> Result<Configured, Vec<String>> {
    let file: ConfigFile = serde_yaml::from_str(yaml).unwrap();
    Configured::from_file(&file, &std::env::temp_dir(), &Loader::default()).await
}

fn http_config(server: &EverythingServer) -> String {
    format!(
        "mcp:\n\
         \x20 - name: everything\n\
         \x20   url: {}\n\
         \x20   allow: [echo, get-sum, toggle-simulated-logging]\n\
         \x20   tools:\n\
         \x20     toggle-simulated-logging: {{ destructive: true, title: Switch the logging, consequence: The server starts or stops logging. }}\n",
        server.url()
    )
}

fn engine(bedrock: &BedrockStandIn, configured: &Configured) -> Engine {
    let store = MemoryStore::new();
    let builder = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store.clone())
        .approvals(store, ApprovalSigner::new([7u8; 32]).unwrap())
        .tool_policy(configured.policy.clone())
        .config(config());
    configured.equip(builder, []).build().unwrap()
}

async fn turn(engine: &Engine, session: &str) -> Vec<AgentEvent> {
    turn_in(engine, Scope::new(sid(session))).await
}

async fn turn_in(engine: &Engine, scope: Scope) -> Vec<AgentEvent> {
    let session = scope.session.clone();
    let scope = scope
        .with_turn_id(tid(&format!("{session}-t1")))
        .with("userId", "ana");
    engine
        .invoke(scope, Prompt::text("Use the tools."))
        .collect()
        .await
}

fn completed(events: &[AgentEvent]) -> serde_json::Value {
    match events.last() {
        Some(AgentEvent::Completed { data }) => data.clone().unwrap_or_default(),
        other => panic!("the turn did not complete: {other:?}"),
    }
}

#[tokio::test]
async fn a_servers_tools_run_in_a_turn_and_its_annotations_decide_approvals() {
    let server = EverythingServer::start().unwrap();
    let configured = configured(&http_config(&server)).await.unwrap();
    let origins: Vec<(&str, &str, &str)> = configured
        .origins
        .iter()
        .map(|o| (o.name.as_str(), o.source.as_str(), o.approval.as_str()))
        .collect();
    assert_eq!(
        origins,
        [
            ("everything_echo", "mcp:everything", "no"),
            ("everything_get-sum", "mcp:everything", "no"),
            (
                "everything_toggle-simulated-logging",
                "mcp:everything",
                "always (declared)"
            ),
        ],
        "allow keeps three of its tools; readOnlyHint makes reads; the declaration a destructive one"
    );

    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = engine(&bedrock, &configured);
    bedrock.push(Reply::tool_call(
        "c1",
        "everything_echo",
        r#"{"message":"hello there"}"#,
    ));
    bedrock.push(Reply::tool_call("c2", "everything_get-sum", r#"{"a":2,"b":40}"#));
    bedrock.push(Reply::text("Done."));
    let events = turn(&engine, "s-calls").await;
    completed(&events);
    let requests = bedrock.requests();
    assert!(
        requests[1].body.to_string().contains("Echo: hello there"),
        "{}",
        requests[1].body
    );
    assert!(
        requests[2].body.to_string().contains("42"),
        "{}",
        requests[2].body
    );

    // The destructive one waits for the person.
    bedrock.push(Reply::tool_call(
        "c3",
        "everything_toggle-simulated-logging",
        "{}",
    ));
    let events = turn(&engine, "s-approval").await;
    let card = approval_event(&events);
    assert_eq!(card["preview"]["title"], "Switch the logging");
    assert_eq!(completed(&events)["stopReason"], "approval_required");
}

#[tokio::test]
async fn a_server_that_dies_mid_turn_gives_an_error_result_and_the_turn_completes() {
    let mut server = EverythingServer::start().unwrap();
    let configured = configured(&http_config(&server)).await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = engine(&bedrock, &configured);
    server.kill();
    bedrock.push(Reply::tool_call(
        "c1",
        "everything_echo",
        r#"{"message":"anyone?"}"#,
    ));
    bedrock.push(Reply::text("The echo server is down."));
    let events = turn(&engine, "s-dead").await;
    completed(&events);
    let result = bedrock.requests()[1].body.to_string();
    assert!(
        result.contains("the MCP server everything"),
        "the model reads why: {result}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolEnded { is_error: true, .. })),
        "the call ended in error: {events:?}"
    );
}

#[tokio::test]
async fn a_local_server_over_stdio_gives_its_tools_too() {
    let script: PathBuf = everything_script();
    let yaml = format!(
        "mcp:\n  - name: local\n    command: node\n    args: [{:?}, stdio]\n    allow: [echo]\n",
        script.display().to_string()
    );
    let configured = configured(&yaml).await.unwrap();
    assert_eq!(configured.origins.len(), 1);
    let echo = &configured.tools_with([])[0];
    assert_eq!(echo.spec().name, "local_echo");
    let answer = echo
        .call(
            serde_json::json!({"message": "over stdio"}),
            agent_worker::engine::tools::ToolContext {
                session: sid("s"),
                turn_id: tid("t"),
                call_id: "c".into(),
                user_id: None,
                account_id: None,
                user_token: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(answer["text"], "Echo: over stdio");
}

#[tokio::test]
async fn a_server_that_is_down_at_start_up_is_named() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let yaml = format!(
        "mcp:\n  - name: gone\n    url: http://127.0.0.1:{port}/mcp\n    timeoutMs: 5000\n  - name: both\n    url: http://x\n    command: y\n"
    );
    let problems = configured(&yaml).await.unwrap_err();
    assert!(
        problems.iter().any(|p| p.starts_with("mcp[0] (gone): ")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("mcp[1] (both): url, command")),
        "{problems:?}"
    );
}

/// The names of the tools a model request offered.
fn offered(body: &serde_json::Value) -> Vec<String> {
    body["toolConfig"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["toolSpec"]["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_changed_tool_list_reaches_the_turns_that_start_after_it() {
    let server = EverythingServer::desk().unwrap();
    let yaml = format!("mcp:\n  - name: desk\n    url: {}\n", server.url());
    let configured = configured(&yaml).await.unwrap();
    let source = configured.sources[0].clone();
    let before = source.generation();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = engine(&bedrock, &configured);

    // The call makes the server add a tool and say so; the turn keeps the list it started with.
    bedrock.push(Reply::tool_call("c1", "desk_grow", "{}"));
    bedrock.push(Reply::text("It grew."));
    completed(&turn(&engine, "s-grow").await);
    tokio::time::timeout(std::time::Duration::from_secs(10), source.changed(before))
        .await
        .expect("the server's list_changed notification was heard");
    let requests = bedrock.requests();
    assert_eq!(offered(&requests[0].body), ["desk_whoami", "desk_grow"]);
    assert_eq!(offered(&requests[1].body), offered(&requests[0].body));

    // The next turn offers the new tool, and it runs.
    bedrock.push(Reply::tool_call("c2", "desk_grown", "{}"));
    bedrock.push(Reply::text("Done."));
    let events = turn(&engine, "s-grown").await;
    completed(&events);
    assert_eq!(
        offered(&bedrock.requests()[2].body),
        ["desk_whoami", "desk_grow", "desk_grown"]
    );
    assert_eq!(tool_result(&events), serde_json::json!({"text": "grown"}));
}

/// What the turn's one tool call gave back; panics if it failed.
fn tool_result(events: &[AgentEvent]) -> serde_json::Value {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolEnded {
                is_error, content, ..
            } => {
                assert!(!is_error, "the call failed: {content}");
                Some(content.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool_ended in {events:?}"))
}

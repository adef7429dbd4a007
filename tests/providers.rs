//! The engine on model providers beside Bedrock (the Anthropic API, OpenAI-compatible APIs), each
//! against a stand-in that speaks the provider's documented wire format, so the real client code
//! runs: the fixture turn (question → tool → answer), throttling with the provider's
//! `retry-after`, a stream that fails midway, and the command line on them. Both hosts on each
//! provider, by settings alone: `provider_matrix.rs`.

use crate::support;

use std::sync::Arc;

use agent_worker::engine::{Engine, EngineConfig};
use agent_worker::models::{ANTHROPIC_VERSION, AnthropicModel, ApiKey};
use agent_worker::protocol::{Agent as _, AgentEvent, Prompt, Scope};
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{ProviderStandIn, SseReply, sid};
use futures_util::StreamExt as _;
use serde_json::json;
use support::{config, example_tools};

const KEY: &str = "sk-ant-stand-in-0123456789";

fn anthropic_engine(stand_in: &ProviderStandIn, config: EngineConfig) -> Engine {
    let model = AnthropicModel::new(ApiKey::new(KEY).unwrap(), "claude-sonnet-4-6").base_url(stand_in.url());
    engine_on(model, config)
}

/// The fixture's engine (a concise assistant with the `add` tool) on `model`.
fn engine_on(model: impl agent_worker::engine::Model + 'static, config: EngineConfig) -> Engine {
    Engine::builder()
        .model(model)
        .store(MemoryStore::new())
        .system_prompt("You are a concise assistant.")
        .tools(example_tools(&["add"]))
        .config(config)
        .build()
        .unwrap()
}

async fn turn(engine: &Engine, session: &str, text: &str) -> Vec<AgentEvent> {
    engine
        .invoke(Scope::new(sid(session)), Prompt::text(text))
        .collect()
        .await
}

/// The fixture turn's events after any `leading` ones: the `add` call and its sum, then the
/// answer streamed in three pieces, its usage, and `completed`.
fn assert_fixture_events(events: &[AgentEvent], leading: &[&str]) {
    let kinds: Vec<&str> = events.iter().map(AgentEvent::type_name).collect();
    let fixture = [
        "tool_started",
        "tool_ended",
        "usage",
        "text",
        "text",
        "text",
        "usage",
        "completed",
    ];
    assert_eq!(kinds[..leading.len()], *leading, "{events:?}");
    assert_eq!(kinds[leading.len()..], fixture, "{events:?}");
    let ended = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolEnded {
                content,
                is_error: false,
                ..
            } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(ended["sum"], 42.0, "{ended}");
    assert_eq!(support::text_of(events), "2 + 40 is 42.");
}

#[tokio::test]
async fn the_fixture_turn_runs_on_the_anthropic_api() {
    let stand_in = ProviderStandIn::start().await.unwrap();
    stand_in.push(SseReply::tool_call("toolu_01", "add", r#"{"numbers": [2, 40]}"#));
    stand_in.push(SseReply::text("2 + 40 is 42."));
    let engine = anthropic_engine(&stand_in, config());
    let events = turn(&engine, "s-fixture", "What is 2 + 40?").await;
    assert_fixture_events(&events, &[]);

    let requests = stand_in.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].api_key.as_deref(), Some(KEY));
    assert_eq!(requests[0].version.as_deref(), Some(ANTHROPIC_VERSION));
    let first = &requests[0].body;
    assert_eq!(first["model"], "claude-sonnet-4-6");
    assert_eq!(first["system"][0]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(first["tools"][0]["name"], "add");
    let second = &requests[1].body;
    assert_eq!(second["messages"][1]["content"][0]["type"], "tool_use");
    let result = &second["messages"][2]["content"][0];
    assert_eq!(
        (&result["type"], &result["tool_use_id"]),
        (&json!("tool_result"), &json!("toolu_01"))
    );
    assert!(result["content"].as_str().unwrap().contains("42"));
}

#[tokio::test]
async fn a_throttled_or_overloaded_call_is_retried_after_the_wait_the_api_asks_for() {
    let stand_in = ProviderStandIn::start().await.unwrap();
    stand_in.push(SseReply::http_error(
        429,
        "rate_limit_error",
        "Slow down.",
        Some("0.3"),
    ));
    stand_in.push(SseReply::http_error(529, "overloaded_error", "Overloaded", None));
    stand_in.push(SseReply::overloaded_mid_stream());
    stand_in.push(SseReply::text("Here now."));
    let waits = EngineConfig {
        retry_max_delay: std::time::Duration::from_secs(2),
        ..config()
    };
    let engine = anthropic_engine(&stand_in, waits);
    let events = turn(&engine, "s-retry", "Hello?").await;
    let delays: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Retrying { delay_ms, .. } => Some(*delay_ms),
            _ => None,
        })
        .collect();
    assert_eq!(delays.len(), 3, "{events:?}");
    assert!(
        delays[0] >= 300,
        "the first retry waited what retry-after asked: {delays:?}"
    );
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    assert_eq!(support::text_of(&events), "Here now.");
    assert_eq!(stand_in.requests().len(), 4);
}

#[tokio::test]
async fn a_refused_request_fails_the_turn_with_the_apis_words_and_the_key_is_never_shown() {
    let stand_in = ProviderStandIn::start().await.unwrap();
    stand_in.push(SseReply::http_error(
        401,
        "authentication_error",
        "invalid x-api-key",
        None,
    ));
    let engine = anthropic_engine(&stand_in, config());
    let events = turn(&engine, "s-refused", "Hello?").await;
    match events.last() {
        Some(AgentEvent::Failed { details, .. }) => {
            assert!(details.contains("authentication_error"), "{details}");
            assert!(!details.contains(KEY));
        }
        other => panic!("not failed: {other:?}"),
    }
    let model = AnthropicModel::new(ApiKey::new(KEY).unwrap(), "m");
    assert!(!format!("{model:?}").contains(KEY), "the key is not in Debug");
    let _ = Arc::new(model);
}

/// `agent-worker invoke --provider provider --endpoint-url url` with the key in `key_variable`,
/// a turn that calls `current_time`: it succeeds, never prints the key, and prints the same event
/// shapes as on Bedrock.
async fn invoke_a_time_turn(provider: &str, url: &str, key_variable: &str, model: &str) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
        .args(["invoke", "--provider", provider, "--endpoint-url", url])
        .args(["--model-id", model, "--session", "s1", "--text", "Time?"])
        .args(["--tool", "current_time"])
        .env_remove("TABLE_NAME")
        .env(key_variable, KEY)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains(KEY), "the key is never printed");
    let events: Vec<AgentEvent> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(matches!(&events[0], AgentEvent::ToolStarted { name, .. } if name == "current_time"));
    assert!(matches!(
        &events[1],
        AgentEvent::ToolEnded { is_error: false, .. }
    ));
    assert_eq!(events.last(), Some(&AgentEvent::completed()));
}

#[tokio::test]
async fn invoke_runs_a_tool_turn_on_the_anthropic_api_and_prints_the_same_event_shapes() {
    let stand_in = ProviderStandIn::start().await.unwrap();
    stand_in.push(SseReply::tool_call("toolu_9", "current_time", "{}"));
    stand_in.push(SseReply::text("It is now."));
    invoke_a_time_turn(
        "anthropic",
        stand_in.url(),
        "ANTHROPIC_API_KEY",
        "claude-haiku-4-5",
    )
    .await;
    assert_eq!(stand_in.requests()[0].body["model"], "claude-haiku-4-5");

    // Without a key, it says which is missing.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
        .args([
            "invoke",
            "--provider",
            "anthropic",
            "--session",
            "s1",
            "--text",
            "Hi",
        ])
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("TABLE_NAME")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("ANTHROPIC_API_KEY"));
}

#[tokio::test]
async fn the_fixture_turn_runs_on_an_openai_compatible_api() {
    use agent_worker::models::OpenAiModel;
    let stand_in = ProviderStandIn::start().await.unwrap();
    stand_in.push(SseReply::http_error(
        429,
        "rate_limit_exceeded",
        "Rate limit reached.",
        Some("0.2"),
    ));
    stand_in.push(SseReply::openai_tool_call(
        "call_01",
        "add",
        r#"{"numbers": [2, 40]}"#,
    ));
    stand_in.push(SseReply::openai_text("2 + 40 is 42."));
    let model = OpenAiModel::new(ApiKey::new(KEY).unwrap(), "gpt-4.1-mini")
        .base_url(stand_in.openai_url())
        .header("x-gateway", "team-a");
    let waits = EngineConfig {
        retry_max_delay: std::time::Duration::from_secs(2),
        ..config()
    };
    let engine = engine_on(model, waits);
    let events = turn(&engine, "s-openai", "What is 2 + 40?").await;
    assert_fixture_events(&events, &["retrying"]);
    match &events[0] {
        AgentEvent::Retrying { delay_ms, .. } => assert!(*delay_ms >= 200, "retry-after: {delay_ms}"),
        other => panic!("{other:?}"),
    }
    let requests = stand_in.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.path == "/v1/chat/completions"));
    assert_eq!(
        requests[1].authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    let first = &requests[1].body;
    assert_eq!(first["model"], "gpt-4.1-mini");
    assert_eq!(first["messages"][0]["role"], "system");
    assert_eq!(first["tools"][0]["function"]["name"], "add");
    let second = &requests[2].body;
    let result = second["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(
        (&result["role"], &result["tool_call_id"]),
        (&json!("tool"), &json!("call_01"))
    );
    assert!(result["content"].as_str().unwrap().contains("42"));
}

#[tokio::test]
async fn invoke_runs_a_tool_turn_on_an_openai_compatible_api() {
    let stand_in = ProviderStandIn::start().await.unwrap();
    stand_in.push(SseReply::openai_tool_call("call_7", "current_time", "{}"));
    stand_in.push(SseReply::openai_text("It is now."));
    invoke_a_time_turn("openai", &stand_in.openai_url(), "OPENAI_API_KEY", "llama3.1").await;
    assert_eq!(stand_in.requests()[0].body["model"], "llama3.1");
}

//! The engine against the wire-level Bedrock stand-in, through the real aws-sdk-bedrockruntime
//! client: streaming, the tool loop, calls run together, reasoning, tools that fail (broken
//! JSON, bad arguments, unknown, panicking, past their timeout). `engine_faults.rs` has the rest.

use crate::support;
use agent_worker::session::HistoryStore as _;

use std::sync::Arc;
use std::time::Duration;

use agent_worker::engine::EngineConfig;
use agent_worker::engine::tools::{Tool, ToolSpec, tool_fn};
use agent_worker::protocol::AgentEvent;
use agent_worker::protocol::conformance::CleanupProbe;
use agent_worker::session::history::check;
use agent_worker::session::{ContentBlock, MemoryStore, Message};
use agent_worker_testkit::{Reply, StreamScript, sid};
use serde_json::{Value, json};
use support::engine::*;
use support::*;

#[tokio::test]
async fn text_streams_as_deltas_and_the_exchange_is_stored() {
    let bedrock = stand_in().await;
    bedrock.push(
        StreamScript::new()
            .text("Hello there, person!", 3)
            .stop("end_turn")
            .usage(12, 8)
            .into_reply(),
    );
    let store = MemoryStore::new();
    let events = run(&engine(&bedrock, &store, config(), vec![]), "s1", "Hi").await;

    // The stand-in cuts the 20 characters into chunks of 7; the first request writes the
    // system prompt to the prompt cache.
    let cached = bedrock.requests()[0].prompt_cache;
    assert!(cached.write_tokens > 0);
    assert_eq!(
        events,
        vec![
            AgentEvent::text("Hello t"),
            AgentEvent::text("here, p"),
            AgentEvent::text("erson!"),
            AgentEvent::Usage {
                input_tokens: 12,
                output_tokens: 8,
                cache_read_tokens: 0,
                cache_write_tokens: cached.write_tokens,
                cost_usd: None,
            },
            AgentEvent::completed(),
        ]
    );
    let history = store.load_history(&sid("s1")).await.unwrap();
    assert_eq!(
        history,
        vec![
            Message::user_text("Hi"),
            Message::assistant_text("Hello there, person!")
        ]
    );
}

#[tokio::test]
async fn the_request_carries_system_inference_settings_and_tools() {
    let bedrock = stand_in().await;
    bedrock.push(Reply::text("ok"));
    run(
        &engine(
            &bedrock,
            &MemoryStore::new(),
            config(),
            example_tools(&["current_time"]),
        ),
        "s1",
        "Hi",
    )
    .await;

    let requests = bedrock.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.model_id, MODEL_ID);
    assert_eq!(request.operation, "converse-stream");
    let body = &request.body;
    assert_eq!(
        body["system"],
        json!([{"text": "You are a test assistant."}, {"cachePoint": {"type": "default"}}])
    );
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [{"text": "Hi"}]}])
    );
    assert_eq!(body["inferenceConfig"]["maxTokens"], json!(32000));
    assert!((body["inferenceConfig"]["temperature"].as_f64().unwrap() - 0.3).abs() < 1e-6);
    assert_eq!(body["toolConfig"]["toolChoice"], json!({"auto": {}}));
    assert_eq!(
        body["toolConfig"]["tools"][0]["toolSpec"]["name"],
        json!("current_time")
    );
    assert_eq!(
        body["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"]["type"],
        json!("object")
    );
}

#[tokio::test]
async fn a_tool_call_runs_and_its_result_goes_back_to_the_model() {
    let bedrock = stand_in().await;
    bedrock.push(
        StreamScript::new()
            .text("Checking.", 1)
            .tool_use("tooluse_1", "current_time", "{}", 1)
            .stop("tool_use")
            .into_reply(),
    );
    bedrock.push(Reply::text("It is late."));
    let store = MemoryStore::new();
    let events = run(
        &engine(&bedrock, &store, config(), example_tools(&["current_time"])),
        "s1",
        "Time?",
    )
    .await;

    let started = events
        .iter()
        .position(|e| matches!(e, AgentEvent::ToolStarted { .. }))
        .unwrap();
    assert_eq!(
        events[started],
        AgentEvent::ToolStarted {
            id: "tooluse_1".into(),
            name: "current_time".into(),
            args: json!({})
        }
    );
    let AgentEvent::ToolEnded {
        id,
        is_error,
        content,
    } = &events[started + 1]
    else {
        panic!("expected tool_ended after tool_started: {events:#?}");
    };
    assert_eq!((id.as_str(), *is_error), ("tooluse_1", false));
    assert!(content["utc"].as_str().unwrap().ends_with('Z'));
    assert_eq!(text_of(&events), "Checking.It is late.");
    assert_eq!(terminal(&events), &AgentEvent::completed());

    let second = &bedrock.requests()[1].body;
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        messages[1]["content"][1],
        json!({"toolUse": {"toolUseId": "tooluse_1", "name": "current_time", "input": {}}})
    );
    let result = &messages[2]["content"][0]["toolResult"];
    assert_eq!(result["toolUseId"], json!("tooluse_1"));
    assert_eq!(result["status"], json!("success"));
    assert_eq!(result["content"][0]["json"]["utc"], content["utc"]);

    let history = store.load_history(&sid("s1")).await.unwrap();
    assert_eq!(history.len(), 4);
    check(&history).unwrap();
}

/// Two tools that can only finish together: each waits at a barrier for the other.
fn rendezvous_tools() -> Vec<Arc<dyn Tool>> {
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    ["left", "right"]
        .into_iter()
        .map(|name| {
            let barrier = barrier.clone();
            Arc::new(tool_fn(
                ToolSpec::new(name, "Meets the other tool.", json!({"type": "object"})),
                move |_, _| {
                    let barrier = barrier.clone();
                    async move {
                        barrier.wait().await;
                        Ok(json!({ "met": name }))
                    }
                },
            )) as Arc<dyn Tool>
        })
        .collect()
}

#[tokio::test]
async fn calls_in_one_response_run_concurrently_and_return_in_call_order() {
    let bedrock = stand_in().await;
    bedrock.push(
        StreamScript::new()
            .tool_use("call_a", "left", "{}", 1)
            .tool_use("call_b", "right", "{}", 1)
            .stop("tool_use")
            .into_reply(),
    );
    bedrock.push(Reply::text("Both met."));
    // Run one after the other, neither could pass the barrier before the timeout.
    let config = EngineConfig {
        tool_timeout: Duration::from_secs(10),
        ..config()
    };
    let events = run(
        &engine(&bedrock, &MemoryStore::new(), config, rendezvous_tools()),
        "s1",
        "Go",
    )
    .await;

    let ended: Vec<(&str, bool)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolEnded { id, is_error, .. } => Some((id.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(ended.len(), 2);
    assert!(ended.iter().all(|(_, err)| !err), "{events:#?}");
    let results = &bedrock.requests()[1].body["messages"][2]["content"];
    assert_eq!(results[0]["toolResult"]["toolUseId"], json!("call_a"));
    assert_eq!(results[1]["toolResult"]["toolUseId"], json!("call_b"));
    assert_eq!(
        results[0]["toolResult"]["content"][0]["json"],
        json!({"met": "left"})
    );
}

#[tokio::test]
async fn reasoning_streams_as_thinking_and_goes_back_with_its_signature() {
    let bedrock = stand_in().await;
    bedrock.push(
        StreamScript::new()
            .reasoning("I should check the clock.", "sig-123")
            .tool_use("t1", "current_time", "", 1)
            .stop("tool_use")
            .into_reply(),
    );
    bedrock.push(Reply::text("Noon."));
    let store = MemoryStore::new();
    let events = run(
        &engine(&bedrock, &store, config(), example_tools(&["current_time"])),
        "s1",
        "Time?",
    )
    .await;

    assert_eq!(thinking_of(&events), "I should check the clock.");
    assert_eq!(text_of(&events), "Noon.", "reasoning is never part of the answer");
    let assistant = &bedrock.requests()[1].body["messages"][1];
    assert_eq!(
        assistant["content"][0],
        json!({"reasoningContent": {"reasoningText": {"text": "I should check the clock.", "signature": "sig-123"}}})
    );
    let history = store.load_history(&sid("s1")).await.unwrap();
    assert_eq!(
        history[1].content[0],
        ContentBlock::Reasoning {
            text: "I should check the clock.".into(),
            signature: Some("sig-123".into())
        }
    );
}

async fn one_call_then_text(
    input: &str,
    name: &str,
    tools: Vec<Arc<dyn Tool>>,
    config: EngineConfig,
) -> (Vec<AgentEvent>, Value) {
    let bedrock = stand_in().await;
    bedrock.push(
        StreamScript::new()
            .tool_use("t1", name, input, 2)
            .stop("tool_use")
            .into_reply(),
    );
    bedrock.push(Reply::text("Sorry about that."));
    let store = MemoryStore::new();
    let events = run(&engine(&bedrock, &store, config, tools), "s1", "Do it").await;
    assert_eq!(terminal(&events), &AgentEvent::completed());
    check(&store.load_history(&sid("s1")).await.unwrap()).unwrap();
    let result = bedrock.requests()[1].body["messages"][2]["content"][0]["toolResult"].clone();
    (events, result)
}

fn ended_error(events: &[AgentEvent]) -> String {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolEnded {
                is_error: true,
                content,
                ..
            } => Some(content["error"].as_str().unwrap_or_default().to_owned()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no failed tool call in {events:#?}"))
}

#[tokio::test]
async fn broken_tool_json_becomes_an_error_result_the_model_reads() {
    let (events, result) =
        one_call_then_text("{\"numbers\": [1, 2", "add", example_tools(&["add"]), config()).await;
    assert!(ended_error(&events).contains("not valid JSON"), "{events:#?}");
    assert_eq!(result["status"], json!("error"));
    assert!(
        result["content"][0]["json"]["error"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
}

#[tokio::test]
async fn arguments_that_break_the_schema_become_an_error_result() {
    let (events, _) = one_call_then_text(
        "{\"numbers\": \"three\"}",
        "add",
        example_tools(&["add"]),
        config(),
    )
    .await;
    assert!(
        ended_error(&events).contains("do not match add's input schema"),
        "{events:#?}"
    );
}

#[tokio::test]
async fn an_unknown_tool_becomes_an_error_result() {
    let (events, _) = one_call_then_text("{}", "launch_rockets", example_tools(&["add"]), config()).await;
    assert!(
        ended_error(&events).contains("no tool named \"launch_rockets\""),
        "{events:#?}"
    );
}

#[tokio::test]
async fn a_panicking_tool_becomes_an_error_result() {
    let crash = tool_fn(
        ToolSpec::new("crash", "Crashes.", json!({"type": "object"})),
        |_, _| async {
            let items: Vec<u8> = Vec::new();
            Ok(json!(items[3]))
        },
    );
    let (events, _) = one_call_then_text("{}", "crash", vec![Arc::new(crash)], config()).await;
    assert!(ended_error(&events).contains("crashed"), "{events:#?}");
}

#[tokio::test]
async fn a_tool_past_its_timeout_is_stopped_and_reported() {
    let probe = CleanupProbe::new();
    let on_drop = probe.clone();
    let stuck = tool_fn(
        ToolSpec::new("stuck", "Never ends.", json!({"type": "object"})),
        move |_, _| {
            let guard = on_drop.guard();
            async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                Ok(Value::Null)
            }
        },
    );
    let config = EngineConfig {
        tool_timeout: Duration::from_millis(50),
        ..config()
    };
    let (events, _) = one_call_then_text("{}", "stuck", vec![Arc::new(stuck)], config).await;
    assert!(
        ended_error(&events).contains("did not finish within 50 ms"),
        "{events:#?}"
    );
    // The stopped call's future was dropped, not left running.
    tokio::time::timeout(Duration::from_secs(5), probe.wait())
        .await
        .expect("the stuck call was dropped");
}

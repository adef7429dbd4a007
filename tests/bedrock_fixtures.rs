//! The recorded live Bedrock responses in tests/fixtures/bedrock, replayed by the stand-in
//! through the real SDK and the engine: the two raw captures (the live ConverseStream body and
//! the exception frame) byte for byte; the `.chunks.txt` event lists re-framed; the Converse
//! response and the HTTP error as their recorded JSON.

use crate::support;
use agent_worker::session::HistoryStore as _;

use std::sync::Arc;

use agent_worker::engine::tools::{Tool, ToolSpec, tool_fn};
use agent_worker::protocol::{AgentEvent, codes};
use agent_worker::session::{ContentBlock, MemoryStore, Role};
use agent_worker_testkit::{BedrockStandIn, Reply, sid};
use aws_sdk_bedrockruntime::types::{ContentBlock as SdkBlock, StopReason};
use serde_json::{Value, json};
use support::*;

fn echo_tool(name: &str) -> Arc<dyn Tool> {
    Arc::new(tool_fn(
        ToolSpec::new(name, "Echoes its input.", json!({"type": "object"})),
        |input, _| async move { Ok(json!({ "echo": input })) },
    ))
}

fn chunks_reply(name: &str) -> Reply {
    Reply::from_chunk_lines(&fixture(name)).expect("a valid chunks fixture")
}

fn tool_started(events: &[AgentEvent]) -> (String, String, Value) {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolStarted { id, name, args } => Some((id.clone(), name.clone(), args.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool_started in {events:#?}"))
}

#[tokio::test]
async fn the_live_stream_replays_byte_for_byte() {
    let recorded: Value = serde_json::from_str(&fixture("live-converse-stream.json")).unwrap();
    let response = &recorded["response"];
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::Raw {
        status: 200,
        content_type: response["contentType"].as_str().unwrap().to_owned(),
        body_base64: response["bodyBase64"].as_str().unwrap().to_owned(),
    });
    let store = MemoryStore::new();
    let events = run(
        &engine(&bedrock, &store, config(), vec![]),
        "s1",
        recorded["prompt"].as_str().unwrap(),
    )
    .await;
    assert_eq!(text_of(&events), recorded["observed"]["text"].as_str().unwrap());
    assert!(events.contains(&AgentEvent::usage(
        recorded["observed"]["inputTokens"].as_u64().unwrap(),
        recorded["observed"]["outputTokens"].as_u64().unwrap()
    )));
    assert_eq!(terminal(&events), &AgentEvent::completed());
    assert_eq!(store.load_history(&sid("s1")).await.unwrap()[1].text(), "OK.");
}

#[tokio::test]
async fn a_tool_call_in_two_fragments_is_assembled() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(chunks_reply("tool-call.chunks.txt"));
    bedrock.push(Reply::text("Done."));
    let events = run(
        &engine(
            &bedrock,
            &MemoryStore::new(),
            config(),
            vec![echo_tool("test-tool")],
        ),
        "s1",
        "Go",
    )
    .await;
    assert_eq!(
        tool_started(&events),
        (
            "tool-use-id".into(),
            "test-tool".into(),
            json!({"value": "Sparkle Day"})
        )
    );
    assert!(events.contains(&AgentEvent::ToolEnded {
        id: "tool-use-id".into(),
        is_error: false,
        content: json!({"echo": {"value": "Sparkle Day"}}),
    }));
    assert_eq!(terminal(&events), &AgentEvent::completed());
}

#[tokio::test]
async fn inline_think_tags_become_thinking_and_stay_out_of_the_answer() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(chunks_reply("thinking-then-tool.chunks.txt"));
    bedrock.push(Reply::text("FOUND ISSUE_11409_CONTENT"));
    let store = MemoryStore::new();
    let events = run(
        &engine(&bedrock, &store, config(), vec![echo_tool("read_file")]),
        "s1",
        "Find it",
    )
    .await;

    let thinking = thinking_of(&events);
    assert!(thinking.starts_with(" The user wants me to:"), "{thinking}");
    assert!(
        thinking.ends_with("read_file for src/cursor-config.ts. "),
        "{thinking}"
    );
    let text = text_of(&events);
    assert!(
        !text.contains("think>") && !text.contains("The user wants"),
        "{text}"
    );
    assert!(text.ends_with("FOUND ISSUE_11409_CONTENT"));
    assert_eq!(
        tool_started(&events),
        (
            "functions.read_file:1".into(),
            "read_file".into(),
            json!({"target_file": "src/cursor-config.ts"})
        )
    );
    // The stored call has no empty text block around it, and no reasoning as answer text.
    let history = store.load_history(&sid("s1")).await.unwrap();
    assert_eq!(history[1].role, Role::Assistant);
    assert!(
        matches!(history[1].content.as_slice(), [ContentBlock::ToolUse { .. }]),
        "{:?}",
        history[1]
    );
}

#[tokio::test]
async fn reasoning_deltas_and_their_signature_are_kept_apart_from_the_answer() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(chunks_reply("reasoning.chunks.txt"));
    let store = MemoryStore::new();
    let events = run(
        &engine(&bedrock, &store, config(), vec![]),
        "s1",
        "How many r's in strawberry?",
    )
    .await;
    assert_eq!(
        thinking_of(&events),
        "Let me count the r's in \"strawberry\":\n\ns-t-r-a-w-b-e-r-r-y\n\nr appears at positions 3, 8, and 9.\n\nSo there are 3 r's."
    );
    let text = text_of(&events);
    assert!(
        text.starts_with("There are **3** r's in \"strawberry\""),
        "{text}"
    );
    assert!(!text.contains("Let me count"));
    let history = store.load_history(&sid("s1")).await.unwrap();
    let ContentBlock::Reasoning { signature, .. } = &history[1].content[0] else {
        panic!("reasoning is stored first: {:?}", history[1]);
    };
    assert!(signature.as_deref().unwrap().starts_with("Ep0CCkgICxAB"));
    assert!(matches!(&history[1].content[1], ContentBlock::Text { .. }));
}

#[tokio::test]
async fn a_recorded_model_stream_error_frame_is_retried() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::Raw {
        status: 200,
        content_type: "application/vnd.amazon.eventstream".into(),
        body_base64: fixture("model-stream-error-exception.eventstream.base64.txt")
            .trim()
            .to_owned(),
    });
    bedrock.push(Reply::text("Recovered."));
    let events = run(
        &engine(&bedrock, &MemoryStore::new(), config(), vec![]),
        "s1",
        "Hi",
    )
    .await;
    let reason = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::Retrying { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .expect("a retrying event");
    assert!(reason.contains("Model Stream Error"), "{reason}");
    assert_eq!(text_of(&events), "Recovered.");
    assert_eq!(terminal(&events), &AgentEvent::completed());
}

#[tokio::test]
async fn the_recorded_validation_error_fails_the_turn_with_its_message() {
    let recorded: Value = serde_json::from_str(&fixture("http-validation-error.json")).unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::HttpError {
        status: u16::try_from(recorded["status"].as_u64().unwrap()).unwrap(),
        error_type: recorded["headers"]["x-amzn-errortype"]
            .as_str()
            .unwrap()
            .to_owned(),
        body: recorded["body"].clone(),
    });
    let events = run(
        &engine(&bedrock, &MemoryStore::new(), config(), vec![]),
        "s1",
        "Hi",
    )
    .await;
    let (details, retryable, code) = failure(&events);
    assert!(!retryable);
    assert_eq!(code.as_deref(), Some(codes::MODEL_REJECTED));
    assert!(details.contains("ValidationException"), "{details}");
    assert!(
        details.contains(recorded["body"]["message"].as_str().unwrap()),
        "{details}"
    );
}

/// The recorded Converse response, streamed as ConverseStream sends the same message: each text
/// block in deltas, each toolUse with its start, its input in fragments and its stop, then
/// `messageStop` with the recorded reason.
fn converse_as_stream(recorded: &Value) -> Reply {
    let mut script = agent_worker_testkit::StreamScript::new();
    for block in recorded["output"]["message"]["content"].as_array().unwrap() {
        if let Some(text) = block["text"].as_str() {
            script = script.text(text, 3);
        } else if let Some(tool) = block.get("toolUse") {
            script = script.tool_use(
                tool["toolUseId"].as_str().unwrap(),
                tool["name"].as_str().unwrap(),
                &tool["input"].to_string(),
                2,
            );
        }
    }
    script
        .stop(recorded["stopReason"].as_str().unwrap())
        .usage(
            recorded["usage"]["inputTokens"].as_u64().unwrap(),
            recorded["usage"]["outputTokens"].as_u64().unwrap(),
        )
        .into_reply()
}

#[tokio::test]
async fn the_recorded_parallel_calls_run_through_the_engine_and_return_in_call_order() {
    let recorded: Value = serde_json::from_str(&fixture("parallel-tool-calls.converse.json")).unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(converse_as_stream(&recorded));
    bedrock.push(Reply::text("R1 and C1 are looked up."));
    let store = MemoryStore::new();
    let tools = vec![echo_tool("get_resistor_value"), echo_tool("get_capacitor_value")];
    let events = run(
        &engine(&bedrock, &store, config(), tools),
        "s1",
        "Look up R1 and C1",
    )
    .await;
    assert_eq!(terminal(&events), &AgentEvent::completed());
    let started: Vec<(String, Value)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolStarted { name, args, .. } => Some((name.clone(), args.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        [
            ("get_resistor_value".to_owned(), json!({"ref": "R1"})),
            ("get_capacitor_value".to_owned(), json!({"ref": "C1"}))
        ]
    );
    // The second request carries both results, in the order of the calls.
    let results: Vec<Value> = bedrock.requests()[1].body["messages"][2]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["toolResult"]["toolUseId"].clone())
        .collect();
    assert_eq!(
        results,
        [
            json!("tooluse_hr5juciYZJwUHpRczsw13R"),
            json!("tooluse_AZHw3Ym0S07qOv5NlXj9iJ")
        ]
    );
    agent_worker::session::history::check(&store.load_history(&sid("s1")).await.unwrap()).unwrap();
}

/// The engine streams, so it never calls Converse: this proves only that the stand-in serves the
/// recorded response as the service does, for the SDK to parse.
#[tokio::test]
async fn the_stand_in_serves_the_recorded_converse_response_as_the_sdk_expects() {
    let recorded: Value = serde_json::from_str(&fixture("parallel-tool-calls.converse.json")).unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::Converse { body: recorded });
    let output = bedrock
        .client()
        .converse()
        .model_id(MODEL_ID)
        .messages(
            aws_sdk_bedrockruntime::types::Message::builder()
                .role(aws_sdk_bedrockruntime::types::ConversationRole::User)
                .content(SdkBlock::Text("Look up R1 and C1".into()))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("the SDK parses the recorded response");
    assert_eq!(output.stop_reason(), &StopReason::ToolUse);
    let message = output.output().unwrap().as_message().unwrap();
    let names: Vec<&str> = message
        .content()
        .iter()
        .filter_map(|b| b.as_tool_use().ok().map(|t| t.name()))
        .collect();
    assert_eq!(names, ["get_resistor_value", "get_capacitor_value"]);
    assert_eq!(bedrock.requests()[0].operation, "converse");
}

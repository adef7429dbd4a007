//! The request body and the stream's translation, event by event.

use agent_worker_core::engine::model::{CachePlan, ToolDescription};

use super::*;

fn request() -> ModelRequest {
    ModelRequest {
        system: vec!["You are terse.".into(), String::new()],
        messages: vec![
            Message::new(Role::User, vec![ContentBlock::text("What time is it?")]),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::Reasoning {
                        text: "Use the clock.".into(),
                        signature: Some("sig-1".into()),
                    },
                    ContentBlock::Reasoning {
                        text: "unsigned".into(),
                        signature: None,
                    },
                    ContentBlock::ToolUse {
                        id: "t1".into(),
                        name: "current_time".into(),
                        input: json!({}),
                    },
                ],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::ToolResult {
                    tool_use_id: "t1".into(),
                    content: json!({"utc": "12:00"}),
                    is_error: false,
                }],
            ),
        ],
        tools: vec![ToolDescription {
            name: "current_time".into(),
            description: "The time.".into(),
            input_schema: json!({"type": "object"}),
        }],
        tool_choice: ToolChoice::Auto,
        max_tokens: 512,
        temperature: 0.5,
        cache: CachePlan {
            system_blocks: 1,
            history_messages: 2,
        },
    }
}

#[test]
fn the_body_says_what_the_request_does_with_breakpoints_where_bedrock_caches() {
    let body = body("claude-x", &request(), true);
    assert_eq!(body["model"], "claude-x");
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}])
    );
    let assistant = &body["messages"][1]["content"];
    assert_eq!(
        assistant[0],
        json!({"type": "thinking", "thinking": "Use the clock.", "signature": "sig-1"})
    );
    assert_eq!(
        assistant.as_array().unwrap().len(),
        2,
        "unsigned reasoning does not go back"
    );
    assert_eq!(
        assistant[1]["cache_control"],
        json!({"type": "ephemeral"}),
        "the history's last block"
    );
    assert!(assistant[0].get("cache_control").is_none());
    assert_eq!(
        body["messages"][2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "t1", "content": "{\"utc\":\"12:00\"}", "is_error": false})
    );
    assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
    assert!(
        body["tools"][0].get("cache_control").is_none(),
        "the system breakpoint covers the tools"
    );
    assert_eq!(body["tool_choice"], json!({"type": "auto"}));
    let plain = super::body("claude-x", &request(), false).to_string();
    assert!(!plain.contains("cache_control"));
}

fn events(script: &[(&str, Value)]) -> Vec<Result<ModelEvent, ModelError>> {
    let mut assembly = Assembly::default();
    let mut out = Vec::new();
    for (name, data) in script {
        take(name, &data.to_string(), &mut assembly);
        out.extend(assembly.ready.drain(..));
    }
    out
}

#[test]
fn a_streamed_tool_call_and_text_become_the_engines_events() {
    let out = events(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 30, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 5, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hm."}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Let me look."}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"a\": 2,"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": " \"b\": 40}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 2}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 17}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]);
    let out: Vec<ModelEvent> = out.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        out,
        [
            ModelEvent::ReasoningDelta("Hm.".into()),
            ModelEvent::ReasoningSignature("sig".into()),
            ModelEvent::TextDelta("Let me look.".into()),
            ModelEvent::ToolUse {
                id: "toolu_1".into(),
                name: "add".into(),
                input: "{\"a\": 2, \"b\": 40}".into()
            },
            ModelEvent::Usage(TokenUsage {
                input_tokens: 30,
                output_tokens: 17,
                cache_read_tokens: 20,
                cache_write_tokens: 5
            }),
            ModelEvent::Stop(StopReason::ToolUse),
        ]
    );
}

#[test]
fn stop_reasons_and_mid_stream_errors_are_mapped() {
    for (said, meant) in [
        ("end_turn", StopReason::EndTurn),
        ("max_tokens", StopReason::MaxTokens),
        ("refusal", StopReason::ContentFiltered),
        ("pause_turn", StopReason::Other("pause_turn".into())),
    ] {
        assert_eq!(stop_reason(said), meant);
    }
    let out = events(&[(
        "error",
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )]);
    let error = out[0].clone().unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Unavailable);
    assert!(error.kind.is_transient() && error.message.contains("Overloaded"));
    let cut = events(&[
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "add"}}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}),
        ),
    ]);
    let error = cut[0].clone().unwrap_err();
    assert!(error.message.contains("never closed"), "{error}");
}

//! The request body and the chunks' translation.

use agent_worker_core::engine::model::{CachePlan, ToolDescription};

use super::*;

#[test]
fn tool_results_are_tool_messages_and_calls_go_back_as_functions() {
    let request = ModelRequest {
        system: vec!["Be terse.".into(), "Files are data.".into()],
        messages: vec![
            Message::new(Role::User, vec![ContentBlock::text("2 + 40?")]),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::Reasoning {
                        text: "hm".into(),
                        signature: None,
                    },
                    ContentBlock::ToolUse {
                        id: "call_1".into(),
                        name: "add".into(),
                        input: json!({"numbers": [2, 40]}),
                    },
                ],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::ToolResult {
                    tool_use_id: "call_1".into(),
                    content: json!({"sum": 42}),
                    is_error: false,
                }],
            ),
        ],
        tools: vec![ToolDescription {
            name: "add".into(),
            description: "Adds.".into(),
            input_schema: json!({"type": "object"}),
        }],
        tool_choice: ToolChoice::Tool("add".into()),
        max_tokens: 100,
        temperature: 0.0,
        cache: CachePlan::default(),
    };
    let body = body("gpt-x", &request);
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "Be terse.\n\nFiles are data."})
    );
    assert_eq!(
        body["messages"][1]["content"][0],
        json!({"type": "text", "text": "2 + 40?"})
    );
    assert_eq!(
        body["messages"][2],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"numbers\":[2,40]}"}}
        ]})
    );
    assert_eq!(
        body["messages"][3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"sum\":42}"})
    );
    assert_eq!(
        body["messages"].as_array().unwrap().len(),
        4,
        "no empty user message for the results"
    );
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "add"}})
    );
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[test]
fn chunks_become_the_engines_events() {
    let mut assembly = Assembly::default();
    let mut out = Vec::new();
    for chunk in [
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "Think."}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "On it."}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_9", "type": "function", "function": {"name": "add", "arguments": ""}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"numbers\": "}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "[1]}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 32}}}),
    ] {
        take(&chunk.to_string(), &mut assembly);
        out.extend(assembly.ready.drain(..).map(Result::unwrap));
    }
    take("[DONE]", &mut assembly);
    assert!(assembly.ended);
    assert_eq!(
        out,
        [
            ModelEvent::ReasoningDelta("Think.".into()),
            ModelEvent::TextDelta("On it.".into()),
            ModelEvent::ToolUse {
                id: "call_9".into(),
                name: "add".into(),
                input: "{\"numbers\": [1]}".into()
            },
            ModelEvent::Stop(StopReason::ToolUse),
            ModelEvent::Usage(TokenUsage {
                input_tokens: 50,
                output_tokens: 9,
                cache_read_tokens: 32,
                cache_write_tokens: 0
            }),
        ]
    );
    assert_eq!(stop_reason("length"), StopReason::MaxTokens);
    assert_eq!(stop_reason("content_filter"), StopReason::ContentFiltered);
}

//! The engine against the wire-level Bedrock stand-in when things go wrong: throttling and retries,
//! broken and cut streams, refusals, limits, a turn's deadline, bad prompts, dropped streams, a broken
//! stored history, a turn delivered twice.

use crate::support;
use agent_worker::session::HistoryStore as _;

use std::sync::Arc;
use std::time::Duration;

use agent_worker::engine::tools::{Tool, ToolSpec, tool_fn};
use agent_worker::engine::{EngineConfig, StepContext, TurnPolicy};
use agent_worker::protocol::conformance::CleanupProbe;
use agent_worker::protocol::{Agent, AgentEvent, ImageRef, Prompt, Scope, codes};
use agent_worker::session::history::{INTERRUPTED_CALL, check};
use agent_worker::session::{ContentBlock, MemoryStore, Message, Role};
use agent_worker_testkit::{Frame, Reply, StreamScript, sid, tid};
use futures_util::StreamExt;
use serde_json::{Value, json};
use support::engine::*;
use support::*;

#[tokio::test]
async fn throttling_and_unavailability_are_retried_and_announced() {
    let bedrock = stand_in().await;
    bedrock.push(Reply::http_error(429, "ThrottlingException", "Too many requests"));
    bedrock.push(Reply::http_error(503, "ServiceUnavailableException", "Try later"));
    bedrock.push(
        StreamScript::new()
            .exception("throttlingException", "Slow down")
            .into_reply(),
    );
    bedrock.push(Reply::text("Finally."));
    let events = run(
        &engine(&bedrock, &MemoryStore::new(), config(), vec![]),
        "s1",
        "Hi",
    )
    .await;

    let retries: Vec<(u32, u32, String)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Retrying {
                attempt,
                max_attempts,
                reason,
                ..
            } => Some((*attempt, *max_attempts, reason.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 3, "{events:#?}");
    assert_eq!((retries[0].0, retries[0].1), (1, 3));
    assert!(retries[0].2.contains("throttled"), "{}", retries[0].2);
    assert_eq!((retries[2].0, retries[2].1), (3, 3));
    assert_eq!(text_of(&events), "Finally.");
    assert_eq!(terminal(&events), &AgentEvent::completed());
    // Four requests, one per attempt: the SDK made no retries of its own.
    assert_eq!(bedrock.requests().len(), 4);
}

#[tokio::test]
async fn retries_run_out_into_a_retryable_failure() {
    let bedrock = stand_in().await;
    for _ in 0..4 {
        bedrock.push(Reply::http_error(429, "ThrottlingException", "Too many requests"));
    }
    let store = MemoryStore::new();
    let events = run(&engine(&bedrock, &store, config(), vec![]), "s1", "Hi").await;
    let (details, retryable, code) = failure(&events);
    assert!(retryable);
    assert_eq!(code.as_deref(), Some(codes::MODEL_UNAVAILABLE));
    assert!(
        details.contains("after 3 retries") && details.contains("Too many requests"),
        "{details}"
    );
    assert_eq!(bedrock.requests().len(), 4);
    assert!(
        store.load_history(&sid("s1")).await.unwrap().is_empty(),
        "a turn that produced nothing stores nothing"
    );
}

#[tokio::test]
async fn a_stream_that_breaks_after_output_is_not_replayed() {
    let bedrock = stand_in().await;
    bedrock.push(
        StreamScript::new()
            .text("The first half", 1)
            .exception("modelStreamErrorException", "The model stream failed.")
            .into_reply(),
    );
    bedrock.push(Reply::text("never sent"));
    let store = MemoryStore::new();
    let events = run(&engine(&bedrock, &store, config(), vec![]), "s1", "Hi").await;
    cut(&events);
    assert!(
        text_of(&events).starts_with("The first half\n\n(My answer was cut off here"),
        "nothing was streamed twice"
    );
    assert_eq!(bedrock.requests().len(), 1);
    let history = store.load_history(&sid("s1")).await.unwrap();
    check(&history).unwrap();
    assert_eq!(history[0], Message::user_text("Hi"));
    assert_eq!(
        history[1].content[0],
        ContentBlock::Text {
            text: "The first half".into()
        }
    );
    assert!(cut_marked(&history), "{history:#?}");
}

/// The details of a turn that failed because the model's response was cut: retryable, and
/// coded as such.
fn cut(events: &[AgentEvent]) -> String {
    let (details, retryable, code) = failure(events);
    assert!(retryable, "{details}");
    assert_eq!(code.as_deref(), Some(codes::MODEL_STREAM_INTERRUPTED));
    details
}

/// Whether the history ends saying that the answer before it was cut.
fn cut_marked(history: &[Message]) -> bool {
    history.last().is_some_and(|m| {
        m.role == Role::Assistant
            && matches!(m.content.last(), Some(ContentBlock::Text { text }) if text.starts_with("(My answer was cut off here"))
    })
}

#[tokio::test]
async fn a_stream_that_ends_without_message_stop_fails_retryable_and_is_never_a_finished_answer() {
    let bedrock = stand_in().await;
    // A whole text block, then the connection ends: no messageStop, so no answer.
    bedrock.push(StreamScript::new().text("Half an answer", 2).into_reply());
    bedrock.push(Reply::text("never sent"));
    let store = MemoryStore::new();
    let events = run(&engine(&bedrock, &store, config(), vec![]), "s1", "Hi").await;
    let details = cut(&events);
    assert!(details.contains("without a stop reason"), "{details}");
    assert_eq!(
        bedrock.requests().len(),
        1,
        "what was streamed is not streamed twice"
    );
    let history = store.load_history(&sid("s1")).await.unwrap();
    check(&history).unwrap();
    assert!(cut_marked(&history), "{history:#?}");
}

#[tokio::test]
async fn a_stream_cut_before_any_output_is_retried_and_announced() {
    let bedrock = stand_in().await;
    bedrock.push(StreamScript::new().into_reply());
    bedrock.push(Reply::text("Whole."));
    let store = MemoryStore::new();
    let events = run(&engine(&bedrock, &store, config(), vec![]), "s1", "Hi").await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::Retrying { attempt: 1, .. })),
        "{events:#?}"
    );
    assert_eq!(text_of(&events), "Whole.");
    assert_eq!(terminal(&events), &AgentEvent::completed());
    assert_eq!(bedrock.requests().len(), 2);
    let history = store.load_history(&sid("s1")).await.unwrap();
    assert_eq!(
        history,
        vec![Message::user_text("Hi"), Message::assistant_text("Whole.")]
    );
}

#[tokio::test]
async fn a_tool_call_whose_block_never_closes_is_named_and_never_run() {
    let bedrock = stand_in().await;
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    let tool = Arc::new(tool_fn(
        ToolSpec::new("lookup", "Looks a thing up", json!({"type": "object"})),
        move |_args, _ctx| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok(json!("found")) }
        },
    )) as Arc<dyn Tool>;
    // Text, then a toolUse block whose contentBlockStop never comes, then messageStop.
    bedrock.push(
        StreamScript::new()
            .text("Let me look.", 1)
            .frame(Frame::event(
                "contentBlockStart",
                json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t-open", "name": "lookup"}}}),
            ))
            .frame(Frame::event(
                "contentBlockDelta",
                json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"q\":"}}}),
            ))
            .stop("tool_use")
            .into_reply(),
    );
    bedrock.push(Reply::text("never sent"));
    let store = MemoryStore::new();
    let events = run(
        &engine(&bedrock, &store, config(), vec![tool]),
        "s1",
        "Look it up",
    )
    .await;
    let details = cut(&events);
    assert!(
        details.contains("`lookup`") && details.contains("t-open"),
        "{details}"
    );
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the call never ran"
    );
    assert_eq!(bedrock.requests().len(), 1);
    let history = store.load_history(&sid("s1")).await.unwrap();
    check(&history).unwrap();
    assert!(cut_marked(&history), "{history:#?}");
}

#[tokio::test]
async fn a_guardrail_or_a_content_filter_ends_the_turn_saying_which() {
    for reason in ["guardrail_intervened", "content_filtered"] {
        let bedrock = stand_in().await;
        bedrock.push(
            StreamScript::new()
                .text("I cannot help with", 1)
                .stop(reason)
                .into_reply(),
        );
        let store = MemoryStore::new();
        let events = run(&engine(&bedrock, &store, config(), vec![]), "s1", "Hi").await;
        assert_eq!(
            terminal(&events),
            &AgentEvent::completed_with(json!({"stopReason": reason})),
            "{reason}"
        );
        let history = store.load_history(&sid("s1")).await.unwrap();
        check(&history).unwrap();
        assert_eq!(history[0], Message::user_text("Hi"), "{reason}");
    }
}

#[tokio::test]
async fn refusals_fail_at_once_and_say_why() {
    for (status, kind, message) in [
        (
            400,
            "ValidationException",
            "The content field in the Message object at messages.1 is empty.",
        ),
        (
            403,
            "AccessDeniedException",
            "You don't have access to the model.",
        ),
        (404, "ResourceNotFoundException", "Model not found."),
    ] {
        let bedrock = stand_in().await;
        bedrock.push(Reply::http_error(status, kind, message));
        let store = MemoryStore::new();
        let events = run(&engine(&bedrock, &store, config(), vec![]), "s1", "Hi").await;
        let (details, retryable, code) = failure(&events);
        assert!(!retryable, "{kind}");
        assert_eq!(code.as_deref(), Some(codes::MODEL_REJECTED));
        assert!(details.contains(kind) && details.contains(message), "{details}");
        assert_eq!(bedrock.requests().len(), 1, "{kind} is not retried");
        assert!(
            store.load_history(&sid("s1")).await.unwrap().is_empty(),
            "a refused prompt never poisons the session"
        );
    }
}

#[tokio::test]
async fn a_step_cut_off_before_saying_anything_runs_once_more_told_to_plan_less() {
    let bedrock = stand_in().await;
    let cut_off = || {
        StreamScript::new()
            .reasoning("Let me plan a very long", "sig")
            .stop("max_tokens")
            .into_reply()
    };
    bedrock.push(cut_off());
    bedrock.push(Reply::text("Short answer."));
    let events = run(
        &engine(&bedrock, &MemoryStore::new(), config(), vec![]),
        "s1",
        "Hi",
    )
    .await;
    assert_eq!(terminal(&events), &AgentEvent::completed());
    assert_eq!(text_of(&events), "Short answer.");
    let requests = bedrock.requests();
    assert_eq!(requests.len(), 2);
    let system = requests[1].body["system"].to_string();
    assert!(system.contains("Plan less"), "{system}");
    assert_eq!(
        requests[1].body["messages"].as_array().unwrap().len(),
        1,
        "the cut-off step is not kept"
    );

    // Cut off twice: the person is told, and the turn completes with output_limit.
    let bedrock = stand_in().await;
    bedrock.push(cut_off());
    bedrock.push(cut_off());
    let store = MemoryStore::new();
    let events = run(&engine(&bedrock, &store, config(), vec![]), "s1", "Hi").await;
    assert_eq!(
        terminal(&events),
        &AgentEvent::completed_with(json!({"stopReason": "output_limit"}))
    );
    assert!(text_of(&events).contains("length limit"));
    let history = store.load_history(&sid("s1")).await.unwrap();
    assert!(history[1].text().contains("length limit"));
}

#[tokio::test]
async fn max_rounds_completes_with_a_line_for_the_person() {
    let bedrock = stand_in().await;
    for i in 0..2 {
        bedrock.push(Reply::tool_call(&format!("t{i}"), "current_time", "{}"));
    }
    let store = MemoryStore::new();
    let config = EngineConfig {
        max_rounds: 2,
        ..config()
    };
    let events = run(
        &engine(&bedrock, &store, config, example_tools(&["current_time"])),
        "s1",
        "Loop",
    )
    .await;
    assert_eq!(
        terminal(&events),
        &AgentEvent::completed_with(json!({"stopReason": "max_rounds"}))
    );
    assert!(text_of(&events).contains("most tool rounds"));
    assert_eq!(bedrock.requests().len(), 2);
    let history = store.load_history(&sid("s1")).await.unwrap();
    check(&history).unwrap();
    assert_eq!(history.last().unwrap().role, Role::Assistant);
}

#[derive(Debug)]
struct TimeFirst;

impl TurnPolicy for TimeFirst {
    fn force_tool(&self, step: &StepContext<'_>) -> Option<String> {
        (step.round == 0).then(|| "current_time".to_owned())
    }
}

#[tokio::test]
async fn a_forced_step_is_a_tool_choice_or_that_tool_alone() {
    for forced_tool_choice in [true, false] {
        let bedrock = stand_in().await;
        bedrock.push(Reply::tool_call("t1", "current_time", "{}"));
        bedrock.push(Reply::text("Done."));
        let engine = agent_worker::engine::Engine::builder()
            .model(agent_worker::engine::BedrockModel::new(
                bedrock.client(),
                MODEL_ID,
            ))
            .store(MemoryStore::new())
            .tools(example_tools(&["current_time", "add"]))
            .turn_policy(TimeFirst)
            .config(EngineConfig {
                forced_tool_choice,
                ..config()
            })
            .build()
            .unwrap();
        run(&engine, "s1", "Hi").await;
        let requests = bedrock.requests();
        let first = &requests[0].body;
        // Without a system prompt, the prompt cache's first checkpoint follows the tools.
        let tools = first["toolConfig"]["tools"].as_array().unwrap();
        assert_eq!(tools.last().unwrap(), &json!({"cachePoint": {"type": "default"}}));
        let names: Vec<&str> = tools
            .iter()
            .filter_map(|t| t["toolSpec"]["name"].as_str())
            .collect();
        if forced_tool_choice {
            assert_eq!(
                first["toolConfig"]["toolChoice"],
                json!({"tool": {"name": "current_time"}})
            );
            assert_eq!(names, ["current_time", "add"]);
        } else {
            assert_eq!(first["toolConfig"]["toolChoice"], json!({"auto": {}}));
            assert_eq!(names, ["current_time"]);
            assert!(
                first["system"]
                    .to_string()
                    .contains("Call the tool `current_time` now.")
            );
        }
        // Only the first step is forced.
        assert_eq!(requests[1].body["toolConfig"]["toolChoice"], json!({"auto": {}}));
    }
}

#[tokio::test]
async fn dropping_the_stream_closes_the_model_connection_promptly() {
    let bedrock = stand_in().await;
    bedrock.push(
        StreamScript::new()
            .open_text("Thinking about")
            .hang()
            .into_reply(),
    );
    let engine = engine(&bedrock, &MemoryStore::new(), config(), vec![]);
    let mut closed = bedrock.closed_early();
    let mut events = engine.invoke(Scope::new("s1".parse().unwrap()), Prompt::text("Hi"));
    assert_eq!(events.next().await, Some(AgentEvent::text("Thinking about")));
    assert_eq!(*closed.borrow(), 0);
    drop(events);
    // A bound that only limits a failure: the close is awaited, not timed.
    tokio::time::timeout(Duration::from_secs(5), closed.wait_for(|n| *n == 1))
        .await
        .expect("the stand-in saw the connection close")
        .unwrap();
}

#[tokio::test]
async fn dropping_the_stream_aborts_running_tools() {
    let bedrock = stand_in().await;
    bedrock.push(
        StreamScript::new()
            .tool_use("t1", "stuck", "{}", 1)
            .hang()
            .into_reply(),
    );
    let probe = CleanupProbe::new();
    let on_drop = probe.clone();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let started_tx = std::sync::Mutex::new(Some(started_tx));
    let stuck = tool_fn(
        ToolSpec::new("stuck", "Never ends.", json!({"type": "object"})),
        move |_, _| {
            let guard = on_drop.guard();
            if let Some(tx) = started_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                Ok(Value::Null)
            }
        },
    );
    let engine = engine(&bedrock, &MemoryStore::new(), config(), vec![Arc::new(stuck)]);
    let mut events = engine.invoke(Scope::new("s1".parse().unwrap()), Prompt::text("Hi"));
    assert!(matches!(
        events.next().await,
        Some(AgentEvent::ToolStarted { .. })
    ));
    // Keep polling until the tool is really running, then cancel.
    let poll = async { while events.next().await.is_some() {} };
    tokio::select! {
        _ = poll => panic!("the turn ended by itself"),
        _ = started_rx => {}
    }
    drop(events);
    tokio::time::timeout(Duration::from_secs(5), probe.wait())
        .await
        .expect("the running tool was dropped");
}

#[tokio::test]
async fn the_turn_deadline_stops_the_turn_and_keeps_what_it_did() {
    let bedrock = stand_in().await;
    bedrock.push(StreamScript::new().open_text("Working on it").hang().into_reply());
    let store = MemoryStore::new();
    let config = EngineConfig {
        turn_deadline: Duration::from_millis(300),
        ..config()
    };
    let events = run(&engine(&bedrock, &store, config, vec![]), "s1", "Hi").await;
    assert_eq!(
        terminal(&events),
        &AgentEvent::completed_with(json!({"stopReason": "deadline"}))
    );
    assert!(text_of(&events).starts_with("Working on it"));
    assert!(text_of(&events).contains("time limit"));
    let history = store.load_history(&sid("s1")).await.unwrap();
    check(&history).unwrap();
    assert!(history[1].text().starts_with("Working on it"));
    tokio::time::timeout(
        Duration::from_secs(5),
        bedrock.closed_early().wait_for(|n| *n == 1),
    )
    .await
    .expect("the model request was aborted")
    .unwrap();
}

#[tokio::test]
async fn bad_prompts_fail_naming_the_field_and_call_no_model() {
    let bedrock = stand_in().await;
    let engine = engine(&bedrock, &MemoryStore::new(), config(), vec![]);
    let image = |mime: &str, data: &str| ImageRef {
        mime_type: mime.into(),
        data: data.into(),
    };
    let cases = [
        (Prompt::text(""), "prompt.text"),
        (
            Prompt::text("see").with_image(image("image/png", "%%%")),
            "prompt.images[0].data",
        ),
        (
            Prompt::text("see").with_image(image("application/pdf", "AAAA")),
            "prompt.images[0].mimeType",
        ),
    ];
    for (prompt, field) in cases {
        let events: Vec<_> = engine
            .invoke(Scope::new("s1".parse().unwrap()), prompt)
            .collect()
            .await;
        let (details, retryable, code) = failure(&events);
        assert!(!retryable);
        assert_eq!(code.as_deref(), Some(codes::INVALID_PROMPT));
        assert!(details.starts_with(field), "{details}");
    }
    assert!(bedrock.requests().is_empty());
}

#[tokio::test]
async fn a_picture_goes_to_the_model_as_an_image_block() {
    let bedrock = stand_in().await;
    bedrock.push(Reply::text("A single pixel."));
    let engine = engine(&bedrock, &MemoryStore::new(), config(), vec![]);
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";
    let prompt = Prompt::text("What is this?").with_image(ImageRef {
        mime_type: "image/png".into(),
        data: png.into(),
    });
    let events: Vec<_> = engine
        .invoke(Scope::new("s1".parse().unwrap()), prompt)
        .collect()
        .await;
    assert_eq!(terminal(&events), &AgentEvent::completed());
    let content = &bedrock.requests()[0].body["messages"][0]["content"];
    assert_eq!(content[0]["image"]["format"], json!("png"));
    assert_eq!(content[0]["image"]["source"]["bytes"], json!(png));
    assert_eq!(content[1], json!({"text": "What is this?"}));
}

#[tokio::test]
async fn a_broken_stored_history_is_repaired_before_it_is_sent() {
    let bedrock = stand_in().await;
    bedrock.push(Reply::text("Carrying on."));
    let store = MemoryStore::new();
    // A worker died mid-call: a toolUse with no result, and a stray empty message.
    store.put_raw_history(
        &sid("s1"),
        vec![
            Message::user_text("Book it"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse {
                    id: "t9".into(),
                    name: "book".into(),
                    input: json!({}),
                }],
            ),
            Message::new(Role::Assistant, vec![]),
        ],
    );
    let events = run(
        &engine(&bedrock, &store, config(), example_tools(&["current_time"])),
        "s1",
        "Well?",
    )
    .await;
    assert_eq!(terminal(&events), &AgentEvent::completed());
    let messages = bedrock.requests()[0].body["messages"].clone();
    assert_eq!(messages.as_array().unwrap().len(), 3);
    let result = &messages[2]["content"][0]["toolResult"];
    assert_eq!(result["toolUseId"], json!("t9"));
    assert_eq!(result["status"], json!("error"));
    assert!(
        result["content"][0]["json"]["error"]
            .as_str()
            .unwrap()
            .starts_with(INTERRUPTED_CALL)
    );
    assert_eq!(messages[2]["content"][1], json!({"text": "Well?"}));
}

#[tokio::test]
async fn a_turn_delivered_twice_runs_once() {
    let bedrock = stand_in().await;
    bedrock.push(Reply::text("Once."));
    let store = MemoryStore::new();
    let engine = engine(&bedrock, &store, config(), vec![]);
    let scope = Scope::new("s1".parse().unwrap()).with_turn_id(tid("turn-42"));
    let first: Vec<_> = engine.invoke(scope.clone(), Prompt::text("Hi")).collect().await;
    assert_eq!(terminal(&first), &AgentEvent::completed());
    let second: Vec<_> = engine.invoke(scope, Prompt::text("Hi")).collect().await;
    let (_, retryable, code) = failure(&second);
    assert!(!retryable);
    assert_eq!(code.as_deref(), Some(codes::DUPLICATE_TURN));
    assert_eq!(bedrock.requests().len(), 1);
    assert_eq!(store.load_history(&sid("s1")).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_second_turn_sends_the_first_as_history() {
    let bedrock = stand_in().await;
    bedrock.push(Reply::text("Hello Ada."));
    bedrock.push(Reply::text("Your name is Ada."));
    let engine = engine(&bedrock, &MemoryStore::new(), config(), vec![]);
    run(&engine, "s1", "I am Ada").await;
    run(&engine, "s1", "Who am I?").await;
    assert_eq!(
        bedrock.requests()[1].body["messages"],
        json!([
            {"role": "user", "content": [{"text": "I am Ada"}]},
            {"role": "assistant", "content": [{"text": "Hello Ada."}, {"cachePoint": {"type": "default"}}]},
            {"role": "user", "content": [{"text": "Who am I?"}]},
        ])
    );
}

#[tokio::test]
async fn the_store_holds_what_the_stand_in_saw() {
    // The stored history and the request the model saw agree, message for message.
    let bedrock = stand_in().await;
    bedrock.push(Reply::tool_call("t1", "add", "{\"numbers\":[2,3]}"));
    bedrock.push(Reply::text("Five."));
    bedrock.push(Reply::text("ok"));
    let store = MemoryStore::new();
    let engine = engine(&bedrock, &store, config(), example_tools(&["add"]));
    run(&engine, "s1", "2+3?").await;
    run(&engine, "s1", "thanks").await;
    let stored = store.load_history(&sid("s1")).await.unwrap();
    let sent = bedrock.requests()[2].body["messages"].as_array().unwrap().len();
    assert_eq!(stored.len(), sent + 1);
    assert_eq!(
        bedrock.requests()[2].body["messages"][2]["content"][0]["toolResult"]["content"][0]["json"],
        json!({"sum": 5.0})
    );
}

//! `POST /agui` against AG-UI's own client (`@ag-ui/client`'s `HttpAgent`, which checks every
//! event against AG-UI's schemas and their order), with DynamoDB on moto and the Bedrock
//! stand-in: a text run, a tool run, a stopped run, an approval asked and given, and refusals
//! that change nothing.

use crate::support;
use agent_worker::session::HistoryStore as _;

use std::sync::Arc;
use std::time::Duration;

use agent_worker::engine::tools::{Tool, ToolSpec, tool_fn};
use agent_worker_testkit::{Reply, StreamScript, run_agui, sid};
use serde_json::{Value, json};
use support::config;
use support::container::{KEY, changed, events_at, post, server, server_with_tools, table};

/// The plan of one run of thread `thread` by person `u` of account `a`, saying `text`.
fn plan(url: &str, thread: &str, run: &str, text: &str) -> Value {
    json!({
        "url": format!("{url}/agui?userId=u&accountId=a"),
        "headers": { "x-api-key": KEY },
        "threadId": thread,
        "runId": run,
        "messages": [{ "id": format!("{run}-user"), "role": "user", "content": text }],
    })
}

fn clock() -> Arc<dyn Tool> {
    Arc::new(tool_fn(
        ToolSpec::new("clock", "The time now.", json!({"type": "object"})),
        |_: Value, _| async move { Ok(json!({ "now": "12:00" })) },
    ))
}

#[tokio::test]
async fn a_text_run_streams_to_the_client_and_is_stored() {
    let server = server(1, config(), Duration::from_secs(5)).await;
    server.bedrock.push(Reply::text("Hello there."));
    let run = run_agui(plan(&server.url, "th-text", "run-1", "Hi"))
        .await
        .unwrap();
    assert_eq!(run.error(), None, "{:?}", run.end);
    assert_eq!(
        run.types(),
        [
            "RUN_STARTED",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ]
    );
    assert_eq!(
        (
            run.events[0]["threadId"].as_str(),
            run.events[0]["runId"].as_str()
        ),
        (Some("th-text"), Some("run-1"))
    );
    assert_eq!(run.events[6]["outcome"]["type"], "success");
    let said: Vec<&Value> = run.end["newMessages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(said.len(), 1, "{:?}", run.end);
    assert_eq!(said[0]["content"], "Hello there.");
    // The conversation is the thread, stored here: the person's words and the answer.
    let history = server.store.load_history(&sid("th-text")).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].text(), "Hello there.");

    // The same run posted again runs once: its events are read back, the model is not asked.
    let again = run_agui(plan(&server.url, "th-text", "run-1", "Hi"))
        .await
        .unwrap();
    assert_eq!(again.error(), None, "{:?}", again.end);
    assert_eq!(again.types(), run.types());
    assert_eq!(server.bedrock.requests().len(), 1);
    assert_eq!(server.store.load_history(&sid("th-text")).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_tool_run_shows_the_call_and_its_result_in_two_steps() {
    let server = server_with_tools(vec![clock()]).await;
    server.bedrock.push(Reply::tool_call("call-1", "clock", "{}"));
    server.bedrock.push(Reply::text("It is noon."));
    let run = run_agui(plan(&server.url, "th-tool", "run-1", "What time is it?"))
        .await
        .unwrap();
    assert_eq!(run.error(), None, "{:?}", run.end);
    let types = run.types();
    let at = |kind: &str| {
        types
            .iter()
            .position(|t| *t == kind)
            .unwrap_or_else(|| panic!("no {kind}: {types:?}"))
    };
    assert!(at("TOOL_CALL_START") < at("TOOL_CALL_ARGS"));
    assert!(at("TOOL_CALL_ARGS") < at("TOOL_CALL_END"));
    assert!(at("TOOL_CALL_END") < at("TOOL_CALL_RESULT"));
    assert_eq!(
        types.iter().filter(|t| **t == "STEP_STARTED").count(),
        2,
        "{types:?}"
    );
    let result = &run.events[at("TOOL_CALL_RESULT")];
    assert_eq!(result["toolCallId"], "call-1");
    assert!(result["content"].as_str().unwrap().contains("12:00"), "{result}");
    // The client keeps the call on the assistant's message and the result as a tool message.
    let messages = run.end["newMessages"].as_array().unwrap();
    assert!(
        messages
            .iter()
            .any(|m| m["toolCalls"][0]["function"]["name"] == "clock"),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "tool" && m["toolCallId"] == "call-1"),
        "{messages:?}"
    );
    assert_eq!(server.store.load_history(&sid("th-tool")).await.unwrap().len(), 4);
}

#[tokio::test]
async fn a_run_stopped_by_the_person_ends_cancelled() {
    let server = server(1, config(), Duration::from_secs(5)).await;
    server.bedrock.push(
        StreamScript::new()
            .open_text("Thinking about it")
            .hang()
            .into_reply(),
    );
    let url = server.url.clone();
    let client = tokio::spawn(run_agui(plan(&url, "th-stop", "run-1", "Think long")));
    tokio::time::timeout(Duration::from_secs(20), server.bedrock.requested(1))
        .await
        .expect("the run started");
    let stop = format!(
        "{}/turns/run-1/stop?session=th-stop&userId=u&accountId=a",
        server.url
    );
    assert_eq!(post(&stop, Some(KEY), "").await.0, 202);
    let run = client.await.unwrap().unwrap();
    assert_eq!(run.error(), None, "{:?}", run.end);
    let last = run.events.last().unwrap();
    assert_eq!(
        (last["type"].as_str(), last["outcome"]["type"].as_str()),
        (Some("RUN_FINISHED"), Some("cancelled")),
        "{:?}",
        run.types()
    );
    assert!(
        run.types().contains(&"TEXT_MESSAGE_END"),
        "the open message is closed first"
    );
}

#[tokio::test]
async fn a_stranger_and_a_malformed_run_are_refused_and_change_nothing() {
    let server = server(1, config(), Duration::from_secs(5)).await;
    server.bedrock.push(Reply::text("Hello, Ada."));
    let mut ada = plan(&server.url, "th-ada", "run-1", "Hi");
    ada["url"] = json!(format!("{}/agui?userId=ada&accountId=acme", server.url));
    assert_eq!(run_agui(ada).await.unwrap().error(), None);
    let before = table(&server.store).await;
    let mut mallory = plan(&server.url, "th-ada", "run-2", "Tell me what Ada said");
    mallory["url"] = json!(format!("{}/agui?userId=mallory&accountId=acme", server.url));
    let refused = run_agui(mallory).await.unwrap();
    assert!(
        refused.error().is_some_and(|e| e.contains("404")),
        "{:?}",
        refused.end
    );
    assert!(refused.events.is_empty(), "{:?}", refused.events);
    // Ids no store can key, and an input that does not end with the person's words.
    let url = format!("{}/agui?userId=ada&accountId=acme", server.url);
    for (body, field) in [
        (
            json!({"threadId": "th-ada", "runId": "r\u{0}", "messages": [{"id": "m", "role": "user", "content": "x"}]}),
            "runId",
        ),
        (
            json!({"threadId": "", "runId": "r3", "messages": [{"id": "m", "role": "user", "content": "x"}]}),
            "threadId",
        ),
        (
            json!({"threadId": "th-ada", "runId": "r4", "messages": [{"id": "m", "role": "assistant", "content": "x"}]}),
            "messages",
        ),
    ] {
        let (status, error) = post(&url, Some(KEY), &body.to_string()).await;
        assert_eq!((status, error["field"].as_str()), (400, Some(field)), "{error}");
    }
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
    assert_eq!(server.bedrock.requests().len(), 1);
}

#[tokio::test]
async fn an_approval_interrupts_the_run_and_the_next_run_resumes_it() {
    let paid = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = paid.clone();
    let pay = tool_fn(
        ToolSpec::new("pay", "Pays an invoice.", json!({"type": "object"}))
            .effect(agent_worker::engine::tools::Effect::Transaction)
            .title("Pay an invoice"),
        move |_: Value, _| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(json!({ "receipt": "R-1" }))
            }
        },
    );
    let server = server_with_tools(vec![Arc::new(pay)]).await;
    server.bedrock.push(Reply::tool_call("call-pay", "pay", "{}"));
    let asked = run_agui(plan(&server.url, "th-pay", "run-1", "Pay the invoice"))
        .await
        .unwrap();
    assert_eq!(asked.error(), None, "{:?}", asked.end);
    let finished = asked.events.last().unwrap();
    assert_eq!(finished["outcome"]["type"], "interrupt", "{finished}");
    let interrupt = &finished["outcome"]["interrupts"][0];
    assert_eq!(
        (interrupt["toolCallId"].as_str(), interrupt["message"].as_str()),
        (Some("call-pay"), Some("Pay an invoice"))
    );
    assert_eq!(
        asked.end["pendingInterrupts"][0]["id"], interrupt["id"],
        "the client holds it open"
    );
    assert_eq!(
        paid.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing paid before the person says so"
    );

    // The person approves: the next run resumes the interrupt with its token; the call runs once.
    server.bedrock.push(Reply::text("Paid: receipt R-1."));
    let mut resumed = plan(&server.url, "th-pay", "run-2", "");
    let mut messages = vec![json!({ "id": "run-1-user", "role": "user", "content": "Pay the invoice" })];
    messages.extend(asked.end["newMessages"].as_array().unwrap().iter().cloned());
    resumed["messages"] = json!(messages);
    resumed["resume"] = json!([{
        "interruptId": interrupt["id"],
        "status": "resolved",
        "payload": { "token": interrupt["metadata"]["token"] },
    }]);
    let done = run_agui(resumed).await.unwrap();
    assert_eq!(done.error(), None, "{:?}", done.end);
    assert_eq!(done.events.last().unwrap()["outcome"]["type"], "success");
    assert_eq!(paid.load(std::sync::atomic::Ordering::SeqCst), 1);
    let said: String = done
        .events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(said, "Paid: receipt R-1.");
}

/// The page's one tool: it sets the page's color.
fn page_tools() -> Value {
    json!([{
        "name": "set_color",
        "description": "Sets the page's background color.",
        "parameters": {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]},
    }])
}

/// The plan of the run that answers `asked`'s pending call of the page with `result`: the
/// client's messages so far, then the tool message.
fn answering(url: &str, asked: &agent_worker_testkit::AguiRun, run: &str, said: &str, result: &str) -> Value {
    let call = asked.events.last().unwrap()["outcome"]["pendingToolCallIds"][0].clone();
    let mut next = plan(url, "th-page", run, "");
    let mut messages = vec![json!({ "id": "run-1-user", "role": "user", "content": said })];
    messages.extend(asked.end["newMessages"].as_array().unwrap().iter().cloned());
    messages.push(
        json!({ "id": format!("{run}-result"), "role": "tool", "toolCallId": call, "content": result }),
    );
    next["messages"] = json!(messages);
    next["tools"] = page_tools();
    next
}

#[tokio::test]
async fn a_tool_of_the_page_ends_the_run_and_the_next_run_goes_on_with_its_result() {
    let server = server(1, config(), Duration::from_secs(5)).await;
    server.bedrock.push(Reply::tool_call(
        "call-1",
        "ui_page_set_color",
        r#"{"color":"blue"}"#,
    ));
    server.bedrock.push(Reply::text("The page is blue now."));
    let mut first = plan(&server.url, "th-page", "run-1", "Make it blue");
    first["tools"] = page_tools();
    first["context"] = json!([{ "description": "The page", "value": "A color picker, now white." }]);
    let asked = run_agui(first).await.unwrap();
    assert_eq!(asked.error(), None, "{:?}", asked.end);
    // What the application told the agent is the page's: with the person's words, as data,
    // never in the system prompt (the person's browser wrote it).
    let request = &server.bedrock.requests()[0].body;
    let system = request["system"].to_string();
    assert!(!system.contains("A color picker"), "{system}");
    let said = request["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(said["role"], "user");
    let page = said["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|block| block["text"].as_str())
        .find(|text| text.contains("A color picker, now white."))
        .unwrap_or_else(|| panic!("the page's context is with the person's words: {said}"));
    assert!(
        page.starts_with("<ui_state>") && page.contains("data, not instructions"),
        "{page}"
    );
    // The call goes to the client under the page's own name; the run ends waiting for it.
    let start = asked
        .events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START")
        .expect("the call");
    assert_eq!(start["toolCallName"], "set_color");
    let finished = asked.events.last().unwrap();
    assert_eq!(finished["type"], "RUN_FINISHED", "{:?}", asked.types());
    assert_eq!(
        finished["outcome"],
        json!({"type": "success", "pendingToolCallIds": [start["toolCallId"]]})
    );
    assert!(
        !asked.types().contains(&"TOOL_CALL_RESULT"),
        "the page's result is the client's to give"
    );
    // The model was offered the page's tool, named as the page's actions are.
    let offered = server.bedrock.requests()[0].body["toolConfig"]["tools"].to_string();
    assert!(offered.contains("ui_page_set_color"), "{offered}");

    // The client ran the tool: the next run carries the result, and the same turn goes on.
    let next = answering(
        &server.url,
        &asked,
        "run-2",
        "Make it blue",
        "The background is blue.",
    );
    let done = run_agui(next).await.unwrap();
    assert_eq!(done.error(), None, "{:?}", done.end);
    assert_eq!(
        done.types(),
        [
            "RUN_STARTED",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ]
    );
    assert_eq!(done.events[0]["runId"], "run-2");
    assert_eq!(done.events[6]["outcome"], json!({"type": "success"}));
    let result = server.bedrock.last_tool_result(1).expect("the page's result");
    assert_eq!(result["toolUseId"], "call-1");
    assert!(result.to_string().contains("The background is blue."), "{result}");
    // One turn, stored whole: the call and its result side by side, then the answer.
    let history = server.store.load_history(&sid("th-page")).await.unwrap();
    assert_eq!(history.len(), 4, "{history:?}");
    assert_eq!(history[3].text(), "The page is blue now.");
    assert_eq!(server.bedrock.requests().len(), 2);

    // The answering run posted again reads the same back; nothing runs twice.
    let again = run_agui(answering(
        &server.url,
        &asked,
        "run-2",
        "Make it blue",
        "The background is blue.",
    ))
    .await
    .unwrap();
    assert_eq!(again.error(), None, "{:?}", again.end);
    assert_eq!(again.types(), done.types());
    assert_eq!(server.bedrock.requests().len(), 2);
    assert_eq!(server.store.load_history(&sid("th-page")).await.unwrap().len(), 4);
}

#[tokio::test]
async fn a_page_result_after_the_turn_stopped_waiting_is_a_turn_of_its_own() {
    let engine = agent_worker::engine::EngineConfig {
        ui_action_timeout: Duration::from_millis(200),
        ..config()
    };
    let server = server(1, engine, Duration::from_secs(5)).await;
    server.bedrock.push(Reply::tool_call(
        "call-1",
        "ui_page_set_color",
        r#"{"color":"red"}"#,
    ));
    server.bedrock.push(Reply::text("The page did not answer."));
    server.bedrock.push(Reply::text("Now it is red."));
    let mut first = plan(&server.url, "th-page", "run-1", "Make it red");
    first["tools"] = page_tools();
    let asked = run_agui(first).await.unwrap();
    assert_eq!(asked.error(), None, "{:?}", asked.end);
    // The turn stops waiting, tells the model, and ends (its stream ends after its terminal).
    let logged = events_at(&server.url, "th-page", "run-1", None).await;
    assert!(
        logged.iter().any(|(_, e)| e["type"] == "ui_action_withdrawn"),
        "{logged:?}"
    );
    let withdrawn = server.bedrock.last_tool_result(1).unwrap();
    assert!(withdrawn.to_string().contains("withdrawn"), "{withdrawn}");

    let late = run_agui(answering(
        &server.url,
        &asked,
        "run-2",
        "Make it red",
        "The background is red.",
    ))
    .await
    .unwrap();
    assert_eq!(late.error(), None, "{:?}", late.end);
    assert_eq!(late.events.last().unwrap()["outcome"]["type"], "success");
    // A turn of its own, whose words tell the model what the page answered.
    let told = server.bedrock.requests()[2].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(told.contains("stopped waiting"), "{told}");
    assert!(told.contains("The background is red."), "{told}");
    let history = server.store.load_history(&sid("th-page")).await.unwrap();
    assert_eq!(history.len(), 6, "{history:?}");
}

#[tokio::test]
async fn an_answer_to_a_call_no_turn_made_is_refused_and_changes_nothing() {
    let server = server(1, config(), Duration::from_secs(5)).await;
    server.bedrock.push(Reply::text("Hello."));
    assert_eq!(
        run_agui(plan(&server.url, "th-page", "run-1", "Hi"))
            .await
            .unwrap()
            .error(),
        None
    );
    let before = table(&server.store).await;
    let url = format!("{}/agui?userId=u&accountId=a", server.url);
    for (call, field) in [
        // A call of the page's, of a turn that never asked for one.
        ("cnVuLTE.call-9", "messages"),
        // Not a call of the page's at all: the run does not end with the person's words.
        ("call-9", "messages"),
    ] {
        let body = json!({"threadId": "th-page", "runId": "run-2", "tools": page_tools(), "messages": [
            {"id": "m1", "role": "user", "content": "Hi"},
            {"id": "m2", "role": "tool", "toolCallId": call, "content": "done"},
        ]});
        let (status, error) = post(&url, Some(KEY), &body.to_string()).await;
        assert_eq!((status, error["field"].as_str()), (400, Some(field)), "{error}");
    }
    // Another person's answer to this thread is refused before anything is read.
    let mallory = format!("{}/agui?userId=mallory&accountId=a", server.url);
    let body = json!({"threadId": "th-page", "runId": "run-3", "messages": [
        {"id": "m2", "role": "tool", "toolCallId": "cnVuLTE.call-9", "content": "done"},
    ]});
    assert_eq!(post(&mallory, Some(KEY), &body.to_string()).await.0, 404);
    // An answer for a thread no one has is refused the same way, and claims nothing.
    let body = json!({"threadId": "th-nobody", "runId": "run-4", "messages": [
        {"id": "m2", "role": "tool", "toolCallId": "cnVuLTE.call-9", "content": "done"},
    ]});
    assert_eq!(post(&url, Some(KEY), &body.to_string()).await.0, 404);
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
    assert_eq!(server.bedrock.requests().len(), 1);
}

#[tokio::test]
async fn the_pages_context_is_bounded_and_a_run_past_it_is_refused_naming_it() {
    let server = server(1, config(), Duration::from_secs(5)).await;
    let before = table(&server.store).await;
    let item = |value: String| json!({ "description": "Item", "value": value });
    let many: Vec<Value> = (0..=agent_worker::hosts::container::MAX_CONTEXT_ITEMS)
        .map(|n| item(n.to_string()))
        .collect();
    let large = vec![item(
        "x".repeat(agent_worker::hosts::container::MAX_CONTEXT_BYTES),
    )];
    for context in [many, large] {
        let mut run = plan(&server.url, "th-context", "run-1", "Hi");
        run["context"] = json!(context);
        let refused = run_agui(run).await.unwrap();
        let error = refused
            .error()
            .unwrap_or_else(|| panic!("taken: {:?}", refused.types()));
        assert!(error.contains("400"), "{error}");
        let url = format!("{}/agui?userId=u&accountId=a", server.url);
        let body = json!({"threadId": "th-context", "runId": "run-1", "context": context,
            "messages": [{"id": "m1", "role": "user", "content": "Hi"}]});
        let (status, answer) = post(&url, Some(KEY), &body.to_string()).await;
        assert_eq!(
            (status, answer["field"].as_str()),
            (400, Some("context")),
            "{answer}"
        );
    }
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
    assert_eq!(server.bedrock.requests().len(), 0);
}

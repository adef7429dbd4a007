//! `POST /agui` against AG-UI's own client (`@ag-ui/client`'s `HttpAgent`, which checks every
//! event against AG-UI's schemas and their order), with DynamoDB on moto and the Bedrock
//! stand-in: a text run, a tool run, a stopped run, an approval asked and given, and refusals
//! that change nothing.

mod support;

use std::sync::Arc;
use std::time::Duration;

use agent_worker::engine::tools::{Tool, ToolSpec, tool_fn};
use agent_worker::session::SessionStore;
use agent_worker_testkit::{Reply, StreamScript, run_agui, sid};
use serde_json::{Value, json};
use support::config;
use support::container::{KEY, changed, post, server, server_with_tools, table};

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

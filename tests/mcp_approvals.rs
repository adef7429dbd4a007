//! An approval a turn asks, over MCP (`POST /mcp` on `serve`'s router, DynamoDB on moto, the
//! Bedrock stand-in): elicited from the official SDKs' clients that declare elicitation (the
//! TypeScript SDK's on the answer's stream, the Python SDK's as the stateless revision's
//! input-required result and, in the handshake, on the stream), and named in the result for
//! `answer_approval` to a client that does not. Each answer runs the approved call once; another
//! person's answer, or one to a turn that waits for nothing, changes nothing.

use std::sync::atomic::Ordering;

use crate::support;
use agent_worker::session::HistoryStore as _;
use agent_worker_testkit::{Reply, run_mcp_client, run_mcp_python_client, sid};
use serde_json::{Value, json};
use support::approvals::Tools;
use support::container::{KEY, Server, changed, send, server_with_tools, table};

fn plan(url: &str, calls: Value) -> Value {
    json!({
        "url": format!("{url}/mcp?userId=u&accountId=a"),
        "headers": {"x-api-key": KEY},
        "calls": calls,
    })
}

/// The model asks to pay, then says what came of it.
fn asks_to_pay(server: &Server, then: &str) {
    let args = r#"{"amount": 12, "to": "ACME"}"#;
    server.bedrock.push(Reply::tool_call("call-pay", "pay", args));
    server.bedrock.push(Reply::text(then));
}

fn ask(conversation: &str) -> Value {
    json!([{"name": "ask", "arguments": {"message": "Pay ACME 12 EUR.", "conversationId": conversation}}])
}

#[tokio::test]
async fn each_sdks_client_is_asked_the_approval_and_its_answer_decides() {
    let tools = Tools::new();
    let server = server_with_tools(tools.list()).await;

    // The TypeScript SDK's client (the handshake revision), on the answer's stream.
    asks_to_pay(&server, "Paid: receipt R-1.");
    let mut asked = plan(&server.url, ask("ts-pay"));
    asked["elicit"] = "accept".into();
    let out = run_mcp_client(asked).await.unwrap();
    assert!(
        out["session"].as_str().is_some_and(|s| s.starts_with("elicits-")),
        "a client that declares elicitation is given a session that says so: {out}"
    );
    let message = out["elicited"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("Pay an invoice"), "{out}");
    let result = &out["results"][0];
    assert_eq!(result["isError"], false, "{out}");
    assert_eq!(result["structuredContent"]["text"], "Paid: receipt R-1.", "{out}");
    assert_eq!(
        result["structuredContent"]["turnId"]
            .as_str()
            .map(|t| t.ends_with("~1")),
        Some(true)
    );
    assert_eq!(tools.paid.load(Ordering::SeqCst), 1);

    // The Python SDK's client, in the stateless revision: an input-required result, retried.
    asks_to_pay(&server, "Paid again: receipt R-1.");
    let mut asked = plan(&server.url, ask("py-pay"));
    asked["elicit"] = "accept".into();
    let out = run_mcp_python_client(asked).await.unwrap();
    assert_eq!(out["protocol"], "2026-07-28", "{out}");
    assert!(
        out["elicited"][0]
            .as_str()
            .unwrap_or_default()
            .contains("Pay an invoice"),
        "{out}"
    );
    assert_eq!(
        out["results"][0]["structuredContent"]["text"], "Paid again: receipt R-1.",
        "{out}"
    );
    assert_eq!(tools.paid.load(Ordering::SeqCst), 2);

    // The Python SDK's client in the handshake, declining on the stream: nothing paid.
    asks_to_pay(&server, "Understood, nothing was paid.");
    let mut asked = plan(&server.url, ask("py-no"));
    asked["elicit"] = "decline".into();
    asked["mode"] = "legacy".into();
    let out = run_mcp_python_client(asked).await.unwrap();
    assert_eq!(out["protocol"], "2025-11-25", "{out}");
    assert_eq!(out["elicited"].as_array().map(Vec::len), Some(1), "{out}");
    assert_eq!(
        out["results"][0]["structuredContent"]["text"], "Understood, nothing was paid.",
        "{out}"
    );
    assert_eq!(tools.paid.load(Ordering::SeqCst), 2, "declined: not paid");
    // The model was told of the decision (the engine's `<approval>` block) in each case.
    let told = server.bedrock.requests()[5].body["messages"].to_string();
    assert!(told.contains("declin"), "{told}");
}

/// One `tools/call`, by the API key and `user`'s ids, answered as JSON.
async fn call(server: &Server, user: &str, id: u64, name: &str, arguments: Value) -> (u16, Value) {
    let request = reqwest::Client::new()
        .post(format!("{}/mcp?userId={user}&accountId=a", server.url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}));
    send(request, Some(KEY)).await
}

#[tokio::test]
async fn without_elicitation_the_result_names_the_approval_and_answer_approval_answers_it_once() {
    let tools = Tools::new();
    let server = server_with_tools(tools.list()).await;
    asks_to_pay(&server, "Paid: receipt R-1.");
    let (status, asked) = call(
        &server,
        "u",
        1,
        "ask",
        json!({"message": "Pay ACME 12 EUR.", "conversationId": "raw-pay"}),
    )
    .await;
    assert_eq!(status, 200, "{asked}");
    let waiting = &asked["result"]["structuredContent"];
    assert_eq!(asked["result"]["isError"], false, "{asked}");
    assert!(waiting["approval"]["approvalId"].is_string(), "{asked}");
    assert!(
        waiting["next"].as_str().unwrap().contains("answer_approval"),
        "{asked}"
    );
    assert!(
        !asked.to_string().contains("token"),
        "never the approval's token: {asked}"
    );
    let turn = waiting["turnId"].as_str().unwrap().to_owned();
    let answer = |decision: &str| json!({"conversationId": "raw-pay", "turnId": turn, "decision": decision});

    // Another person's answer, a decision that is not one, an answer to nothing waiting: refused,
    // nothing written, nothing paid.
    let before = table(&server.store).await;
    let (_, theirs) = call(&server, "v", 2, "answer_approval", answer("approve")).await;
    assert_eq!(theirs["result"]["isError"], true, "{theirs}");
    assert_eq!(theirs["result"]["structuredContent"]["status"], 404, "{theirs}");
    let (_, unclear) = call(&server, "u", 3, "answer_approval", answer("maybe")).await;
    assert_eq!(unclear["error"]["code"], -32602, "{unclear}");
    let stray = reqwest::Client::new()
        .post(format!("{}/mcp?userId=u&accountId=a", server.url))
        .json(&json!({"jsonrpc": "2.0", "id": "approval-nobody", "result": {"action": "accept"}}));
    let (status, _) = send(stray, Some(KEY)).await;
    assert_eq!(status, 400, "an answer nothing waits for");
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
    assert_eq!(tools.paid.load(Ordering::SeqCst), 0);

    // The owner's answer: the call runs once, and the same answer again follows the same turn.
    let (_, paid) = call(&server, "u", 4, "answer_approval", answer("approve")).await;
    assert_eq!(
        paid["result"]["structuredContent"]["text"], "Paid: receipt R-1.",
        "{paid}"
    );
    let (_, again) = call(&server, "u", 5, "answer_approval", answer("decline")).await;
    assert_eq!(
        again["result"]["structuredContent"]["turnId"],
        paid["result"]["structuredContent"]["turnId"]
    );
    assert_eq!(
        again["result"]["structuredContent"]["text"], "Paid: receipt R-1.",
        "{again}"
    );
    assert_eq!(tools.paid.load(Ordering::SeqCst), 1);
    // The turn that answered it waits for nothing.
    let next = paid["result"]["structuredContent"]["turnId"].as_str().unwrap();
    let (_, nothing) = call(
        &server,
        "u",
        6,
        "answer_approval",
        json!({"conversationId": "raw-pay", "turnId": next, "decision": "approve"}),
    )
    .await;
    assert_eq!(nothing["result"]["structuredContent"]["status"], 409, "{nothing}");
    let history = server.store.load_history(&sid("raw-pay")).await.unwrap();
    assert_eq!(history.last().unwrap().text(), "Paid: receipt R-1.");
    assert_eq!(server.bedrock.requests().len(), 2);
}

/// A turn continued by `answer_approval` that asks another approval: a stateless client that
/// declares elicitation is asked it, and its retry of `answer_approval` answers that one (not the
/// first again): each call runs once.
#[tokio::test]
async fn a_second_approval_after_answer_approval_is_asked_and_its_answer_taken() {
    let tools = Tools::new();
    let server = server_with_tools(tools.list()).await;
    server.bedrock.push(Reply::tool_call(
        "call-pay-1",
        "pay",
        r#"{"amount": 12, "to": "ACME"}"#,
    ));
    server.bedrock.push(Reply::tool_call(
        "call-pay-2",
        "pay",
        r#"{"amount": 5, "to": "ACME"}"#,
    ));
    server.bedrock.push(Reply::text("Paid twice."));
    let (_, asked) = call(
        &server,
        "u",
        1,
        "ask",
        json!({"message": "Pay ACME twice.", "conversationId": "two-pay"}),
    )
    .await;
    let turn = asked["result"]["structuredContent"]["turnId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut answered = plan(
        &server.url,
        json!([{"name": "answer_approval", "arguments": {"conversationId": "two-pay", "turnId": turn, "decision": "approve"}}]),
    );
    answered["elicit"] = "accept".into();
    let out = run_mcp_python_client(answered).await.unwrap();
    assert_eq!(out["protocol"], "2026-07-28", "{out}");
    assert_eq!(
        out["elicited"].as_array().map(Vec::len),
        Some(1),
        "the second approval, asked once: {out}"
    );
    assert_eq!(
        out["results"][0]["structuredContent"]["text"], "Paid twice.",
        "{out}"
    );
    assert_eq!(
        out["results"][0]["structuredContent"]["turnId"],
        format!("{turn}~2"),
        "{out}"
    );
    assert_eq!(tools.paid.load(Ordering::SeqCst), 2);
}

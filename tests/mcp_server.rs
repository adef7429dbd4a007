//! The agent as an MCP server (`POST /mcp` on `serve`'s router), against the official MCP
//! TypeScript SDK's client (the handshake revision) and the Python SDK's (the stateless
//! revision, and the handshake) over Streamable HTTP, with DynamoDB on moto and the Bedrock stand-in:
//! the tools listed, a question asked and answered, the person's conversations read; another
//! person's conversation refused with nothing written; and JSON-RPC's errors for what is not a
//! request.

use crate::support;
use agent_worker::session::HistoryStore as _;

use agent_worker_testkit::{Reply, run_mcp_client, run_mcp_python_client, sid};
use serde_json::{Value, json};
use support::container::{KEY, changed, send, server, table};

fn plan(url: &str, user: &str, calls: Value) -> Value {
    json!({
        "url": format!("{url}/mcp?userId={user}&accountId=a"),
        "headers": {"x-api-key": KEY},
        "calls": calls,
    })
}

#[tokio::test]
async fn an_mcp_host_asks_the_agent_and_reads_its_conversations() {
    let server = server(2, support::config(), std::time::Duration::from_secs(5)).await;
    server.bedrock.push(Reply::text("The capital is Paris."));
    let out = run_mcp_client(plan(
        &server.url,
        "u",
        json!([
            {"name": "ask", "arguments": {"message": "What is the capital of France?", "conversationId": "mcp-1"}},
            {"name": "get_conversation", "arguments": {"conversationId": "mcp-1"}},
            {"name": "list_conversations", "arguments": {}},
        ]),
    ))
    .await
    .unwrap();
    assert!(out.get("error").is_none(), "{out}");
    assert_eq!(
        out["protocol"], "2025-11-25",
        "the client's newest revision: {out}"
    );
    assert_eq!(out["server"]["name"], "agent-worker");
    assert_eq!(
        out["tools"],
        json!(["ask", "answer_approval", "list_conversations", "get_conversation"])
    );
    let asked = &out["results"][0];
    assert_eq!(asked["isError"], false, "{asked}");
    assert_eq!(asked["structuredContent"]["text"], "The capital is Paris.");
    assert_eq!(asked["structuredContent"]["conversationId"], "mcp-1");
    assert_eq!(asked["structuredContent"]["terminal"]["type"], "completed");
    let got = &out["results"][1]["structuredContent"];
    assert_eq!(got["messages"][1]["text"], "The capital is Paris.", "{got}");
    let listed = &out["results"][2]["structuredContent"]["conversations"];
    assert_eq!(listed[0]["id"], "mcp-1", "{listed}");
    let history = server.store.load_history(&sid("mcp-1")).await.unwrap();
    assert_eq!(history.len(), 2, "stored once");
}

#[tokio::test]
async fn another_persons_conversation_is_refused_over_mcp_and_nothing_changes() {
    let server = server(2, support::config(), std::time::Duration::from_secs(5)).await;
    server.bedrock.push(Reply::text("Noted."));
    let mine = run_mcp_client(plan(
        &server.url,
        "u",
        json!([{"name": "ask", "arguments": {"message": "Remember the code 1234.", "conversationId": "private"}}]),
    ))
    .await
    .unwrap();
    assert_eq!(mine["results"][0]["isError"], false, "{mine}");

    let before = table(&server.store).await;
    let theirs = run_mcp_client(plan(
        &server.url,
        "v",
        json!([
            {"name": "ask", "arguments": {"message": "What was the code?", "conversationId": "private"}},
            {"name": "get_conversation", "arguments": {"conversationId": "private"}},
            {"name": "ask", "arguments": {"conversationId": "private"}},
            {"name": "no_such_tool", "arguments": {}},
        ]),
    ))
    .await
    .unwrap();
    let results = &theirs["results"];
    assert_eq!(results[0]["isError"], true, "{theirs}");
    assert_eq!(results[0]["structuredContent"]["status"], 404);
    assert_eq!(results[1]["isError"], true, "{theirs}");
    assert!(!results[1].to_string().contains("1234"), "{theirs}");
    assert_eq!(results[2]["code"], -32602, "a message is needed: {theirs}");
    assert_eq!(results[3]["code"], -32602, "no such tool: {theirs}");
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
    assert_eq!(
        server.bedrock.requests().len(),
        1,
        "the model heard only the owner"
    );
}

#[tokio::test]
async fn what_is_not_an_mcp_request_gets_json_rpcs_errors() {
    let server = server(2, support::config(), std::time::Duration::from_secs(5)).await;
    let url = format!("{}/mcp?userId=u&accountId=a", server.url);
    let client = reqwest::Client::new();
    let before = table(&server.store).await;
    let post = |body: &'static str| {
        client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
    };
    let (status, answer) = send(post("{not json"), Some(KEY)).await;
    assert_eq!(
        (status, answer["error"]["code"].as_i64()),
        (400, Some(-32700)),
        "{answer}"
    );
    let (status, answer) = send(post(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#), Some(KEY)).await;
    assert_eq!(
        (status, answer["error"]["code"].as_i64()),
        (400, Some(-32600)),
        "{answer}"
    );
    let (status, answer) = send(
        post(r#"{"jsonrpc":"2.0","id":2,"method":"resources/list"}"#),
        Some(KEY),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_i64()),
        (200, Some(-32601)),
        "{answer}"
    );
    assert_eq!(answer["id"], 2);
    let (status, answer) = send(post(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#), Some(KEY)).await;
    assert_eq!((status, answer["result"].clone()), (200, json!({})), "{answer}");
    let (status, _) = send(
        post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 202);
    let (status, _) = send(client.get(&url), Some(KEY)).await;
    assert_eq!(status, 405, "no stream is offered");
    let (status, _) = send(post(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#), None).await;
    assert_eq!(status, 401, "no credential, no answer");
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
}

/// The Python SDK's client speaks the stateless revision (`server/discover`, its revision in
/// each request) where the server offers it, and the handshake when told to: both ask.
#[tokio::test]
async fn the_python_sdks_client_asks_in_the_stateless_revision_and_in_the_handshake() {
    let server = server(2, support::config(), std::time::Duration::from_secs(5)).await;
    for (mode, revision, conversation) in [
        ("auto", "2026-07-28", "py-new"),
        ("legacy", "2025-11-25", "py-old"),
    ] {
        server.bedrock.push(Reply::text("Forty-two."));
        let mut asked = plan(
            &server.url,
            "u",
            json!([{"name": "ask", "arguments": {"message": "The answer?", "conversationId": conversation}}]),
        );
        asked["mode"] = mode.into();
        let out = run_mcp_python_client(asked).await.unwrap();
        assert!(out.get("error").is_none(), "{mode}: {out}");
        assert_eq!(out["protocol"], revision, "{mode}: {out}");
        assert_eq!(
            out["tools"],
            json!(["ask", "answer_approval", "list_conversations", "get_conversation"])
        );
        let result = &out["results"][0];
        assert_eq!(result["isError"], false, "{mode}: {out}");
        assert_eq!(result["structuredContent"]["text"], "Forty-two.");
    }
    // A request in a revision the server does not speak is refused, naming those it does.
    let (status, answer) = send(
        reqwest::Client::new()
            .post(format!("{}/mcp?userId=u&accountId=a", server.url))
            .header("content-type", "application/json")
            .body(r#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}}"#),
        Some(KEY),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_i64()),
        (200, Some(-32022)),
        "{answer}"
    );
    assert_eq!(answer["error"]["data"]["supported"][0], "2026-07-28");
}

/// An `ask` with a progress token, from a client that takes a stream, is answered as
/// server-sent events: a progress notification for each event the turn logs (its words among
/// them), then the answer.
#[tokio::test]
async fn an_ask_with_a_progress_token_streams_the_turns_progress() {
    let server = support::container::server_with_tools(support::example_tools(&["current_time"])).await;
    server.bedrock.push(Reply::tool_call("c1", "current_time", "{}"));
    server.bedrock.push(Reply::text("It is noon."));
    let out = run_mcp_client(plan(
        &server.url,
        "u",
        json!([{"name": "ask", "arguments": {"message": "What time is it?", "conversationId": "mcp-p"}, "progress": true}]),
    ))
    .await
    .unwrap();
    let result = &out["results"][0];
    assert_eq!(result["isError"], false, "{out}");
    assert_eq!(result["structuredContent"]["text"], "It is noon.");
    let messages: Vec<&str> = result["progress"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["message"].as_str())
        .collect();
    assert!(
        messages.contains(&"tool_started") && messages.contains(&"tool_ended"),
        "{messages:?}"
    );
    assert_eq!(messages.last(), Some(&"completed"), "{messages:?}");
    let said: String = messages
        .iter()
        .filter(|m| !m.contains('_') && **m != "completed" && **m != "usage")
        .copied()
        .collect();
    assert!(said.contains("noon"), "the words came as progress: {messages:?}");
    let counts: Vec<u64> = result["progress"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["progress"].as_u64())
        .collect();
    assert!(
        counts.windows(2).all(|w| w[0] < w[1]),
        "progress only grows: {counts:?}"
    );
}

/// An `ask` the MCP host cancels (the SDK's abort: `notifications/cancelled` naming the request)
/// stops its turn through the stop every route records: the turn ends stopped, what it said
/// kept, and the call is the client's error.
#[tokio::test]
async fn an_ask_the_host_cancels_stops_its_turn() {
    use agent_worker::session::TurnLedger as _;
    use agent_worker_testkit::StreamScript;
    let server = server(2, support::config(), std::time::Duration::from_secs(5)).await;
    let held = StreamScript::new()
        .text("Working on it", 1)
        .hold()
        .text(" and done.", 1)
        .stop("end_turn")
        .into_reply();
    server.bedrock.push(held);
    let out = run_mcp_client(plan(
        &server.url,
        "u",
        json!([{"name": "ask", "arguments": {"message": "Take your time.", "conversationId": "mcp-c"}, "progress": true, "cancelOnProgress": true}]),
    ))
    .await
    .unwrap();
    assert!(
        out["results"][0]["thrown"].is_string(),
        "the call was cancelled: {out}"
    );
    let ends = server.ended(1).await;
    let turn = &ends[0].turn_id;
    let record = server.store.turn(&sid("mcp-c"), turn).await.unwrap().unwrap();
    assert_eq!(
        record.stop.map(|s| s.reason.as_str()),
        Some("user_stop"),
        "{record:?}"
    );
    let history = server.store.load_history(&sid("mcp-c")).await.unwrap();
    assert!(
        history.last().unwrap().text().starts_with("Working on it"),
        "{history:?}"
    );
    server.bedrock.release();
}

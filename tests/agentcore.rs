//! Amazon Bedrock AgentCore Runtime's HTTP contract on `serve`'s router, with DynamoDB on moto
//! and the Bedrock stand-in. The contract (AgentCore developer guide, "Understand the AgentCore
//! Runtime service contract", HTTP protocol): port 8080 on 0.0.0.0; `GET /ping` answers
//! `{"status": "Healthy" | "HealthyBusy", "time_of_last_update": <Unix seconds>}`, busy while
//! work goes on, so that the runtime keeps the session; `POST /invocations` takes a JSON body
//! (`{"prompt": …}`) and answers JSON or Server-Sent Events; the runtime names the session in
//! `X-Amzn-Bedrock-AgentCore-Runtime-Session-Id`. AgentCore's AG-UI protocol posts AG-UI's
//! `RunAgentInput` to the same `/invocations`.

use crate::support;
use agent_worker::session::HistoryStore as _;

use std::time::Duration;

use agent_worker_testkit::{Reply, StreamScript, sid};
use serde_json::{Value, json};
use support::binaries::{announced, on_moto};
use support::config;
use support::container::{KEY, changed, post, send, server, sse_events, table};

/// A session id as AgentCore makes them: 33 to 256 characters.
const SESSION: &str = "agentcore-session-0123456789abcdef0123";

async fn invoke(url: &str, session: Option<&str>, accept: &str, body: &Value) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/invocations?userId=u&accountId=a"))
        .header("x-api-key", KEY)
        .header("content-type", "application/json")
        .header("accept", accept)
        .body(body.to_string());
    if let Some(session) = session {
        request = request.header("X-Amzn-Bedrock-AgentCore-Runtime-Session-Id", session);
    }
    request.send().await.unwrap()
}

async fn ping(url: &str) -> Value {
    let response = reqwest::get(format!("{url}/ping")).await.unwrap();
    assert_eq!(response.status(), 200, "/ping needs no credential");
    response.json().await.unwrap()
}

#[tokio::test]
async fn an_invocation_answers_json_in_the_runtime_session_and_the_session_goes_on() {
    let server = server(1, config(), Duration::from_secs(5)).await;
    server.bedrock.push(Reply::text("Hello from the runtime."));
    let response = invoke(
        &server.url,
        Some(SESSION),
        "application/json",
        &json!({"prompt": "Hi"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["x-amzn-bedrock-agentcore-runtime-session-id"],
        SESSION
    );
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["text"], "Hello from the runtime.");
    assert_eq!(answer["terminal"]["type"], "completed");
    assert_eq!(answer["sessionId"], SESSION);
    // The runtime's session is the conversation: the next invocation continues it.
    server.bedrock.push(Reply::text("Still here."));
    let again: Value = invoke(
        &server.url,
        Some(SESSION),
        "application/json",
        &json!({"prompt": "Again"}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(again["text"], "Still here.");
    assert_ne!(again["turnId"], answer["turnId"]);
    assert_eq!(server.store.load_history(&sid(SESSION)).await.unwrap().len(), 4);
    let second = &server.bedrock.requests()[1].body["messages"];
    assert_eq!(
        second.as_array().unwrap().len(),
        3,
        "the model saw the conversation: {second}"
    );

    // With no session named, the invocation gets a session of its own, said in the header.
    server.bedrock.push(Reply::text("New here."));
    let fresh = invoke(&server.url, None, "application/json", &json!({"prompt": "Hi"})).await;
    let named = fresh.headers()["x-amzn-bedrock-agentcore-runtime-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(named, SESSION);
    assert_eq!(fresh.json::<Value>().await.unwrap()["text"], "New here.");
    assert_eq!(server.store.load_history(&sid(&named)).await.unwrap().len(), 2);
}

#[tokio::test]
async fn an_invocation_streams_its_events_and_an_agui_body_streams_agui_events() {
    let server = server(1, config(), Duration::from_secs(5)).await;
    server.bedrock.push(Reply::text("Streamed."));
    let response = invoke(
        &server.url,
        Some(SESSION),
        "text/event-stream",
        &json!({"prompt": "Hi", "turnId": "t-sse"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = sse_events(&response.text().await.unwrap());
    let types: Vec<&str> = events.iter().filter_map(|(_, e)| e["type"].as_str()).collect();
    assert_eq!(types.first(), Some(&"text"), "{types:?}");
    assert_eq!(types.last(), Some(&"completed"), "{types:?}");

    server.bedrock.push(Reply::text("Through AG-UI."));
    let input = json!({
        "threadId": "agui-thread", "runId": "agui-run",
        "messages": [{"id": "m1", "role": "user", "content": "Hi"}],
    });
    let response = invoke(&server.url, None, "text/event-stream", &input).await;
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let agui: Vec<Value> = body
        .split("\n\n")
        .filter_map(|block| block.lines().find_map(|l| l.strip_prefix("data:")))
        .map(|data| serde_json::from_str(data.trim()).unwrap())
        .collect();
    assert_eq!(agui.first().unwrap()["type"], "RUN_STARTED");
    assert_eq!(agui.last().unwrap()["type"], "RUN_FINISHED");
    assert_eq!(
        server
            .store
            .load_history(&sid("agui-thread"))
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn ping_is_busy_while_a_turn_runs_and_says_since_when() {
    let server = server(1, config(), Duration::from_secs(5)).await;
    let idle = ping(&server.url).await;
    assert_eq!(idle["status"], "Healthy");
    let since = idle["time_of_last_update"].as_u64().expect("Unix seconds");
    server
        .bedrock
        .push(StreamScript::new().open_text("Working").hang().into_reply());
    let url = server.url.clone();
    let streaming = tokio::spawn(async move {
        invoke(
            &url,
            Some(SESSION),
            "text/event-stream",
            &json!({"prompt": "Work", "turnId": "t-busy"}),
        )
        .await
        .text()
        .await
        .unwrap()
    });
    tokio::time::timeout(Duration::from_secs(20), server.bedrock.requested(1))
        .await
        .expect("the turn started");
    let busy = ping(&server.url).await;
    assert_eq!(busy["status"], "HealthyBusy");
    assert!(busy["time_of_last_update"].as_u64().unwrap() >= since);
    let stop = format!(
        "{}/turns/t-busy/stop?session={SESSION}&userId=u&accountId=a",
        server.url
    );
    assert_eq!(post(&stop, Some(KEY), "").await.0, 202);
    let streamed = streaming.await.unwrap();
    assert!(streamed.contains("user_stop"), "{streamed}");
    server.ended(1).await;
    assert_eq!(ping(&server.url).await["status"], "Healthy");
}

#[tokio::test]
async fn another_persons_session_is_refused_and_nothing_changes() {
    let server = server(1, config(), Duration::from_secs(5)).await;
    server.bedrock.push(Reply::text("Hello."));
    assert_eq!(
        invoke(
            &server.url,
            Some(SESSION),
            "application/json",
            &json!({"prompt": "Hi"})
        )
        .await
        .status(),
        200
    );
    let before = table(&server.store).await;
    let refused = reqwest::Client::new()
        .post(format!("{}/invocations?userId=mallory&accountId=a", server.url))
        .header("x-api-key", KEY)
        .header("X-Amzn-Bedrock-AgentCore-Runtime-Session-Id", SESSION)
        .body(json!({"prompt": "What did they say?"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 404);
    let unsigned = reqwest::Client::new()
        .post(format!("{}/invocations?userId=u&accountId=a", server.url))
        .header("X-Amzn-Bedrock-AgentCore-Runtime-Session-Id", SESSION)
        .body(json!({"prompt": "Hi"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    let (status, error) = post(
        &format!("{}/invocations?userId=u&accountId=a", server.url),
        Some(KEY),
        r#"{"words": "no prompt"}"#,
    )
    .await;
    assert_eq!((status, error["field"].as_str()), (400, Some("body")), "{error}");
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
    assert_eq!(server.bedrock.requests().len(), 1);
}

/// The binary an AgentCore Runtime image runs (`agent-worker serve`, the Dockerfile's entry
/// point), configured from its environment as the runtime configures it, answers the contract;
/// in its MCP mode (`--agentcore-mcp`) on port 8000, with the MCP server at `/mcp`.
#[tokio::test]
async fn the_serve_binary_answers_ping_and_invocations() {
    use agent_worker::session::{DynamoConfig, DynamoStore};
    use agent_worker_testkit::{BedrockStandIn, moto};

    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("From the image's binary."));
    let table = format!("agentcore-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    // AgentCore's MCP mode: the port its MCP contract names.
    let args = ["serve", "--agentcore-mcp", "--host", "127.0.0.1"];
    let mut child = on_moto(env!("CARGO_BIN_EXE_agent-worker"), &args, &table, &bedrock)
        .env("AGENT_WORKER_API_KEY", KEY)
        .spawn()
        .expect("the binary runs");
    let url = announced(&mut child, "agent-worker serving turns on ").await;
    assert_eq!(ping(&url).await["status"], "Healthy");
    let response = invoke(&url, Some(SESSION), "application/json", &json!({"prompt": "Hi"})).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap()["text"],
        "From the image's binary."
    );
    assert_eq!(store.load_history(&sid(SESSION)).await.unwrap().len(), 2);
    // The MCP server at `/mcp`, on port 8000, to the official client.
    assert!(url.ends_with(":8000"), "{url}");
    bedrock.push(Reply::text("Over MCP."));
    let plan = json!({
        "url": format!("{url}/mcp?userId=u&accountId=a"),
        "headers": {"x-api-key": KEY},
        "calls": [{"name": "ask", "arguments": {"message": "Hi"}}],
    });
    let out = agent_worker_testkit::run_mcp_client(plan).await.unwrap();
    assert_eq!(
        out["results"][0]["structuredContent"]["text"], "Over MCP.",
        "{out}"
    );
    child.kill().await.unwrap();
}

/// Behind an AgentCore Runtime with IAM callers (`serve --auth iam`), the person is the user the
/// runtime names in `X-Amzn-Bedrock-AgentCore-Runtime-User-Id`, of the configured account, on
/// `/invocations` and on the WebSocket alike: another user is refused the conversation (nothing
/// written), and a request naming no user, or bringing the API key, is refused.
#[tokio::test]
async fn behind_an_iam_runtime_the_person_is_the_user_the_runtime_names() {
    use agent_worker::session::{DynamoConfig, DynamoStore, OwnerStore as _};
    use agent_worker_testkit::{BedrockStandIn, moto};

    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("Hello, Alice."));
    bedrock.push(Reply::text("Over the socket."));
    let table_name = format!("agentcore-iam-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table_name).unwrap());
    store.create_table().await.unwrap();
    let args = ["serve", "--auth", "iam", "--port", "0", "--host", "127.0.0.1"];
    let mut child = on_moto(env!("CARGO_BIN_EXE_agent-worker"), &args, &table_name, &bedrock)
        .env("AGENTCORE_ACCOUNT", "acme")
        .spawn()
        .expect("the binary runs");
    let url = announced(&mut child, "agent-worker serving turns on ").await;
    let invoke_as = |user: Option<&str>| {
        let mut request = reqwest::Client::new()
            .post(format!("{url}/invocations"))
            .header("content-type", "application/json")
            .header("X-Amzn-Bedrock-AgentCore-Runtime-Session-Id", SESSION)
            .body(r#"{"prompt": "Hi"}"#);
        if let Some(user) = user {
            request = request.header("X-Amzn-Bedrock-AgentCore-Runtime-User-Id", user);
        }
        request
    };
    let (status, answer) = send(invoke_as(Some("alice")), None).await;
    assert_eq!(
        (status, answer["text"].as_str()),
        (200, Some("Hello, Alice.")),
        "{answer}"
    );
    let owner = store.owner(&sid(SESSION)).await.unwrap().unwrap();
    assert_eq!(
        (owner.user_id.as_str(), owner.account_id.as_str()),
        ("alice", "acme")
    );

    let before = table(&store).await;
    let (status, _) = send(invoke_as(Some("bob")), None).await;
    assert_eq!(status, 404, "another user's conversation");
    let (status, answer) = send(invoke_as(None), None).await;
    assert_eq!(status, 401, "no user named: {answer}");
    let keyed = reqwest::Client::new()
        .post(format!("{url}/invocations?userId=alice&accountId=acme"))
        .header("content-type", "application/json")
        .body(r#"{"prompt": "Hi"}"#);
    let (status, _) = send(keyed, Some(KEY)).await;
    assert_eq!(status, 401, "the API key opens nothing here");
    assert_eq!(changed(&before, &table(&store).await), Vec::<String>::new());

    // The WebSocket, through the binary's own HTTP edge, as the same person.
    let out = agent_worker_testkit::run_ws_client(json!({
        "url": format!("{}/ws", url.replacen("http://", "ws://", 1)),
        "headers": {"X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": SESSION,
            "X-Amzn-Bedrock-AgentCore-Runtime-User-Id": "alice"},
        "steps": [{"send": {"prompt": "And now?"}, "until": "end"}],
    }))
    .await
    .unwrap();
    let said: String = out["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["event"]["delta"].as_str())
        .collect();
    assert_eq!(said, "Over the socket.", "{out}");
    assert_eq!(store.load_history(&sid(SESSION)).await.unwrap().len(), 4);
    child.kill().await.unwrap();
}

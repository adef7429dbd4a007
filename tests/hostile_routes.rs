//! The container's routes tried as a hostile client would, on moto and the Bedrock stand-in: the
//! console's token acts for its own person alone, a stranger's act on a conversation that does
//! not exist yet never takes effect on it, ids are checked on every route, permanent client
//! errors answer 4xx, a stream on a turn that never starts ends, and the security headers. After
//! every refusal the table is read whole and must be as it was.

use crate::support;
use agent_worker::session::HistoryStore as _;

use std::time::Duration;

use agent_worker::hosts::container::console::Console;
use agent_worker_testkit::{Reply, StreamScript, sid};
use reqwest::Method;
use serde_json::{Value, json};
use support::config;
use support::container::{KEY, Server, changed, send, server_for, sse_events, table};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bob's first turn in `conversation`, run to its end: the conversation is his.
async fn bobs_turn(server: &Server, turn: &str, conversation: &str) {
    server.bedrock.push(Reply::text("Hello Bob."));
    let body = json!({"turnId": turn, "conversationId": conversation, "userId": "bob", "accountId": "acme", "content": "Hi"});
    let (status, _) = send(
        client().post(format!("{}/turns", server.url)).json(&body),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 202);
    let events = bobs_events(server, conversation, turn).await;
    assert_eq!(events.last().unwrap()["type"], "completed");
}

/// The events of bob's turn `turn` of `conversation`, from its stream, to its end.
async fn bobs_events(server: &Server, conversation: &str, turn: &str) -> Vec<Value> {
    let stream = client()
        .get(format!(
            "{}/turns/{turn}/events?session={conversation}&userId=bob&accountId=acme",
            server.url
        ))
        .header("x-api-key", KEY)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    sse_events(&stream).into_iter().map(|(_, event)| event).collect()
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// A request sent as its bytes are written (a path no client library would leave as it is).
async fn raw(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Value) {
    let address = server.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.split(' ').nth(1).unwrap().parse().unwrap();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    // A chunked body: the JSON sits between the chunk sizes.
    let json = body
        .find('{')
        .and_then(|start| body.rfind('}').map(|end| &body[start..=end]))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

#[tokio::test]
async fn the_consoles_token_acts_as_its_person_alone() {
    let console = Console::new("carol", "acme");
    let token = console.token().to_owned();
    let server = server_for(2, config(), Some(console), |_| {}).await;
    bobs_turn(&server, "t-b1", "conv-bob").await;
    let before = table(&server.store).await;
    let url = &server.url;
    let as_bob = json!({"turnId": "t-b2", "conversationId": "conv-bob", "userId": "bob", "accountId": "acme", "content": "Mine now"});
    let as_carol = json!({"turnId": "t-c1", "conversationId": "conv-bob", "userId": "carol", "accountId": "acme", "content": "Hi"});
    let abort = json!({"type": "abort"});
    let (get, post, delete) = (Method::GET, Method::POST, Method::DELETE);
    let probes: Vec<(Method, &str, Option<&Value>, u16)> = vec![
        // Naming another person is refused; naming no one acts as carol, who owns nothing here.
        (
            get.clone(),
            "/conversations/conv-bob?userId=bob&accountId=acme",
            None,
            403,
        ),
        (get.clone(), "/conversations/conv-bob", None, 404),
        (get.clone(), "/conversations?userId=bob&accountId=acme", None, 403),
        (get, "/sessions/conv-bob/entries", None, 404),
        (post.clone(), "/turns", Some(&as_bob), 403),
        (post.clone(), "/turns", Some(&as_carol), 404),
        (
            delete.clone(),
            "/conversations/conv-bob?userId=bob&accountId=acme",
            None,
            403,
        ),
        (delete, "/conversations/conv-bob", None, 404),
        (post.clone(), "/turns/t-b1/stop?session=conv-bob", None, 404),
        (post, "/sessions/conv-bob/commands", Some(&abort), 404),
    ];
    for (method, path, body, expected) in probes {
        let mut request = client()
            .request(method.clone(), format!("{url}{path}"))
            .header("x-console-token", token.as_str());
        if let Some(body) = body {
            request = request.json(body);
        }
        let (status, answer) = send(request, None).await;
        assert_eq!(status, expected, "{method} {path}: {answer}");
        assert!(
            answer["error"].is_string(),
            "{method} {path}: one body shape: {answer}"
        );
    }
    // The token is taken in the query of an event stream alone.
    for request in [
        client().get(format!("{url}/console/config?consoleToken={token}")),
        client()
            .post(format!("{url}/turns?consoleToken={token}"))
            .json(&as_carol),
    ] {
        assert_eq!(send(request, None).await.0, 401);
    }
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new(),
        "a refusal changed the table"
    );
    assert_eq!(server.bedrock.requests().len(), 1);
    // Carol's own list holds nothing of Bob's.
    let (status, list) = send(
        client()
            .get(format!("{url}/conversations"))
            .header("x-console-token", token.as_str()),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(list["conversations"], json!([]), "{list}");
}

#[tokio::test]
async fn a_strangers_act_on_a_conversation_that_does_not_exist_yet_never_takes_effect() {
    let server = server_for(2, config(), None, |settings| {
        settings.event_start_wait = Duration::from_millis(300);
    })
    .await;
    let url = &server.url;
    let mallory = "userId=mallory&accountId=evil";
    // Mallory acts first on four conversations Bob has not begun.
    let (status, _) = send(
        client().post(format!("{url}/turns/t-f1/stop?session=conv-future&{mallory}")),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 202);
    let answer = json!({"status": "done", "result": "Mallory's words", "isError": false});
    let (status, _) = send(
        client()
            .post(format!(
                "{url}/turns/t-k1/actions/tu_ui?session=conv-future2&{mallory}"
            ))
            .json(&answer),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = send(
        client()
            .post(format!(
                "{url}/conversations/conv-future4/files?{mallory}&name=a.txt"
            ))
            .header("content-type", "text/plain")
            .body("planted"),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 201);
    let stream = client()
        .get(format!("{url}/turns/t-h1/events?session=conv-future3&{mallory}"))
        .header("x-api-key", KEY)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let before = table(&server.store).await;
    // Bob's turns in them are refused before anything runs.
    for (turn, conversation) in [
        ("t-f1", "conv-future"),
        ("t-k1", "conv-future2"),
        ("t-h1", "conv-future3"),
        ("t-x1", "conv-future4"),
    ] {
        server.bedrock.push(Reply::text("Hello Bob."));
        let body = json!({"turnId": turn, "conversationId": conversation, "userId": "bob", "accountId": "acme", "content": "Hi"});
        let (status, error) = send(client().post(format!("{url}/turns")).json(&body), Some(KEY)).await;
        assert_eq!(status, 404, "{conversation}: {error}");
    }
    // Mallory's stream ends, having seen nothing of Bob's.
    let body = stream.text().await.unwrap();
    assert!(sse_events(&body).is_empty(), "{body}");
    assert!(body.contains("event: stream_ended"), "{body}");
    assert!(body.contains("not_started"), "{body}");
    assert!(server.bedrock.requests().is_empty());
    let after = table(&server.store).await;
    assert_eq!(
        changed(&before, &after),
        Vec::<String>::new(),
        "Bob's refused turns changed the table"
    );
    let bobs: Vec<&String> = after
        .iter()
        .filter(|item| item.contains("\"bob\"") || item.contains("msg#"))
        .collect();
    assert!(bobs.is_empty(), "{bobs:?}");
}

#[tokio::test]
async fn ids_are_checked_on_every_route_and_a_refusal_writes_nothing() {
    let server = server_for(2, config(), None, |_| {}).await;
    bobs_turn(&server, "t-b1", "conv-bob").await;
    let before = table(&server.store).await;
    let bob = "userId=bob&accountId=acme";
    let long = "x".repeat(2_000);
    let answer = br#"{"status": "done", "result": "ok", "isError": false}"#;
    let json = [("x-api-key", KEY), ("content-type", "application/json")];
    let probes: Vec<(String, String, &str)> = vec![
        (
            "POST".into(),
            format!("/turns/t%00x/stop?session=conv-bob&{bob}"),
            "turnId",
        ),
        (
            "POST".into(),
            format!("/turns/{long}/stop?session=conv-bob&{bob}"),
            "turnId",
        ),
        (
            "POST".into(),
            format!("/turns/t-b1/stop?session=conv%01bob&{bob}"),
            "session",
        ),
        (
            "POST".into(),
            format!("/turns/t-b1/actions/tu%23x?session=conv-bob&{bob}"),
            "callId",
        ),
        (
            "POST".into(),
            format!("/turns/t-b1/actions/{long}?session=conv-bob&{bob}"),
            "callId",
        ),
        (
            "POST".into(),
            format!("/turns/t%0Ab1/actions/tu?session=conv-bob&{bob}"),
            "turnId",
        ),
        (
            "POST".into(),
            "/sessions/conv-bob/commands?userId=b%00ob&accountId=acme".to_owned(),
            "userId",
        ),
        (
            "GET".into(),
            format!("/sessions/conv-bob/state?userId=bob&accountId={long}"),
            "accountId",
        ),
        (
            "POST".into(),
            format!("/conversations/../files?{bob}&name=a.txt"),
            "conversationId",
        ),
        (
            "GET".into(),
            format!("/turns/t-b1/events?session=..&{bob}"),
            "session",
        ),
    ];
    for (method, path, field) in probes {
        let (status, body) = raw(&server, &method, &path, &json, answer).await;
        let shown: String = path.chars().take(80).collect();
        assert_eq!(status, 400, "{method} {shown}: {body}");
        assert_eq!(body["field"], field, "{method} {shown}: {body}");
    }
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new(),
        "a refusal changed the table"
    );
}

#[tokio::test]
async fn permanent_client_errors_answer_4xx_and_keep_nothing() {
    let server = server_for(2, config(), None, |_| {}).await;
    let url = &server.url;
    let bob = "userId=bob&accountId=acme";
    server
        .bedrock
        .push(StreamScript::new().open_text("Thinking").hang().into_reply());
    let body = json!({"turnId": "t-1", "conversationId": "conv-bob", "userId": "bob", "accountId": "acme", "content": "Hi"});
    assert_eq!(
        send(client().post(format!("{url}/turns")).json(&body), Some(KEY))
            .await
            .0,
        202
    );
    // The running turn takes commands up to its budget: four of the largest, then no more.
    let steer = json!({"type": "steer", "prompt": "s".repeat(32 * 1024)});
    let command = || {
        client()
            .post(format!("{url}/sessions/conv-bob/commands?{bob}"))
            .json(&steer)
    };
    // The turn runs once the model has been asked.
    server.bedrock.requested(1).await;
    let mut answers = Vec::new();
    loop {
        let (status, answer) = send(command(), Some(KEY)).await;
        answers.push(status);
        if status != 202 {
            assert_eq!(status, 413, "{answer}");
            assert_eq!(answer["error"]["code"], "too_large", "{answer}");
            assert_eq!(answer["error"]["retryable"], false, "{answer}");
            break;
        }
    }
    assert_eq!(answers, [202, 202, 202, 202, 413]);
    let before = table(&server.store).await;
    // A UI answer larger than an item keeps.
    let huge = json!({"status": "done", "result": "a".repeat(600 * 1024), "isError": false});
    let (status, answer) = send(
        client()
            .post(format!("{url}/turns/t-1/actions/tu_1?session=conv-bob&{bob}"))
            .json(&huge),
        Some(KEY),
    )
    .await;
    assert_eq!((status, &answer["field"]), (413, &json!("body")), "{answer}");
    // A page larger than the most one read gives.
    let (status, answer) = send(
        client().get(format!("{url}/sessions/conv-bob/entries?limit=5000&{bob}")),
        Some(KEY),
    )
    .await;
    assert_eq!((status, &answer["field"]), (400, &json!("limit")), "{answer}");
    // An upload to `..`.
    let (status, answer) = raw(
        &server,
        "POST",
        &format!("/conversations/../files?{bob}&name=a.txt"),
        &[("x-api-key", KEY), ("content-type", "text/plain")],
        b"hello",
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    let after = table(&server.store).await;
    let quiet = |items: &[String]| -> Vec<String> {
        // The running turn's own log may move on; nothing else may.
        items
            .iter()
            .filter(|i| !i.contains("event#t-1#"))
            .cloned()
            .collect()
    };
    assert_eq!(
        changed(&quiet(&before), &quiet(&after)),
        Vec::<String>::new(),
        "a refusal changed the table"
    );
    let (status, _) = send(
        client().post(format!("{url}/turns/t-1/stop?session=conv-bob&{bob}")),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 202);
}

#[tokio::test]
async fn a_stream_on_a_turn_that_never_starts_ends_and_frees_its_place() {
    let server = server_for(1, config(), None, |settings| {
        settings.event_streams.host = 1;
        settings.event_start_wait = Duration::from_millis(300);
    })
    .await;
    let events = format!(
        "{}/turns/t-never/events?session=conv-bob&userId=bob&accountId=acme",
        server.url
    );
    for _ in 0..2 {
        let response = client()
            .get(&events)
            .header("x-api-key", KEY)
            .timeout(Duration::from_secs(20))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body = response.text().await.unwrap();
        assert!(body.contains("event: stream_ended"), "{body}");
        assert!(body.contains(r#""reason":"not_started""#), "{body}");
        // Its place under the cap is given back once the server has dropped the stream.
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let (_, health) = send(client().get(format!("{}/health", server.url)), None).await;
                if health["eventStreams"] == 0 {
                    return;
                }
            }
        })
        .await
        .expect("the stream's place was given back");
    }
}

#[tokio::test]
async fn the_console_and_its_api_carry_the_security_headers() {
    let console = Console::new("carol", "acme");
    let token = console.token().to_owned();
    let server = server_for(1, config(), Some(console), |_| {}).await;
    for (path, header) in [
        ("/", None),
        ("/console.js", None),
        ("/client.js", None),
        ("/console/config", Some(token.as_str())),
    ] {
        let mut request = client().get(format!("{}{path}", server.url));
        if let Some(token) = header {
            request = request.header("x-console-token", token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers();
        let csp = headers["content-security-policy"].to_str().unwrap();
        for directive in ["script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert_eq!(headers["x-frame-options"], "DENY", "{path}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{path}");
    }
}

#[tokio::test]
async fn a_restored_approval_card_shows_what_the_live_card_showed() {
    let server = server_for(1, config(), None, |_| {}).await;
    let surface = json!({"surfaces": [{"id": "tasks", "title": "Task list", "actions": [
        {"id": "delete", "title": "Delete a task", "confirm": true,
            "consequence": "The task is gone for good.",
            "input": {"type": "object", "properties": {"id": {"type": "string", "title": "Task"}}}}
    ]}]});
    server
        .bedrock
        .push(Reply::tool_call("c1", "ui_tasks_delete", r#"{"id":"task-1"}"#));
    let body = json!({"turnId": "t-1", "conversationId": "conv-bob", "userId": "bob", "accountId": "acme",
        "content": "Delete it", "context": {"oui": surface}});
    let (status, _) = send(
        client().post(format!("{}/turns", server.url)).json(&body),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 202);
    let live = bobs_events(&server, "conv-bob", "t-1")
        .await
        .into_iter()
        .find(|event| event["type"] == "approval_required")
        .expect("the live card");
    assert_eq!(live["preview"]["title"], "Delete a task");
    let (status, conversation) = send(
        client().get(format!(
            "{}/conversations/conv-bob?userId=bob&accountId=acme",
            server.url
        )),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 200, "{conversation}");
    let restored = &conversation["approvals"][0];
    assert_eq!(restored["preview"], live["preview"], "{conversation}");
    assert_eq!(restored["preview"]["consequence"], "The task is gone for good.");
    let token = live["token"].as_str().unwrap();
    assert!(
        !conversation.to_string().contains(token),
        "the card never holds the token"
    );
}

#[tokio::test]
async fn a_ui_action_past_its_wait_is_withdrawn_and_kept_as_its_tab_left_it() {
    let engine = agent_worker::engine::EngineConfig {
        ui_action_timeout: Duration::from_millis(200),
        // The call looks once at the start and once more when its wait is over: the last look.
        ui_answer_poll: Duration::from_secs(60),
        ..config()
    };
    let server = server_for(1, engine, None, |_| {}).await;
    let url = &server.url;
    let bob = "userId=bob&accountId=acme";
    let surface = json!({"surfaces": [{"id": "tasks", "title": "Task list", "actions": [
        {"id": "add", "title": "Add a task",
            "input": {"type": "object", "properties": {"title": {"type": "string"}}}}
    ]}]});
    server
        .bedrock
        .push(Reply::tool_call("c1", "ui_tasks_add", r#"{"title":"milk"}"#));
    server
        .bedrock
        .push(Reply::tool_call("c2", "ui_tasks_add", r#"{"title":"bread"}"#));
    server.bedrock.push(Reply::text("I could not confirm either."));
    // The tab takes c2's request and never answers it; nobody takes c1's.
    let (status, _) = send(
        client()
            .post(format!("{url}/turns/t-1/actions/c2?session=conv-bob&{bob}"))
            .json(&json!({"status": "taken"})),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 200);
    let body = json!({"turnId": "t-1", "conversationId": "conv-bob", "userId": "bob", "accountId": "acme",
        "content": "Add milk and bread", "context": {"oui": surface}});
    assert_eq!(
        send(client().post(format!("{url}/turns")).json(&body), Some(KEY))
            .await
            .0,
        202
    );
    let events = bobs_events(&server, "conv-bob", "t-1").await;
    let withdrawn: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "ui_action_withdrawn")
        .collect();
    assert_eq!(withdrawn.len(), 2, "{events:#?}");
    assert_eq!(
        (&withdrawn[0]["callId"], &withdrawn[0]["reason"]),
        (&json!("c1"), &json!("timeout"))
    );
    assert_eq!(withdrawn[1]["callId"], "c2");
    assert_eq!(events.last().unwrap()["type"], "completed");
    // What the model read, and what is stored: c1 did not run; c2's outcome is unknown.
    let results =
        |text: &str| text.contains("no tab took the request") && text.contains("outcome is unknown");
    let third = server.bedrock.requests()[2].body["messages"].to_string();
    assert!(results(&third), "{third}");
    let stored = server.store.load_history(&sid("conv-bob")).await.unwrap();
    assert!(results(&serde_json::to_string(&stored).unwrap()));
    // A late answer is kept as an answer, and changes nothing of the ended turn.
    let before = table(&server.store).await;
    let late = json!({"status": "done", "result": {"added": "milk"}, "isError": false});
    let (status, _) = send(
        client()
            .post(format!("{url}/turns/t-1/actions/c1?session=conv-bob&{bob}"))
            .json(&late),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 200);
    let after = table(&server.store).await;
    let new: Vec<String> = changed(&before, &after);
    assert!(
        new.len() == 1 && new[0].starts_with("+ answer="),
        "only the answer's own item: {new:?}"
    );
    assert_eq!(server.store.load_history(&sid("conv-bob")).await.unwrap(), stored);
    assert_eq!(server.bedrock.requests().len(), 3);
}

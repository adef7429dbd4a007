//! The container's routes for the person's tab, on moto and the Bedrock stand-in: the console's
//! gate (its page is served open, everything else wants the per-start token or the API key, the
//! token works in a header or in an event stream's query, and the page never holds the API key),
//! a UI action answered through `POST /turns/{id}/actions/{callId}`, and a file uploaded through
//! `POST /conversations/{id}/files`. The page itself is driven in a browser by
//! `make test-browser`.

use crate::support;

use std::sync::Arc;

use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::hosts::container::console::Console;
use agent_worker::hosts::container::{ContainerConfig, ContainerHost};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::session::MemoryStore;
use agent_worker::sinks::Sinks;
use agent_worker_testkit::BedrockStandIn;
use std::time::Duration;

use agent_worker_testkit::Reply;
use serde_json::{Value, json};
use support::container::{events, post, server, sse_events, turn};
use support::{MODEL_ID, config};

const KEY: &str = "console-test-api-key-0123456789";
/// The key of the support module's container host.
const SERVER_KEY: &str = support::container::KEY;

/// A host on 127.0.0.1 with `console`, or none; its URL.
async fn host(bedrock: &BedrockStandIn, console: Option<Console>) -> String {
    let store = MemoryStore::new();
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store.clone())
        .build()
        .unwrap();
    let handler = TurnHandler::new(engine, Sinks::new());
    let mut host = ContainerHost::builder(
        handler,
        Arc::new(store),
        None,
        MODEL_ID,
        ContainerConfig::new(KEY).unwrap(),
    );
    if let Some(console) = console {
        host = host.console(console);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(crate::support::openapi::serve_checked(
        listener,
        host.build(),
        std::future::pending(),
    ));
    url
}

/// The table's answers to UI actions, and who owns each conversation, as text: what a refused
/// answer must leave as it found it (the running turn's own items move on meanwhile).
async fn answers_and_owner(store: &agent_worker::session::DynamoStore) -> Vec<String> {
    let owned = |field: &&str| field.starts_with("pk=") || field.starts_with("owner");
    support::container::table(store)
        .await
        .into_iter()
        .filter_map(|item| {
            if item.contains("uianswer#") {
                Some(item)
            } else if item.contains(r#"sk=S("meta")"#) {
                Some(item.split(' ').filter(owned).collect::<Vec<_>>().join(" "))
            } else {
                None
            }
        })
        .collect()
}

async fn status(url: String, header: Option<(&str, &str)>) -> (u16, String) {
    let mut request = reqwest::Client::new().get(url);
    if let Some((name, value)) = header {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn the_page_is_open_and_the_rest_wants_the_token_which_is_not_the_api_key() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let console = Console::new("ana", "acme");
    let token = console.token().to_owned();
    assert!(token.len() >= 64 && token != KEY);
    let url = host(&bedrock, Some(console)).await;

    for asset in ["/", "/console.js", "/console.css", "/client.js"] {
        let (code, body) = status(format!("{url}{asset}"), None).await;
        assert_eq!(code, 200, "{asset}");
        assert!(
            !body.contains(KEY) && !body.contains(&token),
            "{asset} holds no secret"
        );
    }
    assert_eq!(status(format!("{url}/console/config"), None).await.0, 401);
    let wrong = "0".repeat(64);
    assert_eq!(
        status(
            format!("{url}/console/config"),
            Some(("x-console-token", wrong.as_str()))
        )
        .await
        .0,
        401
    );
    let (code, body) = status(
        format!("{url}/console/config"),
        Some(("x-console-token", token.as_str())),
    )
    .await;
    assert_eq!(code, 200);
    let config: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&config["userId"], &config["accountId"]),
        (&"ana".into(), &"acme".into())
    );
    // The token rides in a query on an event stream alone (which cannot send headers), so that
    // it stays out of the other routes' access logs.
    assert_eq!(
        status(format!("{url}/console/config?consoleToken={token}"), None)
            .await
            .0,
        401
    );
    assert_eq!(
        status(format!("{url}/console/config?consoleToken={wrong}"), None)
            .await
            .0,
        401
    );
    // The API key still opens everything.
    assert_eq!(
        status(format!("{url}/console/config"), Some(("x-api-key", KEY)))
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn a_host_without_a_console_serves_no_page_and_takes_no_token() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let url = host(&bedrock, None).await;
    assert_eq!(status(format!("{url}/"), None).await.0, 401);
    assert_eq!(
        status(format!("{url}/console.js"), Some(("x-api-key", KEY)))
            .await
            .0,
        404
    );
    let token = Console::new("ana", "acme").token().to_owned();
    assert_eq!(status(format!("{url}/health"), None).await.0, 200);
    assert_eq!(
        status(
            format!("{url}/turns/t/events?session=s&userId=u&accountId=a&consoleToken={token}"),
            None
        )
        .await
        .0,
        401
    );
}

#[tokio::test]
async fn the_tab_answers_a_ui_action_through_the_container_and_the_turn_goes_on() {
    let server = server(4, config(), Duration::from_secs(5)).await;
    server
        .bedrock
        .push(Reply::tool_call("c1", "ui_tasks_add", r#"{"title":"Milk"}"#));
    server.bedrock.push(Reply::text("Added it."));
    let mut body = turn("t-ui", "conv-1");
    body["context"] = json!({"oui": {"surfaces": [{"id": "tasks", "actions": [
        {"id": "add", "input": {"type": "object", "properties": {"title": {"type": "string"}}}}
    ]}]}});
    let (status, _) = post(
        &format!("{}/turns", server.url),
        Some(SERVER_KEY),
        &body.to_string(),
    )
    .await;
    assert_eq!(status, 202);
    let mut stream = reqwest::Client::new()
        .get(format!(
            "{}/turns/t-ui/events?session=conv-1&userId=u&accountId=a",
            server.url
        ))
        .header("x-api-key", SERVER_KEY)
        .send()
        .await
        .unwrap();
    let answer_at = |person: &str| format!("{}/turns/t-ui/actions/c1?session=conv-1&{person}", server.url);
    let (mut text, mut answered) = (String::new(), false);
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(20), stream.chunk())
        .await
        .expect("the stream goes on")
        .unwrap()
    {
        text.push_str(&String::from_utf8_lossy(&chunk));
        if !answered && text.contains("ui_action_requested") {
            answered = true;
            let done = r#"{"status":"done","result":{"id":"task-1"}}"#;
            let answers = answers_and_owner(&server.store).await;
            let stranger = post(&answer_at("userId=eve&accountId=a"), Some(SERVER_KEY), done).await;
            assert_eq!(stranger.0, 404, "another person cannot answer: {stranger:?}");
            let bad = post(
                &answer_at("userId=u&accountId=a"),
                Some(SERVER_KEY),
                r#"{"status":"maybe"}"#,
            )
            .await;
            assert_eq!(bad.0, 400, "{bad:?}");
            let no_key = post(&answer_at("userId=u&accountId=a"), None, done).await;
            assert_eq!(no_key.0, 401);
            // The refusals wrote nothing: no answer to the call, the owner unchanged.
            assert_eq!(answers_and_owner(&server.store).await, answers);
            assert!(
                answers.iter().all(|item| !item.contains("uianswer#")),
                "nothing answered yet: {answers:?}"
            );
            assert!(
                answers.iter().any(|item| item.contains(r#"ownerUserId=S("u")"#)),
                "the conversation is u's: {answers:?}"
            );
            let taken = post(
                &answer_at("userId=u&accountId=a"),
                Some(SERVER_KEY),
                r#"{"status":"taken"}"#,
            )
            .await;
            assert_eq!(taken, (200, json!({"recorded": true})));
            let kept = post(&answer_at("userId=u&accountId=a"), Some(SERVER_KEY), done).await;
            assert_eq!(kept, (200, json!({"recorded": true})));
            let again = post(&answer_at("userId=u&accountId=a"), Some(SERVER_KEY), done).await;
            assert_eq!(
                again,
                (200, json!({"recorded": false})),
                "a call keeps its first answer"
            );
        }
    }
    let events = sse_events(&text);
    let request = events
        .iter()
        .find(|(_, e)| e["type"] == "ui_action_requested")
        .map(|(_, e)| e.clone())
        .unwrap();
    assert_eq!(
        (&request["surface"], &request["action"]),
        (&json!("tasks"), &json!("add"))
    );
    assert_eq!(events.last().unwrap().1["type"], "completed");
    let sent = server.bedrock.requests()[1].body.to_string();
    assert!(sent.contains("task-1"), "the model read the tab's answer: {sent}");
}

#[tokio::test]
async fn a_file_uploaded_to_the_conversation_goes_to_the_model_with_the_next_turn() {
    let server = server(4, config(), Duration::from_secs(5)).await;
    let upload = |person: &'static str, name: &'static str, body: &'static str| {
        let url = format!("{}/conversations/conv-1/files?{person}&name={name}", server.url);
        async move {
            let response = reqwest::Client::new()
                .post(url)
                .header("x-api-key", SERVER_KEY)
                .header("content-type", "text/plain; charset=utf-8")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap_or_default())
        }
    };
    let (status, reference) = upload("userId=u&accountId=a", "notes.txt", "The launch is on Friday.").await;
    assert_eq!(status, 201, "{reference}");
    assert_eq!(
        (
            &reference["name"],
            &reference["mediaType"],
            &reference["kind"],
            &reference["size"],
            &reference["status"]
        ),
        (
            &json!("notes.txt"),
            &json!("text/plain"),
            &json!("text"),
            &json!(24),
            &json!("ready")
        )
    );
    assert_eq!(
        upload("userId=u&accountId=a", "", "x").await.0,
        400,
        "a file has a name"
    );
    assert_eq!(
        upload("userId=u&accountId=a", "empty.txt", "").await.0,
        400,
        "and bytes"
    );

    server.bedrock.push(Reply::text("Friday, it says."));
    let mut body = turn("t-file", "conv-1");
    body["content"] = json!("What does my file say?");
    body["attachments"] = json!([reference]);
    let (status, _) = post(
        &format!("{}/turns", server.url),
        Some(SERVER_KEY),
        &body.to_string(),
    )
    .await;
    assert_eq!(status, 202);
    let events = events(&server, "t-file", None).await;
    assert_eq!(events.last().unwrap().1["type"], "completed");
    let sent = server.bedrock.requests()[0].body.to_string();
    assert!(
        sent.contains("The launch is on Friday."),
        "the file's text went with the message: {sent}"
    );

    // The conversation is the person's now: another person cannot put files in it.
    let (status, _) = upload("userId=eve&accountId=a", "more.txt", "x").await;
    assert_eq!(status, 404);
}

//! The container host over real HTTP on 127.0.0.1, with DynamoDB on moto and the Bedrock
//! stand-in.

use crate::support;
use agent_worker::session::{HistoryStore as _, TurnLedger as _};

use agent_worker_testkit::{sid, tid};
use std::time::Duration;

use agent_worker::engine::EngineConfig;
use agent_worker::hosts::container::{AllowedOrigins, ContainerConfig};
use agent_worker::session::TurnStatus;
use agent_worker_testkit::{Reply, StreamScript};
use serde_json::{Value, json};
use support::container::{KEY, Server, changed, events, post, server, server_with, sse_events, table, turn};
use support::{MODEL_ID, config};

#[tokio::test]
async fn each_status_code() {
    let server = server(1, config(), Duration::from_secs(5)).await;
    let url = format!("{}/turns", server.url);
    let body = turn("t1", "conv-1").to_string();
    assert_eq!(post(&url, None, &body).await.0, 401);
    assert_eq!(post(&url, Some("wrong-key-0123456789"), &body).await.0, 401);
    // Every route but the health check is behind the key.
    let client = reqwest::Client::new();
    for (method, path) in [
        (
            reqwest::Method::POST,
            "/turns/t1/stop?session=conv-1&userId=u&accountId=a",
        ),
        (
            reqwest::Method::GET,
            "/turns/t1/events?session=conv-1&userId=u&accountId=a",
        ),
    ] {
        let refused = client
            .request(method, format!("{}{path}", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401, "{path}");
    }
    let health = client.get(format!("{}/health", server.url)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let (status, error) = post(&url, Some(KEY), r#"{"turnId":"t1","conversationId":"c"}"#).await;
    assert_eq!(status, 400);
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("missing field `userId`"),
        "{error}"
    );
    assert_eq!(error["field"], "userId", "the missing field is named");
    let huge = json!({"turnId": "t", "conversationId": "c", "userId": "u", "accountId": "a", "content": "x".repeat(2 * 1024 * 1024)});
    let (status, error) = post(&url, Some(KEY), &huge.to_string()).await;
    assert_eq!(status, 413);
    assert!(
        error["error"].as_str().is_some_and(|e| e.contains("bytes")),
        "a JSON error: {error}"
    );
    // Words the table could not keep: refused at once, naming the field, nothing run.
    let wordy = json!({"turnId": "t-wordy", "conversationId": "c", "userId": "u", "accountId": "a", "content": "w".repeat(500_000)});
    let (status, error) = post(&url, Some(KEY), &wordy.to_string()).await;
    assert_eq!(
        (status, error["field"].as_str()),
        (413, Some("content")),
        "{error}"
    );
    // Ids a store cannot key are refused at the edge, naming the field.
    for (turn, session, field) in [
        ("t".repeat(10_000), "c".to_owned(), "turnId"),
        ("t".to_owned(), "c\u{0}".to_owned(), "conversationId"),
    ] {
        let body = json!({"turnId": turn, "conversationId": session, "userId": "u", "accountId": "a", "content": "Hi"});
        let (status, error) = post(&url, Some(KEY), &body.to_string()).await;
        assert_eq!((status, error["field"].as_str()), (400, Some(field)), "{error}");
    }

    // A turn that hangs keeps the one slot busy.
    server
        .bedrock
        .push(StreamScript::new().open_text("Thinking").hang().into_reply());
    assert_eq!(post(&url, Some(KEY), &body).await.0, 202);
    assert_eq!(
        post(&url, Some(KEY), &body).await.0,
        409,
        "the same turn is running"
    );
    let refused = reqwest::Client::new()
        .post(&url)
        .header("x-api-key", KEY)
        .body(turn("t2", "conv-2").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 503, "at capacity");
    assert_eq!(refused.headers()["retry-after"], "1");

    let health: Value = serde_json::from_str(
        &reqwest::get(format!("{}/health", server.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        health,
        json!({"status": "ok", "runningTurns": 1, "capacity": 1, "model": MODEL_ID,
            "eventStreams": 0, "eventReaders": 0})
    );

    let stop_url = format!("{}/turns/t1/stop?session=conv-1&userId=u&accountId=a", server.url);
    assert_eq!(post(&stop_url, Some(KEY), r#"{"reason":"now"}"#).await.0, 400);
    // A long reason is not echoed back whole.
    let long = json!({"reason": "r".repeat(100_000)}).to_string();
    let (status, error) = post(&stop_url, Some(KEY), &long).await;
    assert_eq!(status, 400);
    assert!(
        error.to_string().len() < 1_000,
        "{} bytes echoed",
        error.to_string().len()
    );
    // No turn id, or no session: refused, nothing written under an empty key.
    for url in [
        format!("{}/turns//stop?session=conv-1&userId=u&accountId=a", server.url),
        format!("{}/turns/t1/stop?session=&userId=u&accountId=a", server.url),
    ] {
        let (status, error) = post(&url, Some(KEY), "").await;
        assert_eq!(status, 400, "{url}: {error}");
    }
    assert_eq!(
        post(&stop_url, Some(KEY), r#"{"reason":"user_stop"}"#).await.0,
        202
    );
    let streamed = events(&server, "t1", None).await;
    assert_eq!(
        streamed.last().unwrap().1,
        json!({"type": "completed", "data": {"stopReason": "user_stop"}})
    );
    assert_eq!(post(&stop_url, Some(KEY), "").await.0, 409, "the turn had ended");
    assert!(ContainerConfig::new("").is_err(), "no key, no server");
}

#[tokio::test]
async fn a_turn_over_http_streams_its_events_in_order_and_a_reconnect_resumes_exactly() {
    let server = server(8, config(), Duration::from_secs(5)).await;
    server.bedrock.push(Reply::text("Hello over HTTP."));
    let (status, accepted) = post(
        &format!("{}/turns", server.url),
        Some(KEY),
        &turn("t1", "conv-1").to_string(),
    )
    .await;
    assert_eq!(status, 202);
    assert_eq!(accepted, json!({"turnId": "t1", "session": "conv-1"}));

    let all = events(&server, "t1", None).await;
    let ids: Vec<u64> = all.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        (0..all.len() as u64).collect::<Vec<_>>(),
        "in order, none twice"
    );
    assert_eq!(
        all.iter()
            .filter(|(_, e)| e["type"] == "completed" || e["type"] == "failed")
            .count(),
        1
    );
    assert_eq!(all.last().unwrap().1["type"], "completed");
    assert_eq!(all[0].1, json!({"type": "text", "delta": "Hello over HTTP."}));

    let resumed = events(&server, "t1", Some(all[0].0)).await;
    assert_eq!(resumed, all[1..].to_vec());
    // Resumed at the terminal, or past it, the stream ends at once with nothing in it (it polled
    // forever before).
    let terminal = all.last().unwrap().0;
    for cursor in [terminal, terminal + 5, u64::MAX] {
        assert_eq!(
            events(&server, "t1", Some(cursor)).await,
            Vec::new(),
            "cursor {cursor}"
        );
    }
    assert_eq!(server.ends.lock().unwrap()[0].outcome.as_str(), "completed");
}

#[tokio::test]
async fn shutdown_while_turns_run_loses_none() {
    let quick = EngineConfig {
        stop_poll_interval: Duration::from_millis(20),
        stop_poll_idle: Duration::from_millis(20),
        stop_grace: Duration::from_millis(50),
        ..config()
    };
    let mut server = server(8, quick, Duration::from_millis(200)).await;
    // One turn has finished before the shutdown; two hang through the grace and are stopped. (A
    // turn that finishes within the grace would race its store's commit against the grace.)
    server.bedrock.push(
        StreamScript::new()
            .text("Quick.", 2)
            .stop("end_turn")
            .into_reply(),
    );
    server
        .bedrock
        .push(StreamScript::new().open_text("Slow one").hang().into_reply());
    server
        .bedrock
        .push(StreamScript::new().open_text("Slow two").hang().into_reply());
    for id in ["t1", "t2", "t3"] {
        let (status, _) = post(
            &format!("{}/turns", server.url),
            Some(KEY),
            &turn(id, &format!("conv-{id}")).to_string(),
        )
        .await;
        assert_eq!(status, 202);
    }
    // Every turn has reached the model, and the quick one has ended, before the shutdown begins.
    tokio::time::timeout(Duration::from_secs(20), server.bedrock.requested(3))
        .await
        .expect("every turn reached the model");
    let ended = server.ended(1).await;
    assert_eq!(ended[0].turn_id, "t1");
    server.stop.take().unwrap().send(()).unwrap();
    server.served.await.unwrap().unwrap();

    for id in ["t1", "t2", "t3"] {
        let record = server
            .store
            .turn(&sid(&format!("conv-{id}")), &tid(id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.status, TurnStatus::Completed, "{id}");
        assert_eq!(
            server
                .store
                .load_history(&sid(&format!("conv-{id}")))
                .await
                .unwrap()
                .len(),
            2,
            "{id} was stored"
        );
    }
    let mut outcomes: Vec<&str> = server
        .ends
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.outcome.as_str())
        .collect();
    outcomes.sort();
    assert_eq!(outcomes, ["completed", "stopped", "stopped"]);
}

async fn health(server: &Server) -> Value {
    reqwest::get(format!("{}/health", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn subscribers_of_one_turn_share_one_reader_and_their_number_is_capped() {
    let server = server_with(1, config(), Duration::from_secs(5), |c| c.event_streams.host = 3).await;
    server
        .bedrock
        .push(StreamScript::new().open_text("Thinking").hang().into_reply());
    let url = format!("{}/turns", server.url);
    assert_eq!(
        post(&url, Some(KEY), &turn("t1", "conv-1").to_string()).await.0,
        202
    );
    let events_url = format!(
        "{}/turns/t1/events?session=conv-1&userId=u&accountId=a",
        server.url
    );
    let client = reqwest::Client::new();
    let mut open = Vec::new();
    for _ in 0..3 {
        let response = client
            .get(&events_url)
            .header("x-api-key", KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        open.push(response);
    }
    let now = health(&server).await;
    assert_eq!(
        (now["eventStreams"].as_u64(), now["eventReaders"].as_u64()),
        (Some(3), Some(1)),
        "{now}"
    );
    let refused = client
        .get(&events_url)
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503, "past the cap");

    // The turn ends: every subscriber gets the same whole stream, ending with the terminal.
    let stop_url = format!("{}/turns/t1/stop?session=conv-1&userId=u&accountId=a", server.url);
    assert_eq!(post(&stop_url, Some(KEY), "").await.0, 202);
    let mut bodies = Vec::new();
    for response in open {
        let body = tokio::time::timeout(Duration::from_secs(20), response.text())
            .await
            .expect("the stream ended after the terminal")
            .unwrap();
        bodies.push(sse_events(&body));
    }
    assert!(bodies.iter().all(|b| b == &bodies[0]), "{bodies:?}");
    assert_eq!(bodies[0].last().unwrap().1["type"], "completed");
    // Once they are gone, so is the reader.
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let now = health(&server).await;
            if now["eventStreams"] == 0 && now["eventReaders"] == 0 {
                return;
            }
        }
    })
    .await
    .expect("the streams and their reader were released");
}

/// A listed origin's page may call the API: its preflight is answered before the person's check
/// (no key, nothing read or written), and the answers name it; another origin's preflight names no
/// origin and its page cannot read the answers.
#[tokio::test]
async fn a_listed_origins_pages_may_call_the_api_and_no_other_origins() {
    const APP: &str = "https://app.example.com";
    let server = server_with(2, config(), Duration::from_secs(5), |settings| {
        settings.allowed_origins = AllowedOrigins::parse(APP).unwrap();
    })
    .await;
    let http = reqwest::Client::new();
    let before = table(&server.store).await;
    let preflight = |origin: &str| {
        http.request(reqwest::Method::OPTIONS, format!("{}/turns", server.url))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "x-api-key, content-type")
            .send()
    };

    let answer = preflight(APP).await.unwrap();
    assert!(answer.status().is_success(), "{}", answer.status());
    let header = |answer: &reqwest::Response, name: &str| {
        answer
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_ascii_lowercase())
    };
    assert_eq!(
        header(&answer, "access-control-allow-origin").as_deref(),
        Some(APP)
    );
    let allowed = header(&answer, "access-control-allow-headers").unwrap();
    assert!(
        allowed.contains("x-api-key") && allowed.contains("authorization"),
        "{allowed}"
    );
    assert!(
        header(&answer, "access-control-allow-methods")
            .unwrap()
            .contains("post")
    );

    let stranger = preflight("https://evil.example").await.unwrap();
    assert_eq!(header(&stranger, "access-control-allow-origin"), None);
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );

    // The call itself: checked as ever, and its answer names the listed origin alone.
    let list = |origin: &'static str| {
        http.get(format!("{}/conversations?userId=ada&accountId=acme", server.url))
            .header("origin", origin)
            .header("x-api-key", KEY)
            .send()
    };
    let answer = list(APP).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(
        header(&answer, "access-control-allow-origin").as_deref(),
        Some(APP)
    );
    let answer = list("https://evil.example").await.unwrap();
    assert_eq!(header(&answer, "access-control-allow-origin"), None);
    let refused = http
        .get(format!("{}/conversations?userId=ada&accountId=acme", server.url))
        .header("origin", APP)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401, "an origin is not a key");
}

/// A presigned upload needs a file area that takes one (S3): a local directory takes the bytes in
/// the body, and says so; bytes and a size together are refused. Neither writes anything.
#[tokio::test]
async fn a_presigned_upload_is_refused_where_the_file_area_takes_bytes_alone() {
    let server = server(2, config(), Duration::from_secs(5)).await;
    let http = reqwest::Client::new();
    let upload = |query: &str, body: &'static str| {
        http.post(format!(
            "{}/conversations/conv-files/files?userId=ada&accountId=acme&name=a.txt{query}",
            server.url
        ))
        .header("content-type", "text/plain")
        .body(body)
    };
    // The conversation is ada's (her first upload, its bytes in the body, made it hers).
    let (status, answer) = support::container::send(upload("", "hello"), Some(KEY)).await;
    assert_eq!(status, 201, "{answer}");
    let before = table(&server.store).await;
    for (query, body) in [("&size=10", ""), ("&size=5", "hello"), ("&size=0", "")] {
        let (status, answer) = support::container::send(upload(query, body), Some(KEY)).await;
        assert_eq!(status, 400, "{query}: {answer}");
        assert_eq!(answer["field"], "size", "{query}: {answer}");
    }
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
}

/// Issue 52: 24 streams opened by one person on made-up turn ids held every place, and another
/// person's events, `/agui`, `/invocations` and A2A then got 503 after their turns had started.
/// Streams are capped for one person and one account beside the host (429), and a protocol that
/// starts a turn takes its answer's stream place first: refused, it starts nothing.
#[tokio::test]
async fn one_person_cannot_take_the_streams_of_all_and_no_turn_starts_unanswerable() {
    use agent_worker::hosts::container::StreamCaps;
    let caps = StreamCaps {
        host: 4,
        person: 2,
        account: 3,
    };
    let server = server_with(2, config(), Duration::from_secs(5), |c| c.event_streams = caps).await;
    let client = reqwest::Client::new();
    let stream = |user: &str, account: &str, n: usize| {
        client
            .get(format!(
                "{}/turns/made-up-{user}-{n}/events?session=conv-{user}&userId={user}&accountId={account}",
                server.url
            ))
            .header("x-api-key", KEY)
            .send()
    };
    let mut open = Vec::new();
    for n in 0..2 {
        let response = stream("mallory", "evil", n).await.unwrap();
        assert_eq!(response.status(), 200);
        open.push(response);
    }
    let refused = stream("mallory", "evil", 2).await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("one person"), "{body}");
    // A refused stream claims nothing: a conversation no one owns stays no one's.
    let before = table(&server.store).await;
    let unclaimed = client
        .get(format!(
            "{}/turns/made-up-3/events?session=conv-unclaimed&userId=mallory&accountId=evil",
            server.url
        ))
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(unclaimed.status(), 429);
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
    // Another of the same account: one more, then the account's cap.
    let response = stream("eve", "evil", 0).await.unwrap();
    assert_eq!(response.status(), 200);
    open.push(response);
    assert_eq!(stream("eve", "evil", 1).await.unwrap().status(), 429);

    // Bob is served: his own stream, and a turn through /invocations.
    server.bedrock.push(Reply::text("Hello Bob."));
    let invoked = client
        .post(format!("{}/invocations?userId=bob&accountId=acme", server.url))
        .header("x-api-key", KEY)
        .json(&json!({ "prompt": "Hi" }))
        .send()
        .await
        .unwrap();
    assert_eq!(invoked.status(), 200);
    let answer: Value = invoked.json().await.unwrap();
    assert_eq!(answer["text"], "Hello Bob.", "{answer}");

    // The host's last place taken, a turn whose answer could not be streamed is not started.
    let response = stream("bob", "acme", 0).await.unwrap();
    assert_eq!(response.status(), 200);
    open.push(response);
    let before = table(&server.store).await;
    let refused = client
        .post(format!("{}/invocations?userId=carol&accountId=acme", server.url))
        .header("x-api-key", KEY)
        .json(&json!({ "prompt": "Hi" }))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
    assert_eq!(server.bedrock.requests().len(), 1, "carol's turn asked no model");
    drop(open);
}

//! The container host's people rules over real HTTP on 127.0.0.1: a person reaches their own
//! conversations alone (turns, reads, stops, lists, deletes), and a refusal stores nothing.

use crate::support;
use agent_worker::session::{HistoryStore as _, SignalStore as _};
use agent_worker_testkit::{sid, tid};
use std::time::Duration;

use agent_worker::hosts::container::TurnEnd;
use agent_worker_testkit::{Reply, StreamScript};
use serde_json::{Value, json};
use support::config;
use support::container::{KEY, Server, changed, post, server, sse_events, table};
#[tokio::test]
async fn a_turn_of_another_persons_conversation_is_refused_and_stores_nothing() {
    let server = server(2, config(), Duration::from_secs(5)).await;
    let url = format!("{}/turns", server.url);
    let of = |turn: &str, user: &str| {
        json!({"turnId": turn, "conversationId": "c-ada", "userId": user, "accountId": "acme", "content": "Hi"})
            .to_string()
    };
    server.bedrock.push(Reply::text("Hello Ada."));
    // Ada's turn makes the conversation hers before Mallory's comes: the route records the
    // owner before it answers.
    assert_eq!(post(&url, Some(KEY), &of("t1", "ada")).await.0, 202);
    server.ended(1).await;
    let before = table(&server.store).await;
    // Mallory's is refused at the door: nothing runs, nothing is written.
    let (status, error) = post(&url, Some(KEY), &of("t2", "mallory")).await;
    assert_eq!(status, 404, "{error}");
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
    assert_eq!(server.ends.lock().unwrap().len(), 1);
    assert_eq!(server.bedrock.requests().len(), 1);
    assert_eq!(server.store.load_history(&sid("c-ada")).await.unwrap().len(), 2);
}

#[tokio::test]
async fn only_the_owner_reads_or_stops_a_conversation() {
    let server = server(1, config(), Duration::from_secs(5)).await;
    server
        .bedrock
        .push(StreamScript::new().open_text("Thinking").hang().into_reply());
    let body = json!({"turnId": "t1", "conversationId": "c-ada", "userId": "ada", "accountId": "acme", "content": "Hi"});
    assert_eq!(
        post(&format!("{}/turns", server.url), Some(KEY), &body.to_string())
            .await
            .0,
        202
    );
    // The turn runs once the model has been asked.
    tokio::time::timeout(Duration::from_secs(20), server.bedrock.requested(1))
        .await
        .expect("the turn started");
    let client = reqwest::Client::new();
    let events = |who: &str| format!("{}/turns/t1/events?session=c-ada&{who}", server.url);
    let stop = |who: &str| format!("{}/turns/t1/stop?session=c-ada&{who}", server.url);
    for who in ["userId=mallory&accountId=acme", "userId=ada&accountId=evil-corp"] {
        let read = client
            .get(events(who))
            .header("x-api-key", KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), 404, "{who} reads");
        assert_eq!(post(&stop(who), Some(KEY), "").await.0, 404, "{who} stops");
    }
    // The refused stops wrote nothing: the running turn has no stop, before the owner acts.
    assert_eq!(
        server
            .store
            .stop_requested(&sid("c-ada"), &tid("t1"))
            .await
            .unwrap(),
        None
    );
    // Without the person's ids: 400, naming the one missing.
    let (status, error) = post(&stop("userId=ada"), Some(KEY), "").await;
    assert_eq!(status, 400);
    assert!(error.to_string().contains("accountId"), "{error}");
    // The owner can.
    assert_eq!(
        post(&stop("userId=ada&accountId=acme"), Some(KEY), "").await.0,
        202
    );
    let read = client
        .get(events("userId=ada&accountId=acme"))
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(20), read.text())
        .await
        .expect("the stream ended after the terminal")
        .unwrap();
    assert_eq!(sse_events(&body).last().unwrap().1["type"], "completed");
}

/// The ends seen so far, once there are `count` of them.
async fn ends(server: &Server, count: usize) -> Vec<TurnEnd> {
    server.ended(count).await
}

#[tokio::test]
async fn a_persons_conversations_are_listed_read_and_deleted_for_them_alone() {
    let server = server(2, config(), Duration::from_secs(5)).await;
    let of = |turn: &str, conversation: &str| {
        json!({"turnId": turn, "conversationId": conversation, "userId": "ada", "accountId": "acme", "content": format!("About {conversation}")})
            .to_string()
    };
    server.bedrock.push(Reply::text("First answer."));
    server.bedrock.push(Reply::text("Second answer."));
    let turns = format!("{}/turns", server.url);
    assert_eq!(post(&turns, Some(KEY), &of("t1", "c-1")).await.0, 202);
    ends(&server, 1).await;
    assert_eq!(post(&turns, Some(KEY), &of("t2", "c-2")).await.0, 202);
    ends(&server, 2).await;

    let client = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str| {
        client
            .request(method, format!("{}{path}", server.url))
            .header("x-api-key", KEY)
            .send()
    };
    let list = call(reqwest::Method::GET, "/conversations?userId=ada&accountId=acme")
        .await
        .unwrap();
    assert_eq!(list.status(), 200);
    let list: Value = list.json().await.unwrap();
    let listed: Vec<(&str, &str, &str)> = list["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap(),
                c["title"].as_str().unwrap(),
                c["preview"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("c-2", "About c-2", "Second answer."),
            ("c-1", "About c-1", "First answer.")
        ],
        "most recent first"
    );
    let got: Value = call(
        reqwest::Method::GET,
        "/conversations/c-1?userId=ada&accountId=acme",
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let texts: Vec<&str> = got["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["About c-1", "First answer."]);

    // Another person, or nobody: 404 and 400, never a confirmation that it exists.
    for path in [
        "/conversations/c-1?userId=mallory&accountId=acme",
        "/conversations/c-1?userId=ada&accountId=evil-corp",
    ] {
        assert_eq!(
            call(reqwest::Method::GET, path).await.unwrap().status(),
            404,
            "{path}"
        );
        assert_eq!(
            call(reqwest::Method::DELETE, path).await.unwrap().status(),
            404,
            "{path}"
        );
    }
    let none: Value = call(
        reqwest::Method::GET,
        "/conversations?userId=mallory&accountId=acme",
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(none["conversations"], json!([]));
    assert_eq!(
        call(reqwest::Method::GET, "/conversations?userId=ada")
            .await
            .unwrap()
            .status(),
        400
    );
    assert_eq!(
        call(
            reqwest::Method::GET,
            "/conversations?userId=ada&accountId=acme&limit=500"
        )
        .await
        .unwrap()
        .status(),
        400
    );
    let unkeyed = client
        .get(format!("{}/conversations?userId=ada&accountId=acme", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(unkeyed.status(), 401);

    // Deleted: counted, gone from the list, and a later turn of it runs nothing.
    let deleted = call(
        reqwest::Method::DELETE,
        "/conversations/c-1?userId=ada&accountId=acme",
    )
    .await
    .unwrap();
    assert_eq!(deleted.status(), 200);
    let deleted: Value = deleted.json().await.unwrap();
    assert_eq!(
        (deleted["messages"].as_u64(), deleted["turns"].as_u64()),
        (Some(2), Some(1))
    );
    assert!(deleted["events"].as_u64().unwrap() > 0);
    assert_eq!(
        call(
            reqwest::Method::GET,
            "/conversations/c-1?userId=ada&accountId=acme"
        )
        .await
        .unwrap()
        .status(),
        404
    );
    // A later turn of it is refused at the door (the queue's hosts refuse it as
    // `conversation_deleted` when it runs).
    assert_eq!(post(&turns, Some(KEY), &of("t3", "c-1")).await.0, 404);
    assert_eq!(server.ends.lock().unwrap().len(), 2);
    assert_eq!(
        server.bedrock.requests().len(),
        2,
        "the deleted conversation's turn asked no model"
    );
    assert!(server.store.load_history(&sid("c-1")).await.unwrap().is_empty());
}

//! The HTTP emit sink against a real HTTP receiver on 127.0.0.1.

use agent_worker::session::TurnLedger as _;
use agent_worker_testkit::{sid, tid};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::hosts::AgentTurnPayload;
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::protocol::AgentEvent;
use agent_worker::session::MemoryStore;
use agent_worker::sinks::{HttpEmitSink, Sink, Sinks, TurnRef};
use agent_worker_testkit::{BedrockStandIn, Reply};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;

/// What the receiver got, and how many requests it should still refuse.
#[derive(Default)]
struct Received {
    bodies: Vec<Value>,
    keys: Vec<String>,
    refuse: usize,
}

async fn receiver(refuse: usize) -> (SocketAddr, Arc<Mutex<Received>>) {
    let received = Arc::new(Mutex::new(Received {
        refuse,
        ..Received::default()
    }));
    let app = axum::Router::new()
        .route(
            "/api/emit",
            post(
                |State(state): State<Arc<Mutex<Received>>>, headers: HeaderMap, body: String| async move {
                    let mut state = state.lock().unwrap();
                    if state.refuse > 0 {
                        state.refuse -= 1;
                        return StatusCode::SERVICE_UNAVAILABLE;
                    }
                    state.keys.push(headers["x-api-key"].to_str().unwrap().to_owned());
                    state.bodies.push(serde_json::from_str(&body).unwrap());
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, received)
}

fn turn() -> TurnRef {
    TurnRef::new(sid("conv-1"), tid("turn-1"))
}

#[tokio::test]
async fn events_arrive_in_order_with_the_api_key() {
    let (addr, received) = receiver(0).await;
    let sink = HttpEmitSink::new(&format!("http://{addr}/"), "secret").unwrap();
    let mut open = sink.open(&turn());
    for event in [
        AgentEvent::text("a"),
        AgentEvent::text("b"),
        AgentEvent::completed(),
    ] {
        open.event(&event).await.unwrap();
    }
    open.close().await.unwrap();
    let received = received.lock().unwrap();
    // The two deltas were queued together, so they went as one event: two requests, not three.
    assert_eq!(received.keys, ["secret", "secret"]);
    let kinds: Vec<&str> = received
        .bodies
        .iter()
        .map(|b| b["event"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["text", "completed"]);
    assert_eq!(received.bodies[0]["event"]["delta"], "ab");
    assert_eq!(received.bodies[0]["conversationId"], "conv-1");
    assert_eq!(received.bodies[0]["turnId"], "turn-1");
    assert!(received.bodies[0].get("socketRoom").is_none(), "no room, no key");
}

/// The deltas and events each request carried, in order.
fn sent(received: &Mutex<Received>) -> Vec<String> {
    received
        .lock()
        .unwrap()
        .bodies
        .iter()
        .map(|b| match b["event"]["delta"].as_str() {
            Some(delta) => delta.to_owned(),
            None => b["event"]["type"].as_str().unwrap().to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn a_delta_held_for_more_goes_at_once_when_another_event_or_the_close_comes() {
    let (addr, received) = receiver(0).await;
    // A window no test waits out: were the delta held for it, closing would give up after
    // EMIT_DRAIN and say so.
    let sink = HttpEmitSink::new(&format!("http://{addr}"), "k")
        .unwrap()
        .with_text_window(std::time::Duration::from_secs(3600));
    let mut open = sink.open(&turn());
    open.event(&AgentEvent::text("a")).await.unwrap();
    // The sink's task takes the delta and waits for more.
    tokio::task::yield_now().await;
    open.event(&AgentEvent::text("b")).await.unwrap();
    open.event(&AgentEvent::Thinking { delta: "t".into() })
        .await
        .unwrap();
    open.event(&AgentEvent::text("c")).await.unwrap();
    open.close().await.unwrap();
    assert_eq!(sent(&received), ["ab", "t", "c"]);
}

#[tokio::test]
async fn the_payloads_socket_room_travels_with_every_event() {
    let (addr, received) = receiver(0).await;
    let sink = HttpEmitSink::new(&format!("http://{addr}/"), "k").unwrap();
    let mut open = sink.open(&TurnRef {
        socket_room: Some("room:ana".into()),
        ..turn()
    });
    for event in [AgentEvent::text("a"), AgentEvent::completed()] {
        open.event(&event).await.unwrap();
    }
    open.close().await.unwrap();
    let rooms: Vec<String> = received
        .lock()
        .unwrap()
        .bodies
        .iter()
        .map(|b| b["socketRoom"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(rooms, ["room:ana", "room:ana"]);
}

#[tokio::test]
async fn a_refused_event_is_retried() {
    let (addr, received) = receiver(2).await;
    let sink = HttpEmitSink::new(&format!("http://{addr}"), "k").unwrap();
    let mut open = sink.open(&turn());
    open.event(&AgentEvent::completed()).await.unwrap();
    open.close().await.unwrap();
    assert_eq!(
        received.lock().unwrap().bodies.len(),
        1,
        "the third try went through"
    );
}

#[tokio::test]
async fn a_dead_endpoint_never_fails_the_turn() {
    // A port nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("Fine without it."));
    let store = MemoryStore::new();
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), "m"))
        .store(store.clone())
        .build()
        .unwrap();
    let sinks = Sinks::new().with(HttpEmitSink::new(&format!("http://{dead}"), "k").unwrap());
    let payload = AgentTurnPayload::decode(
        r#"{"turnId":"turn-1","conversationId":"conv-1","userId":"u","accountId":"a","content":"Hi"}"#,
    )
    .unwrap();
    let outcome = TurnHandler::new(engine, sinks).run_turn(&payload, None).await;
    assert!(!outcome.is_redrive(), "{outcome:?}");
    assert_eq!(
        store
            .turn(&sid("conv-1"), &tid("turn-1"))
            .await
            .unwrap()
            .unwrap()
            .status,
        agent_worker::session::TurnStatus::Completed
    );
}

#[test]
fn bad_settings_are_refused() {
    assert!(
        HttpEmitSink::new("ftp://x", "k")
            .unwrap_err()
            .to_string()
            .contains("http://")
    );
    assert!(
        HttpEmitSink::new("http://x", " ")
            .unwrap_err()
            .to_string()
            .contains("API key")
    );
}

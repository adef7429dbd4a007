//! Middleware from the outside: each wrapper is an Agent, acts on what it should, and passes
//! every other event through unchanged (MUST 5).

use crate::support;

use std::time::Duration;

use agent_worker::protocol::conformance::CleanupProbe;
use agent_worker::protocol::middleware::{
    Deadline, DeadlineLayer, TokenBudget, TokenBudgetLayer, TraceLayer, Traced,
};
use agent_worker::protocol::{Agent, AgentEvent, AgentExt, Prompt, Scope, agent_fn, codes};
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{BedrockStandIn, StreamScript, tid};
use futures_util::{StreamExt, stream};
use serde_json::json;
use support::*;

fn unknown() -> AgentEvent {
    serde_json::from_value(json!({"type": "agent:approval_required", "preview": {"title": "Pay €12"}}))
        .unwrap()
}

fn script() -> Vec<AgentEvent> {
    vec![
        AgentEvent::text("a"),
        unknown(),
        AgentEvent::usage(10, 5),
        AgentEvent::thinking("t"),
        AgentEvent::completed_with(json!({"k": 1})),
    ]
}

fn scripted() -> impl Agent + Clone {
    agent_fn(|_: Scope, _: Prompt| stream::iter(script()))
}

#[tokio::test]
async fn every_wrapper_relays_unknown_events_unchanged() {
    let stacked = scripted()
        .layer(TokenBudgetLayer::new(1_000))
        .layer(DeadlineLayer::new(Duration::from_secs(60)))
        .layer(TraceLayer::new());
    let events: Vec<_> = stacked
        .invoke(Scope::new("s".parse().unwrap()), Prompt::text("x"))
        .collect()
        .await;
    assert_eq!(events, script());
    assert_eq!(
        serde_json::to_value(&events[1]).unwrap(),
        json!({"type": "agent:approval_required", "preview": {"title": "Pay €12"}})
    );
}

#[tokio::test(start_paused = true)]
async fn the_deadline_ends_a_turn_that_runs_too_long_and_cancels_it() {
    let probe = CleanupProbe::new();
    let on_drop = probe.clone();
    let slow = agent_fn(move |_: Scope, _: Prompt| {
        let guard = on_drop.guard();
        stream::once(async { AgentEvent::text("started") })
            .chain(stream::pending())
            .map(move |e| {
                let _ = &guard;
                e
            })
    });
    let events: Vec<_> = Deadline::new(slow, Duration::from_secs(90))
        .invoke(Scope::new("s".parse().unwrap()), Prompt::text("x"))
        .collect()
        .await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], AgentEvent::text("started"));
    let (details, retryable, code) = failure(&events);
    assert!(!retryable);
    assert_eq!(code.as_deref(), Some(codes::DEADLINE));
    assert!(details.contains("90000 ms"), "{details}");
    tokio::time::timeout(Duration::from_secs(1), probe.wait())
        .await
        .expect("the inner turn was dropped");
}

#[tokio::test(start_paused = true)]
async fn a_turn_within_its_deadline_is_untouched() {
    let events: Vec<_> = Deadline::new(scripted(), Duration::from_secs(1))
        .invoke(Scope::new("s".parse().unwrap()), Prompt::text("x"))
        .collect()
        .await;
    assert_eq!(events, script());
}

#[tokio::test]
async fn the_deadline_over_the_engine_aborts_the_model_request() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    // A slow model: a frame every 10 s, far past the 200 ms deadline.
    bedrock.push(
        StreamScript::new()
            .text("Hmm, let me think about that for a while.", 8)
            .stop("end_turn")
            .chunk_delay(Duration::from_secs(10))
            .into_reply(),
    );
    let engine = engine(&bedrock, &MemoryStore::new(), config(), vec![]);
    let events: Vec<_> = Deadline::new(engine, Duration::from_millis(200))
        .invoke(Scope::new("s".parse().unwrap()), Prompt::text("x"))
        .collect()
        .await;
    assert_eq!(failure(&events).2.as_deref(), Some(codes::DEADLINE));
    tokio::time::timeout(
        Duration::from_secs(5),
        bedrock.closed_early().wait_for(|n| *n == 1),
    )
    .await
    .expect("the stand-in saw the request dropped")
    .unwrap();
}

#[tokio::test]
async fn the_budget_stops_a_turn_after_the_step_that_goes_over() {
    let probe = CleanupProbe::new();
    let on_drop = probe.clone();
    let hungry = agent_fn(move |_: Scope, _: Prompt| {
        let guard = on_drop.guard();
        let usage = |n| AgentEvent::usage(n, 100);
        stream::iter([
            usage(500),
            AgentEvent::text("more"),
            usage(500),
            AgentEvent::text("never"),
        ])
        .chain(stream::pending())
        .map(move |e| {
            let _ = &guard;
            e
        })
    });
    let events: Vec<_> = TokenBudget::new(hungry, 1_000)
        .invoke(Scope::new("s".parse().unwrap()), Prompt::text("x"))
        .collect()
        .await;
    assert_eq!(events.len(), 4, "{events:#?}");
    assert_eq!(events[1], AgentEvent::text("more"));
    assert!(matches!(
        events[2],
        AgentEvent::Usage {
            input_tokens: 500,
            ..
        }
    ));
    let (details, retryable, code) = failure(&events);
    assert!(!retryable);
    assert_eq!(code.as_deref(), Some(codes::BUDGET_EXCEEDED));
    assert_eq!(details, "the turn used 1200 tokens, over its budget of 1000");
    tokio::time::timeout(Duration::from_secs(1), probe.wait())
        .await
        .expect("the inner turn was dropped");
}

#[tokio::test]
async fn the_trace_wrapper_logs_each_turn_in_a_span_with_session_and_turn_id() {
    let captured = support::LogCapture::default();
    let _default = tracing::subscriber::set_default(captured.subscriber(tracing::Level::INFO));

    let traced = Traced::new(scripted());
    let events: Vec<_> = traced
        .invoke(
            Scope::new("s-7".parse().unwrap()).with_turn_id(tid("t-3")),
            Prompt::text("x"),
        )
        .collect()
        .await;
    assert_eq!(events, script());
    let logs = captured.text();
    assert!(logs.contains("turn{session=s-7 turn_id=\"t-3\"}"), "{logs}");
    assert!(logs.contains("turn completed"), "{logs}");
}

#[tokio::test]
async fn collect_through_a_stack_sees_the_middleware_failure() {
    let over =
        agent_fn(|_: Scope, _: Prompt| stream::iter([AgentEvent::usage(50, 0), AgentEvent::completed()]))
            .layer(TokenBudgetLayer::new(10));
    let err = over
        .collect(Scope::new("s".parse().unwrap()), Prompt::text("x"))
        .await
        .unwrap_err();
    let said = agent_worker::protocol::chain(&err);
    assert!(said.contains("over its budget"), "{said}");
}

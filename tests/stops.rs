//! Stopping and superseding a turn, on the engine with the Bedrock stand-in.

use crate::support;

use agent_worker_testkit::{sid, tid};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_worker::engine::tools::{ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::AgentTurnPayload;
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope, codes};
use agent_worker::session::history::check;
use agent_worker::session::{
    Claim, HistoryStore, Lease, MemoryStore, Message, OwnerStore, SignalStore, Stop, StopCause, StopOutcome,
    StoreError, TurnLedger, TurnOutcome, TurnRecord, TurnStatus,
};
use agent_worker::sinks::{Sink, SinkError, Sinks, TurnRef, TurnSink};
use agent_worker_testkit::{BedrockStandIn, Reply, StreamScript};
use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::{Value, json};
use support::*;

fn quick_stops() -> EngineConfig {
    EngineConfig {
        stop_poll_interval: Duration::from_millis(10),
        stop_poll_idle: Duration::from_millis(10),
        stop_grace: Duration::from_millis(50),
        ..config()
    }
}

fn stopped_with(events: &[AgentEvent], reason: &str) {
    assert_eq!(
        terminal(events),
        &AgentEvent::completed_with(json!({ "stopReason": reason })),
        "{events:#?}"
    );
}

#[tokio::test]
async fn a_stop_asked_while_the_turn_waited_means_the_model_is_never_called() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    assert_eq!(
        store
            .request_stop(&sid("s1"), &tid("t1"), Stop::now(StopCause::UserStop))
            .await
            .unwrap(),
        StopOutcome::Recorded
    );
    let engine = engine(&bedrock, &store, quick_stops(), vec![]);
    let events: Vec<_> = engine
        .invoke(
            Scope::new("s1".parse().unwrap()).with_turn_id(tid("t1")),
            Prompt::text("Hi"),
        )
        .collect()
        .await;
    stopped_with(&events, "user_stop");
    assert!(bedrock.requests().is_empty(), "the stand-in received no request");
    let history = store.load_history(&sid("s1")).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].stopped.map(|s| s.reason), Some(StopCause::UserStop));
    assert!(history[1].text().contains("stopped"));
}

/// A tool that signals when it starts, then never finishes.
fn slow_tool(started: Arc<tokio::sync::Notify>) -> Arc<dyn agent_worker::engine::Tool> {
    Arc::new(tool_fn(
        ToolSpec::new("slow_lookup", "Takes forever.", json!({"type": "object"})),
        move |_, _| {
            let started = started.clone();
            async move {
                started.notify_one();
                std::future::pending::<()>().await;
                Ok(Value::Null)
            }
        },
    ))
}

#[tokio::test]
async fn a_stop_during_a_slow_tool_keeps_one_result_per_call_and_the_next_request_valid() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(
        StreamScript::new()
            .text("Looking it up.", 1)
            .tool_use("call-1", "slow_lookup", "{}", 1)
            .stop("tool_use")
            .into_reply(),
    );
    let store = MemoryStore::new();
    let started = Arc::new(tokio::sync::Notify::new());
    let engine = engine(&bedrock, &store, quick_stops(), vec![slow_tool(started.clone())]);
    let turn = engine.invoke(
        Scope::new("s1".parse().unwrap()).with_turn_id(tid("t1")),
        Prompt::text("Find it"),
    );
    let stopper = {
        let store = store.clone();
        async move {
            started.notified().await;
            store
                .request_stop(&sid("s1"), &tid("t1"), Stop::now(StopCause::UserStop))
                .await
                .unwrap();
        }
    };
    let (events, ()) = tokio::join!(turn.collect::<Vec<_>>(), stopper);
    stopped_with(&events, "user_stop");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolEnded { id, is_error: true, .. } if id == "call-1"))
    );

    let history = store.load_history(&sid("s1")).await.unwrap();
    check(&history).unwrap();
    assert_eq!(history.len(), 4, "{history:#?}");
    assert_eq!(history[3].stopped.map(|s| s.reason), Some(StopCause::UserStop));

    // The next turn's request is valid and tells the model where the turn was stopped.
    bedrock.push(Reply::text("Sorry, stopped."));
    let next = run(&engine, "s1", "Never mind").await;
    assert_eq!(terminal(&next), &AgentEvent::completed());
    let messages = bedrock.requests()[1].body["messages"].clone();
    let result = &messages[2]["content"][0]["toolResult"];
    assert_eq!(
        (result["toolUseId"].as_str(), result["status"].as_str()),
        (Some("call-1"), Some("error"))
    );
    assert!(
        messages
            .to_string()
            .contains("The person stopped this turn here.")
    );
}

#[tokio::test]
async fn a_stop_while_the_model_streams_cuts_it_off_after_the_grace_and_keeps_the_words() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(
        StreamScript::new()
            .text("one two three four five six seven eight nine ten", 10)
            .stop("end_turn")
            .chunk_delay(Duration::from_millis(200))
            .into_reply(),
    );
    let store = MemoryStore::new();
    let engine = engine(&bedrock, &store, quick_stops(), vec![]);
    let mut turn = engine.invoke(
        Scope::new("s1".parse().unwrap()).with_turn_id(tid("t1")),
        Prompt::text("Count"),
    );
    let mut events = vec![turn.next().await.unwrap()];
    store
        .request_stop(&sid("s1"), &tid("t1"), Stop::now(StopCause::UserStop))
        .await
        .unwrap();
    events.extend(turn.collect::<Vec<_>>().await);
    stopped_with(&events, "user_stop");
    let said = text_of(&events);
    assert!(said.starts_with("one") && !said.contains("ten"), "{said}");
    tokio::time::timeout(
        Duration::from_secs(5),
        bedrock.closed_early().wait_for(|n| *n == 1),
    )
    .await
    .expect("the model stream was aborted")
    .unwrap();
    let history = store.load_history(&sid("s1")).await.unwrap();
    assert_eq!(history[1].text(), said);
    assert!(history[1].stopped.is_some());
}

#[tokio::test]
async fn an_answer_that_ends_within_the_grace_completes_as_it_would_have() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(
        StreamScript::new()
            .text("Almost done.", 4)
            .stop("end_turn")
            .chunk_delay(Duration::from_millis(30))
            .into_reply(),
    );
    let store = MemoryStore::new();
    let config = EngineConfig {
        stop_grace: Duration::from_secs(30),
        ..quick_stops()
    };
    let engine = engine(&bedrock, &store, config, vec![]);
    let mut turn = engine.invoke(
        Scope::new("s1".parse().unwrap()).with_turn_id(tid("t1")),
        Prompt::text("Hi"),
    );
    let mut events = vec![turn.next().await.unwrap()];
    store
        .request_stop(&sid("s1"), &tid("t1"), Stop::now(StopCause::UserStop))
        .await
        .unwrap();
    events.extend(turn.collect::<Vec<_>>().await);
    assert_eq!(terminal(&events), &AgentEvent::completed());
    assert_eq!(text_of(&events), "Almost done.");
    assert!(store.load_history(&sid("s1")).await.unwrap()[1].stopped.is_none());
}

#[tokio::test]
async fn a_stop_after_the_turn_ended_changes_nothing() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("Done."));
    let store = MemoryStore::new();
    let engine = engine(&bedrock, &store, quick_stops(), vec![]);
    let _: Vec<_> = engine
        .invoke(
            Scope::new("s1".parse().unwrap()).with_turn_id(tid("t1")),
            Prompt::text("Hi"),
        )
        .collect()
        .await;
    let before = store.load_history(&sid("s1")).await.unwrap();
    assert_eq!(
        store
            .request_stop(&sid("s1"), &tid("t1"), Stop::now(StopCause::UserStop))
            .await
            .unwrap(),
        StopOutcome::AlreadyEnded
    );
    assert_eq!(store.load_history(&sid("s1")).await.unwrap(), before);
}

#[tokio::test]
async fn a_barge_in_stops_the_running_turn_and_reads_history_once_it_is_stored() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(
        StreamScript::new()
            .open_text("Let me write a long essay")
            .hang()
            .into_reply(),
    );
    bedrock.push(Reply::text("Sure, something shorter."));
    let store = MemoryStore::new();
    let engine = engine(&bedrock, &store, quick_stops(), vec![]);

    let mut first = engine.invoke(
        Scope::new("s1".parse().unwrap()).with_turn_id(tid("t1")),
        Prompt::text("Write an essay"),
    );
    let mut first_events = vec![first.next().await.unwrap()];
    let second = engine.invoke(
        Scope::new("s1".parse().unwrap())
            .with_turn_id(tid("t2"))
            .with("supersedes", json!(["t1"])),
        Prompt::text("Actually, something shorter"),
    );
    let (rest, second_events) = tokio::join!(first.collect::<Vec<_>>(), second.collect::<Vec<_>>());
    first_events.extend(rest);
    stopped_with(&first_events, "superseded");
    assert_eq!(terminal(&second_events), &AgentEvent::completed());

    let sent = bedrock.requests()[1].body["messages"].clone();
    assert_eq!(sent.as_array().unwrap().len(), 3, "{sent}");
    assert!(sent[1].to_string().contains("Let me write a long essay"));
    assert!(
        sent[1]
            .to_string()
            .contains("cut short here by the person's next message")
    );
    check(&store.load_history(&sid("s1")).await.unwrap()).unwrap();
}

#[tokio::test]
async fn a_turn_that_lists_itself_as_superseded_does_not_wait_for_itself() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("Hello."));
    let store = MemoryStore::new();
    // Were it to wait for itself, it would wait the whole ten minutes.
    let patient = EngineConfig {
        supersede_wait: Duration::from_secs(600),
        ..quick_stops()
    };
    let engine = engine(&bedrock, &store, patient, vec![]);
    let events = tokio::time::timeout(
        Duration::from_secs(20),
        engine
            .invoke(
                Scope::new("s1".parse().unwrap())
                    .with_turn_id(tid("t1"))
                    .with("supersedes", json!(["t1"])),
                Prompt::text("Hi"),
            )
            .collect::<Vec<_>>(),
    )
    .await
    .expect("the turn did not wait for itself");
    assert_eq!(terminal(&events), &AgentEvent::completed());
}

/// Counts the events a sink receives.
#[derive(Debug, Default, Clone)]
struct Counting(Arc<AtomicUsize>);

#[derive(Debug)]
struct CountingTurn(Arc<AtomicUsize>);

impl Sink for Counting {
    fn open(&self, _turn: &TurnRef) -> Box<dyn TurnSink> {
        Box::new(CountingTurn(self.0.clone()))
    }
}

#[async_trait]
impl TurnSink for CountingTurn {
    async fn event(&mut self, _event: &AgentEvent) -> Result<(), SinkError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn a_redelivered_turn_that_was_superseded_does_nothing_at_all() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    store
        .request_stop(&sid("s1"), &tid("old"), Stop::now(StopCause::Superseded))
        .await
        .unwrap();
    let engine = engine(&bedrock, &store, quick_stops(), vec![]);

    let events: Vec<_> = engine
        .invoke(
            Scope::new("s1".parse().unwrap()).with_turn_id(tid("old")),
            Prompt::text("Hi"),
        )
        .collect()
        .await;
    assert_eq!(failure(&events).2.as_deref(), Some(codes::SUPERSEDED));

    // Through the host: acknowledged, and the sinks hear nothing.
    let counting = Counting::default();
    let handler = TurnHandler::new(engine, Sinks::new().with(counting.clone()));
    let payload = AgentTurnPayload::decode(
        r#"{"turnId":"old","conversationId":"s1","userId":"u","accountId":"a","content":"Hi"}"#,
    )
    .unwrap();
    assert!(!handler.run_turn(&payload, None).await.is_redrive());
    assert_eq!(counting.0.load(Ordering::SeqCst), 0);
    assert!(bedrock.requests().is_empty());
    assert!(store.load_history(&sid("s1")).await.unwrap().is_empty());
}

/// A store whose writes of messages never finish: a database that hangs.
#[derive(Debug, Clone)]
struct HangingWrites(MemoryStore);

#[async_trait]
impl OwnerStore for HangingWrites {
    async fn claim_owner(
        &self,
        session: &agent_worker::session::SessionId,
        turn_id: Option<&agent_worker::session::TurnId>,
        owner: &agent_worker::session::Owner,
    ) -> Result<agent_worker::session::OwnerCheck, StoreError> {
        self.0.claim_owner(session, turn_id, owner).await
    }

    async fn owner(
        &self,
        session: &agent_worker::session::SessionId,
    ) -> Result<Option<agent_worker::session::Owner>, StoreError> {
        self.0.owner(session).await
    }
}

#[async_trait]
impl HistoryStore for HangingWrites {
    async fn load_history(
        &self,
        session: &agent_worker::session::SessionId,
    ) -> Result<Vec<Message>, StoreError> {
        self.0.load_history(session).await
    }
}

#[async_trait]
impl SignalStore for HangingWrites {
    async fn request_stop(
        &self,
        session: &agent_worker::session::SessionId,
        turn_id: &agent_worker::session::TurnId,
        stop: Stop,
    ) -> Result<StopOutcome, StoreError> {
        self.0.request_stop(session, turn_id, stop).await
    }

    async fn stop_requested(
        &self,
        session: &agent_worker::session::SessionId,
        turn_id: &agent_worker::session::TurnId,
    ) -> Result<Option<Stop>, StoreError> {
        self.0.stop_requested(session, turn_id).await
    }
}

#[async_trait]
impl TurnLedger for HangingWrites {
    async fn claim_turn(
        &self,
        session: &agent_worker::session::SessionId,
        turn_id: &agent_worker::session::TurnId,
        lease: Lease,
    ) -> Result<Claim, StoreError> {
        self.0.claim_turn(session, turn_id, lease).await
    }

    async fn complete_turn(
        &self,
        session: &agent_worker::session::SessionId,
        turn_id: &agent_worker::session::TurnId,
        messages: &[Message],
        outcome: &TurnOutcome,
    ) -> Result<(), StoreError> {
        if !messages.is_empty() {
            std::future::pending::<()>().await;
        }
        self.0.complete_turn(session, turn_id, messages, outcome).await
    }

    async fn release_turn(
        &self,
        session: &agent_worker::session::SessionId,
        turn_id: &agent_worker::session::TurnId,
    ) -> Result<(), StoreError> {
        self.0.release_turn(session, turn_id).await
    }

    async fn turn(
        &self,
        session: &agent_worker::session::SessionId,
        turn_id: &agent_worker::session::TurnId,
    ) -> Result<Option<TurnRecord>, StoreError> {
        self.0.turn(session, turn_id).await
    }
}

#[tokio::test]
async fn a_deadline_whose_store_does_not_finish_in_time_keeps_nothing_and_says_so() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(StreamScript::new().open_text("Working").hang().into_reply());
    let memory = MemoryStore::new();
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(HangingWrites(memory.clone()))
        .config(EngineConfig {
            turn_deadline: Duration::from_millis(200),
            store_timeout: Duration::from_millis(100),
            ..quick_stops()
        })
        .build()
        .unwrap();
    let events: Vec<_> = engine
        .invoke(
            Scope::new("s1".parse().unwrap()).with_turn_id(tid("t1")),
            Prompt::text("Hi"),
        )
        .collect()
        .await;
    let (details, retryable, code) = failure(&events);
    assert_eq!(code.as_deref(), Some(codes::TURN_DEADLINE_EXCEEDED));
    assert!(!retryable);
    assert!(details.contains("nothing of it was kept"), "{details}");
    let record = memory.turn(&sid("s1"), &tid("t1")).await.unwrap().unwrap();
    assert_eq!(record.status, TurnStatus::Failed);
    assert!(!record.outcome.unwrap().failure().unwrap().stored);
    assert!(memory.load_history(&sid("s1")).await.unwrap().is_empty());
}

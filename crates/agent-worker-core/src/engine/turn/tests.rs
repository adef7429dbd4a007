//! The phases around a turn's rounds, on the memory store: what each admits, refuses, and
//! records, and the terminal each refusal becomes.

use crate::session::test_ids::{sid, tid};
use crate::session::{SignalStore as _, TurnLedger as _};

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::TurnAsk;
use super::phases::{self, Refusal};
use crate::engine::model::{Model, ModelEvent, ModelRequest, ModelStream, StopReason};
use crate::engine::{Engine, EngineInner};
use crate::protocol::{AgentEvent, Prompt, codes};
use crate::session::{Lease, MemoryStore, Stop, StopCause, TurnOutcome, TurnStatus};

#[derive(Debug)]
struct Silent;

impl Model for Silent {
    fn id(&self) -> &str {
        "silent"
    }
    fn stream(&self, _request: ModelRequest) -> ModelStream {
        Box::pin(futures_util::stream::iter([Ok(ModelEvent::Stop(
            StopReason::EndTurn,
        ))]))
    }
}

fn engine(store: &MemoryStore) -> Arc<EngineInner> {
    let engine = Engine::builder()
        .model(Silent)
        .store(store.clone())
        .build()
        .unwrap();
    engine.inner
}

fn ask(session: &str, turn_id: &str) -> TurnAsk {
    TurnAsk {
        session: sid(session),
        turn_id: tid(turn_id),
        user_id: None,
        account_id: None,
        user_token: None,
        approval: None,
        supersedes: Vec::new(),
        context: None,
        result_schema: None,
        parent_session: None,
        branch_hints: Vec::new(),
        agent: None,
        host_deadline: None,
        continuable: false,
    }
}

const LEASE: Lease = Lease(Duration::from_secs(60));

#[test]
fn admit_wants_a_session_and_a_prompt_the_model_can_take() {
    // A blank session never reaches the engine: no scope can hold it.
    assert!(serde_json::from_value::<crate::protocol::Scope>(json!({"session": " "})).is_err());
    assert!(matches!(
        phases::admit(&ask("s", "t"), &Prompt::text("  "), &MemoryStore::new(), None),
        Err(Refusal::InvalidPrompt(_))
    ));
    let user = phases::admit(&ask("s", "t"), &Prompt::text("Hi"), &MemoryStore::new(), None).unwrap();
    assert_eq!(user.text(), "Hi");
    // A decision on an approval may come without words.
    let mut decision = ask("s", "t");
    decision.approval = Some(crate::protocol::ApprovalDecision::decline("ap-1"));
    assert!(
        phases::admit(&decision, &Prompt::text(""), &MemoryStore::new(), None)
            .unwrap()
            .content
            .is_empty()
    );
}

#[test]
fn the_ids_are_refused_with_control_characters_wherever_the_turn_is_stored() {
    // The ids are typed where a turn enters: a scope cannot carry one no store could key.
    for (session, turn) in [("s\0", "t"), ("s", "t\n1")] {
        let scope = json!({"session": session, "turnId": turn});
        let refused = serde_json::from_value::<crate::protocol::Scope>(scope).unwrap_err();
        assert!(
            refused.to_string().contains("control character"),
            "{session:?}/{turn:?}: {refused}"
        );
    }
}

#[tokio::test]
async fn a_turn_is_claimed_once_and_a_redelivery_is_refused() {
    let store = MemoryStore::new();
    let engine = engine(&store);
    let turn = ask("s", "t-1");
    phases::open(&engine, &turn, LEASE, false, true).await.unwrap();
    assert!(matches!(
        phases::open(&engine, &turn, LEASE, false, true).await,
        Err(Refusal::RunningElsewhere)
    ));
    let done = TurnOutcome::Completed(None);
    store
        .complete_turn(&sid("s"), &tid("t-1"), &[], &done)
        .await
        .unwrap();
    assert!(matches!(
        phases::open(&engine, &turn, LEASE, false, true).await,
        Err(Refusal::AlreadyRan)
    ));
}

#[tokio::test]
async fn a_turn_superseded_in_the_queue_is_recorded_and_refused_and_other_stops_end_it() {
    let store = MemoryStore::new();
    let engine = engine(&store);
    store
        .request_stop(&sid("s"), &tid("t-1"), Stop::now(StopCause::Superseded))
        .await
        .unwrap();
    assert!(matches!(
        phases::open(&engine, &ask("s", "t-1"), LEASE, false, true).await,
        Err(Refusal::Superseded)
    ));
    let record = store.turn(&sid("s"), &tid("t-1")).await.unwrap().unwrap();
    assert_eq!(record.status, TurnStatus::Completed);

    let opened = phases::open(&engine, &ask("s", "t-2"), LEASE, false, true)
        .await
        .unwrap();
    assert_eq!(opened.stop, None);
    assert!(opened.history.is_some(), "the history is read with the claim");
    // t-2 holds the conversation's run: no other turn of it opens until it is given back.
    assert!(matches!(
        phases::open(&engine, &ask("s", "t-3"), LEASE, false, false).await,
        Err(Refusal::ConversationBusy(running)) if running == "t-2"
    ));
    store.release_turn(&sid("s"), &tid("t-2")).await.unwrap();
    store
        .request_stop(&sid("s"), &tid("t-3"), Stop::now(StopCause::UserStop))
        .await
        .unwrap();
    let opened = phases::open(&engine, &ask("s", "t-3"), LEASE, false, false)
        .await
        .unwrap();
    assert_eq!(opened.stop.map(|stop| stop.reason), Some(StopCause::UserStop));
    assert!(
        opened.history.is_none(),
        "a turn that waits for others reads it later"
    );
}

#[test]
fn each_refusal_is_a_failed_terminal_with_its_code() {
    let store_error = || crate::session::StoreError::Backend("the table is gone".into());
    let cases = [
        (Refusal::ClaimFailed(store_error()), codes::STORE_FAILED, true),
        (
            Refusal::HistoryUnreadable(store_error()),
            codes::STORE_FAILED,
            true,
        ),
        (Refusal::AlreadyRan, codes::DUPLICATE_TURN, false),
        (
            Refusal::FailedBefore("the model refused it".into()),
            codes::FAILED_BEFORE,
            false,
        ),
        (Refusal::RunningElsewhere, codes::TURN_IN_PROGRESS, true),
        (
            Refusal::ConversationBusy("t-1".into()),
            codes::TURN_IN_PROGRESS,
            true,
        ),
        (Refusal::NotOwner, codes::NOT_OWNER, false),
        (Refusal::Deleted, codes::CONVERSATION_DELETED, false),
        (Refusal::Superseded, codes::SUPERSEDED, false),
    ];
    for (refusal, code, retryable) in cases {
        match refusal.event(&tid("t-9")) {
            AgentEvent::Failed {
                code: Some(got),
                retryable: got_retryable,
                details,
                ..
            } => {
                assert_eq!((got.as_str(), got_retryable), (code, retryable), "{refusal:?}");
                if code == codes::STORE_FAILED {
                    assert_eq!(
                        details, "the session store failed",
                        "the backend's words stay in the log"
                    );
                }
            }
            other => panic!("{refusal:?} became {other:?}"),
        }
    }
}

//! The DynamoDB session store on moto's server.

use agent_worker::session::{HistoryStore as _, OwnerStore as _, SignalStore as _, TurnLedger as _};
use agent_worker_testkit::{sid, tid};
use std::time::Duration;

use agent_worker::protocol::AgentEvent;
use agent_worker::session::history::check;
use agent_worker::session::{
    Claim, ContentBlock, DynamoConfig, DynamoStore, Lease, Message, Role, StoreError, TurnOutcome, TurnStatus,
};
use agent_worker_testkit::moto;
use serde_json::json;

async fn store() -> DynamoStore {
    let table = format!("sessions-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).unwrap());
    store.create_table().await.expect("the table is created");
    store
}

fn completed() -> TurnOutcome {
    TurnOutcome::Completed(None)
}

const MINUTE: Lease = Lease(Duration::from_secs(60));

#[tokio::test]
async fn a_turn_is_claimed_once_and_a_finished_turn_never_again() {
    let store = store().await;
    assert_eq!(
        store.claim_turn(&sid("s"), &tid("t1"), MINUTE).await.unwrap(),
        Claim::Claimed { reclaimed: false }
    );
    assert!(
        matches!(store.claim_turn(&sid("s"), &tid("t1"), MINUTE).await.unwrap(), Claim::Running(r) if r.attempts == 1)
    );
    let exchange = [Message::user_text("hi"), Message::assistant_text("hello")];
    store
        .complete_turn(&sid("s"), &tid("t1"), &exchange, &completed())
        .await
        .unwrap();
    let Claim::Done(record) = store.claim_turn(&sid("s"), &tid("t1"), MINUTE).await.unwrap() else {
        panic!("a finished turn is done");
    };
    assert_eq!(record.status, TurnStatus::Completed);
    assert_eq!(store.load_history(&sid("s")).await.unwrap(), exchange);
    // Completing it a second time is refused and changes nothing.
    let again = store
        .complete_turn(&sid("s"), &tid("t1"), &exchange, &completed())
        .await
        .unwrap_err();
    assert!(matches!(again, StoreError::LostLease(_)), "{again}");
    assert_eq!(store.load_history(&sid("s")).await.unwrap().len(), 2);
}

#[tokio::test]
async fn an_expired_lease_is_reclaimed_and_a_released_turn_at_once() {
    let store = store().await;
    store
        .claim_turn(&sid("s"), &tid("t1"), Lease(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(
        store.claim_turn(&sid("s"), &tid("t1"), MINUTE).await.unwrap(),
        Claim::Claimed { reclaimed: true }
    );
    assert_eq!(
        store.turn(&sid("s"), &tid("t1")).await.unwrap().unwrap().attempts,
        2
    );

    store.claim_turn(&sid("s"), &tid("t2"), MINUTE).await.unwrap();
    store.release_turn(&sid("s"), &tid("t2")).await.unwrap();
    assert_eq!(
        store.claim_turn(&sid("s"), &tid("t2"), MINUTE).await.unwrap(),
        Claim::Claimed { reclaimed: true }
    );
}

#[tokio::test]
async fn a_broken_history_is_refused_whole() {
    let store = store().await;
    store.claim_turn(&sid("s"), &tid("t1"), MINUTE).await.unwrap();
    let broken = [
        Message::user_text("hi"),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: "a".into(),
                name: "x".into(),
                input: json!({}),
            }],
        ),
    ];
    let err = store
        .complete_turn(&sid("s"), &tid("t1"), &broken, &completed())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidHistory(_)), "{err}");
    assert!(store.load_history(&sid("s")).await.unwrap().is_empty());
    assert_eq!(
        store.turn(&sid("s"), &tid("t1")).await.unwrap().unwrap().status,
        TurnStatus::Running
    );
}

#[tokio::test]
async fn a_turn_larger_than_one_transaction_is_stored_whole_and_read_back_in_pages() {
    let store = store().await;
    store.claim_turn(&sid("s"), &tid("big"), MINUTE).await.unwrap();
    // 250 messages of 5 KB: three transactions to write, and more than one 1 MB page to read.
    let filler = "x".repeat(5 * 1024);
    let messages: Vec<Message> = (0..250)
        .map(|i| {
            if i % 2 == 0 {
                Message::user_text(format!("{i} {filler}"))
            } else {
                Message::assistant_text(format!("{i} {filler}"))
            }
        })
        .collect();
    store
        .complete_turn(&sid("s"), &tid("big"), &messages, &completed())
        .await
        .unwrap();
    let history = store.load_history(&sid("s")).await.unwrap();
    assert_eq!(history.len(), 250);
    assert_eq!(history, messages);
}

#[tokio::test]
async fn two_turns_of_one_session_completing_at_once_both_land_in_order() {
    let store = store().await;
    store.claim_turn(&sid("s"), &tid("a"), MINUTE).await.unwrap();
    store.claim_turn(&sid("s"), &tid("b"), MINUTE).await.unwrap();
    let a = [Message::user_text("from a"), Message::assistant_text("answer a")];
    let b = [Message::user_text("from b"), Message::assistant_text("answer b")];
    let done = completed();
    let (s, ta, tb) = (sid("s"), tid("a"), tid("b"));
    let (ra, rb) = tokio::join!(
        store.complete_turn(&s, &ta, &a, &done),
        store.complete_turn(&s, &tb, &b, &done)
    );
    ra.unwrap();
    rb.unwrap();
    let history = store.load_history(&sid("s")).await.unwrap();
    assert_eq!(history.len(), 4);
    check(&history).unwrap();
    let texts: Vec<String> = history.iter().map(Message::text).collect();
    assert!(texts.contains(&"answer a".to_owned()) && texts.contains(&"answer b".to_owned()));
}

#[tokio::test]
async fn a_picture_too_large_for_an_item_is_replaced_by_a_line() {
    let store = store().await;
    store.claim_turn(&sid("s"), &tid("t1"), MINUTE).await.unwrap();
    let big = Message::new(
        Role::User,
        vec![
            ContentBlock::Image {
                mime_type: "image/png".into(),
                data: "A".repeat(600 * 1024),
            },
            ContentBlock::text("what is this?"),
        ],
    );
    let messages = [big, Message::assistant_text("a picture")];
    store
        .complete_turn(&sid("s"), &tid("t1"), &messages, &completed())
        .await
        .unwrap();
    let history = store.load_history(&sid("s")).await.unwrap();
    let stored = history[0].text();
    assert!(
        stored.contains("image/png, about 450 KB") && stored.ends_with("what is this?"),
        "{stored}"
    );
}

#[tokio::test]
async fn an_unreachable_table_is_a_clear_error() {
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new("no-such-table").unwrap());
    let err = store.claim_turn(&sid("s"), &tid("t1"), MINUTE).await.unwrap_err();
    let said = agent_worker::protocol::chain(&err);
    assert!(said.contains("claiming the turn"), "{said}");
    assert!(DynamoConfig::new(" ").is_err());
}

#[tokio::test]
async fn a_stop_is_kept_across_the_claim_and_refused_once_the_turn_ended() {
    use agent_worker::session::{Stop, StopCause, StopOutcome};
    let store = store().await;
    let stop = Stop::now(StopCause::Superseded);
    assert_eq!(
        store.request_stop(&sid("s"), &tid("t1"), stop).await.unwrap(),
        StopOutcome::Recorded
    );
    assert_eq!(
        store.turn(&sid("s"), &tid("t1")).await.unwrap(),
        None,
        "asked to stop, not claimed"
    );
    assert_eq!(
        store.claim_turn(&sid("s"), &tid("t1"), MINUTE).await.unwrap(),
        Claim::Claimed { reclaimed: false }
    );
    assert_eq!(
        store.stop_requested(&sid("s"), &tid("t1")).await.unwrap(),
        Some(stop)
    );
    // A second request does not replace the first.
    store
        .request_stop(&sid("s"), &tid("t1"), Stop::now(StopCause::UserStop))
        .await
        .unwrap();
    assert_eq!(
        store.stop_requested(&sid("s"), &tid("t1")).await.unwrap(),
        Some(stop)
    );
    store
        .complete_turn(&sid("s"), &tid("t1"), &[], &completed())
        .await
        .unwrap();
    assert_eq!(
        store.request_stop(&sid("s"), &tid("t1"), stop).await.unwrap(),
        StopOutcome::AlreadyEnded
    );
    assert_eq!(store.stop_requested(&sid("s"), &tid("t2")).await.unwrap(), None);
}

/// Writes `events` as turn `turn_id`'s log, through the sink as a turn does.
async fn log_turn(
    log: &agent_worker::sinks::DynamoEventLog,
    session: &str,
    turn_id: &str,
    events: &[AgentEvent],
) {
    use agent_worker::sinks::{Sink, TurnRef};
    let mut sink = log.open(&TurnRef::new(sid(session), tid(turn_id)));
    for event in events {
        sink.event(event).await.unwrap();
    }
    sink.close().await.unwrap();
}

#[tokio::test]
async fn a_turns_event_log_holds_its_own_events_whatever_the_ids_hold() {
    let log = agent_worker::sinks::DynamoEventLog::new(store().await);
    log_turn(
        &log,
        "s",
        "tp",
        &[AgentEvent::text("mine"), AgentEvent::completed()],
    )
    .await;
    log_turn(
        &log,
        "s",
        "tp#x",
        &[AgentEvent::text("theirs"), AgentEvent::completed()],
    )
    .await;
    log_turn(&log, "s", "q#1", &[AgentEvent::completed()]).await;

    let mine: Vec<AgentEvent> = log
        .read("s", "tp", None)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.event)
        .collect();
    assert_eq!(mine, [AgentEvent::text("mine"), AgentEvent::completed()]);
    let theirs = log.read("s", "tp#x", None).await.unwrap();
    assert_eq!(theirs.len(), 2, "{theirs:?}");
    assert!(
        log.read("s", "q", None).await.unwrap().is_empty(),
        "turn q was never posted"
    );
    // A cursor at the end, or at the last position there is, reads nothing and never wraps.
    assert!(log.read("s", "tp", Some(1)).await.unwrap().is_empty());
    assert!(log.read("s", "tp", Some(u64::MAX)).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_replaced_turns_waiting_approvals_are_withdrawn_and_no_other() {
    use agent_worker::session::{ApprovalStatus, ApprovalStore, PendingApproval};
    let store = store().await;
    let approval = |id: &str, turn: &str| PendingApproval {
        id: id.into(),
        session: sid("s"),
        user_id: "ada".into(),
        turn_id: tid(turn),
        tool: "pay".into(),
        args: json!({"amount": 1}),
        args_hash: "h".into(),
        created_at: 0,
        expires_at: u64::MAX / 2,
        preview: None,
    };
    for (id, turn) in [("a1", "t1"), ("a2", "t1"), ("a3", "t1#2"), ("a4", "t2")] {
        store.put_approval(&approval(id, turn)).await.unwrap();
    }
    // One of t1's was already decided: it stays as it was.
    assert!(
        store
            .settle_approval(&sid("s"), "a2", ApprovalStatus::Redeemed)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .withdraw_turn_approvals(&sid("s"), &tid("t1"))
            .await
            .unwrap(),
        1
    );
    let status = |id: &'static str| {
        let store = store.clone();
        async move { store.get_approval(&sid("s"), id).await.unwrap().unwrap().1 }
    };
    assert_eq!(status("a1").await, ApprovalStatus::Expired);
    assert_eq!(status("a2").await, ApprovalStatus::Redeemed);
    assert_eq!(
        status("a3").await,
        ApprovalStatus::Pending,
        "another turn's, whatever its id begins with"
    );
    assert_eq!(status("a4").await, ApprovalStatus::Pending);
    assert_eq!(
        store
            .withdraw_turn_approvals(&sid("s"), &tid("t1"))
            .await
            .unwrap(),
        0,
        "nothing twice"
    );
}

#[tokio::test]
async fn a_turn_that_logs_again_continues_its_own_log_not_a_neighbours() {
    let log = agent_worker::sinks::DynamoEventLog::new(store().await);
    let usage = |n: u64| AgentEvent::usage(n, 1);
    let first: Vec<AgentEvent> = (0..10).map(usage).collect();
    log_turn(&log, "s", "t", &first).await;
    // A turn whose id begins with `t#`: its keys sort after `t`'s, newest first.
    log_turn(&log, "s", "t#1", &[usage(100), usage(101), usage(102)]).await;
    // `t` logs again (a worker that took it over): it goes on from its own last position.
    log_turn(&log, "s", "t", &[usage(10), usage(11)]).await;
    let logged = log.read("s", "t", None).await.unwrap();
    let seqs: Vec<u64> = logged.iter().map(|l| l.seq).collect();
    assert_eq!(seqs, (0..12).collect::<Vec<u64>>());
    let events: Vec<AgentEvent> = logged.into_iter().map(|l| l.event).collect();
    assert_eq!(
        events,
        (0..12).map(usage).collect::<Vec<_>>(),
        "nothing of t's was overwritten"
    );
    assert_eq!(log.read("s", "t#1", None).await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_conversation_belongs_to_the_person_of_its_first_turn() {
    use agent_worker::session::{Owner, OwnerCheck};
    let store = store().await;
    let ada = Owner::new("ada", "acme");
    assert_eq!(store.owner(&sid("s")).await.unwrap(), None);
    assert_eq!(
        store.claim_owner(&sid("s"), Some(&tid("t")), &ada).await.unwrap(),
        OwnerCheck::Claimed
    );
    assert_eq!(
        store.claim_owner(&sid("s"), Some(&tid("t")), &ada).await.unwrap(),
        OwnerCheck::Same
    );
    for other in [Owner::new("mallory", "acme"), Owner::new("ada", "evil-corp")] {
        assert_eq!(
            store
                .claim_owner(&sid("s"), Some(&tid("t")), &other)
                .await
                .unwrap(),
            OwnerCheck::Other(ada.clone())
        );
    }
    assert_eq!(store.owner(&sid("s")).await.unwrap(), Some(ada.clone()));
    // A conversation stored before owners were recorded is claimed by its next turn, and its
    // history and version are untouched by the claim.
    store.claim_turn(&sid("old"), &tid("t1"), MINUTE).await.unwrap();
    let exchange = [Message::user_text("hi"), Message::assistant_text("hello")];
    store
        .complete_turn(&sid("old"), &tid("t1"), &exchange, &completed())
        .await
        .unwrap();
    assert_eq!(
        store
            .claim_owner(&sid("old"), Some(&tid("t")), &ada)
            .await
            .unwrap(),
        OwnerCheck::Claimed
    );
    assert_eq!(store.load_history(&sid("old")).await.unwrap(), exchange);
    store.claim_turn(&sid("old"), &tid("t2"), MINUTE).await.unwrap();
    let more = [Message::user_text("again"), Message::assistant_text("still here")];
    store
        .complete_turn(&sid("old"), &tid("t2"), &more, &completed())
        .await
        .unwrap();
    assert_eq!(store.load_history(&sid("old")).await.unwrap().len(), 4);
}

//! A person's conversations on moto's DynamoDB: listed from the owner index, read back in display
//! form, deleted whole.

use agent_worker::session::{HistoryStore as _, OwnerStore as _, TurnLedger as _};
use agent_worker_testkit::{sid, tid};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use agent_worker::conversations::{Conversations, ToolCallStatus};
use agent_worker::engine::ToolSpec;
use agent_worker::protocol::AgentEvent;
use agent_worker::session::conversations::ConversationSummary;
use agent_worker::session::{
    ApprovalStore, ContentBlock, ConversationError, DynamoConfig, DynamoStore, Lease, Message, Owner,
    OwnerCheck, PendingApproval, Role, Stop, StopCause, StoreError, Summary, TurnOutcome,
};
use agent_worker_testkit::moto;
use aws_sdk_dynamodb::types::AttributeValue;
use futures_util::StreamExt as _;
use serde_json::json;

async fn store() -> DynamoStore {
    let table = format!("conversations-{}", uuid::Uuid::new_v4().simple());
    let mut config = DynamoConfig::new(table).unwrap();
    // A delete does not wait for a stopped turn here: the tests' turns have no worker to end them.
    config.stop_wait = Duration::ZERO;
    let store = DynamoStore::new(moto().dynamodb(), config);
    store.create_table().await.expect("the table is created");
    store
}

const MINUTE: Lease = Lease(Duration::from_secs(60));

fn completed() -> TurnOutcome {
    TurnOutcome::Completed(None)
}

/// One turn of `session` by `owner`, as the engine stores it: the owner check, the claim, the
/// messages and the end together.
async fn turn(store: &DynamoStore, owner: &Owner, session: &str, turn_id: &str, messages: &[Message]) {
    let (session, turn_id) = (&sid(session), &tid(turn_id));
    let check = store.claim_owner(session, Some(turn_id), owner).await.unwrap();
    assert!(
        matches!(check, OwnerCheck::Claimed | OwnerCheck::Same),
        "{check:?}"
    );
    store.claim_turn(session, turn_id, MINUTE).await.unwrap();
    store
        .complete_turn(session, turn_id, messages, &completed())
        .await
        .unwrap();
}

fn exchange(question: &str, answer: &str) -> [Message; 2] {
    [Message::user_text(question), Message::assistant_text(answer)]
}

/// Every page of `owner`'s list, `limit` at a time.
async fn every_page(conversations: &Conversations, owner: &Owner, limit: usize) -> Vec<ConversationSummary> {
    let mut listed = Vec::new();
    let mut cursor = None;
    loop {
        let page = conversations
            .list(owner, Some(limit), cursor.as_deref())
            .await
            .unwrap();
        assert!(page.conversations.len() <= limit);
        listed.extend(page.conversations);
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => return listed,
        }
    }
}

#[tokio::test]
async fn lists_order_and_page_across_250_conversations_of_two_people() {
    let store = store().await;
    let ann = Owner::new("ann", "acme");
    let bob = Owner::new("bob", "acme");
    let people: Vec<(Owner, String)> = (0..250)
        .map(|i| {
            let owner = if i % 5 < 3 { ann.clone() } else { bob.clone() };
            (owner, format!("c-{i:03}"))
        })
        .collect();
    futures_util::stream::iter(&people)
        .for_each_concurrent(8, |(owner, id)| {
            let store = store.clone();
            async move {
                let question = format!("  Question\n about {id}  ");
                turn(
                    &store,
                    owner,
                    id,
                    "t1",
                    &exchange(&question, &format!("Answer for {id}")),
                )
                .await;
            }
        })
        .await;
    let conversations = Conversations::new(store.clone());

    for (owner, limit) in [(&ann, 7), (&ann, 100), (&bob, 33)] {
        let listed = every_page(&conversations, owner, limit).await;
        let expected: BTreeSet<&str> = people
            .iter()
            .filter(|(o, _)| o == owner)
            .map(|(_, id)| id.as_str())
            .collect();
        let ids: Vec<&str> = listed.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids.len(), expected.len(), "no conversation twice, none missing");
        assert_eq!(
            ids.iter().copied().collect::<BTreeSet<_>>(),
            expected,
            "only {}'s",
            owner.user_id
        );
        assert!(
            listed
                .windows(2)
                .all(|w| w[0].last_active_at >= w[1].last_active_at),
            "most recent first"
        );
        let first = &listed[0];
        assert_eq!(first.title, format!("Question about {}", first.id));
        assert_eq!(first.preview, format!("Answer for {}", first.id));
        assert_eq!((first.turns, first.running), (1, false));
    }

    // A new turn moves its conversation to the top, and one running shows as running.
    let oldest = every_page(&conversations, &ann, 100).await.pop().unwrap();
    turn(&store, &ann, &oldest.id, "t2", &exchange("more", "again")).await;
    assert_eq!(
        store
            .claim_owner(&sid(&oldest.id), Some(&tid("t3")), &ann)
            .await
            .unwrap(),
        OwnerCheck::Same
    );
    store
        .claim_turn(&sid(&oldest.id), &tid("t3"), MINUTE)
        .await
        .unwrap();
    let top = conversations.list(&ann, Some(1), None).await.unwrap();
    let top = &top.conversations[0];
    assert_eq!(top.id, oldest.id);
    assert_eq!((top.turns, top.running, top.preview.as_str()), (2, true, "again"));
    assert_eq!(top.title, oldest.title, "the title is the first question's");

    // Ann's cursor is not Bob's.
    let ann_page = conversations.list(&ann, Some(5), None).await.unwrap();
    let refused = conversations
        .list(&bob, Some(5), ann_page.cursor.as_deref())
        .await
        .unwrap_err();
    assert_eq!(refused, ConversationError::ForeignCursor);
    assert_eq!(
        conversations.list(&ann, Some(101), None).await.unwrap_err(),
        ConversationError::Limit(101)
    );
}

#[tokio::test]
async fn get_shows_the_stopped_marker_and_a_waiting_cards_preview_never_its_token() {
    use agent_worker::engine::ApprovalSigner;
    let store = store().await;
    let ann = Owner::new("ann", "acme");
    let mut stopped = Message::assistant_text("I was saying");
    stopped.stopped = Some(Stop {
        reason: StopCause::UserStop,
        at: 1_700_000_000_000,
    });
    turn(
        &store,
        &ann,
        "s",
        "t1",
        &[Message::user_text("Tell me a story"), stopped],
    )
    .await;
    let call = Message::new(
        Role::Assistant,
        vec![ContentBlock::ToolUse {
            id: "c1".into(),
            name: "pay".into(),
            input: json!({"amount": 12, "card": "4111 1111"}),
        }],
    );
    let held = Message::new(
        Role::User,
        vec![ContentBlock::error_result(
            "c1",
            "waiting for the person's approval",
        )],
    );
    turn(
        &store,
        &ann,
        "s",
        "t2",
        &[
            Message::user_text("Pay the invoice"),
            call,
            held,
            Message::assistant_text("Approve?"),
        ],
    )
    .await;
    let approval = PendingApproval {
        id: "ap-1".into(),
        session: sid("s"),
        user_id: "ann".into(),
        turn_id: tid("t2"),
        tool: "pay".into(),
        args: json!({"amount": 12}),
        args_hash: String::new(),
        created_at: agent_worker::clock::now_ms(),
        expires_at: agent_worker::clock::now_ms() + 600_000,
        preview: None,
    };
    store.put_approval(&approval).await.unwrap();
    let token = ApprovalSigner::new(b"a secret of at least thirty-two bytes!!")
        .unwrap()
        .sign(&approval);

    let pay = ToolSpec::new("pay", "Pays an invoice", json!({"type": "object"})).title("Pay an invoice");
    let conversations = Conversations::new(store.clone()).tools([&pay]);
    let view = conversations.get(&ann, "s", None, None).await.unwrap();
    let marker = view.messages[1].stopped.expect("the stopped turn's marker");
    assert_eq!(marker.reason, StopCause::UserStop);
    assert_eq!(view.messages[1].text, "I was saying");
    let calls = &view.messages[3].tool_calls;
    assert_eq!(
        (calls[0].name.as_str(), calls[0].status),
        ("pay", ToolCallStatus::Error)
    );
    assert_eq!(calls[0].arguments, None, "pay's arguments are not for logs");
    assert_eq!(view.approvals.len(), 1);
    assert_eq!(view.approvals[0].preview["title"], "Pay an invoice");
    assert_eq!(view.approvals[0].preview["fields"][0]["value"], 12);
    let shown = serde_json::to_string(&view).unwrap();
    assert!(!shown.contains(&token), "the card never carries the token");
    assert!(!shown.contains("token"), "{shown}");

    // Someone else gets the same answer as for a conversation that does not exist.
    for asking in [Owner::new("bob", "acme"), Owner::new("ann", "other")] {
        assert_eq!(
            conversations.get(&asking, "s", None, None).await.unwrap_err(),
            ConversationError::NotFound("s".into())
        );
    }
    assert_eq!(
        conversations
            .get(&ann, "nothing-here", None, None)
            .await
            .unwrap_err(),
        ConversationError::NotFound("nothing-here".into())
    );
}

#[tokio::test]
async fn a_long_conversation_reads_back_page_by_page_and_past_its_summary() {
    let store = store().await;
    let ann = Owner::new("ann", "acme");
    for t in 0..125 {
        turn(
            &store,
            &ann,
            "long",
            &format!("t{t}"),
            &exchange(&format!("q{t}"), &format!("a{t}")),
        )
        .await;
    }
    assert!(
        store
            .save_summary(
                &sid("long"),
                &Summary {
                    text: "earlier".into(),
                    upto: 200
                }
            )
            .await
            .unwrap()
    );
    let conversations = Conversations::new(store.clone());
    let mut seqs = Vec::new();
    let mut before = None;
    loop {
        let page = conversations.get(&ann, "long", Some(100), before).await.unwrap();
        assert!(page.messages.len() <= 100);
        let mut these: Vec<u64> = page.messages.iter().map(|m| m.seq).collect();
        these.extend(seqs);
        seqs = these;
        match page.older {
            Some(older) => before = Some(older),
            None => break,
        }
    }
    assert_eq!(
        seqs,
        (0..250).collect::<Vec<_>>(),
        "every message, in order, summary or not"
    );
    let first = conversations.get(&ann, "long", Some(2), Some(2)).await.unwrap();
    assert_eq!(first.messages[0].text, "q0");
    assert_eq!(first.messages[0].turn_id.as_deref(), Some("t0"));
}

/// Every item of `session`'s partition, straight from moto.
async fn items_of(store: &DynamoStore, session: &str) -> Vec<HashMap<String, AttributeValue>> {
    let partition = format!("session#{session}");
    agent_worker_testkit::session_audit::every_item(store.table())
        .await
        .unwrap()
        .into_iter()
        .filter(|item| item.get("pk").and_then(|v| v.as_s().ok()) == Some(&partition))
        .collect()
}

#[tokio::test]
async fn delete_leaves_no_item_of_the_conversation_and_its_turns_never_run_again() {
    use agent_worker::sinks::{DynamoEventLog, Sink, TurnRef};
    let store = store().await;
    let ann = Owner::new("ann", "acme");
    for t in 0..30 {
        turn(&store, &ann, "gone", &format!("t{t}"), &exchange("q", "a")).await;
    }
    turn(&store, &ann, "kept", "t1", &exchange("stay", "staying")).await;
    assert!(
        store
            .save_summary(
                &sid("gone"),
                &Summary {
                    text: "s".into(),
                    upto: 20
                }
            )
            .await
            .unwrap()
    );
    let log = DynamoEventLog::new(store.clone());
    let mut sink = log.open(&TurnRef::new(sid("gone"), tid("t0")));
    for i in 0..40 {
        sink.event(&AgentEvent::text(format!("x{i}"))).await.unwrap();
        sink.event(&AgentEvent::usage(i, i)).await.unwrap();
    }
    sink.close().await.unwrap();
    store
        .put_approval(&PendingApproval {
            id: "ap-1".into(),
            session: sid("gone"),
            user_id: "ann".into(),
            turn_id: tid("t29"),
            tool: "pay".into(),
            args: json!({}),
            args_hash: String::new(),
            created_at: 1,
            expires_at: agent_worker::clock::now_ms() + 60_000,
            preview: None,
        })
        .await
        .unwrap();
    // A turn that started before the delete and stores after it.
    assert_eq!(
        store
            .claim_owner(&sid("gone"), Some(&tid("late")), &ann)
            .await
            .unwrap(),
        OwnerCheck::Same
    );
    store
        .claim_turn(&sid("gone"), &tid("late"), MINUTE)
        .await
        .unwrap();
    assert!(items_of(&store, "gone").await.len() > 100);

    let conversations = Conversations::new(store.clone());
    let bob = Owner::new("bob", "acme");
    assert_eq!(
        conversations.delete(&bob, "gone").await.unwrap_err(),
        ConversationError::NotFound("gone".into()),
        "someone else's is not found, and stays"
    );
    let deleted = conversations.delete(&ann, "gone").await.unwrap();
    assert_eq!(deleted.messages, 60);
    assert_eq!(deleted.turns, 31);
    assert_eq!(deleted.approvals, 1);
    assert!(deleted.events > 0);
    assert_eq!(deleted.stopped_turn.as_deref(), Some("late"));

    let left = items_of(&store, "gone").await;
    assert_eq!(left.len(), 1, "only the tombstone: {left:?}");
    let names: BTreeSet<&str> = left[0].keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from(["pk", "sk", "deletedAt", "deletedBy", "expiresAt"]),
        "the tombstone holds nothing of the conversation"
    );
    assert_eq!(
        items_of(&store, "kept").await.len(),
        4,
        "the other conversation is whole: meta, two messages, its turn"
    );

    // The turn that was running stores nothing; a late delivery runs nothing; deleting again
    // removes nothing; the list no longer has it.
    let late = store
        .complete_turn(&sid("gone"), &tid("late"), &exchange("q", "a"), &completed())
        .await
        .unwrap_err();
    assert!(
        matches!(late, StoreError::Deleted(_) | StoreError::LostLease(_)),
        "{late}"
    );
    assert_eq!(
        store
            .claim_owner(&sid("gone"), Some(&tid("t99")), &ann)
            .await
            .unwrap(),
        OwnerCheck::Deleted
    );
    assert_eq!(
        store
            .claim_owner(&sid("gone"), Some(&tid("t99")), &bob)
            .await
            .unwrap(),
        OwnerCheck::Deleted
    );
    let again = conversations.delete(&ann, "gone").await.unwrap();
    assert_eq!((again.messages, again.turns, again.events), (0, 0, 0));
    assert_eq!(items_of(&store, "gone").await.len(), 1);
    let listed = conversations.list(&ann, None, None).await.unwrap();
    let ids: Vec<&str> = listed.conversations.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["kept"]);
    assert_eq!(
        conversations.get(&ann, "gone", None, None).await.unwrap_err(),
        ConversationError::NotFound("gone".into())
    );
}

#[tokio::test]
async fn setup_adds_the_owner_index_to_a_table_made_before_it() {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let name = format!("older-{}", uuid::Uuid::new_v4().simple());
    let client = moto().dynamodb();
    let attribute = |n: &str| {
        AttributeDefinition::builder()
            .attribute_name(n)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .unwrap()
    };
    let key = |n: &str, k: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(n)
            .key_type(k)
            .build()
            .unwrap()
    };
    client
        .create_table()
        .table_name(&name)
        .attribute_definitions(attribute("pk"))
        .attribute_definitions(attribute("sk"))
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    let store = DynamoStore::new(client.clone(), DynamoConfig::new(&name).unwrap());
    let ann = Owner::new("ann", "acme");
    turn(
        &store,
        &ann,
        "before",
        "t1",
        &exchange("from before the index", "yes"),
    )
    .await;
    store.create_table().await.unwrap();
    store
        .create_table()
        .await
        .expect("a second setup leaves it as it is");
    let indexes = client.describe_table().table_name(&name).send().await.unwrap();
    let names: Vec<&str> = indexes
        .table()
        .unwrap()
        .global_secondary_indexes()
        .iter()
        .filter_map(|i| i.index_name())
        .collect();
    assert_eq!(names, ["byOwner"]);
    let listed = Conversations::new(store.clone())
        .list(&ann, None, None)
        .await
        .unwrap();
    assert_eq!(
        listed.conversations.len(),
        1,
        "the index holds what was there before it"
    );
}

#[tokio::test]
async fn a_deleted_conversation_takes_its_files_and_only_its_own() {
    use std::sync::Arc;

    use agent_worker::engine::LocalFileArea;
    use agent_worker::engine::attachments::FileArea;
    use agent_worker::hosts::S3FileArea;
    use agent_worker::protocol::AttachmentRef;
    use agent_worker::session::MemoryStore;

    let s3 = moto().s3();
    let bucket = format!("files-{}", uuid::Uuid::new_v4().simple());
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let s3_area = S3FileArea::new(s3, &bucket, "attachments/");
    let folder = std::env::temp_dir().join(format!("agent-worker-files-{}", uuid::Uuid::new_v4().simple()));
    let local = LocalFileArea::new(&folder);
    let notes = AttachmentRef::new("n1", "notes.txt", "text/plain", 5);
    let more = AttachmentRef::new("k1", "keep.txt", "text/plain", 4);
    s3_area.put("gone", &notes, b"notes".to_vec()).await.unwrap();
    s3_area.put("gone", &more, b"more".to_vec()).await.unwrap();
    s3_area.put("kept", &more, b"keep".to_vec()).await.unwrap();
    local.put("gone", &notes, b"notes").unwrap();
    local.put("gone", &more, b"more").unwrap();
    local.put("kept", &more, b"keep").unwrap();
    let areas: [(&str, Arc<dyn FileArea>); 2] = [("s3", Arc::new(s3_area)), ("local", Arc::new(local))];
    for (name, area) in areas {
        area.record_usage("gone", 40).await.unwrap();
        let store = MemoryStore::new();
        let ann = Owner::new("ann", "acme");
        store
            .claim_owner(&sid("gone"), Some(&tid("t1")), &ann)
            .await
            .unwrap();
        store.claim_turn(&sid("gone"), &tid("t1"), MINUTE).await.unwrap();
        store
            .complete_turn(
                &sid("gone"),
                &tid("t1"),
                &exchange("read these", "done"),
                &completed(),
            )
            .await
            .unwrap();

        let conversations = Conversations::new(store).file_area(area.clone());
        let deleted = conversations.delete(&ann, "gone").await.unwrap();
        assert_eq!(deleted.files, 2, "{name}: its two files");
        assert!(area.list("gone").await.unwrap().is_empty(), "{name}");
        assert_eq!(
            area.conversation_usage("gone").await,
            None,
            "{name}: its count went too"
        );
        assert_eq!(
            area.list("kept").await.unwrap().len(),
            1,
            "{name}: another's file stays"
        );
        assert_eq!(
            conversations.delete(&ann, "gone").await.unwrap().files,
            0,
            "{name}: deleting again removes nothing more"
        );
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

/// Issue 52: a turn still running when its conversation is deleted wrote its log's events after
/// the delete had removed every item (left with a 90-day TTL). Every write of the log carries
/// the check that the conversation was not deleted: after the tombstone, nothing of it lands.
#[tokio::test]
async fn a_turns_log_writes_nothing_after_its_conversation_is_deleted() {
    use agent_worker::sinks::{DynamoEventLog, Sink, TurnRef};
    let store = store().await;
    let ann = Owner::new("ann", "acme");
    turn(&store, &ann, "gone", "t1", &exchange("q", "a")).await;
    let log = DynamoEventLog::new(store.clone());
    let mut running = log.open(&TurnRef::new(sid("gone"), tid("t2")));
    running
        .event(&AgentEvent::text("before the delete"))
        .await
        .unwrap();
    running.flush().await.unwrap();
    assert_eq!(log.read("gone", "t2", None).await.unwrap().len(), 1);

    Conversations::new(store.clone())
        .delete(&ann, "gone")
        .await
        .unwrap();
    assert_eq!(items_of(&store, "gone").await.len(), 1, "the tombstone alone");
    for text in ["after", "the", "delete"] {
        running.event(&AgentEvent::text(text)).await.unwrap();
        running.flush().await.unwrap();
    }
    running.event(&AgentEvent::completed()).await.unwrap();
    running.close().await.unwrap();
    let left = items_of(&store, "gone").await;
    assert_eq!(left.len(), 1, "nothing after the tombstone: {left:?}");
}

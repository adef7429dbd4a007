//! The conversations API on moto's DynamoDB: DynamoDB requests and bytes for a person's list
//! (1,000 conversations) and for reading back a 10,000-message conversation, with the metering
//! interceptor of `storage`.

use agent_worker::session::OwnerStore as _;
use std::time::Instant;

use agent_worker::conversations::Conversations;
use agent_worker::session::{DynamoConfig, DynamoStore, Owner, SessionId, TurnId};
use agent_worker_testkit::moto;
use serde_json::{Value, json};

use crate::storage::{Counts, Meter, seed, write_all};

/// Conversations the person has.
const CONVERSATIONS: u64 = 1_000;
/// Messages in the long conversation.
const LONG: u64 = 10_000;
/// Repetitions of each measured call.
const REPEAT: u32 = 5;

/// Writes `count` conversations of `owner` as their meta items: what the index lists.
async fn seed_list(client: &aws_sdk_dynamodb::Client, table: &str, owner: &Owner, count: u64) {
    use agent_worker::session::conversations::owner_key;
    use agent_worker::session::dynamo::keys::{
        LAST_ACTIVE_AT, META_SK, OWNER_ACCOUNT, OWNER_KEY, OWNER_USER, PK, SK, session_pk,
    };
    use aws_sdk_dynamodb::types::{AttributeValue as A, PutRequest, WriteRequest};
    let writes: Vec<WriteRequest> = (0..count)
        .map(|i| {
            let item = std::collections::HashMap::from([
                (PK.to_owned(), A::S(session_pk(&format!("list-{i:04}")))),
                (SK.to_owned(), A::S(META_SK.to_owned())),
                (OWNER_KEY.to_owned(), A::S(owner_key(owner))),
                (OWNER_USER.to_owned(), A::S(owner.user_id.clone())),
                (OWNER_ACCOUNT.to_owned(), A::S(owner.account_id.clone())),
                (
                    LAST_ACTIVE_AT.to_owned(),
                    A::N((1_700_000_000_000 + i * 1_000).to_string()),
                ),
                (
                    "title".to_owned(),
                    A::S(format!("What is the status of item {i} on our list?")),
                ),
                (
                    "preview".to_owned(),
                    A::S("Item is on track: the order went out on Monday.".into()),
                ),
                ("turns".to_owned(), A::N("4".into())),
                ("version".to_owned(), A::N("8".into())),
            ]);
            WriteRequest::builder()
                .put_request(PutRequest::builder().set_item(Some(item)).build().expect("a put"))
                .build()
        })
        .collect();
    write_all(client, table, &writes).await;
}

fn row(what: &str, counts: &Counts, wall: std::time::Duration, calls: u32) -> Value {
    let per = |n: u64| n as f64 / f64::from(calls);
    let ms = wall.as_secs_f64() * 1e3 / f64::from(calls);
    println!(
        "{what:<44} {:>9.1} {:>11.0} {:>11.0} {:>9.1}",
        per(counts.requests),
        per(counts.sent),
        per(counts.received),
        ms
    );
    json!({
        "call": what,
        "requests": per(counts.requests),
        "bytesSent": per(counts.sent),
        "bytesReceived": per(counts.received),
        "wallMs": ms,
        "operations": counts.operations.iter().map(|(k, v)| (k.clone(), json!(per(*v)))).collect::<serde_json::Map<_, _>>(),
    })
}

/// Measures list and get; prints a table and returns the rows.
pub(crate) async fn run() -> Value {
    println!("\n## The conversations API (moto): DynamoDB per call\n");
    println!(
        "{:<44} {:>9} {:>11} {:>11} {:>9}",
        "call", "requests", "bytes sent", "bytes recv", "wall ms"
    );
    let meter = Meter::default();
    let plain = moto().dynamodb();
    let table = crate::fresh_table("bench-conversations").await;
    let config = DynamoConfig::new(&table).expect("a table name");
    let ann = Owner::new("ann", "acme");
    seed_list(&plain, &table, &ann, CONVERSATIONS).await;
    seed(&plain, &table, "long", LONG).await;
    DynamoStore::new(plain.clone(), config.clone())
        .claim_owner(
            &SessionId::new("long").expect("an id"),
            Some(&TurnId::new("seed").expect("an id")),
            &ann,
        )
        .await
        .expect("the long one is ann's");
    let conversations = Conversations::new(DynamoStore::new(meter.client(&plain), config));
    let mut rows = Vec::new();

    for limit in [20, 100] {
        meter.take();
        let started = Instant::now();
        for _ in 0..REPEAT {
            let page = conversations.list(&ann, Some(limit), None).await.expect("a page");
            assert_eq!(page.conversations.len(), limit);
        }
        rows.push(row(
            &format!("list, first page of {limit} (of {CONVERSATIONS})"),
            &meter.take(),
            started.elapsed(),
            REPEAT,
        ));
    }
    meter.take();
    let started = Instant::now();
    let (mut cursor, mut pages, mut listed) = (None, 0, 0);
    loop {
        let page = conversations
            .list(&ann, Some(100), cursor.as_deref())
            .await
            .expect("a page");
        pages += 1;
        listed += page.conversations.len();
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(listed as u64, CONVERSATIONS + 1);
    rows.push(row(
        &format!("list, per page of 100, all {} pages", pages),
        &meter.take(),
        started.elapsed(),
        pages,
    ));
    for (what, limit, before) in [
        ("get, newest 20 of 10,000 messages", None, None),
        ("get, 100 from the middle of 10,000", Some(100), Some(LONG / 2)),
    ] {
        meter.take();
        let started = Instant::now();
        for _ in 0..REPEAT {
            let view = conversations
                .get(&ann, "long", limit, before)
                .await
                .expect("the conversation");
            assert_eq!(view.messages.len(), limit.unwrap_or(20));
        }
        rows.push(row(what, &meter.take(), started.elapsed(), REPEAT));
    }
    Value::Array(rows)
}

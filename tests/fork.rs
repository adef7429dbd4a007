//! Branching a conversation (`parentSession`, `branchHints`), on DynamoDB (moto) and in memory,
//! against the Bedrock stand-in: what the model is sent is read from the stand-in's requests.

use crate::support;

use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::protocol::{
    ACCOUNT_ID_KEY, Agent as _, AgentEvent, BRANCH_HINTS_KEY, PARENT_SESSION_KEY, Prompt, Scope, USER_ID_KEY,
    codes,
};
use agent_worker::session::{DynamoConfig, DynamoStore, MemoryStore, SessionStore};
use agent_worker_testkit::{BedrockStandIn, Reply, moto, sid, tid};
use futures_util::StreamExt as _;
use serde_json::{Value, json};

async fn dynamo() -> DynamoStore {
    let table = format!("fork-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    store
}

fn engine(bedrock: &BedrockStandIn, store: impl SessionStore + 'static) -> Engine {
    Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(store)
        .config(support::config())
        .build()
        .unwrap()
}

/// One turn of person `user`, answered `answer`, with `extra` extensions.
async fn turn(
    engine: &Engine,
    bedrock: &BedrockStandIn,
    (session, turn_id, user): (&str, &str, &str),
    text: &str,
    answer: &str,
    extra: Value,
) -> Vec<AgentEvent> {
    bedrock.push(Reply::text(answer));
    let mut scope = Scope::new(sid(session))
        .with_turn_id(tid(turn_id))
        .with(USER_ID_KEY, user)
        .with(ACCOUNT_ID_KEY, "a");
    for (key, value) in extra.as_object().cloned().unwrap_or_default() {
        scope = scope.with(&key, value);
    }
    engine.invoke(scope, Prompt::text(text)).collect().await
}

/// The texts of the messages of the last request the model was sent.
fn sent(bedrock: &BedrockStandIn) -> Vec<String> {
    let body = bedrock.requests().pop().unwrap().body;
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"][0]["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

async fn the_branch_starts_from_its_parent_and_goes_its_own_way(store: impl SessionStore + Clone + 'static) {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = engine(&bedrock, store.clone());
    let none = json!({});
    turn(&engine, &bedrock, ("parent", "p1", "u"), "Q1", "A1", none.clone()).await;
    turn(&engine, &bedrock, ("parent", "p2", "u"), "Q2", "A2", none.clone()).await;

    // A branch of the whole parent: its first turn sees the parent's history.
    let branch = json!({ PARENT_SESSION_KEY: "parent" });
    let events = turn(
        &engine,
        &bedrock,
        ("child", "c1", "u"),
        "Q3",
        "A3",
        branch.clone(),
    )
    .await;
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    assert_eq!(sent(&bedrock), ["Q1", "A1", "Q2", "A2", "Q3"]);
    // Its second turn ignores the field, whatever it names.
    let elsewhere = json!({ PARENT_SESSION_KEY: "no-such-conversation" });
    let events = turn(&engine, &bedrock, ("child", "c2", "u"), "Q4", "A4", elsewhere).await;
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    assert_eq!(sent(&bedrock), ["Q1", "A1", "Q2", "A2", "Q3", "A3", "Q4"]);
    // The parent is untouched, and goes on by itself.
    assert_eq!(store.load_history(&sid("parent")).await.unwrap().len(), 4);
    turn(&engine, &bedrock, ("parent", "p3", "u"), "Q5", "A5", none).await;
    assert_eq!(sent(&bedrock), ["Q1", "A1", "Q2", "A2", "Q5"]);
    assert_eq!(store.load_history(&sid("child")).await.unwrap().len(), 8);
    // Its durable history from a cursor crosses from the parent's part into its own.
    let entries = store.entries(&sid("child"), 3, 2).await.unwrap();
    let read: Vec<(u64, Option<&str>)> = entries.iter().map(|e| (e.seq, e.turn_id.as_deref())).collect();
    assert_eq!(read, [(3, Some("p2")), (4, Some("c1"))]);

    // A hint cuts the parent at that turn; the first hint found wins.
    let hinted = json!({ PARENT_SESSION_KEY: "parent", BRANCH_HINTS_KEY: ["nope", "p1", "p2"] });
    turn(&engine, &bedrock, ("early", "e1", "u"), "Q6", "A6", hinted).await;
    assert_eq!(sent(&bedrock), ["Q1", "A1", "Q6"]);
    // A branch of a branch, cut inside the first parent's part.
    let nested = json!({ PARENT_SESSION_KEY: "child", BRANCH_HINTS_KEY: ["c1"] });
    turn(&engine, &bedrock, ("grandchild", "g1", "u"), "Q7", "A7", nested).await;
    assert_eq!(sent(&bedrock), ["Q1", "A1", "Q2", "A2", "Q3", "A3", "Q7"]);

    // Another person's conversation is not theirs to branch: nothing ran.
    let requests = bedrock.requests().len();
    let events = turn(&engine, &bedrock, ("stolen", "s1", "mallory"), "Q8", "A8", branch).await;
    let (_, _, code) = support::failure(&events);
    assert_eq!(code.as_deref(), Some(codes::NOT_OWNER));
    assert_eq!(bedrock.requests().len(), requests, "the model was not called");
    assert!(store.load_history(&sid("stolen")).await.unwrap().is_empty());

    // A parent that does not exist is said so, naming the field.
    let missing = json!({ PARENT_SESSION_KEY: "no-such-conversation" });
    let events = turn(&engine, &bedrock, ("orphan", "o1", "u"), "Q9", "A9", missing).await;
    let (details, _, code) = support::failure(&events);
    assert_eq!(code.as_deref(), Some(codes::INVALID_PROMPT));
    assert!(details.contains("parentSession"), "{details}");
}

#[tokio::test]
async fn on_dynamodb_a_branch_refers_to_its_parent_and_goes_its_own_way() {
    let store = dynamo().await;
    the_branch_starts_from_its_parent_and_goes_its_own_way(store.clone()).await;
    // Storage stays flat: the branch's partition holds its own messages only.
    let own = moto()
        .dynamodb()
        .query()
        .table_name(store.table())
        .key_condition_expression("pk = :pk AND begins_with(sk, :msg)")
        .expression_attribute_values(
            ":pk",
            aws_sdk_dynamodb::types::AttributeValue::S("session#child".into()),
        )
        .expression_attribute_values(":msg", aws_sdk_dynamodb::types::AttributeValue::S("msg#".into()))
        .send()
        .await
        .unwrap();
    assert_eq!(own.count(), 4, "the branch copied none of its parent's messages");
}

#[tokio::test]
async fn in_memory_a_branch_starts_from_its_parent_and_goes_its_own_way() {
    the_branch_starts_from_its_parent_and_goes_its_own_way(MemoryStore::new()).await;
}

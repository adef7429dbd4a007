//! Long conversations: older turns are summarized and kept as the session's summary, a turn
//! reads the summary and the messages after it, tool pairs stay whole, and Bedrock's "input is
//! too long" compacts and retries once. On the in-memory store and on DynamoDB (moto).

use crate::support;
use agent_worker::session::HistoryStore as _;

use agent_worker::engine::compaction::SUMMARIZE;
use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::{
    ContentBlock, DynamoConfig, DynamoStore, MemoryStore, Role, SessionStore, history,
};
use agent_worker_testkit::{BedrockStandIn, Reply, moto, sid, tid};
use futures_util::StreamExt;
use serde_json::Value;

fn engine(bedrock: &BedrockStandIn, store: impl SessionStore + 'static, config: EngineConfig) -> Engine {
    Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(store)
        .system_prompt("You are a test assistant.")
        .tools(support::example_tools(&["current_time"]))
        .config(config)
        .build()
        .unwrap()
}

async fn turn(engine: &Engine, session: &str, id: &str, text: &str) -> Vec<AgentEvent> {
    engine
        .invoke(Scope::new(sid(session)).with_turn_id(tid(id)), Prompt::text(text))
        .collect()
        .await
}

fn other<'a>(events: &'a [AgentEvent], kind: &str) -> Option<&'a Value> {
    events.iter().find_map(|e| match e {
        AgentEvent::Other(raw) if raw["type"] == kind => Some(raw),
        _ => None,
    })
}

fn small_history() -> EngineConfig {
    EngineConfig {
        compact_after_messages: 8,
        ..support::config()
    }
}

/// Four turns: a tool turn (4 messages), then text turns (2 each): 10 messages.
async fn four_turns(bedrock: &BedrockStandIn, engine: &Engine, session: &str) {
    bedrock.push(Reply::tool_call("c1", "current_time", "{}"));
    bedrock.push(Reply::text("It is noon."));
    turn(engine, session, "t1", "What time is it?").await;
    for i in 2..=4 {
        bedrock.push(Reply::text(&format!("Answer {i}.")));
        turn(engine, session, &format!("t{i}"), &format!("Question {i}?")).await;
    }
}

async fn older_turns_are_summarized_and_the_summary_is_what_later_turns_read(
    store: impl SessionStore + Clone + 'static,
) {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = engine(&bedrock, store.clone(), small_history());
    let session = format!("long-{}", uuid::Uuid::new_v4().simple());
    four_turns(&bedrock, &engine, &session).await;
    assert_eq!(
        bedrock.requests().len(),
        5,
        "no compaction yet: 8 messages are allowed"
    );

    // The fifth turn finds 10 messages: it summarizes the older turns and keeps the last two.
    bedrock.push(Reply::text(
        "The person asked the time (noon) and questions 2 and 3.",
    ));
    bedrock.push(Reply::text("Answer 5."));
    let events = turn(&engine, &session, "t5", "Question 5?").await;
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    let compacted = other(&events, "compacted").expect("a compacted event");
    assert_eq!(
        (compacted["summarized"].as_u64(), compacted["kept"].as_u64()),
        (Some(6), Some(4))
    );
    assert!(other(&events, "compacting").is_some());

    let requests = bedrock.requests();
    let summarizing = &requests[5].body;
    assert_eq!(summarizing["system"][0]["text"], SUMMARIZE);
    assert!(summarizing.get("toolConfig").is_none());
    let transcript = summarizing["messages"][0]["content"][0]["text"].as_str().unwrap();
    assert!(transcript.contains("person: What time is it?") && transcript.contains("[calls current_time"));
    assert!(
        !transcript.contains("Question 4?"),
        "the kept turns are not summarized: {transcript}"
    );

    // The turn is sent the summary, the two kept turns word for word, and its own words.
    let sent = requests[6].body["messages"].as_array().unwrap().clone();
    assert_eq!(sent.len(), 2 + 4 + 1);
    assert!(
        sent[0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("questions 2 and 3")
    );
    assert_eq!(sent[2]["content"][0]["text"], "Question 3?");
    assert_eq!(sent[6]["content"][0]["text"], "Question 5?");

    // The store keeps the summary; nothing stored was removed.
    let view = store.load_view(&sid(&session)).await.unwrap();
    let summary = view.summary.as_ref().expect("a stored summary");
    assert_eq!(summary.upto, 6);
    assert_eq!(view.messages.len(), 6);
    assert_eq!(view.messages[0].text(), "Question 3?");
    let all = store.load_history(&sid(&session)).await.unwrap();
    assert_eq!(all.len(), 12);
    history::check(&all).unwrap();

    // The next turn reads the summary and the messages after it, and does not compact again.
    bedrock.push(Reply::text("Answer 6."));
    let events = turn(&engine, &session, "t6", "Question 6?").await;
    assert!(other(&events, "compacting").is_none());
    let sent = bedrock.requests()[7].body["messages"].as_array().unwrap().clone();
    assert_eq!(sent.len(), 2 + 6 + 1);
    assert!(
        sent[0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("questions 2 and 3")
    );
}

#[tokio::test]
async fn older_turns_are_summarized_in_memory() {
    older_turns_are_summarized_and_the_summary_is_what_later_turns_read(MemoryStore::new()).await;
}

#[tokio::test]
async fn older_turns_are_summarized_on_dynamodb() {
    let table = format!("compaction-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    older_turns_are_summarized_and_the_summary_is_what_later_turns_read(store).await;
}

#[tokio::test]
async fn input_too_long_compacts_harder_and_sends_the_step_again() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let engine = engine(&bedrock, store.clone(), support::config());
    four_turns(&bedrock, &engine, "s").await;
    bedrock.push(Reply::http_error(
        400,
        "ValidationException",
        "Input is too long for requested model.",
    ));
    bedrock.push(Reply::text("Summary of the conversation."));
    bedrock.push(Reply::text("Answer 5."));
    let events = turn(&engine, "s", "t5", "Question 5?").await;
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    let compacted = other(&events, "compacted").expect("compacted");
    // Keeping an eighth of the budget still keeps the last turn.
    assert!(compacted["kept"].as_u64().unwrap() >= 2);
    let requests = bedrock.requests();
    assert_eq!(requests.len(), 5 + 3);
    let retried = requests[7].body["messages"].as_array().unwrap();
    assert!(retried.len() < requests[5].body["messages"].as_array().unwrap().len());
    // Each call in what is kept still has its result.
    let kept = store.load_view(&sid("s")).await.unwrap();
    history::check(&kept.messages).unwrap();
    assert!(kept.messages.first().is_some_and(|m| {
        m.role == Role::User
            && !m
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
    }));

    // A second "too long" in the same turn is not retried again: the turn fails, saying so.
    bedrock.push(Reply::http_error(
        400,
        "ValidationException",
        "Input is too long for requested model.",
    ));
    bedrock.push(Reply::text("Shorter summary."));
    bedrock.push(Reply::http_error(
        400,
        "ValidationException",
        "Input is too long for requested model.",
    ));
    let events = turn(&engine, "s", "t6", "Question 6?").await;
    match events.last() {
        Some(AgentEvent::Failed { details, code, .. }) => {
            assert_eq!(code.as_deref(), Some("model_rejected"));
            assert!(details.contains("too long"), "{details}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        bedrock.pending_replies(),
        0,
        "it summarized once more, then gave up"
    );
}

/// The summary compaction asks for is counted in the budgets' ledgers with the step after it:
/// every model call of the conversation, the summary's included, at the model's price.
#[tokio::test]
async fn the_summary_a_turn_asks_for_is_counted_against_its_budgets() {
    use agent_worker::engine::spending::{Budgets, Ledger, Prices, SpendLedger, Spending};
    use std::sync::Arc;

    let bedrock = BedrockStandIn::start().await.unwrap();
    let table = format!("compaction-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).unwrap());
    store.create_table().await.unwrap();
    let ledger: Arc<dyn SpendLedger> = Arc::new(store.clone());
    let budgets = Budgets {
        conversation: Some(5_000_000),
        ..Budgets::default()
    };
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(store.clone())
        .tools(support::example_tools(&["current_time"]))
        .config(small_history())
        .spending(Spending::new(Prices::default(), budgets, Some(ledger)).unwrap())
        .build()
        .unwrap();
    let session = format!("priced-{}", uuid::Uuid::new_v4().simple());
    four_turns(&bedrock, &engine, &session).await;
    let conversation = Ledger::Conversation(sid(&session));
    let before = store.spent(&conversation).await.unwrap();
    bedrock.push(Reply::text("The person asked the time and three questions."));
    bedrock.push(Reply::text("Answer 5."));
    let events = turn(&engine, &session, "t5", "Question 5?").await;
    assert!(other(&events, "compacted").is_some(), "{events:?}");
    // Two calls, the summary's and the step's, each reporting its usage and what it cost.
    let costs: Vec<f64> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Usage { cost_usd, .. } => *cost_usd,
            _ => None,
        })
        .collect();
    assert_eq!(costs.len(), 2, "{events:?}");
    let micros = costs
        .iter()
        .map(|c| (c * 1_000_000.0).round() as u64)
        .sum::<u64>();
    let spent = store.spent(&conversation).await.unwrap();
    assert_eq!(
        spent - before,
        micros,
        "both calls counted in the conversation's ledger"
    );
}

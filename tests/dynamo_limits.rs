//! DynamoDB's limits, kept by construction: a turn whose tool results are larger than an item
//! holds, or whose messages are larger than one transaction holds, is stored whole (its results
//! cut to fit, with a note the model reads), never run and then lost. On moto's DynamoDB, with
//! the Bedrock stand-in.

use crate::support;
use agent_worker::session::{HistoryStore as _, TurnLedger as _};

use agent_worker_testkit::{sid, tid};
use futures_util::StreamExt as _;
use std::sync::Arc;

use agent_worker::engine::tools::{Tool, ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::protocol::AgentEvent;
use agent_worker::session::dynamo::MAX_MESSAGE_BYTES;
use agent_worker::session::history::check;
use agent_worker::session::{ContentBlock, DynamoConfig, DynamoStore, Message, Role};
use agent_worker_testkit::{BedrockStandIn, Reply, StreamScript, moto};
use serde_json::{Value, json};
use support::*;

async fn store() -> DynamoStore {
    let table = format!("limits-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).unwrap());
    store.create_table().await.unwrap();
    store
}

/// `fetch` returns as many bytes as its `bytes` argument asks.
fn fetch() -> Arc<dyn Tool> {
    Arc::new(tool_fn(
        ToolSpec::new("fetch", "Returns data.", json!({"type": "object"})),
        |args: Value, _| async move {
            let bytes = args["bytes"].as_u64().unwrap_or(0) as usize;
            Ok(json!({ "data": "x".repeat(bytes) }))
        },
    ))
}

fn engine(bedrock: &BedrockStandIn, store: &DynamoStore) -> Engine {
    Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store.clone())
        .tools(vec![fetch()])
        .config(config())
        .build()
        .unwrap()
}

/// Each stored message, as the store keeps it, fits one item.
fn assert_each_fits(history: &[Message]) {
    for message in history {
        let bytes = serde_json::to_string(message).unwrap().len();
        assert!(
            bytes <= MAX_MESSAGE_BYTES,
            "a message of {bytes} bytes was stored"
        );
    }
}

/// The results of the message at `index` of the model's request `request`.
fn results_sent(bedrock: &BedrockStandIn, request: usize, index: usize) -> Vec<Value> {
    bedrock.requests()[request].body["messages"][index]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["toolResult"].clone())
        .collect()
}

#[tokio::test]
async fn thirty_results_of_300_kb_in_one_step_are_cut_to_fit_and_stored() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = store().await;
    let mut step = StreamScript::new();
    for i in 0..30 {
        step = step.tool_use(&format!("c{i}"), "fetch", r#"{"bytes": 307200}"#, 1);
    }
    bedrock.push(step.stop("tool_use").into_reply());
    bedrock.push(Reply::text("That was a lot."));
    let events = run(&engine(&bedrock, &store), "s1", "Fetch everything").await;
    assert_eq!(terminal(&events), &AgentEvent::completed());
    let history = store.load_history(&sid("s1")).await.unwrap();
    check(&history).unwrap();
    assert_each_fits(&history);
    assert_eq!(
        history.len(),
        4,
        "the prompt, the calls, their results, the answer"
    );
    // What the model read is what was stored: each result says it was cut, and how large it was.
    let sent = results_sent(&bedrock, 1, 2);
    assert_eq!(sent.len(), 30);
    assert!(
        sent.iter()
            .all(|r| r.to_string().contains("more than the conversation can keep")),
        "{}",
        sent[0]
    );
    let ContentBlock::ToolResult { content, .. } = &history[2].content[0] else {
        panic!("not a result: {:?}", history[2])
    };
    assert_eq!(content["truncated"], true);
}

#[tokio::test]
async fn one_result_of_2_mb_is_cut_and_the_rest_of_the_turn_stands() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = store().await;
    bedrock.push(Reply::tool_call("c1", "fetch", r#"{"bytes": 2097152}"#));
    bedrock.push(Reply::text("Too much to read."));
    let events = run(&engine(&bedrock, &store), "s1", "Fetch it").await;
    assert_eq!(terminal(&events), &AgentEvent::completed());
    let history = store.load_history(&sid("s1")).await.unwrap();
    check(&history).unwrap();
    assert_each_fits(&history);
    assert_eq!(history.last().unwrap().text(), "Too much to read.");
}

#[tokio::test]
async fn a_turn_larger_than_one_transaction_is_stored_whole() {
    // Fifteen rounds of a 300 KB result each: 4.5 MB of messages, more than one transaction's
    // 4 MB, in fewer than its 100 items. (Through the engine the model would be sent all of it:
    // the store is given the turn directly.)
    let store = store().await;
    let lease = agent_worker::session::Lease(std::time::Duration::from_secs(60));
    store.claim_turn(&sid("s1"), &tid("t1"), lease).await.unwrap();
    let mut messages = vec![Message::user_text("Fetch fifteen times")];
    for i in 0..15 {
        let id = format!("c{i}");
        messages.push(Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: id.clone(),
                name: "fetch".into(),
                input: json!({"bytes": 300000}),
            }],
        ));
        messages.push(Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                tool_use_id: id,
                content: json!({ "data": "x".repeat(300_000) }),
                is_error: false,
            }],
        ));
    }
    messages.push(Message::assistant_text("Done fetching."));
    let outcome = agent_worker::session::TurnOutcome::Completed(None);
    store
        .complete_turn(&sid("s1"), &tid("t1"), &messages, &outcome)
        .await
        .unwrap();
    let history = store.load_history(&sid("s1")).await.unwrap();
    check(&history).unwrap();
    assert_each_fits(&history);
    assert_eq!(history, messages, "stored whole, in order");
    let stored: usize = history
        .iter()
        .map(|m| serde_json::to_string(m).unwrap().len())
        .sum();
    assert!(stored > 4 * 1024 * 1024, "the turn was {stored} bytes");
}

#[tokio::test]
async fn ids_longer_than_the_table_keys_are_refused_before_anything_is_written() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = store().await;
    let engine = engine(&bedrock, &store);
    let long = "s".repeat(agent_worker::session::dynamo::keys::MAX_ID_BYTES + 1);
    let by_session = run(&engine, &long, "Hi").await;
    let scope = agent_worker::protocol::Scope::new("s1".parse().unwrap()).with_turn_id(tid(&long.clone()));
    let by_turn: Vec<AgentEvent> =
        agent_worker::protocol::Agent::invoke(&engine, scope, agent_worker::protocol::Prompt::text("Hi"))
            .collect()
            .await;
    for (events, field) in [(by_session, "scope.session"), (by_turn, "scope.turnId")] {
        let AgentEvent::Failed { details, code, .. } = terminal(&events) else {
            panic!("{field}: not refused: {events:?}")
        };
        assert_eq!(code.as_deref(), Some("invalid_prompt"), "{field}: {details}");
        assert!(
            details.contains(field) && details.contains("over the limit of 512"),
            "{details}"
        );
    }
    assert!(bedrock.requests().is_empty(), "the model was called");
    let scan = moto()
        .dynamodb()
        .scan()
        .table_name(store.table())
        .send()
        .await
        .unwrap();
    assert_eq!(scan.count(), 0, "items were written: {:?}", scan.items());
}

/// A read whose result is larger than an item holds, through the handler the Lambda function
/// runs, with its event log: the `tool_ended` event carries the result, and each of the log's
/// items, like each message's, is kept under DynamoDB's 400 KB (the event's content cut, saying
/// so). Each turn completes, stored once, and the tool ran once.
#[tokio::test]
async fn results_of_399_kb_to_20_mb_complete_their_turns_and_every_item_fits() {
    use agent_worker::hosts::AgentTurnPayload;
    use agent_worker::hosts::lambda::TurnHandler;
    use agent_worker::sinks::{DynamoEventLog, Sinks};

    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = store().await;
    let handler = TurnHandler::new(
        engine(&bedrock, &store),
        Sinks::new().with(DynamoEventLog::new(store.clone())),
    );
    let sizes = [399_000, 400_000, 1_500_000, 20_000_000];
    for (i, bytes) in sizes.into_iter().enumerate() {
        let (session, turn) = (format!("big-{i}"), format!("t{i}"));
        bedrock.push(Reply::tool_call(
            "c1",
            "fetch",
            &format!(r#"{{"bytes": {bytes}}}"#),
        ));
        bedrock.push(Reply::text("Read it."));
        let body = json!({"turnId": turn, "conversationId": session, "userId": "u", "accountId": "a", "content": "Fetch the report."});
        let payload = AgentTurnPayload::decode(&body.to_string()).unwrap();
        let run = handler.run_turn_to_end(&payload, None).await;
        assert_eq!(
            run.terminal,
            Some(AgentEvent::completed()),
            "{bytes} bytes: the turn completed"
        );
        let history = store.load_history(&sid(&session)).await.unwrap();
        check(&history).unwrap();
        assert_eq!(history.len(), 4, "{bytes} bytes: stored once");
        let logged = DynamoEventLog::new(store.clone())
            .read(&session, &turn, None)
            .await
            .unwrap();
        let ended = logged
            .iter()
            .find_map(|l| match &l.event {
                AgentEvent::ToolEnded { content, .. } => Some(content.to_string()),
                _ => None,
            })
            .unwrap_or_else(|| {
                panic!(
                    "{bytes} bytes: the call's end is not in the log: {:?}",
                    logged
                        .iter()
                        .map(|l| (l.seq, serde_json::to_string(&l.event).unwrap().len()))
                        .collect::<Vec<_>>()
                )
            });
        assert!(
            ended.len() < 400 * 1024,
            "{bytes} bytes: an event of {} bytes",
            ended.len()
        );
        assert!(
            matches!(logged.last().unwrap().event, AgentEvent::Completed { .. }),
            "{bytes} bytes: the log ends with the terminal"
        );
    }
    assert_eq!(
        bedrock.pending_replies(),
        0,
        "each tool ran once, each answer asked for"
    );
    for (sk, size) in support::table_items::item_sizes(store.table()).await {
        assert!(size < 400 * 1024, "item {sk} is {size} bytes");
    }
}

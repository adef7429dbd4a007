//! A turn longer than its invocation, through the handler the Lambda function runs, on moto's
//! DynamoDB and FIFO queue: it hands itself over near the invocation's deadline and goes on in
//! the next, its first record held in flight meanwhile. (The same through the function itself:
//! `tests/bootstrap.rs`.)

use crate::support;

use std::sync::{Arc, Mutex};

use agent_worker::engine::tools::{Tool, ToolError, ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::protocol::AgentEvent;
use agent_worker::session::{DynamoConfig, DynamoStore, HistoryStore as _, TurnLedger as _};
use agent_worker_testkit::{BedrockStandIn, Reply, moto, sid, tid};
use serde_json::{Value, json};

async fn table() -> DynamoStore {
    let table = format!("long-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    store
}

/// A turn longer than its invocation: the host's deadline (5 s here, for Lambda's 15 minutes)
/// comes before the turn's own (60 s), so at the round boundary within the hand-over margin (the
/// invocation's last quarter, here after the tool's 3.9 s, more than a second before the
/// deadline whatever moto's pace) the turn writes down where it is and gives up its lease; the
/// handler sends the queue its continuation (the same body, in a group of its own) and holds the
/// first record in flight. The next invocation takes the continuation and the turn goes on: the
/// model is not asked again for the round done, the tool ran once, the turn is stored once, its
/// readers see one turn, and the first record is let go.
#[tokio::test]
async fn a_turn_longer_than_its_invocation_goes_on_in_the_next() {
    use agent_worker::hosts::lambda::TurnHandler;
    use agent_worker::hosts::redrive::{RedriveBackoff, Requeue};
    use agent_worker::sinks::{DynamoEventLog, Sinks};
    use aws_sdk_sqs::types::QueueAttributeName;
    use std::time::{Duration, SystemTime};

    let store = table().await;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let runs = Arc::new(Mutex::new(0));
    let counted = runs.clone();
    let spec = ToolSpec::new("build_report", "Builds the report.", json!({"type": "object"}))
        .effect(agent_worker::engine::tools::Effect::Mutate);
    let slow = tool_fn(spec, move |_input: Value, _ctx| {
        let counted = counted.clone();
        async move {
            *counted.lock().unwrap() += 1;
            // The work takes most of the invocation.
            tokio::time::sleep(Duration::from_millis(3900)).await;
            Ok::<Value, ToolError>(json!({"report": "R-1"}))
        }
    });
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(store.clone())
        .tools(vec![Arc::new(slow) as Arc<dyn Tool>])
        .config(agent_worker::engine::EngineConfig {
            turn_deadline: Duration::from_secs(60),
            hand_over_margin: Duration::from_secs(1),
            ..support::config()
        })
        .build()
        .unwrap();
    let sqs = moto().sqs();
    let queue = format!("long-{}", uuid::Uuid::new_v4().simple());
    let (url, arn) = support::lambda_batch::fifo_queue(&sqs, &queue).await;
    let handler = TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(store.clone())))
        .store_margin(Duration::from_millis(100))
        .requeue(Requeue::new(sqs.clone(), RedriveBackoff::default()));
    let body = json!({"turnId": "t1", "conversationId": "long-1", "userId": "ana", "accountId": "acme", "content": "Build the report."})
        .to_string();
    let next = async || support::lambda_batch::next_message(&sqs, &url, &arn).await;
    let in_flight = async || {
        let attributes = sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap();
        let count = |name| attributes.attributes().unwrap()[&name].parse::<u64>().unwrap();
        (
            count(QueueAttributeName::ApproximateNumberOfMessages),
            count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        )
    };
    let invocation = || Some(SystemTime::now() + Duration::from_secs(5));
    sqs.send_message()
        .queue_url(&url)
        .message_body(&body)
        .message_group_id("long-1")
        .message_deduplication_id("t1")
        .send()
        .await
        .unwrap();

    bedrock.push(Reply::tool_call("tu-1", "build_report", "{}"));
    let original = next().await;
    let original_id = original.records[0].message_id.clone().unwrap();
    let first = handler.handle_batch(original, invocation()).await.unwrap();
    let reported: Vec<&str> = first
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(
        reported,
        [original_id.as_str()],
        "the first record is held, not deleted"
    );
    assert_eq!(*runs.lock().unwrap(), 1);
    assert_eq!(
        in_flight().await,
        (1, 1),
        "the continuation waits; the first record is held"
    );
    let continuation = next().await;
    let record = &continuation.records[0];
    assert_eq!(record.body.as_deref(), Some(body.as_str()));
    assert_eq!(record.attributes["MessageGroupId"], "long-1#continue");
    let handed = store.turn(&sid("long-1"), &tid("t1")).await.unwrap().unwrap();
    assert_eq!(
        handed.status,
        agent_worker::session::TurnStatus::Running,
        "not ended: handed over"
    );

    bedrock.push(Reply::text("The report is R-1."));
    let receipt = record.receipt_handle.clone().unwrap();
    let second = handler.handle_batch(continuation, invocation()).await.unwrap();
    assert!(second.batch_item_failures.is_empty());
    assert_eq!(*runs.lock().unwrap(), 1, "the tool ran once");
    assert_eq!(
        bedrock.requests().len(),
        2,
        "the model was asked once in each invocation"
    );
    let ended = store.turn(&sid("long-1"), &tid("t1")).await.unwrap().unwrap();
    assert_eq!(
        (ended.status, ended.attempts),
        (agent_worker::session::TurnStatus::Completed, 2)
    );
    let history = store.load_history(&sid("long-1")).await.unwrap();
    assert_eq!(history.len(), 4, "{history:#?}");
    // Its readers see one turn: one terminal, the last, and no word of the hand-over.
    let logged = DynamoEventLog::new(store.clone())
        .read("long-1", "t1", None)
        .await
        .unwrap();
    let terminals: Vec<_> = logged.iter().filter(|l| l.event.is_terminal()).collect();
    assert_eq!(terminals.len(), 1, "{logged:#?}");
    assert!(matches!(
        logged.last().unwrap().event,
        AgentEvent::Completed { .. }
    ));
    for (at, logged) in logged.iter().enumerate() {
        assert_eq!(logged.seq, at as u64, "the positions go on without a gap");
    }
    // Lambda deletes the continuation it was given (it was not reported); the handler let the
    // first record go.
    sqs.delete_message()
        .queue_url(&url)
        .receipt_handle(receipt)
        .send()
        .await
        .unwrap();
    assert_eq!(in_flight().await, (0, 0), "the turn's first record was let go");
}

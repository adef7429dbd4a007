//! The container host given a turns queue (`serve --queue-url`, `TURNS_QUEUE_URL`): `POST /turns`
//! checks the person and the conversation as ever, sends the turn to the queue (SQS on moto) as
//! `agent-worker send` would, and runs nothing itself; the worker that reads the queue runs it.

use crate::support;
use agent_worker::session::{HistoryStore as _, TurnLedger as _};

use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::hosts::TurnQueue;
use agent_worker::hosts::sqs_poller::{PollOptions, poll_queue};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::{Reply, moto};
use agent_worker_testkit::{sid, tid};
use aws_sdk_sqs::types::{MessageSystemAttributeName as System, QueueAttributeName};
use serde_json::Value;
use support::container::{KEY, changed, post, server_queued, table, turn};

/// A FIFO queue of its own on moto.
async fn fifo_queue(sqs: &aws_sdk_sqs::Client) -> String {
    sqs.create_queue()
        .queue_name(format!("turns-{}.fifo", uuid::Uuid::new_v4().simple()))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

/// How many messages the queue holds, visible or not.
async fn held(sqs: &aws_sdk_sqs::Client, queue: &str) -> usize {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(queue)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap_or_default();
    [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
    ]
    .iter()
    .map(|name| attributes.get(name).map_or(0, |n| n.parse::<usize>().unwrap()))
    .sum()
}

#[tokio::test]
async fn a_turn_goes_to_the_queue_in_its_conversations_group_and_the_worker_that_reads_it_runs_it() {
    let sqs = moto().sqs();
    let queue = fifo_queue(&sqs).await;
    let server = server_queued(TurnQueue::new(sqs.clone(), &queue)).await;

    let (status, accepted) = post(
        &format!("{}/turns", server.url),
        Some(KEY),
        &turn("t-q1", "conv-q").to_string(),
    )
    .await;
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["turnId"], "t-q1");
    assert_eq!(accepted["queued"], true);
    assert!(accepted["messageId"].is_string(), "{accepted}");
    // Nothing ran here: no model call, no turn running or ended on this host.
    assert!(server.bedrock.requests().is_empty());
    assert!(server.ends.lock().unwrap().is_empty());
    assert!(
        server
            .store
            .turn(&sid("conv-q"), &tid("t-q1"))
            .await
            .unwrap()
            .is_none()
    );

    // A stranger's turn to the same conversation is refused before the queue: nothing is sent,
    // and the table is as it was.
    let before = table(&server.store).await;
    let mut strangers = turn("t-q2", "conv-q");
    strangers["userId"] = "mallory".into();
    let (status, refused) = post(
        &format!("{}/turns", server.url),
        Some(KEY),
        &strangers.to_string(),
    )
    .await;
    assert_eq!(status, 404, "{refused}");
    assert_eq!(
        held(&sqs, &queue).await,
        1,
        "only the owner's turn is on the queue"
    );
    assert!(changed(&before, &table(&server.store).await).is_empty());

    // The message is the turn, in the conversation's group, deduplicated by the turn id.
    let received = sqs
        .receive_message()
        .queue_url(&queue)
        .message_system_attribute_names(System::MessageGroupId)
        .message_system_attribute_names(System::MessageDeduplicationId)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let message = &received.messages()[0];
    let attribute = |name: System| message.attributes().and_then(|a| a.get(&name)).cloned();
    assert_eq!(attribute(System::MessageGroupId).as_deref(), Some("conv-q"));
    assert_eq!(attribute(System::MessageDeduplicationId).as_deref(), Some("t-q1"));
    let body: Value = serde_json::from_str(message.body().unwrap()).unwrap();
    assert_eq!(
        (&body["turnId"], &body["conversationId"], &body["userId"]),
        (&"t-q1".into(), &"conv-q".into(), &"u".into())
    );

    // The worker that reads the queue runs it once, into the same table.
    server.bedrock.push(Reply::text("Hello from the queue."));
    let engine = Engine::builder()
        .model(BedrockModel::new(server.bedrock.client(), support::MODEL_ID))
        .store(server.store.clone())
        .config(support::config())
        .build()
        .unwrap();
    let worker = agent_worker::hosts::runner::TurnHandler::new(
        engine,
        Sinks::new().with(DynamoEventLog::new(server.store.clone())),
    );
    let options = PollOptions {
        until_empty: true,
        wait: std::time::Duration::from_secs(1),
        ..PollOptions::default()
    };
    let stats = poll_queue(&sqs, &queue, &worker, &options, std::future::pending())
        .await
        .unwrap();
    assert_eq!((stats.received, stats.deleted, stats.failed), (1, 1, 0));
    assert_eq!(server.bedrock.requests().len(), 1);
    assert_eq!(server.store.load_history(&sid("conv-q")).await.unwrap().len(), 2);
    assert_eq!(held(&sqs, &queue).await, 0);
}

#[tokio::test]
async fn a_queue_that_does_not_take_the_turn_is_a_503_and_nothing_runs() {
    let sqs = moto().sqs();
    let missing = format!("{}/000000000000/no-such-queue.fifo", moto().endpoint());
    let server = server_queued(TurnQueue::new(sqs, missing)).await;
    let (status, answer) = post(
        &format!("{}/turns", server.url),
        Some(KEY),
        &turn("t-n1", "conv-n").to_string(),
    )
    .await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"], "the turns queue did not take the turn");
    assert!(server.bedrock.requests().is_empty());
    assert!(
        server
            .store
            .turn(&sid("conv-n"), &tid("t-n1"))
            .await
            .unwrap()
            .is_none()
    );
}

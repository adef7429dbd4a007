//! The serverless path's world for tests/lambda_batch*.rs: moto's SQS and DynamoDB, the stand-in,
//! records and batches as Lambda sends them.

use std::time::{Duration, SystemTime};

use super::{MODEL_ID, config, example_tools};
use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::{BedrockStandIn, moto};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::json;

/// A table on moto and a Bedrock stand-in.
pub struct World {
    pub bedrock: BedrockStandIn,
    pub table: String,
}

impl World {
    pub async fn new() -> Self {
        let table = format!("sessions-{}", uuid::Uuid::new_v4().simple());
        let world = Self {
            bedrock: BedrockStandIn::start().await.unwrap(),
            table,
        };
        world.store().create_table().await.unwrap();
        world
    }

    /// A store on its own client: what a separate worker process would have.
    pub fn store(&self) -> DynamoStore {
        DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&self.table).unwrap())
    }

    pub fn engine(&self, config: EngineConfig) -> Engine {
        Engine::builder()
            .model(BedrockModel::new(self.bedrock.client(), MODEL_ID))
            .store(self.store())
            .tools(example_tools(&["current_time"]))
            .config(config)
            .build()
            .unwrap()
    }

    pub fn handler(&self) -> TurnHandler {
        TurnHandler::new(
            self.engine(config()),
            Sinks::new().with(DynamoEventLog::new(self.store())),
        )
    }
}

pub fn body(turn_id: &str, session: &str, text: &str) -> String {
    json!({"turnId": turn_id, "conversationId": session, "userId": "u-1", "accountId": "a-1", "content": text}).to_string()
}

pub fn record(message_id: &str, body: &str) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = Some(message_id.to_owned());
    record.body = Some(body.to_owned());
    record.event_source_arn = Some("arn:aws:sqs:us-east-1:000000000000:turns".into());
    record
}

pub fn batch(records: Vec<SqsMessage>) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = records;
    event
}

pub fn failures(response: &aws_lambda_events::event::sqs::SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

pub fn in_an_hour() -> Option<SystemTime> {
    Some(SystemTime::now() + Duration::from_secs(3600))
}

pub async fn queue(sqs: &aws_sdk_sqs::Client, max_receive_count: u32) -> (String, String) {
    let name = format!("turns-{}", uuid::Uuid::new_v4().simple());
    let dlq = sqs
        .create_queue()
        .queue_name(format!("{name}-dlq"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let dlq_arn = agent_worker_testkit::queue_arn(sqs, &dlq).await;
    let redrive = json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}).to_string();
    let url = sqs
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::RedrivePolicy, redrive)
        .attributes(QueueAttributeName::VisibilityTimeout, "60")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    (url, dlq)
}

/// The bodies in the dead-letter queue at `dlq`.
pub async fn dead_letters(sqs: &aws_sdk_sqs::Client, dlq: &str) -> Vec<String> {
    let dead = sqs
        .receive_message()
        .queue_url(dlq)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    dead.messages
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.body)
        .collect()
}

/// The queue's next message (one, and only one, is there), as Lambda hands it over: a batch of
/// one record with its system and message attributes, from queue `arn`.
pub async fn next_message(sqs: &aws_sdk_sqs::Client, url: &str, arn: &str) -> SqsEvent {
    use aws_sdk_sqs::types::MessageSystemAttributeName;
    let received = sqs
        .receive_message()
        .queue_url(url)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap();
    let messages = received.messages.unwrap_or_default();
    assert_eq!(messages.len(), 1, "one message: {messages:?}");
    agent_worker::hosts::sqs_poller::to_sqs_event(messages, Some(arn), Some("us-east-1"))
}

/// A new FIFO queue on moto, named `name` (`.fifo` added): its URL and its ARN.
pub async fn fifo_queue(sqs: &aws_sdk_sqs::Client, name: &str) -> (String, String) {
    use aws_sdk_sqs::types::QueueAttributeName;
    let url = sqs
        .create_queue()
        .queue_name(format!("{name}.fifo"))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = agent_worker_testkit::moto::queue_arn(sqs, &url).await;
    (url, arn)
}

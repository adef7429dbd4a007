//! A queue consumer that does what Lambda's SQS event source mapping does: receive batches,
//! run the same [`TurnHandler`], delete what succeeded, and leave failures to the queue's
//! redrive policy (sooner with the handler's [`Requeue`](agent_worker_runtime::redrive::Requeue), as on Lambda).
//! It serves for local runs and for a long-running worker (ECS, a VM).

use agent_worker_core::Failure;
use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName, QueueAttributeName};

use agent_worker_contract::ErrorChain;
use agent_worker_runtime::runner::TurnHandler;

/// How the poller receives and returns messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollOptions {
    /// Messages per receive, 1 to 10.
    pub batch_size: i32,
    /// How long one receive waits for messages (long polling), at most 20 s.
    pub wait: Duration,
    /// Stop once a receive finds the queue empty.
    pub until_empty: bool,
}

impl Default for PollOptions {
    fn default() -> Self {
        Self {
            batch_size: 10,
            wait: Duration::from_secs(20),
            until_empty: false,
        }
    }
}

/// What a poll did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Messages received.
    pub received: u64,
    /// Messages handled and deleted.
    pub deleted: u64,
    /// Messages left to the queue.
    pub failed: u64,
}

/// The queue could not be read or written: what was being done; the SDK's error is the source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(transparent)]
pub struct PollError(Failure);

fn sqs_error<E, R>(what: &str, e: aws_sdk_sqs::error::SdkError<E, R>) -> PollError
where
    E: std::error::Error + aws_smithy_types::error::metadata::ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    PollError(Failure::caused_by(
        format!("SQS: {what}"),
        agent_worker_runtime::AwsError::new(e),
    ))
}

/// Polls `queue_url` until `shutdown` resolves (or, with `until_empty`, the queue is empty).
pub async fn poll_queue(
    sqs: &Client,
    queue_url: &str,
    handler: &TurnHandler,
    options: &PollOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<PollStats, PollError> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .attribute_names(QueueAttributeName::VisibilityTimeout)
        .send()
        .await
        .map_err(|e| sqs_error("reading the queue's attributes", e))?;
    let attributes = attributes.attributes().cloned().unwrap_or_default();
    let arn = attributes.get(&QueueAttributeName::QueueArn).cloned();
    let visibility = attributes
        .get(&QueueAttributeName::VisibilityTimeout)
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(30), Duration::from_secs);

    let mut stats = PollStats::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let receive = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(options.batch_size.clamp(1, 10))
            .wait_time_seconds(i32::try_from(options.wait.as_secs().min(20)).unwrap_or(20))
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send();
        let received = tokio::select! {
            () = &mut shutdown => return Ok(stats),
            received = receive => received.map_err(|e| sqs_error("receiving", e))?,
        };
        let messages = received.messages.unwrap_or_default();
        if messages.is_empty() {
            if options.until_empty {
                return Ok(stats);
            }
            continue;
        }
        stats.received += messages.len() as u64;
        let receipts: HashMap<String, String> = messages
            .iter()
            .filter_map(|m| Some((m.message_id.clone()?, m.receipt_handle.clone()?)))
            .collect();
        let event = to_sqs_event(
            messages,
            arn.as_deref(),
            sqs.config().region().map(|r| r.as_ref()),
        );
        let ids: Vec<String> = event
            .records
            .iter()
            .filter_map(|r| r.message_id.clone())
            .collect();
        let deadline = SystemTime::now() + visibility;
        let failed: Vec<String> = match handler.handle_batch(event, Some(deadline)).await {
            Ok(response) => response
                .batch_item_failures
                .into_iter()
                .map(|f| f.item_identifier)
                .collect(),
            Err(e) => {
                tracing::error!(error = %ErrorChain(&e), "the batch failed as a whole");
                ids.clone()
            }
        };
        let succeeded: Vec<&String> = ids.iter().filter(|id| !failed.contains(id)).collect();
        if !succeeded.is_empty() {
            let entries = succeeded
                .iter()
                .enumerate()
                .filter_map(|(i, id)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(format!("m{i}"))
                        .receipt_handle(receipts.get(*id)?)
                        .build()
                        .ok()
                })
                .collect();
            let deleted = sqs
                .delete_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| sqs_error("deleting handled messages", e))?;
            stats.deleted += deleted.successful().len() as u64;
        }
        stats.failed += failed.len() as u64;
    }
}

/// SQS API messages as the Lambda event source mapping would deliver them.
pub fn to_sqs_event(
    messages: Vec<aws_sdk_sqs::types::Message>,
    arn: Option<&str>,
    region: Option<&str>,
) -> SqsEvent {
    let mut event = SqsEvent::default();
    for message in messages {
        let mut record = SqsMessage::default();
        record.attributes = message
            .attributes()
            .map(|a| {
                a.iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        // The message's own attributes, as Lambda gives them (a continuation names its turn's
        // first record in one).
        if let Some(attributes) = message.message_attributes() {
            for (name, value) in attributes {
                let mut attribute = aws_lambda_events::event::sqs::SqsMessageAttribute::default();
                attribute.string_value = value.string_value().map(str::to_owned);
                attribute.data_type = Some(value.data_type().to_owned());
                record.message_attributes.insert(name.clone(), attribute);
            }
        }
        record.message_id = message.message_id;
        record.receipt_handle = message.receipt_handle;
        record.body = message.body;
        record.md5_of_body = message.md5_of_body;
        record.event_source = Some("aws:sqs".into());
        record.event_source_arn = arn.map(str::to_owned);
        record.aws_region = region.map(str::to_owned);
        event.records.push(record);
    }
    event
}

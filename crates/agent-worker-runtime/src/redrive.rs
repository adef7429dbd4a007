//! Returning redriven records to their queue soon: a short visibility timeout that grows with
//! the record's receive count, set with `ChangeMessageVisibilityBatch` before the batch is
//! answered.
//!
//! Without it a record reported in `batchItemFailures` stays hidden for the queue's whole
//! visibility timeout (on the template's FIFO queue 5,400 s, six times the function's largest
//! timeout, as Lambda asks), and on a FIFO queue it holds its conversation's message group all
//! that time. With it a conversation is held up for seconds at first, and the queue's redrive
//! policy still moves what keeps failing to the dead-letter queue.
//!
//! A change that fails is logged and forgiven: the record still comes back, only later.

use std::time::Duration;

pub use requeue::{QueueUrlError, Requeue};

/// The first delay of a redriven record when `REDRIVE_DELAY_MS` is not set.
pub const DEFAULT_REDRIVE_DELAY: Duration = Duration::from_secs(5);
/// The longest delay of a redriven record when `REDRIVE_MAX_DELAY_MS` is not set.
pub const DEFAULT_REDRIVE_MAX_DELAY: Duration = Duration::from_secs(15 * 60);
/// The longest visibility timeout SQS takes (12 hours).
const SQS_MAX_VISIBILITY: Duration = Duration::from_secs(12 * 60 * 60);

/// How long a redriven record stays hidden: `first` on its first receive, doubling with each
/// receive after it, never more than `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedriveBackoff {
    first: Duration,
    max: Duration,
}

/// A backoff whose first delay is longer than its longest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the first redrive delay ({first:?}) is longer than the longest ({max:?})")]
pub struct InvalidBackoff {
    first: Duration,
    max: Duration,
}

impl RedriveBackoff {
    /// A backoff from `first` up to `max` (at most SQS's 12 hours).
    pub fn new(first: Duration, max: Duration) -> Result<Self, InvalidBackoff> {
        if first > max {
            return Err(InvalidBackoff { first, max });
        }
        Ok(Self {
            first,
            max: max.min(SQS_MAX_VISIBILITY),
        })
    }

    /// The delay of a record received `receive_count` times (1 on its first delivery).
    pub fn delay(&self, receive_count: u32) -> Duration {
        let doublings = receive_count.saturating_sub(1).min(31);
        self.first
            .checked_mul(1 << doublings)
            .map_or(self.max, |d| d.min(self.max))
    }
}

impl Default for RedriveBackoff {
    fn default() -> Self {
        Self {
            first: DEFAULT_REDRIVE_DELAY,
            max: DEFAULT_REDRIVE_MAX_DELAY,
        }
    }
}

mod requeue {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    use aws_lambda_events::event::sqs::SqsMessage;
    use aws_sdk_sqs::Client;
    use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry;

    use super::RedriveBackoff;
    use crate::AwsError;
    use agent_worker_contract::ErrorChain;

    /// The most entries one `ChangeMessageVisibilityBatch` takes.
    const SQS_BATCH_LIMIT: usize = 10;

    /// How many times SQS has delivered `record` (its `ApproximateReceiveCount`; 1 when absent).
    pub(super) fn receive_count(record: &SqsMessage) -> u32 {
        record
            .attributes
            .get("ApproximateReceiveCount")
            .and_then(|n| n.parse().ok())
            .unwrap_or(1)
    }

    /// Sets the visibility of redriven records, so they come back after their backoff instead of
    /// the queue's visibility timeout. Queue URLs are looked up once per queue ARN and kept.
    #[derive(Debug)]
    pub struct Requeue {
        sqs: SqsClient,
        backoff: RedriveBackoff,
        urls: Mutex<HashMap<String, String>>,
    }

    /// The SQS client: given, or made from a configuration when first needed.
    #[derive(Debug)]
    enum SqsClient {
        Given(Client),
        Lazy {
            config: Box<aws_config::SdkConfig>,
            client: OnceLock<Client>,
        },
    }

    impl Requeue {
        /// Requeues through `sqs` with `backoff`.
        pub fn new(sqs: Client, backoff: RedriveBackoff) -> Self {
            Self::with(SqsClient::Given(sqs), backoff)
        }

        /// Requeues through an SQS client made from `config` on the first redrive: a function
        /// instance that never redrives never builds it (nor holds its memory).
        pub fn from_config(config: aws_config::SdkConfig, backoff: RedriveBackoff) -> Self {
            Self::with(
                SqsClient::Lazy {
                    config: Box::new(config),
                    client: OnceLock::new(),
                },
                backoff,
            )
        }

        fn with(sqs: SqsClient, backoff: RedriveBackoff) -> Self {
            Self {
                sqs,
                backoff,
                urls: Mutex::default(),
            }
        }

        pub(crate) fn sqs(&self) -> &Client {
            match &self.sqs {
                SqsClient::Given(client) => client,
                SqsClient::Lazy { config, client } => client.get_or_init(|| Client::new(config)),
            }
        }

        /// Hides each of `records` for its backoff. Records without a receipt handle or a queue ARN
        /// are left as they are.
        pub async fn schedule(&self, records: &[&SqsMessage]) {
            let mut by_queue: HashMap<&str, Vec<&SqsMessage>> = HashMap::new();
            for record in records {
                if let (Some(arn), Some(_)) = (record.event_source_arn.as_deref(), &record.receipt_handle) {
                    by_queue.entry(arn).or_default().push(record);
                }
            }
            for (arn, records) in by_queue {
                let url = match self.queue_url(arn).await {
                    Ok(url) => url,
                    Err(why) => {
                        tracing::warn!(queue = arn, error = %ErrorChain(&why), "cannot shorten the redriven records' visibility; they come back after the queue's timeout");
                        continue;
                    }
                };
                for chunk in records.chunks(SQS_BATCH_LIMIT) {
                    self.change(&url, chunk).await;
                }
            }
        }

        async fn change(&self, url: &str, records: &[&SqsMessage]) {
            let entries = records
                .iter()
                .enumerate()
                .filter_map(|(i, record)| {
                    let delay = self.backoff.delay(receive_count(record));
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(format!("r{i}"))
                        .set_receipt_handle(record.receipt_handle.clone())
                        .visibility_timeout(i32::try_from(delay.as_secs()).unwrap_or(i32::MAX))
                        .build()
                        .ok()
                })
                .collect();
            match self
                .sqs()
                .change_message_visibility_batch()
                .queue_url(url)
                .set_entries(Some(entries))
                .send()
                .await
            {
                Ok(answer) => {
                    for failed in answer.failed() {
                        tracing::warn!(entry = failed.id(), code = failed.code(), message = ?failed.message(), "a redriven record's visibility was not changed");
                    }
                }
                Err(e) => {
                    tracing::warn!(queue = url, error = %ErrorChain(&AwsError::new(e)), "cannot shorten the redriven records' visibility; they come back after the queue's timeout");
                }
            }
        }

        pub(crate) async fn queue_url(&self, arn: &str) -> Result<String, QueueUrlError> {
            if let Some(url) = self.urls.lock().ok().and_then(|urls| urls.get(arn).cloned()) {
                return Ok(url);
            }
            let queue = QueueArn::parse(arn).ok_or_else(|| QueueUrlError::NotAnArn(arn.to_owned()))?;
            let url = self
                .sqs()
                .get_queue_url()
                .queue_name(queue.name)
                .queue_owner_aws_account_id(queue.account)
                .send()
                .await
                .map_err(|e| QueueUrlError::Sqs(AwsError::new(e)))?
                .queue_url
                .ok_or(QueueUrlError::NoUrl)?;
            if let Ok(mut urls) = self.urls.lock() {
                urls.insert(arn.to_owned(), url.clone());
            }
            Ok(url)
        }
    }

    /// Why a redriven record's queue could not be found.
    #[derive(Debug, thiserror::Error)]
    pub enum QueueUrlError {
        /// The record's `eventSourceARN` is not a queue's.
        #[error("{0:?} is not an SQS queue ARN")]
        NotAnArn(String),
        /// `GetQueueUrl` failed.
        #[error("GetQueueUrl failed")]
        Sqs(#[source] AwsError),
        /// `GetQueueUrl` answered without one.
        #[error("GetQueueUrl answered no URL")]
        NoUrl,
    }

    /// The parts of `arn:<partition>:sqs:<region>:<account>:<name>` that name a queue.
    pub(super) struct QueueArn<'a> {
        pub(super) account: &'a str,
        pub(super) name: &'a str,
    }

    impl<'a> QueueArn<'a> {
        pub(super) fn parse(arn: &'a str) -> Option<Self> {
            let mut parts = arn.splitn(6, ':');
            let (Some("arn"), Some(_), Some("sqs"), Some(_), Some(account), Some(name)) = (
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
            ) else {
                return None;
            };
            (!account.is_empty() && !name.is_empty()).then_some(Self { account, name })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_with_each_receive_up_to_the_longest() {
        let backoff = RedriveBackoff::new(Duration::from_secs(5), Duration::from_secs(60)).unwrap();
        let delays: Vec<u64> = (0..=6).map(|n| backoff.delay(n).as_secs()).collect();
        assert_eq!(delays, [5, 5, 10, 20, 40, 60, 60]);
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(60));
        let default = RedriveBackoff::default();
        assert_eq!(default.delay(1), DEFAULT_REDRIVE_DELAY);
        assert_eq!(default.delay(40), DEFAULT_REDRIVE_MAX_DELAY);
        assert!(RedriveBackoff::new(Duration::from_secs(2), Duration::from_secs(1)).is_err());
        let capped = RedriveBackoff::new(Duration::from_secs(1), Duration::from_secs(86_400)).unwrap();
        assert_eq!(capped.delay(30), SQS_MAX_VISIBILITY);
    }

    #[test]
    fn a_queue_arn_names_its_account_and_queue() {
        use super::requeue::QueueArn;
        let arn = QueueArn::parse("arn:aws:sqs:eu-west-1:123456789012:turns.fifo").unwrap();
        assert_eq!((arn.account, arn.name), ("123456789012", "turns.fifo"));
        assert!(QueueArn::parse("arn:aws:sns:eu-west-1:123456789012:topic").is_none());
        assert!(QueueArn::parse("turns").is_none());
        assert!(QueueArn::parse("arn:aws:sqs:eu-west-1::turns").is_none());
    }

    #[test]
    fn the_receive_count_comes_from_the_record() {
        use super::requeue::receive_count;
        let mut record = aws_lambda_events::event::sqs::SqsMessage::default();
        assert_eq!(receive_count(&record), 1);
        record
            .attributes
            .insert("ApproximateReceiveCount".into(), "4".into());
        assert_eq!(receive_count(&record), 4);
    }
}

//! A turn longer than its invocation goes on in the next: the handler sends the queue the
//! record's continuation (the same turn), and keeps the turn's first record in flight until the
//! turn ends.
//!
//! Holding the first record is what keeps the conversation's order on a FIFO queue: while it is
//! in flight, SQS delivers no later message of its group, so the conversation's next turn waits
//! for this one without being received (and without its receive count growing towards the
//! dead-letter queue). The record is reported in `batchItemFailures` (so that neither Lambda nor
//! the poller deletes it) with its visibility set to what is left of SQS's 12 hours; each
//! continuation names it (the message attribute [`HELD_RECEIPT`]), travels in a group of its own
//! (the record's, `#continue`, which the held record does not block), and the continuation that
//! ends the turn deletes it. Were the chain of continuations lost, the held record comes back at
//! the end of its visibility and the turn goes on from it.

use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::SqsMessage;
use aws_sdk_sqs::types::MessageAttributeValue;

use crate::AwsError;
use crate::redrive::{QueueUrlError, Requeue};
use agent_worker_contract::ErrorChain;

/// The message attribute of a continuation that carries the receipt handle of the turn's first
/// record, held in flight until the turn ends.
pub const HELD_RECEIPT: &str = "agentWorkerHeldReceipt";

/// SQS's longest visibility, counted from a message's first receipt.
const LONGEST_HOLD: Duration = Duration::from_secs(12 * 3600);
/// Room left under it, for the clocks' difference.
const HOLD_MARGIN: Duration = Duration::from_secs(60);

/// What became of a record whose turn goes on in the next run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continued {
    /// It is the turn's first record, now held in flight: report it, delete it not.
    Held,
    /// Its continuation was sent, and it may be deleted (it was itself a continuation).
    Sent,
}

/// Why a turn's continuation was not sent.
#[derive(Debug, thiserror::Error)]
pub enum ContinuationError {
    /// The record names no queue (`eventSourceARN`).
    #[error("the record names no queue")]
    NoQueue,
    /// The record has no body, or no receipt handle.
    #[error("the record has no {0}")]
    Missing(&'static str),
    /// Its queue could not be found.
    #[error("its queue could not be found")]
    Queue(#[source] QueueUrlError),
    /// The continuation's attribute could not be built.
    #[error("the continuation's attribute does not build")]
    Attribute(#[source] aws_sdk_sqs::error::BuildError),
    /// An SQS request failed.
    #[error("{0} failed")]
    Sqs(&'static str, #[source] AwsError),
}

/// The receipt handle of the record a continuation holds, if `record` is a continuation.
pub fn held_receipt(record: &SqsMessage) -> Option<&str> {
    record
        .message_attributes
        .get(HELD_RECEIPT)
        .and_then(|attribute| attribute.string_value.as_deref())
}

impl Requeue {
    /// Sends the queue `record`'s continuation: the same turn, to go on in the next run, in a
    /// group of its own on a FIFO queue, naming the turn's first record; and, when `record` is
    /// that first record, holds it in flight until the turn ends.
    pub async fn continue_turn(&self, record: &SqsMessage) -> Result<Continued, ContinuationError> {
        let arn = record
            .event_source_arn
            .as_deref()
            .ok_or(ContinuationError::NoQueue)?;
        let body = continuation_body(record.body.as_deref().ok_or(ContinuationError::Missing("body"))?);
        let (held, holds_itself) = match held_receipt(record) {
            Some(receipt) => (receipt.to_owned(), false),
            None => (
                record
                    .receipt_handle
                    .clone()
                    .ok_or(ContinuationError::Missing("receipt handle"))?,
                true,
            ),
        };
        let url = self.queue_url(arn).await.map_err(ContinuationError::Queue)?;
        let attribute = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(&held)
            .build()
            .map_err(ContinuationError::Attribute)?;
        let mut send = self
            .sqs()
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .message_attributes(HELD_RECEIPT, attribute);
        if let Some(group) = record.attributes.get("MessageGroupId") {
            send = send
                .message_group_id(continuation_group(group))
                // A new id each continuation; the SDK's retries of this send share it.
                .message_deduplication_id(format!("{:032x}", agent_worker_contract::fresh_random_bits()));
        }
        send.send()
            .await
            .map_err(|e| ContinuationError::Sqs("SendMessage", AwsError::new(e)))?;
        if !holds_itself {
            return Ok(Continued::Sent);
        }
        let hold = hold_for(record, SystemTime::now());
        if let Err(e) = self
            .sqs()
            .change_message_visibility()
            .queue_url(&url)
            .receipt_handle(&held)
            .visibility_timeout(i32::try_from(hold.as_secs()).unwrap_or(i32::MAX))
            .send()
            .await
        {
            // It comes back at the queue's visibility timeout, and goes on the turn from there.
            tracing::warn!(error = %ErrorChain(&AwsError::new(e)), "could not hold the turn's first record in flight");
        }
        Ok(Continued::Held)
    }

    /// Deletes the first record of the turn `record` continued, once that turn has ended.
    pub async fn release_held(&self, record: &SqsMessage) {
        let (Some(receipt), Some(arn)) = (held_receipt(record), record.event_source_arn.as_deref()) else {
            return;
        };
        let deleted = match self.queue_url(arn).await {
            Ok(url) => self
                .sqs()
                .delete_message()
                .queue_url(url)
                .receipt_handle(receipt)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| ErrorChain(&AwsError::new(e)).to_string()),
            Err(e) => Err(ErrorChain(&e).to_string()),
        };
        if let Err(error) = deleted {
            // It comes back at the end of its hold, finds its turn ended, and is deleted then.
            tracing::warn!(%error, "could not delete the turn's first record");
        }
    }
}

/// How long the turn's first record is held: what is left of SQS's 12 hours since its first
/// receipt (`ApproximateFirstReceiveTimestamp`; from now, when the record does not say).
fn hold_for(record: &SqsMessage, now: SystemTime) -> Duration {
    let first = record
        .attributes
        .get("ApproximateFirstReceiveTimestamp")
        .and_then(|ms| ms.parse().ok())
        .map_or(now, |ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
    let since = now.duration_since(first).unwrap_or_default();
    LONGEST_HOLD.saturating_sub(since).saturating_sub(HOLD_MARGIN)
}

/// The body of a record's continuation: the same turn, without the command a record may carry
/// (a steer or follow-up that ran as a turn of its own), which would otherwise be sent to the
/// running turn (itself) instead of running it.
fn continuation_body(body: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(mut fields)) => match fields.remove("command") {
            Some(_) => serde_json::Value::Object(fields).to_string(),
            None => body.to_owned(),
        },
        _ => body.to_owned(),
    }
}

/// The message group of a continuation of a record of `group`: within SQS's 128 characters, and
/// the same for every continuation of a turn.
fn continuation_group(group: &str) -> String {
    const SUFFIX: &str = "#continue";
    let group = group.strip_suffix(SUFFIX).unwrap_or(group);
    let keep = group
        .char_indices()
        .map(|(at, c)| at + c.len_utf8())
        .take_while(|&end| end + SUFFIX.len() <= 128)
        .last()
        .unwrap_or(0);
    format!("{}{SUFFIX}", &group[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_continuation_carries_the_turn_without_its_command() {
        let turn = r#"{"turnId":"t1","content":"Hi"}"#;
        assert_eq!(continuation_body(turn), turn);
        let steer = r#"{"turnId":"t1","content":"Hi","command":"steer"}"#;
        let body: serde_json::Value = serde_json::from_str(&continuation_body(steer)).unwrap();
        assert_eq!(body, serde_json::json!({"turnId": "t1", "content": "Hi"}));
        assert_eq!(continuation_body("not json"), "not json");
    }

    #[test]
    fn a_continuation_goes_to_one_group_of_its_own_within_the_limit() {
        assert_eq!(continuation_group("conv-1"), "conv-1#continue");
        assert_eq!(continuation_group("conv-1#continue"), "conv-1#continue");
        let group = continuation_group(&"g".repeat(128));
        assert_eq!(group.len(), 128);
        assert!(group.ends_with("#continue"));
    }

    #[test]
    fn the_first_record_is_held_for_what_is_left_of_twelve_hours() {
        let now = SystemTime::now();
        let mut record = SqsMessage::default();
        assert_eq!(hold_for(&record, now), LONGEST_HOLD - HOLD_MARGIN);
        let an_hour_ago = now - Duration::from_secs(3600);
        let ms = an_hour_ago
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        record
            .attributes
            .insert("ApproximateFirstReceiveTimestamp".into(), ms.to_string());
        let hold = hold_for(&record, now);
        assert!(hold <= Duration::from_secs(11 * 3600) - HOLD_MARGIN + Duration::from_secs(1));
        assert!(hold >= Duration::from_secs(11 * 3600) - HOLD_MARGIN - Duration::from_secs(1));
    }
}

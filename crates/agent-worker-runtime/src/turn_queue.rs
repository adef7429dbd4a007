//! [`TurnQueue`]: a turn sent to the turns queue, as one message whoever sends it
//! (`agent-worker send`, the container host given a queue, the serverless API). The worker that
//! reads the queue (the Lambda function, `agent-worker poll`) runs it.
//!
//! On a FIFO queue a turn goes in its conversation's message group, so the conversation's turns
//! run in order, one at a time; a command (steer, follow-up, abort) goes in the conversation's
//! control group (`<conversation>#control`), so that the running turn it is for does not hold it
//! back. The turn id is the deduplication id (its SHA-256 where SQS would refuse it: over 128
//! characters, or a character SQS does not take): a turn sent twice within SQS's five-minute
//! window is one message, and a later redelivery is refused by the table (`duplicate_turn`).

use super::AwsError;
use super::payload::AgentTurnPayload;

/// Why a turn was not sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The turn could not be written as JSON.
    #[error("the turn cannot be written as JSON")]
    Encode(#[source] serde_json::Error),
    /// SQS refused the message or could not be reached.
    #[error("the turns queue did not take the turn")]
    Sqs(#[source] AwsError),
}

/// A turns queue: where turns go to be run by the worker that reads it.
#[derive(Debug, Clone)]
pub struct TurnQueue {
    sqs: aws_sdk_sqs::Client,
    url: String,
}

/// A turn the queue took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// SQS's id of the message.
    pub message_id: Option<String>,
    /// The message group it went in, on a FIFO queue.
    pub group: Option<String>,
}

impl TurnQueue {
    /// The queue at `url`, reached through `sqs`.
    pub fn new(sqs: aws_sdk_sqs::Client, url: impl Into<String>) -> Self {
        Self { sqs, url: url.into() }
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether it is a FIFO queue (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.url.ends_with(".fifo")
    }

    /// The message group `turn` goes in on a FIFO queue: its conversation, or for a command the
    /// conversation's control group.
    pub fn group_of(turn: &AgentTurnPayload) -> String {
        match turn.command {
            Some(_) => format!("{}#control", turn.conversation_id),
            None => turn.conversation_id.to_string(),
        }
    }

    /// Sends `turn`.
    pub async fn send(&self, turn: &AgentTurnPayload) -> Result<Sent, SendError> {
        let body = serde_json::to_string(turn).map_err(SendError::Encode)?;
        let mut request = self.sqs.send_message().queue_url(&self.url).message_body(body);
        let group = self.is_fifo().then(|| Self::group_of(turn));
        if let Some(group) = &group {
            request = request
                .message_group_id(group)
                .message_deduplication_id(deduplication_id(&turn.turn_id));
        }
        let sent = request
            .send()
            .await
            .map_err(|e| SendError::Sqs(AwsError::new(e)))?;
        Ok(Sent {
            message_id: sent.message_id,
            group,
        })
    }
}

/// The longest deduplication id SQS takes.
const MAX_DEDUPLICATION_ID: usize = 128;

/// The deduplication id of turn `turn_id`: the id itself where SQS takes it (at most 128
/// characters, each a letter, a digit or ASCII punctuation), else its SHA-256 in hex.
fn deduplication_id(turn_id: &str) -> String {
    let taken = turn_id.len() <= MAX_DEDUPLICATION_ID
        && !turn_id.is_empty()
        && turn_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b.is_ascii_punctuation());
    if taken {
        return turn_id.to_owned();
    }
    use sha2::Digest as _;
    sha2::Sha256::digest(turn_id.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_id_sqs_would_refuse_is_deduplicated_by_its_hash() {
        assert_eq!(deduplication_id("turn-1:a/b"), "turn-1:a/b");
        let long = "t".repeat(129);
        let hashed = deduplication_id(&long);
        assert_eq!(hashed.len(), 64);
        assert_ne!(hashed, deduplication_id(&"t".repeat(130)));
        assert_eq!(deduplication_id("a turn"), deduplication_id("a turn"));
        assert_eq!(deduplication_id("a turn").len(), 64, "a space is not taken");
        assert_eq!(deduplication_id("tour-é").len(), 64);
    }
}

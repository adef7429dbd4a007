//! The SQS batch handler: an [`SqsEvent`] batch in, an [`SqsBatchResponse`] out, as the Lambda
//! function (`agent-worker-lambda`) and the queue poller deliver it.
//!
//! Each record's body is decoded on its own, so one bad record never fails the batch. Records
//! of different sessions run concurrently; records of one session run in order. On a FIFO queue,
//! after the first failure in a message group, that record and the rest of its group are
//! reported as failures, so the group keeps its order on redelivery.
//!
//! How a turn's end maps to what the queue sees ([`disposition`]):
//!
//! | the turn | the record |
//! | --- | --- |
//! | `completed` (a stop or deadline included: it is stored) | acknowledged |
//! | `failed`, recoverable (`model_unavailable`, `model_stream_interrupted`), already told to the client | acknowledged |
//! | `duplicate_turn`: a redelivery of a turn that already ran | acknowledged, nothing ran |
//! | `superseded`: a turn the person's next message replaced before it started | acknowledged, nothing ran, no event sent |
//! | not started: too little of the invocation was left (see below) | in `batchItemFailures`, unclaimed and untouched: the next delivery runs it |
//! | a body that is not a turn, `invalid_prompt`, `model_rejected` (retrying cannot help: the DLQ shows it to an operator), `store_failed`, a bug | in `batchItemFailures`: redrive, then the DLQ |
//! | `turn_in_progress`: another worker holds the turn's lease | in `batchItemFailures`, back after the queue's visibility timeout |
//!
//! **Time.** A record starts only with at least the store margin plus the least turn time left
//! before the invocation's deadline; otherwise it goes back to the queue before anything is
//! claimed, and on a FIFO queue so does the rest of its group. The least turn time is
//! [`DEFAULT_MIN_TURN_TIME`], or half the batch's whole window when that is shorter (a poller
//! on a queue whose visibility timeout is short: every delivery gets that same window). A
//! deadline that cannot be real (already past, or further away than any invocation lasts, as the
//! `cargo lambda` emulator's constant is) counts as no deadline: each turn's own
//! `turn_deadline` holds it, and the function says so once in its log.
//!
//! **Redrive.** With a [`Requeue`], every redriven record (but a `turn_in_progress` one) is hidden
//! for a short, growing time ([`RedriveBackoff`]) instead of the queue's visibility timeout, so a
//! failure holds its conversation up for seconds, not hours.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::future::join_all;
use tracing::Instrument as _;

use crate::continuation::{Continued, held_receipt};
use crate::payload::AgentTurnPayload;
use crate::redrive::Requeue;
use crate::runner::{Delivery, Disposition, StartRule, TurnHandler};

/// The longest a Lambda invocation lasts (15 minutes), with a minute's room for clock skew. A
/// deadline further away than this is not an invocation's.
const LONGEST_INVOCATION: Duration = Duration::from_secs(16 * 60);

/// The runtime's `deadline`, if it can be real at `now`: a deadline already past, or further
/// away than any invocation lasts (the `cargo lambda` emulator sends the constant `600000`, a
/// moment of 1970), is `None`.
pub fn usable_deadline(deadline: SystemTime, now: SystemTime) -> Option<SystemTime> {
    let left = deadline.duration_since(now).ok()?;
    (!left.is_zero() && left <= LONGEST_INVOCATION).then_some(deadline)
}

/// A batch the handler cannot answer record by record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// A record that failed has no message id, so it cannot be reported alone: the whole batch
    /// is redriven instead (every turn is idempotent, so nothing runs twice).
    #[error("record {index} failed and has no messageId; the whole batch is returned to the queue")]
    MissingMessageId {
        /// The record's position in the batch.
        index: usize,
    },
}

enum Decoded {
    Turn(Box<AgentTurnPayload>),
    Malformed(String),
}

impl TurnHandler {
    /// Returns redriven records to their queue after a short backoff (see [`Requeue`]).
    #[must_use]
    pub fn requeue(mut self, requeue: Requeue) -> Self {
        self.requeue = Some(Arc::new(requeue));
        self
    }

    /// Handles a batch: every record is decoded and run on its own, and the failures are
    /// reported by message id. `deadline` is the invocation's.
    pub async fn handle_batch(
        &self,
        event: SqsEvent,
        deadline: Option<SystemTime>,
    ) -> Result<SqsBatchResponse, BatchError> {
        let records = event.records;
        let fifo = records.iter().any(|r| {
            r.attributes.contains_key("MessageGroupId")
                || r.event_source_arn
                    .as_deref()
                    .is_some_and(|arn| arn.ends_with(".fifo"))
        });
        let decoded: Vec<Decoded> = records.iter().map(decode).collect();
        let start = self.start_rule(deadline, SystemTime::now());

        // Group by message group (FIFO) or session, keeping arrival order within each group.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut by_key: HashMap<String, usize> = HashMap::new();
        for (index, (record, turn)) in records.iter().zip(&decoded).enumerate() {
            let key = match (record.attributes.get("MessageGroupId"), turn) {
                (Some(group), _) => format!("group#{group}"),
                (None, Decoded::Turn(turn)) => format!("session#{}", turn.conversation_id),
                (None, Decoded::Malformed(_)) => format!("record#{index}"),
            };
            let group = *by_key.entry(key).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[group].push(index);
        }

        let runs = groups.iter().map(|members| {
            let records = &records;
            let decoded = &decoded;
            async move {
                let mut outcomes = Vec::with_capacity(members.len());
                let mut group_failed = false;
                for &index in members {
                    let outcome = if fifo && group_failed {
                        Disposition::Redrive("an earlier message of its FIFO group failed".into())
                    } else {
                        self.run_record(&records[index], &decoded[index], &start).await
                    };
                    group_failed |= outcome.is_redrive();
                    outcomes.push((index, outcome));
                }
                outcomes
            }
        });
        let outcomes: Vec<(usize, Disposition)> = join_all(runs).await.into_iter().flatten().collect();
        // Continuations first: one that cannot be sent is redriven, and comes back soon.
        let outcomes = self.send_continuations(&records, outcomes).await;
        if let Some(requeue) = &self.requeue {
            let soon: Vec<&SqsMessage> = outcomes
                .iter()
                .filter(|(_, outcome)| matches!(outcome, Disposition::Redrive(_)))
                .map(|(index, _)| &records[*index])
                .collect();
            if !soon.is_empty() {
                requeue.schedule(&soon).await;
            }
        }
        let mut response = SqsBatchResponse::default();
        for (index, outcome) in outcomes {
            if outcome.is_redrive() {
                let id = records[index]
                    .message_id
                    .clone()
                    .filter(|id| !id.is_empty())
                    .ok_or(BatchError::MissingMessageId { index })?;
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = id;
                response.batch_item_failures.push(failure);
            }
        }
        Ok(response)
    }

    /// Sends the continuation of each record whose turn goes on in the next run; a record whose
    /// continuation cannot be sent is redriven instead (its next delivery goes on just the same).
    async fn send_continuations(
        &self,
        records: &[SqsMessage],
        outcomes: Vec<(usize, Disposition)>,
    ) -> Vec<(usize, Disposition)> {
        let mut sent = Vec::with_capacity(outcomes.len());
        for (index, outcome) in outcomes {
            let Disposition::Continue(why) = outcome else {
                sent.push((index, outcome));
                continue;
            };
            let outcome = match &self.requeue {
                Some(requeue) => match requeue.continue_turn(&records[index]).await {
                    // Reported, and so kept by the queue: it holds the conversation's group.
                    Ok(Continued::Held) => {
                        Disposition::Defer(format!("{why}; held in flight until the turn ends"))
                    }
                    Ok(Continued::Sent) => Disposition::Continue(why),
                    Err(e) => {
                        tracing::warn!(error = %agent_worker_contract::ErrorChain(&e), "could not send the turn's continuation; the record is redriven");
                        Disposition::Redrive(format!("its continuation could not be sent: {e}"))
                    }
                },
                None => Disposition::Redrive("no queue to send its continuation to".into()),
            };
            sent.push((index, outcome));
        }
        // A continuation whose turn has ended lets the turn's first record go.
        if let Some(requeue) = &self.requeue {
            for (index, outcome) in &sent {
                if let Disposition::Acknowledge(_) = outcome
                    && held_receipt(&records[*index]).is_some()
                {
                    requeue.release_held(&records[*index]).await;
                }
            }
        }
        sent
    }

    async fn run_record(&self, record: &SqsMessage, decoded: &Decoded, start: &StartRule) -> Disposition {
        let message_id = record.message_id.as_deref().unwrap_or("<none>");
        let delivery = delivery(record);
        match decoded {
            Decoded::Malformed(why) => {
                tracing::error!(message_id, error = %why, "the record's body is not a turn");
                self.unrun(None, delivery, "malformed_body");
                Disposition::Redrive(why.clone())
            }
            Decoded::Turn(turn) => {
                let span = tracing::info_span!("record", message_id, turn_id = %turn.turn_id, session = %turn.conversation_id);
                let outcome = match start.refuses(SystemTime::now()) {
                    Some(why) => {
                        self.unrun(Some(&turn.turn_id), delivery, "not_started");
                        Disposition::Redrive(why)
                    }
                    None => {
                        self.run_watched(turn, start.deadline, delivery)
                            .instrument(span.clone())
                            .await
                            .disposition
                    }
                };
                let _entered = span.enter();
                match &outcome {
                    Disposition::Acknowledge(why) => tracing::info!(outcome = %why, "record done"),
                    Disposition::Continue(why) => {
                        tracing::info!(outcome = %why, "the turn goes on in the next run")
                    }
                    Disposition::Redrive(why) | Disposition::Defer(why) => {
                        tracing::warn!(reason = %why, "record returned to the queue")
                    }
                }
                outcome
            }
        }
    }
}

/// What the queue says of `record`, for its turn's metrics and trace.
fn delivery(record: &SqsMessage) -> Delivery<'_> {
    let sent = record
        .attributes
        .get("SentTimestamp")
        .and_then(|millis| millis.parse().ok())
        .and_then(|millis| SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(millis)));
    Delivery {
        message_id: record.message_id.as_deref(),
        sent,
        trace_header: record.attributes.get("AWSTraceHeader").map(String::as_str),
    }
}

fn decode(record: &SqsMessage) -> Decoded {
    match record.body.as_deref() {
        None => Decoded::Malformed("the record has no body".into()),
        Some(body) => match AgentTurnPayload::decode(body) {
            Ok(turn) => Decoded::Turn(Box::new(turn)),
            Err(e) => Decoded::Malformed(format!("the body is not a turn: {e}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_that_cannot_be_real_is_none() {
        let now = SystemTime::now();
        let emulator = SystemTime::UNIX_EPOCH + Duration::from_millis(600_000);
        assert_eq!(usable_deadline(emulator, now), None);
        assert_eq!(usable_deadline(now, now), None);
        assert_eq!(usable_deadline(now - Duration::from_secs(1), now), None);
        assert_eq!(usable_deadline(now + Duration::from_secs(3600), now), None);
        let real = now + Duration::from_secs(900);
        assert_eq!(usable_deadline(real, now), Some(real));
    }
}

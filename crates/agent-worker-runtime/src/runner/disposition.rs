//! [`Disposition`]: what the queue should do with a record, given how its turn ended.
//!
//! The one place that says which failure codes are redeliveries: a host asks [`disposition`],
//! and matches no code itself.

use agent_worker_contract::{AgentEvent, codes};

/// What the queue should do with one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Delete it: the turn ran, ran before, or cannot be helped by running again.
    Acknowledge(String),
    /// Report it in `batchItemFailures`: it comes back soon (after its [`RedriveBackoff`](crate::redrive::RedriveBackoff) when
    /// the handler has a `Requeue`), and after `maxReceiveCount` goes to the DLQ. The reason is
    /// logged.
    Redrive(String),
    /// Report it in `batchItemFailures` and leave its visibility to the queue: the turn is
    /// running on another worker, which is to be given its time.
    Defer(String),
    /// Delete it, and send the queue its continuation: the turn goes on in the next run
    /// ([`codes::TURN_CONTINUES`]). When the continuation cannot be sent, the record is redriven
    /// instead, and its next delivery goes on just the same.
    Continue(String),
}

impl Disposition {
    /// Whether the record is reported as a failure.
    pub fn is_redrive(&self) -> bool {
        matches!(self, Self::Redrive(_) | Self::Defer(_))
    }
}

/// What the queue should do, given how a turn ended (`None`: it ended without a terminal).
pub fn disposition(terminal: Option<&AgentEvent>) -> Disposition {
    match terminal {
        Some(AgentEvent::Completed { .. }) => Disposition::Acknowledge("completed".into()),
        Some(AgentEvent::Failed { details, code, .. }) => match code.as_deref() {
            Some(codes::DUPLICATE_TURN) => {
                Disposition::Acknowledge("a duplicate delivery; nothing ran".into())
            }
            Some(codes::TURN_IN_PROGRESS) => Disposition::Defer(details.clone()),
            Some(codes::TURN_CONTINUES) => Disposition::Continue(details.clone()),
            // What cannot run now, and what can never run: the queue keeps it, and its redrive
            // policy moves it to the dead-letter queue, where an operator sees it.
            Some(
                codes::STORE_FAILED
                | codes::INTERNAL
                | codes::INVALID_PROMPT
                | codes::MODEL_REJECTED
                | codes::FAILED_BEFORE
                | codes::NOT_OWNER,
            )
            | None => Disposition::Redrive(details.clone()),
            Some(other) => Disposition::Acknowledge(format!("failed ({other}), and the client was told")),
        },
        Some(_) | None => Disposition::Redrive("the turn ended without a terminal event".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_terminal_maps_to_what_the_queue_should_do() {
        let failed = |code: &str, retryable| AgentEvent::failed("why", retryable, Some(code));
        let redrives = |e: &AgentEvent| disposition(Some(e)).is_redrive();
        assert!(!redrives(&AgentEvent::completed()));
        assert!(!redrives(&AgentEvent::completed_with(
            serde_json::json!({"stopReason": "deadline"})
        )));
        assert!(!redrives(&failed(codes::MODEL_UNAVAILABLE, true)));
        assert!(!redrives(&failed(codes::MODEL_STREAM_INTERRUPTED, true)));
        assert!(!redrives(&failed(codes::DUPLICATE_TURN, false)));
        assert!(redrives(&failed(codes::STORE_FAILED, true)));
        assert!(redrives(&failed(codes::TURN_IN_PROGRESS, true)));
        assert!(matches!(
            disposition(Some(&failed(codes::TURN_CONTINUES, true))),
            Disposition::Continue(_)
        ));
        assert!(matches!(
            disposition(Some(&failed(codes::TURN_IN_PROGRESS, true))),
            Disposition::Defer(_)
        ));
        assert!(matches!(
            disposition(Some(&failed(codes::STORE_FAILED, true))),
            Disposition::Redrive(_)
        ));
        assert!(redrives(&failed(codes::INVALID_PROMPT, false)));
        assert!(redrives(&failed(codes::MODEL_REJECTED, false)));
        assert!(redrives(&failed(codes::FAILED_BEFORE, false)));
        assert!(redrives(&failed(codes::NOT_OWNER, false)));
        assert!(!redrives(&failed(codes::CONVERSATION_DELETED, false)));
        assert!(redrives(&failed(codes::INTERNAL, false)));
        assert!(redrives(&AgentEvent::failed("no code", false, None)));
        assert!(disposition(None).is_redrive());
    }
}

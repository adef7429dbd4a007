//! Claiming a session for a turn: the prompt delivered and the session marked running this turn,
//! a redelivery or an ended session refused, or, while another turn of the person's runs, the
//! prompt queued as that turn's follow-up.

use crate::agents::subagents::PARENT_KEY;
use crate::agents::thread::{ParentLink, SessionStatus, ThreadMessage, ThreadRecord};
use crate::clock::now_ms;
use serde_json::json;

use crate::protocol::{AgentEvent, Prompt, codes};
use crate::session::TurnId;

use super::SESSION_ENDED;
use super::follow_ups;
use super::session::{Session, TurnFailure};

/// What claiming a session for a turn came to.
enum Claimed {
    /// The session runs this turn.
    Run(Box<ThreadRecord>),
    /// Another turn runs it; this one's message was queued as its follow-up.
    Queued {
        /// The running turn.
        run: Option<TurnId>,
    },
}

impl Session {
    /// The session's thread, claimed for this turn; or `None` once the invocation's terminal is
    /// said: the prompt queued as the running turn's follow-up, or why the turn cannot run.
    pub(super) async fn claim_or_queue(&self, prompt: &Prompt) -> Option<ThreadRecord> {
        match self.claim(prompt).await {
            Ok(Claimed::Run(record)) => Some(*record),
            Ok(Claimed::Queued { run }) => {
                self.out.emit(AgentEvent::Completed {
                    data: Some(json!({ "followUp": "queued", "runId": run.as_deref().unwrap_or_default() })),
                });
                None
            }
            Err(failure) => {
                failure.emit(&self.out);
                None
            }
        }
    }

    /// Loads the session, delivers the prompt, and marks the session as running this turn; or,
    /// while another turn of the person's runs, queues the prompt as that turn's follow-up.
    async fn claim(&self, prompt: &Prompt) -> Result<Claimed, TurnFailure> {
        let threads = &self.inner.threads;
        let stored = threads
            .load(&self.scope.session)
            .await
            .map_err(|e| TurnFailure::store(&e))?;
        let now = now_ms();
        let speaker = self.speaker();
        let deliver = |record: &mut ThreadRecord| {
            record
                .transcript
                .push(ThreadMessage::new(speaker, prompt.text.clone()));
            record.trim_transcript();
            record.next_side = speaker.other();
        };
        let mut record = match stored {
            None => {
                let mut record =
                    ThreadRecord::new(self.scope.session.clone(), &self.definition.name, speaker.other());
                record.parent = self
                    .scope
                    .extensions
                    .get(PARENT_KEY)
                    .and_then(|link| serde_json::from_value::<ParentLink>(link.clone()).ok());
                deliver(&mut record);
                record
            }
            Some(mut record) => {
                if record.agent != self.definition.name
                    && !record.handed_off_from.contains(&self.definition.name)
                {
                    return Err(TurnFailure {
                        details: format!(
                            "session {} runs agent `{}`, not `{}`",
                            record.session, record.agent, self.definition.name
                        ),
                        retryable: false,
                        code: codes::INVALID_PROMPT.into(),
                    });
                }
                if record.handled_turns.contains(&self.turn_id) {
                    return Err(TurnFailure {
                        details: format!("turn {} was already handled; it does not run again", self.turn_id),
                        retryable: false,
                        code: codes::DUPLICATE_TURN.into(),
                    });
                }
                match record.status {
                    status if status.is_final() => {
                        return Err(TurnFailure {
                            details: format!("session {} has ended ({})", record.session, status.as_str()),
                            retryable: false,
                            code: SESSION_ENDED.into(),
                        });
                    }
                    SessionStatus::Running
                        if record.lease_until_ms > now
                            && record.running_turn.as_ref() != Some(&self.turn_id) =>
                    {
                        let run = record.running_turn.clone();
                        if self.side(speaker).is_human() {
                            follow_ups::queue(threads.as_ref(), record, &self.turn_id, &prompt.text)
                                .await
                                .map_err(|e| TurnFailure::store(&e))?;
                            return Ok(Claimed::Queued { run });
                        }
                        return Err(TurnFailure {
                            details: format!("session {} is running a turn", record.session),
                            retryable: true,
                            code: codes::TURN_IN_PROGRESS.into(),
                        });
                    }
                    SessionStatus::Running if record.lease_until_ms > now => {
                        return Err(TurnFailure {
                            details: format!(
                                "session {} is running turn {} on another worker",
                                record.session, self.turn_id
                            ),
                            retryable: true,
                            code: codes::TURN_IN_PROGRESS.into(),
                        });
                    }
                    // This turn was cut off earlier: resume it, its message already delivered.
                    SessionStatus::Running if record.running_turn.as_ref() == Some(&self.turn_id) => {}
                    // Parked, or another turn's lease ran out: this message goes in, and on.
                    _ => deliver(&mut record),
                }
                record
            }
        };
        record.status = SessionStatus::Running;
        record.running_turn = Some(self.turn_id.clone());
        record.lease_until_ms = now.saturating_add(self.inner.lease.as_millis() as u64);
        record.version = threads.save(&record).await.map_err(|e| TurnFailure::store(&e))?;
        Ok(Claimed::Run(Box::new(record)))
    }
}

//! The control plane on a session store ([`StoreControl`], and the engine's own
//! [`SessionControl`]): commands go to the session's running turn through the store, so that the
//! turn takes them on whatever worker runs it, and any process with the store can send them (a
//! host needs no engine to take them).

use std::sync::Arc;

use crate::protocol::control::{CommandCounts, ControlFuture, SessionStatus, refusals};
use crate::protocol::{Accepted, Refused, SessionCommand, SessionControl, SessionState};
use crate::session::{
    CommandOutcome, MAX_QUEUED_COMMAND_BYTES, Owner, SessionId, SessionStore, Stop, StopCause, StopOutcome,
    StoreError, StoredMessage, TurnCommand,
};

use super::Engine;
use crate::protocol::ErrorChain;

/// A piece of a session's durable history, read from a cursor.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Entries {
    /// The messages, each with its place and turn.
    pub entries: Vec<StoredMessage>,
    /// The place to read on from (`since` of the next read).
    pub next: u64,
}

/// The longest prompt a command may carry, in bytes: it is kept on the turn's record.
pub const MAX_COMMAND_BYTES: usize = 32 * 1024;

/// What the engine offers.
const CAPABILITIES: &[&str] = &["steer", "follow_up", "abort"];

/// The control plane of the sessions in a store: what the engine's turns on that store take.
#[derive(Debug, Clone)]
pub struct StoreControl {
    store: Arc<dyn SessionStore>,
}

impl StoreControl {
    /// The control plane of `store`'s sessions.
    pub fn new(store: Arc<dyn SessionStore>) -> Self {
        Self { store }
    }

    /// The session's durable history from place `since`, at most `limit` entries, and the place
    /// to read on from.
    pub async fn entries(&self, session: &SessionId, since: u64, limit: usize) -> Result<Entries, Refused> {
        let entries = self
            .store
            .entries(session, since, limit)
            .await
            .map_err(|e| store_failed(&e))?;
        let next = entries.last().map_or(since, |last| last.seq + 1);
        Ok(Entries { entries, next })
    }

    /// [`dispatch`](SessionControl::dispatch) for the person `asking`: a conversation that is
    /// someone else's is refused (`not_owner`), and nothing is kept.
    pub async fn dispatch_as(
        &self,
        session: &SessionId,
        asking: &Owner,
        command: SessionCommand,
    ) -> Result<Accepted, Refused> {
        match self.store.owner(session).await {
            Err(e) => Err(store_failed(&e)),
            Ok(Some(owner)) if &owner != asking => {
                asking.warn_refused(&owner, "a command");
                Err(Refused::new(
                    refusals::NOT_OWNER,
                    "this conversation belongs to another person; nothing was kept",
                    false,
                ))
            }
            Ok(_) => dispatch(self.store.as_ref(), session, command).await,
        }
    }
}

impl SessionControl for StoreControl {
    fn capabilities(&self) -> &'static [&'static str] {
        CAPABILITIES
    }

    fn dispatch<'a>(
        &'a self,
        session: &'a SessionId,
        command: SessionCommand,
    ) -> ControlFuture<'a, Accepted> {
        Box::pin(dispatch(self.store.as_ref(), session, command))
    }

    fn state<'a>(&'a self, session: &'a SessionId) -> ControlFuture<'a, SessionState> {
        Box::pin(state(self.store.as_ref(), session))
    }
}

impl Engine {
    /// The control plane of this engine's sessions: commands its turns take, on any worker of
    /// the same store.
    pub fn control(&self) -> StoreControl {
        StoreControl::new(self.inner.store.clone())
    }
}

fn store_failed(error: &StoreError) -> Refused {
    tracing::warn!(error = %ErrorChain(&error), "a command could not be taken");
    Refused::new(refusals::STORE_FAILED, error.client_message(), true)
}

fn no_active_run(session: &SessionId) -> Refused {
    Refused::new(
        refusals::NO_ACTIVE_RUN,
        format!("session {session} has no running turn to take the command; send a turn instead"),
        true,
    )
}

/// The command as a turn keeps it, or why it is not one.
fn turn_command(command: SessionCommand) -> Result<Option<TurnCommand>, Refused> {
    let (prompt, make): (String, fn(String) -> TurnCommand) = match command {
        SessionCommand::Abort => return Ok(None),
        SessionCommand::Steer { prompt } => (prompt, |text| TurnCommand::Steer { text }),
        SessionCommand::FollowUp { prompt } => (prompt, |text| TurnCommand::FollowUp { text }),
    };
    if prompt.trim().is_empty() {
        return Err(Refused::new(refusals::INVALID_COMMAND, "prompt: is empty", false));
    }
    if prompt.len() > MAX_COMMAND_BYTES {
        return Err(Refused::new(
            refusals::INVALID_COMMAND,
            format!(
                "prompt: is {} bytes, over the limit of {MAX_COMMAND_BYTES}",
                prompt.len()
            ),
            false,
        ));
    }
    Ok(Some(make(prompt)))
}

async fn dispatch(
    store: &dyn SessionStore,
    session: &SessionId,
    command: SessionCommand,
) -> Result<Accepted, Refused> {
    let command = turn_command(command)?;
    let run = store
        .active_turn(session)
        .await
        .map_err(|e| store_failed(&e))?
        .ok_or_else(|| no_active_run(session))?;
    let kept = match &command {
        None => {
            let asked = store
                .request_stop(session, &run, Stop::now(StopCause::UserStop))
                .await
                .map_err(|e| store_failed(&e))?;
            asked == StopOutcome::Recorded
        }
        Some(command) => {
            match store
                .add_command(session, &run, command)
                .await
                .map_err(|e| store_failed(&e))?
            {
                CommandOutcome::Accepted { .. } => true,
                CommandOutcome::NotRunning => false,
                CommandOutcome::Full => {
                    return Err(Refused::new(
                        refusals::TOO_LARGE,
                        format!(
                            "the running turn's commands would pass {MAX_QUEUED_COMMAND_BYTES} bytes; \
                             send this as a turn once it has ended"
                        ),
                        false,
                    ));
                }
            }
        }
    };
    if kept {
        Ok(Accepted {
            run_id: run.into_string(),
        })
    } else {
        Err(no_active_run(session))
    }
}

async fn state(store: &dyn SessionStore, session: &SessionId) -> Result<SessionState, Refused> {
    let Some(run) = store.active_turn(session).await.map_err(|e| store_failed(&e))? else {
        return Ok(SessionState {
            status: SessionStatus::Idle,
            active_run_id: None,
            commands: CommandCounts::default(),
        });
    };
    let signals = store
        .turn_signals(session, &run)
        .await
        .map_err(|e| store_failed(&e))?;
    let steering = signals
        .commands
        .iter()
        .filter(|c| matches!(c, TurnCommand::Steer { .. }))
        .count();
    Ok(SessionState {
        status: SessionStatus::Running,
        active_run_id: Some(run.into_string()),
        commands: CommandCounts {
            steering,
            follow_up: signals.commands.len() - steering,
        },
    })
}

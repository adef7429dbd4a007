//! `POST /turns`: a turn accepted (202) once its person and conversation are checked, then run
//! here through the runner, or sent to the turns queue when the host sends them there.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;

use super::access::{self, Authority};
use super::answers::TurnAccepted;
use super::extract::TurnBody;
use super::{ContainerHost, HostError, TurnEnd, Turns};
use agent_worker_contract::ErrorChain;
use agent_worker_contract::{AgentEvent, codes};
use agent_worker_core::engine::config::DEFAULT_SUPERSEDE_WAIT;
use agent_worker_core::session::{Lease, Owner, SessionId, Stop, StopCause, StopOutcome, TurnId};
use agent_worker_runtime::AgentTurnPayload;
use agent_worker_runtime::metrics::TurnOutcome;
use agent_worker_runtime::runner::TurnHandler;

/// `POST /turns`: the turn is decoded ([`TurnBody`]), its person is the request's (the console's
/// token acts for its own person alone), and its conversation is theirs (claimed when no one
/// owns it) and runs no other turn, before it is accepted (202) and run here, or sent to the
/// turns queue when the host sends them there ([`ContainerHost::queued`]).
pub(super) async fn accept_turn(
    State(host): State<ContainerHost>,
    authority: Authority,
    TurnBody(turn): TurnBody,
) -> Result<(StatusCode, axum::Json<TurnAccepted>), HostError> {
    let person = authority.person(Some(&turn.user_id), Some(&turn.account_id))?;
    let mut accepted = TurnAccepted {
        turn_id: turn.turn_id.clone(),
        session: turn.conversation_id.clone(),
        queued: None,
        message_id: None,
    };
    if let Started::Queued { message_id } = start(&host, &person, turn).await? {
        accepted.queued = Some(true);
        accepted.message_id = message_id;
    }
    Ok((StatusCode::ACCEPTED, axum::Json(accepted)))
}

/// Where a started turn went.
#[derive(Debug)]
pub(super) enum Started {
    /// It runs here.
    Running,
    /// It was sent to the turns queue, as this message.
    Queued {
        /// The queue's id of the message.
        message_id: Option<String>,
    },
}

/// Starts `turn` for `person` (the ids it carries are theirs: the caller checked), every
/// protocol's way in (`POST /turns`, AG-UI, AgentCore's `/invocations`): its conversation is
/// theirs (claimed when no one owns it) and runs no other turn, then it runs here, or goes to
/// the turns queue when the host sends them there ([`ContainerHost::queued`]).
pub(super) async fn start(
    host: &ContainerHost,
    person: &Owner,
    turn: AgentTurnPayload,
) -> Result<Started, HostError> {
    let running = admit(host, person, &turn).await?;
    match host.turns() {
        Turns::Queue(queue) => {
            let sent = queue.send(&turn).await.map_err(|e| {
                tracing::error!(error = %ErrorChain(&e), turn_id = %turn.turn_id, "the turn was not queued");
                HostError::unavailable("the turns queue did not take the turn")
            })?;
            Ok(Started::Queued {
                message_id: sent.message_id,
            })
        }
        Turns::Run { handler, .. } => {
            host.refuse_if_running_here(&turn)?;
            // The run is taken before the turn is accepted, so that of two turns racing into one
            // conversation the loser is answered 409 now, never accepted and then dropped; and
            // before a place is taken, so that turns racing for one conversation (or waiting
            // for the turn they supersede) hold none of the places other people's turns need.
            let held_already = running.as_ref() == Some(&turn.turn_id);
            if !held_already {
                host.take_run(&turn, running).await?;
            }
            if let Err(refused) = host.reserve(&turn) {
                // Not when the same turn took its place meanwhile: the run is that turn's.
                if !held_already && refused.status() != StatusCode::CONFLICT {
                    host.give_run_back(&turn).await;
                }
                return Err(refused);
            }
            host.spawn_turn(handler.clone(), turn);
            Ok(Started::Running)
        }
    }
}

/// How long the run a turn takes when it is accepted lasts before its engine's own claim (with
/// the turn's whole lease) takes it over. Bounds how long a conversation stays held when the
/// host dies between accepting a turn and starting it.
pub const ACCEPTED_RUN_LEASE: Duration = Duration::from_secs(60);

/// The first wait between two looks at a superseded turn's run, doubled up to
/// [`MAX_RUN_LOOK_INTERVAL`].
const FIRST_RUN_LOOK_INTERVAL: Duration = Duration::from_millis(50);
/// The longest wait between two looks at a superseded turn's run.
const MAX_RUN_LOOK_INTERVAL: Duration = Duration::from_millis(500);

/// Whether `turn` may start for `person` now, as [`start`] asks first: the host takes turns,
/// the conversation is theirs (claimed when no one owns it; 404 otherwise) and runs no other
/// turn (409 naming it, unless `turn` supersedes it). A protocol that keeps something for the
/// turn before it starts (A2A's file parts) asks this first, so a refusal keeps nothing.
/// Answers the turn running now (the one `turn` supersedes), if any.
pub(super) async fn admit(
    host: &ContainerHost,
    person: &Owner,
    turn: &AgentTurnPayload,
) -> Result<Option<TurnId>, HostError> {
    if !host.accepting() {
        return Err(HostError::unavailable("shutting down"));
    }
    // One turn of a conversation at a time: said here, before the turn is accepted (the owner
    // check read the run); the table holds to it when two arrive at once.
    let running = access::theirs(host, person, &turn.conversation_id, true).await?;
    if let Some(running) = running
        .as_ref()
        .filter(|running| **running != turn.turn_id && !turn.supersedes.iter().any(|id| id == *running))
    {
        return Err(HostError::conversation_busy(&turn.conversation_id, running));
    }
    Ok(running)
}

impl ContainerHost {
    /// Takes `turn`'s conversation's run in the table for it: when the turn supersedes the one
    /// `running`, that turn is asked to stop and its run waited for (at most the supersede
    /// wait) first. 409 naming the turn that holds the run when it cannot be taken: another
    /// turn that raced this one in, or a superseded turn that did not end in time.
    async fn take_run(&self, turn: &AgentTurnPayload, running: Option<TurnId>) -> Result<(), HostError> {
        let store = &self.inner.store;
        let conversation = &turn.conversation_id;
        if let Some(superseded) = running.filter(|running| *running != turn.turn_id) {
            match store
                .request_stop(conversation, &superseded, Stop::now(StopCause::Superseded))
                .await
            {
                Ok(StopOutcome::Recorded | StopOutcome::AlreadyEnded) => {}
                Err(e) => return Err(HostError::store("stopping a superseded turn", &e)),
            }
            self.until_run_leaves(conversation, &superseded).await?;
        }
        match store
            .claim_run(conversation, &turn.turn_id, Lease(ACCEPTED_RUN_LEASE))
            .await
        {
            Ok(None) => Ok(()),
            Ok(Some(holder)) => Err(HostError::conversation_busy(conversation, &holder)),
            Err(e) => Err(HostError::store("taking the conversation's run", &e)),
        }
    }

    /// Waits until `holder` no longer holds `conversation`'s run, or the supersede wait passed.
    async fn until_run_leaves(&self, conversation: &SessionId, holder: &TurnId) -> Result<(), HostError> {
        let store = &self.inner.store;
        let deadline = tokio::time::Instant::now() + DEFAULT_SUPERSEDE_WAIT;
        let mut interval = FIRST_RUN_LOOK_INTERVAL;
        loop {
            let now_held = store
                .running_turn(conversation)
                .await
                .map_err(|e| HostError::store("looking at the conversation's run", &e))?;
            if now_held.as_ref() != Some(holder) || tokio::time::Instant::now() >= deadline {
                return Ok(());
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(MAX_RUN_LOOK_INTERVAL);
        }
    }

    /// Gives back the place [`reserve`](Self::reserve) took for a turn that will not run.
    fn give_place_back(&self, turn_id: &TurnId) {
        if let Ok(mut running) = self.inner.running.lock() {
            running.remove(turn_id);
            self.inner.activity.turns(running.len());
        }
    }

    /// 409 when `turn` runs in this host already.
    fn refuse_if_running_here(&self, turn: &AgentTurnPayload) -> Result<(), HostError> {
        let here = self
            .inner
            .running
            .lock()
            .map(|running| running.contains_key(&turn.turn_id))
            .unwrap_or(false);
        if here {
            return Err(already_running(turn));
        }
        Ok(())
    }

    /// Gives back the conversation's run `turn` took and will not use (no place for it).
    async fn give_run_back(&self, turn: &AgentTurnPayload) {
        if let Err(e) = self.store().end_run(&turn.conversation_id, &turn.turn_id).await {
            tracing::warn!(error = %e, turn_id = %turn.turn_id, "could not give the conversation's run back; its lease will");
        }
    }

    /// Takes a place for `turn` among the running turns: 409 when it runs already, 503 when
    /// every place is taken.
    fn reserve(&self, turn: &AgentTurnPayload) -> Result<(), HostError> {
        let mut running =
            self.inner.running.lock().map_err(|_| {
                HostError::new(StatusCode::INTERNAL_SERVER_ERROR, "the host's state is poisoned")
            })?;
        if running.contains_key(&turn.turn_id) {
            return Err(already_running(turn));
        }
        if running.len() >= self.inner.config.max_concurrent_turns {
            return Err(HostError::unavailable("at capacity; try again shortly"));
        }
        running.insert(turn.turn_id.clone(), turn.conversation_id.clone());
        self.inner.activity.turns(running.len());
        Ok(())
    }

    /// Runs `turn` (its place taken by [`reserve`](Self::reserve)) to its end, logs how it
    /// ended, tells the end hook, and gives its place back.
    fn spawn_turn(&self, handler: TurnHandler, turn: AgentTurnPayload) {
        let host = self.clone();
        tokio::spawn(async move {
            let run = handler.run_turn_to_end(&turn, None).await;
            let end = TurnEnd {
                session: turn.conversation_id.clone(),
                turn_id: turn.turn_id.clone(),
                outcome: TurnOutcome::of(run.terminal.as_ref(), false),
                terminal: run.terminal,
            };
            tracing::info!(turn_id = %end.turn_id, session = %end.session, outcome = end.outcome.as_str(), "turn ended");
            // The run taken when the turn was accepted goes back if the turn did not give it back
            // itself (one that was refused before its claim, or whose agent keeps no run); not
            // when the same turn runs on another host, which holds the run under the same id.
            let elsewhere = matches!(
                &end.terminal,
                Some(AgentEvent::Failed { code: Some(code), .. }) if code == codes::TURN_IN_PROGRESS
            );
            if !elsewhere && let Err(e) = host.store().end_run(&turn.conversation_id, &turn.turn_id).await {
                tracing::warn!(error = %ErrorChain(&e), turn_id = %turn.turn_id, "could not give the conversation's run back; its lease will");
            }
            host.tell_turn_end(end);
            host.give_place_back(&turn.turn_id);
            host.notify_idle();
        });
    }
}

/// The refusal of a turn that runs in this host already.
fn already_running(turn: &AgentTurnPayload) -> HostError {
    HostError::new(
        StatusCode::CONFLICT,
        format!("turn {} is already running", turn.turn_id),
    )
}

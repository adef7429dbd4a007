//! The session state machine: one `invoke` carries a session between its sides until it parks,
//! ends or fails, saving its thread after every side turn.

use std::sync::{Arc, PoisonError};

use futures_util::StreamExt as _;
use serde_json::json;

use crate::agents::definition::{AgentDefinition, HookStage, PromptSide, SideConfig, SubagentRelationship};
use crate::agents::handler::ChildPort;
use crate::agents::handler::{HandlerEnd, ThreadState};
use crate::agents::hooks::{HookContext, hook_key};
use crate::agents::subagents::settled_message;
use crate::agents::thread::{
    ParentLink, SessionEnd, SessionStatus, Side, ThreadMessage, ThreadRecord, ThreadStoreError,
};
use crate::clock::now_ms;
use crate::engine::{Emitter, Engine};
use crate::protocol::{Agent, AgentEvent, Prompt, Scope, codes};
use crate::session::{IdError, SessionId, TurnId};

use super::engines::{bound_message, build_engine};
use super::events::SessionEvent;
use super::follow_ups;
use super::stop_rules::{SideOutcome, apply_stop_rules};
use super::{RuntimeInner, SESSION_FAILED};
use crate::protocol::ErrorChain;

mod side_turns;

/// A side turn that could not finish: the invocation fails with it.
pub(super) struct TurnFailure {
    pub(super) details: String,
    pub(super) retryable: bool,
    pub(super) code: String,
}

impl TurnFailure {
    pub(super) fn store(e: &ThreadStoreError) -> Self {
        match e {
            ThreadStoreError::Conflict => Self {
                details: "another worker took this session over".into(),
                retryable: true,
                code: codes::TURN_IN_PROGRESS.into(),
            },
            ThreadStoreError::Unavailable(why) => Self {
                details: {
                    tracing::error!(error = %ErrorChain(&why), "the session store failed");
                    "the session store failed".into()
                },
                retryable: true,
                code: codes::STORE_FAILED.into(),
            },
        }
    }

    /// An id this session derives (a side's session, a side turn's id) that is not one: an id
    /// it was derived from is too long, or a name in it holds what an id may not.
    fn derived_id(what: &str, problem: &IdError) -> Self {
        Self {
            details: format!("{what} derived from this session's cannot be an id: it {problem}"),
            retryable: false,
            code: codes::INVALID_PROMPT.into(),
        }
    }

    pub(super) fn emit(self, out: &Emitter) {
        out.emit(AgentEvent::failed(self.details, self.retryable, Some(&self.code)));
    }
}

pub(super) struct Session {
    pub(super) inner: Arc<RuntimeInner>,
    pub(super) definition: AgentDefinition,
    pub(super) scope: Scope,
    pub(super) turn_id: TurnId,
    pub(super) out: Emitter,
}

impl Session {
    pub(super) fn side(&self, side: Side) -> &SideConfig {
        match side {
            Side::A => &self.definition.side_a,
            Side::B => &self.definition.side_b,
        }
    }

    /// The side whose messages `invoke` delivers: the human side, or side B.
    pub(super) fn speaker(&self) -> Side {
        if self.definition.side_a.is_human() {
            Side::A
        } else {
            Side::B
        }
    }

    pub(super) async fn run(self, prompt: Prompt) {
        let Some(record) = self.claim_or_queue(&prompt).await else {
            return;
        };
        // A thread handed off goes on with the agent that has it now.
        let owner = match self.inner.catalog.get_agent(&record.agent) {
            Some(definition) if definition.name != self.definition.name => {
                self.with_definition(definition.clone())
            }
            _ => self.with_definition(self.definition.clone()),
        };
        match owner.run_sides(record).await {
            Ok(record) => {
                if record.status.is_final()
                    && let Some(link) = &record.parent
                {
                    self.resume_parent(link, &record).await;
                }
                self.finish(&record);
            }
            Err(failure) => failure.emit(&self.out),
        }
    }

    /// Runs the hooks of `side`'s turn: its children's `before_parent` hooks, the agent's own,
    /// then its children's other hooks. What they return is given to the side as context.
    async fn hook_context(&self, side: Side, record: &ThreadRecord) -> Result<Vec<String>, TurnFailure> {
        let mut before = Vec::new();
        let mut after = Vec::new();
        for relationship in self.side(side).subagents().iter().filter(|r| r.is_enabled()) {
            let Some(child) = self.inner.catalog.get_agent(&relationship.agent) else {
                continue;
            };
            for requirement in &child.parent_hooks {
                let key = hook_key(child.package_name.as_deref(), &requirement.hook);
                match requirement.stage {
                    Some(HookStage::AfterParent) => after.push(key),
                    _ => before.push(key),
                }
            }
        }
        let package = self.definition.package_name.as_deref();
        let ids = before
            .into_iter()
            .chain(self.definition.hooks.iter().map(|id| hook_key(package, id)))
            .chain(after);
        let mut context = Vec::new();
        for id in ids {
            // Validation already refused a missing hook; fail closed should one still be missing.
            let hook = self.inner.hooks.get(&id).ok_or_else(|| TurnFailure {
                details: format!("hook `{id}` is required and not registered"),
                retryable: false,
                code: codes::INTERNAL.into(),
            })?;
            let input = HookContext {
                agent: self.definition.name.clone(),
                session: self.scope.session.clone(),
                side,
                transcript: record.transcript.clone(),
            };
            let added = hook.before_turn(&input).await.map_err(|e| TurnFailure {
                details: format!("hook `{id}` failed: {e}"),
                retryable: true,
                code: codes::INTERNAL.into(),
            })?;
            context.extend(added.filter(|c| !c.trim().is_empty()));
        }
        Ok(context)
    }

    /// A child that settled after its parent parked on it: its result, attachments included, goes
    /// to the parent side as a message, and the parent goes on once it waits for no other child. The parent's events
    /// stream here; where it ends up is told by a `session_status` event, not a terminal.
    async fn resume_parent(&self, link: &ParentLink, child: &ThreadRecord) {
        let threads = &self.inner.threads;
        let Ok(Some(mut parent)) = threads.load(&link.session).await else {
            return;
        };
        // A parent that is running now hears of the child in its own time; one that waits, now.
        if parent.status == SessionStatus::Running || !parent.waiting_on.contains(&child.session) {
            return;
        }
        let Some(definition) = self.inner.catalog.get_agent(&parent.agent).cloned() else {
            return;
        };
        parent.waiting_on.retain(|s| s != &child.session);
        for known in parent.children.iter_mut().filter(|c| c.session == child.session) {
            known.ended = true;
        }
        parent.transcript.push(ThreadMessage {
            side: link.side.other(),
            text: settled_message(&link.relationship, child.status, child.end.as_ref()),
            source: Some(format!("subagent:{}", link.relationship)),
        });
        parent.trim_transcript();
        let resume_turn = match TurnId::new(format!("{}>{}", self.turn_id, link.session)) {
            Ok(turn) => turn,
            Err(e) => {
                tracing::warn!(parent = %link.session, error = %e, "a parent's resuming turn cannot be named");
                return;
            }
        };
        if parent.status == SessionStatus::AwaitingChild && parent.waiting_on.is_empty() {
            parent.status = SessionStatus::Running;
            parent.next_side = link.side;
            parent.running_turn = Some(resume_turn.clone());
            parent.lease_until_ms = now_ms().saturating_add(self.inner.lease.as_millis() as u64);
        }
        match threads.save(&parent).await {
            Ok(version) => parent.version = version,
            Err(e) => {
                tracing::warn!(parent = %link.session, error = %ErrorChain(&e), "could not hand a child's result to its parent");
                return;
            }
        }
        if parent.status != SessionStatus::Running {
            return;
        }
        self.out.emit(
            SessionEvent::Resuming {
                session: &link.session,
                child: &child.session,
            }
            .event(),
        );
        let session = Session {
            inner: self.inner.clone(),
            definition,
            scope: Scope::new(link.session.clone()).with_turn_id(resume_turn.clone()),
            turn_id: resume_turn,
            out: self.out.clone(),
        };
        match Box::pin(session.run_sides(parent)).await {
            Ok(parent) => {
                if parent.status.is_final()
                    && let Some(grandparent) = &parent.parent
                {
                    Box::pin(session.resume_parent(grandparent, &parent)).await;
                }
                self.out.emit(
                    SessionEvent::ParentSettled {
                        status: parent.status,
                        session: &parent.session,
                        end: parent.end.as_ref(),
                    }
                    .event(),
                );
            }
            Err(failure) => self.out.emit(
                SessionEvent::Interrupted {
                    session: &link.session,
                    details: &failure.details,
                    code: &failure.code,
                }
                .event(),
            ),
        }
    }

    async fn run_sides(&self, mut record: ThreadRecord) -> Result<ThreadRecord, TurnFailure> {
        loop {
            if let Some(max) = self.definition.max_session_turns
                && record.side_turns >= max
            {
                record.status = SessionStatus::Completed;
                record.end = Some(SessionEnd {
                    message: record.transcript.last().map(|m| m.text.clone()),
                    attachments: None,
                    reason: "max_session_turns".into(),
                });
                break;
            }
            let side = record.next_side;
            let config = self.side(side);
            if config.is_human() {
                // The person's follow-ups, queued while this turn ran, come first.
                if follow_ups::take_next(&mut record, side, &self.out) {
                    continue;
                }
                record.status = SessionStatus::AwaitingHuman;
                break;
            }
            self.out.emit(
                SessionEvent::SideStarted {
                    side,
                    label: config.label(),
                    side_turn: record.side_turns + 1,
                }
                .event(),
            );
            self.inner.open_scratch(&self.scope.session, &record.children);
            let outcome = match self.hook_context(side, &record).await {
                Err(failure) => Err(failure),
                Ok(context) => match config {
                    SideConfig::Prompt(prompt_side) => {
                        self.prompt_turn(side, prompt_side, &record, context).await
                    }
                    SideConfig::Handler(handler_side) => {
                        self.handler_turn(side, &handler_side.handler, &record, context)
                            .await
                    }
                    SideConfig::Human(_) => unreachable_human(),
                },
            };
            let scratch = self.inner.close_scratch(&self.scope.session);
            record.children = scratch.children;
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(failure) => {
                    // Keep the session as it was before this side turn; a retry resumes here.
                    record.lease_until_ms = 0;
                    let _ = self.inner.threads.save(&record).await;
                    return Err(failure);
                }
            };
            record.side_turns += 1;
            if let Some(text) = outcome.message.filter(|t| !t.trim().is_empty()) {
                record.transcript.push(ThreadMessage::new(side, text));
                record.trim_transcript();
            }
            if let Some(status) = outcome.status {
                record.status_text = Some(status);
            }
            record.next_side = side.other();
            if let Some((status, end)) = outcome.end {
                record.status = status;
                record.end = Some(end);
                break;
            }
            if let Some(target) = outcome.handoff {
                return self.hand_off(record, &target).await;
            }
            if !scratch.parked.is_empty() {
                // A child the model started waits for a person: so does this side.
                record.waiting_on.extend(scratch.parked);
                record.next_side = side;
                record.status = SessionStatus::AwaitingChild;
                break;
            }
            record.lease_until_ms = now_ms().saturating_add(self.inner.lease.as_millis() as u64);
            self.save(&mut record).await?;
        }
        let lease = record.lease_until_ms;
        record.running_turn = None;
        record.lease_until_ms = 0;
        record.handled(&self.turn_id);
        // The last save parks the session only when no follow-up came meanwhile; one that did
        // runs first, in this invocation.
        let came = follow_ups::finish(self.inner.threads.as_ref(), &mut record, &self.turn_id)
            .await
            .map_err(|e| TurnFailure::store(&e))?;
        if came {
            record.running_turn = Some(self.turn_id.clone());
            record.lease_until_ms = lease;
            record.status = SessionStatus::Running;
            return Box::pin(self.run_sides(record)).await;
        }
        Ok(record)
    }

    /// Hands the thread to `target`: it keeps the transcript and the person's side, and its
    /// other side takes the next turn, in this same invocation.
    async fn hand_off(&self, mut record: ThreadRecord, target: &str) -> Result<ThreadRecord, TurnFailure> {
        let definition = self
            .inner
            .catalog
            .get_agent(target)
            .cloned()
            .ok_or_else(|| TurnFailure {
                details: format!("no agent `{target}` to hand off to"),
                retryable: false,
                code: codes::INTERNAL.into(),
            })?;
        let from = std::mem::replace(&mut record.agent, definition.name.clone());
        record.handed_off_from.push(from.clone());
        let human = if definition.side_a.is_human() {
            Side::A
        } else {
            Side::B
        };
        record.next_side = human.other();
        // What the new agent is told first: who handed the thread over.
        record.transcript.push(ThreadMessage {
            side: human,
            text: format!(
                "[handoff] {from} handed this conversation to {}.",
                definition.name
            ),
            source: Some(format!("handoff:{from}")),
        });
        self.save(&mut record).await?;
        self.out.emit(
            SessionEvent::Handoff {
                from: &from,
                to: &definition.name,
            }
            .event(),
        );
        let next = self.with_definition(definition);
        Box::pin(next.run_sides(record)).await
    }

    /// The same invocation, run by another agent of the thread.
    fn with_definition(&self, definition: AgentDefinition) -> Session {
        Session {
            inner: self.inner.clone(),
            definition,
            scope: self.scope.clone(),
            turn_id: self.turn_id.clone(),
            out: self.out.clone(),
        }
    }

    /// Saves `record`, which takes the stored version.
    /// Saves the running turn's thread, keeping what the person queued on it meanwhile.
    async fn save(&self, record: &mut ThreadRecord) -> Result<(), TurnFailure> {
        follow_ups::save_keeping(self.inner.threads.as_ref(), record, &self.turn_id)
            .await
            .map(|_| ())
            .map_err(|e| TurnFailure::store(&e))
    }

    fn finish(&self, record: &ThreadRecord) {
        let awaiting = (record.status == SessionStatus::AwaitingHuman).then_some(record.next_side);
        self.out.emit(
            SessionEvent::Settled {
                status: record.status,
                awaiting,
                status_text: record.status_text.as_deref(),
                end: record.end.as_ref(),
            }
            .event(),
        );
        if record.status == SessionStatus::Failed {
            let message = record
                .end
                .as_ref()
                .and_then(|e| e.message.clone())
                .unwrap_or_default();
            self.out.emit(AgentEvent::failed(
                format!("the session failed: {message}"),
                false,
                Some(SESSION_FAILED),
            ));
            return;
        }
        let mut data = json!({ "sessionStatus": record.status.as_str(), "sideTurns": record.side_turns });
        if let Some(side) = awaiting {
            data["awaiting"] = side.as_str().into();
        }
        if !record.waiting_on.is_empty() {
            data["waitingOn"] = json!(record.waiting_on);
        }
        if record.status.is_final() {
            // What Agent Protocol reads as a task's last step.
            data["is_last"] = true.into();
        }
        if let Some(end) = &record.end {
            data["end"] = json!(end);
        }
        if let Some(status) = &record.status_text {
            data["statusText"] = status.clone().into();
        }
        self.out.emit(AgentEvent::completed_with(data));
    }

    /// The scope of a side's engine turn: its own session and a turn id derived from this one,
    /// with the caller's deadline.
    fn side_scope(&self, side: Side, record: &ThreadRecord) -> Result<Scope, TurnFailure> {
        let session = SessionId::new(format!("{}#{}", self.scope.session, side.as_str()))
            .map_err(|e| TurnFailure::derived_id("a side's session", &e))?;
        let mut scope = Scope::new(session).with_turn_id(self.side_turn(record)?);
        scope.options.deadline_ms = self.scope.options.deadline_ms;
        Ok(scope)
    }

    /// The id of the side turn `record` takes next.
    fn side_turn(&self, record: &ThreadRecord) -> Result<TurnId, TurnFailure> {
        TurnId::new(format!("{}#{}", self.turn_id, record.side_turns + 1))
            .map_err(|e| TurnFailure::derived_id("a side turn's id", &e))
    }
}

pub(super) fn unreachable_human() -> Result<SideOutcome, TurnFailure> {
    Err(TurnFailure {
        details: "a human side's turn cannot be run".into(),
        retryable: false,
        code: codes::INTERNAL.into(),
    })
}

//! The session runner: carries a two-sided session between its sides, on the engine and a
//! [`ThreadStore`], and serves it as an [`Agent`].
//!
//! `invoke(scope, prompt)` on a session delivers the prompt as the human side's message (as side
//! B's, when no person takes part), then runs side turns until the session parks on the human
//! side, ends, or fails:
//!
//! - A **prompt side** runs one engine turn in its own engine session (`<session>#sideA`), where
//!   its own words are `assistant` and the other side's are `user`. The turn's stop rules, in
//!   order: `sessionStop` / `sessionFail` (the bound tool's `messageProperty` and
//!   `attachmentsProperty` become the session's result or failure), `stopTool` (its
//!   `stopToolResponseProperty` becomes the side's message), `stopOnResponse` (a text answer
//!   without tool calls ends the turn; when false the side is told to go on until a bound tool
//!   ends it), then `maxSteps` (model steps in the turn). A bound tool the prompt does not
//!   register is provided by the runner: it takes the named properties and answers `ok`.
//! - A **handler side** runs one [`Handler`] invocation.
//! - A **human side** parks the session: `awaiting_human`, until the next `invoke`.
//! - `maxSessionTurns` counts every side turn, whatever backs it; reaching it ends the session.
//! - A prompt side that calls an exposed agent named in its prompt's `tools` hands the thread
//!   off: that agent takes it, with its transcript and its person, in the same invocation.
//!
//! Every side's events are streamed as they come, each side turn announced by a non-terminal
//! `{"type":"session_status","status":"running","side":"sideA",…}` event, and a last
//! `session_status` saying where the session stands before the terminal: `completed` with
//! `data: {"sessionStatus", "sideTurns", "awaiting"?, "end"?}` when it parked or ended well,
//! `failed` with code `session_failed` when a side failed it. The state is saved after every
//! side turn, so a redelivered turn resumes where it stopped, and any worker resumes a parked
//! session.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tracing::Instrument as _;

use super::catalog::Catalog;
use super::definition::{
    AgentDefinition, HookStage, PromptSide, SessionToolBinding, SideConfig, SubagentRelationship, ToolChoice,
};
use super::handler::ChildPort;
use super::handler::{Handler, HandlerEnd, ThreadState};
use super::hooks::{Hook, HookContext};
use super::relay::{RELAY_PIPE, relay_pipe};
use super::subagents::{ChildRuntime, PARENT_KEY, Scratchpads, SideScratch, subagent_tool};
use super::thread::{
    ChildLink, ParentLink, SessionEnd, SessionStatus, Side, ThreadMessage, ThreadRecord, ThreadStore,
    ThreadStoreError,
};
use super::validate::{Issue, Known, binding_tools, has_errors};
use crate::engine::model::Model;
use crate::engine::tools::{Tool, ToolSpec, tool_fn};
use crate::engine::{Emitter, Engine, EngineConfig, StepContext, TurnPolicy, turn_stream};
use crate::protocol::{AGENT_KEY, Agent, AgentEvent, DEADLINE_KEY, EventStream, Prompt, Scope, codes};
use crate::session::SessionStore;

/// How long a running turn holds its session before another worker may take it over.
pub const DEFAULT_SESSION_LEASE: Duration = Duration::from_secs(15 * 60);

/// The failure code of a session a side failed (`sessionFail`, or a handler's `fail_session`).
pub const SESSION_FAILED: &str = "session_failed";
/// The failure code of a message sent to a session that has ended.
pub const SESSION_ENDED: &str = "session_ended";

/// What told a prompt side that its text answer did not end its turn.
const GO_ON: &str = "Your turn is not over: go on, and end it by calling";

/// Makes the model a prompt names.
pub type ModelSource = Arc<dyn Fn(&str) -> Arc<dyn Model> + Send + Sync>;

/// A runtime that cannot be built; the message names what is missing or wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuntimeError(String);

/// Serves the agents of a [`Catalog`]. Cheap to clone.
#[derive(Clone)]
pub struct AgentRuntime {
    inner: Arc<RuntimeInner>,
}

pub(crate) struct RuntimeInner {
    /// The runtime itself, for the subagent tools its engines hold (weak: no cycle).
    me: Weak<RuntimeInner>,
    catalog: Catalog,
    models: ModelSource,
    default_model: String,
    sessions: Arc<dyn SessionStore>,
    threads: Arc<dyn ThreadStore>,
    tools: BTreeMap<String, Arc<dyn Tool>>,
    handlers: BTreeMap<String, Arc<dyn Handler>>,
    hooks: BTreeMap<String, Arc<dyn Hook>>,
    engine_config: EngineConfig,
    lease: Duration,
    default_agent: Option<String>,
    engines: Mutex<HashMap<(String, Side), Engine>>,
    scratchpads: Scratchpads,
}

impl RuntimeInner {
    /// The scratch of the side turn running in `session`.
    pub(crate) fn scratch(&self, session: &str) -> Option<Arc<Mutex<SideScratch>>> {
        self.scratchpads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(session)
            .cloned()
    }

    fn open_scratch(&self, session: &str, children: &[ChildLink]) {
        let pad = Arc::new(Mutex::new(SideScratch {
            children: children.to_vec(),
            parked: Vec::new(),
        }));
        self.scratchpads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session.to_owned(), pad);
    }

    fn close_scratch(&self, session: &str) -> SideScratch {
        let pad = self
            .scratchpads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(session);
        pad.map(|pad| std::mem::take(&mut *pad.lock().unwrap_or_else(PoisonError::into_inner)))
            .unwrap_or_default()
    }
}

impl fmt::Debug for AgentRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentRuntime")
            .field(
                "agents",
                &self.inner.catalog.agents().map(|a| &a.name).collect::<Vec<_>>(),
            )
            .field("default_model", &self.inner.default_model)
            .finish_non_exhaustive()
    }
}

/// Builds an [`AgentRuntime`]; see [`AgentRuntime::builder`].
#[derive(Default)]
pub struct AgentRuntimeBuilder {
    catalog: Catalog,
    models: Option<(String, ModelSource)>,
    sessions: Option<Arc<dyn SessionStore>>,
    threads: Option<Arc<dyn ThreadStore>>,
    tools: BTreeMap<String, Arc<dyn Tool>>,
    handlers: BTreeMap<String, Arc<dyn Handler>>,
    hooks: BTreeMap<String, Arc<dyn Hook>>,
    engine_config: EngineConfig,
    lease: Option<Duration>,
    default_agent: Option<String>,
}

impl fmt::Debug for AgentRuntimeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentRuntimeBuilder").finish_non_exhaustive()
    }
}

impl AgentRuntimeBuilder {
    /// The agents and prompts to serve.
    pub fn catalog(mut self, catalog: Catalog) -> Self {
        self.catalog = catalog;
        self
    }

    /// The agents and prompts of `folder` (`agents/`, `prompts/`), checked against the tools,
    /// handlers and hooks registered so far; fails listing every error.
    pub fn catalog_dir(self, folder: &Path) -> Result<Self, RuntimeError> {
        let (catalog, issues) =
            Catalog::load(folder, &self.known()).map_err(|e| RuntimeError(e.to_string()))?;
        if has_errors(&issues) {
            return Err(listed(&issues));
        }
        Ok(self.catalog(catalog))
    }

    /// Where models come from: `make(model_id)`, and the id a prompt without one uses.
    pub fn models(
        mut self,
        default_model: impl Into<String>,
        make: impl Fn(&str) -> Arc<dyn Model> + Send + Sync + 'static,
    ) -> Self {
        self.models = Some((default_model.into(), Arc::new(make)));
        self
    }

    /// Where each prompt side's conversation is kept.
    pub fn session_store(mut self, store: impl SessionStore + 'static) -> Self {
        self.sessions = Some(Arc::new(store));
        self
    }

    /// Where each session's state between turns is kept.
    pub fn thread_store(mut self, store: impl ThreadStore) -> Self {
        self.threads = Some(Arc::new(store));
        self
    }

    /// A tool prompts may name.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.insert(tool.spec().name.clone(), tool);
        self
    }

    /// Tools prompts may name.
    pub fn tools(self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        tools.into_iter().fold(self, Self::tool)
    }

    /// A handler sides may name.
    pub fn handler(mut self, name: impl Into<String>, handler: impl Handler) -> Self {
        self.handlers.insert(name.into(), Arc::new(handler));
        self
    }

    /// A hook agents may name in `hooks`, and composed children in `parentHooks`.
    pub fn hook(mut self, id: impl Into<String>, hook: impl Hook) -> Self {
        self.hooks.insert(id.into(), Arc::new(hook));
        self
    }

    /// The engine settings every prompt side starts from (`maxSteps`, `maxTokens` and
    /// `temperature` override them per side).
    pub fn engine_config(mut self, config: EngineConfig) -> Self {
        self.engine_config = config;
        self
    }

    /// How long a running turn holds its session.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// The agent an `invoke` runs when its scope names none.
    pub fn default_agent(mut self, name: impl Into<String>) -> Self {
        self.default_agent = Some(name.into());
        self
    }

    /// What this runtime provides, for validation.
    fn known(&self) -> Known {
        let mut known = Known::with_builtins();
        known.handlers.extend(self.handlers.keys().cloned());
        known.tools.extend(self.tools.keys().cloned());
        known.hooks.extend(self.hooks.keys().cloned());
        known
    }

    /// The runtime. Fails naming a missing setting, or listing the catalog's errors.
    pub fn build(mut self) -> Result<AgentRuntime, RuntimeError> {
        let issues = self.catalog.validate(&self.known());
        if has_errors(&issues) {
            return Err(listed(&issues));
        }
        if let Some(name) = &self.default_agent {
            if self.catalog.get_agent(name).is_none() {
                return Err(RuntimeError(format!("default agent `{name}` is not defined")));
            }
        }
        let (default_model, models) = self
            .models
            .ok_or_else(|| RuntimeError("models are required (AgentRuntimeBuilder::models)".into()))?;
        self.handlers
            .entry(RELAY_PIPE.to_owned())
            .or_insert_with(|| Arc::new(relay_pipe()));
        let sessions = self.sessions.ok_or_else(|| {
            RuntimeError("a session store is required (AgentRuntimeBuilder::session_store)".into())
        })?;
        let threads = self.threads.ok_or_else(|| {
            RuntimeError("a thread store is required (AgentRuntimeBuilder::thread_store)".into())
        })?;
        Ok(AgentRuntime {
            inner: Arc::new_cyclic(|me| RuntimeInner {
                me: me.clone(),
                catalog: self.catalog,
                models,
                default_model,
                sessions,
                threads,
                tools: self.tools,
                handlers: self.handlers,
                hooks: self.hooks,
                engine_config: self.engine_config,
                lease: self.lease.unwrap_or(DEFAULT_SESSION_LEASE),
                default_agent: self.default_agent,
                engines: Mutex::new(HashMap::new()),
                scratchpads: Mutex::new(HashMap::new()),
            }),
        })
    }
}

/// The error listing a catalog's issues.
fn listed(issues: &[Issue]) -> RuntimeError {
    let lines: Vec<String> = issues.iter().map(ToString::to_string).collect();
    RuntimeError(format!(
        "the agent definitions have errors:\n{}",
        lines.join("\n")
    ))
}

impl AgentRuntime {
    /// A builder.
    pub fn builder() -> AgentRuntimeBuilder {
        AgentRuntimeBuilder::default()
    }

    /// The catalog it serves.
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// The agent `name` as an [`Agent`]: each `invoke` is a message into one of its sessions.
    pub fn agent(&self, name: &str) -> Result<DefinedAgent, RuntimeError> {
        if self.inner.catalog.get_agent(name).is_none() {
            return Err(RuntimeError(format!("no agent `{name}` is defined")));
        }
        Ok(DefinedAgent {
            runtime: self.clone(),
            name: name.to_owned(),
        })
    }

    /// A session's state, if it has one.
    pub async fn session(&self, session: &str) -> Result<Option<ThreadRecord>, ThreadStoreError> {
        self.inner.threads.load(session).await
    }
}

/// Runs the agent the scope names (the `agent` extension), or the default agent.
impl Agent for AgentRuntime {
    fn invoke(&self, scope: Scope, prompt: Prompt) -> EventStream {
        let named = scope
            .extensions
            .get(AGENT_KEY)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| self.inner.default_agent.clone());
        let inner = self.inner.clone();
        turn_stream(move |out| async move {
            let Some(name) = named else {
                return out.emit(AgentEvent::failed(
                    "the turn names no agent and this runtime has no default agent",
                    false,
                    Some(codes::INVALID_PROMPT),
                ));
            };
            run_session(inner, name, scope, prompt, out).await;
        })
    }
}

/// One agent of a runtime, as an [`Agent`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DefinedAgent {
    runtime: AgentRuntime,
    name: String,
}

impl Agent for DefinedAgent {
    fn invoke(&self, scope: Scope, prompt: Prompt) -> EventStream {
        let inner = self.runtime.inner.clone();
        let name = self.name.clone();
        turn_stream(move |out| run_session(inner, name, scope, prompt, out))
    }
}

use crate::clock::now_ms;

fn session_status(status: &str, extra: Value) -> AgentEvent {
    let mut event = json!({ "type": "session_status", "status": status });
    if let (Some(event), Value::Object(extra)) = (event.as_object_mut(), extra) {
        event.extend(extra);
    }
    AgentEvent::Other(event)
}

/// A side turn that could not finish: the invocation fails with it.
struct TurnFailure {
    details: String,
    retryable: bool,
    code: String,
}

impl TurnFailure {
    fn store(e: &ThreadStoreError) -> Self {
        match e {
            ThreadStoreError::Conflict => Self {
                details: "another worker took this session over".into(),
                retryable: true,
                code: codes::TURN_IN_PROGRESS.into(),
            },
            ThreadStoreError::Unavailable(why) => Self {
                details: {
                    tracing::error!(error = %why, "the session store failed");
                    "the session store failed".into()
                },
                retryable: true,
                code: codes::STORE_FAILED.into(),
            },
        }
    }

    fn emit(self, out: &Emitter) {
        out.emit(AgentEvent::failed(self.details, self.retryable, Some(&self.code)));
    }
}

/// What a side turn produced.
#[derive(Default)]
struct SideOutcome {
    message: Option<String>,
    status: Option<String>,
    end: Option<(SessionStatus, SessionEnd)>,
    /// The exposed agent the side handed the thread to.
    handoff: Option<String>,
}

impl ChildRuntime for RuntimeInner {
    fn scratch(&self, session: &str) -> Option<Arc<Mutex<SideScratch>>> {
        RuntimeInner::scratch(self, session)
    }

    fn run_child(
        self: Arc<Self>,
        agent: String,
        scope: Scope,
        prompt: Prompt,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<AgentEvent>> + Send>> {
        Box::pin(turn_stream(move |out| run_session(self, agent, scope, prompt, out)).collect())
    }
}

pub(crate) async fn run_session(
    inner: Arc<RuntimeInner>,
    name: String,
    scope: Scope,
    prompt: Prompt,
    out: Emitter,
) {
    let Some(definition) = inner.catalog.get_agent(&name).cloned() else {
        return out.emit(AgentEvent::failed(
            format!("no agent `{name}` is defined"),
            false,
            Some(codes::INVALID_PROMPT),
        ));
    };
    let turn_id = scope
        .turn_id()
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let span =
        tracing::info_span!("agent_session", agent = %name, session = %scope.session, turn_id = %turn_id);
    let session = Session {
        inner,
        definition,
        scope,
        turn_id,
        out,
    };
    session.run(prompt).instrument(span).await;
}

struct Session {
    inner: Arc<RuntimeInner>,
    definition: AgentDefinition,
    scope: Scope,
    turn_id: String,
    out: Emitter,
}

impl Session {
    fn side(&self, side: Side) -> &SideConfig {
        match side {
            Side::A => &self.definition.side_a,
            Side::B => &self.definition.side_b,
        }
    }

    /// The side whose messages `invoke` delivers: the human side, or side B.
    fn speaker(&self) -> Side {
        if self.definition.side_a.is_human() {
            Side::A
        } else {
            Side::B
        }
    }

    async fn run(self, prompt: Prompt) {
        let record = match self.claim(&prompt).await {
            Ok(record) => record,
            Err(failure) => return failure.emit(&self.out),
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
                if record.status.is_final() {
                    if let Some(link) = &record.parent {
                        self.resume_parent(link, &record).await;
                    }
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
                match requirement.stage {
                    Some(HookStage::AfterParent) => after.push(requirement.hook.clone()),
                    _ => before.push(requirement.hook.clone()),
                }
            }
        }
        let ids = before
            .into_iter()
            .chain(self.definition.hooks.iter().cloned())
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

    /// A child that settled after its parent parked on it: its result goes to the parent side as
    /// a message, and the parent goes on once it waits for no other child. The parent's events
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
        let message = child
            .end
            .as_ref()
            .and_then(|e| e.message.clone())
            .unwrap_or_default();
        parent.waiting_on.retain(|s| s != &child.session);
        for known in parent.children.iter_mut().filter(|c| c.session == child.session) {
            known.ended = true;
        }
        parent.transcript.push(ThreadMessage {
            side: link.side.other(),
            text: format!("[{}] {}: {message}", link.relationship, child.status.as_str()),
            source: Some(format!("subagent:{}", link.relationship)),
        });
        parent.trim_transcript();
        let resume_turn = format!("{}>{}", self.turn_id, link.session);
        if parent.status == SessionStatus::AwaitingChild && parent.waiting_on.is_empty() {
            parent.status = SessionStatus::Running;
            parent.next_side = link.side;
            parent.running_turn = Some(resume_turn.clone());
            parent.lease_until_ms = now_ms().saturating_add(self.inner.lease.as_millis() as u64);
        }
        match threads.save(&parent).await {
            Ok(version) => parent.version = version,
            Err(e) => {
                tracing::warn!(parent = %link.session, error = %e, "could not hand a child's result to its parent");
                return;
            }
        }
        if parent.status != SessionStatus::Running {
            return;
        }
        self.out.emit(session_status(
            "resuming",
            json!({ "session": link.session, "child": child.session }),
        ));
        let session = Session {
            inner: self.inner.clone(),
            definition,
            scope: Scope::new(&link.session).with_turn_id(&resume_turn),
            turn_id: resume_turn,
            out: self.out.clone(),
        };
        match Box::pin(session.run_sides(parent)).await {
            Ok(parent) => {
                if parent.status.is_final() {
                    if let Some(grandparent) = &parent.parent {
                        Box::pin(session.resume_parent(grandparent, &parent)).await;
                    }
                }
                self.out.emit(session_status(
                    parent.status.as_str(),
                    json!({ "session": parent.session, "end": parent.end }),
                ));
            }
            Err(failure) => self.out.emit(session_status(
                "interrupted",
                json!({ "session": link.session, "details": failure.details, "code": failure.code }),
            )),
        }
    }

    /// Loads the session, delivers the prompt, and marks the session as running this turn.
    async fn claim(&self, prompt: &Prompt) -> Result<ThreadRecord, TurnFailure> {
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
                    ThreadRecord::new(&self.scope.session, &self.definition.name, speaker.other());
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
                    SessionStatus::Running if record.lease_until_ms > now => {
                        return Err(TurnFailure {
                            details: format!("session {} is running a turn", record.session),
                            retryable: true,
                            code: codes::TURN_IN_PROGRESS.into(),
                        });
                    }
                    // This turn was cut off earlier: resume it, its message already delivered.
                    SessionStatus::Running
                        if record.running_turn.as_deref() == Some(self.turn_id.as_str()) => {}
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
        Ok(record)
    }

    async fn run_sides(&self, mut record: ThreadRecord) -> Result<ThreadRecord, TurnFailure> {
        loop {
            if let Some(max) = self.definition.max_session_turns {
                if record.side_turns >= max {
                    record.status = SessionStatus::Completed;
                    record.end = Some(SessionEnd {
                        message: record.transcript.last().map(|m| m.text.clone()),
                        attachments: None,
                        reason: "max_session_turns".into(),
                    });
                    break;
                }
            }
            let side = record.next_side;
            let config = self.side(side);
            if config.is_human() {
                record.status = SessionStatus::AwaitingHuman;
                break;
            }
            self.out.emit(session_status(
                "running",
                json!({ "side": side.as_str(), "label": config.label(), "sideTurn": record.side_turns + 1 }),
            ));
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
        record.running_turn = None;
        record.lease_until_ms = 0;
        record.handled(&self.turn_id);
        self.save(&mut record).await?;
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
        self.out.emit(session_status(
            "handoff",
            json!({ "from": from, "to": definition.name }),
        ));
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
    async fn save(&self, record: &mut ThreadRecord) -> Result<(), TurnFailure> {
        record.version = self
            .inner
            .threads
            .save(record)
            .await
            .map_err(|e| TurnFailure::store(&e))?;
        Ok(())
    }

    fn finish(&self, record: &ThreadRecord) {
        let awaiting = (record.status == SessionStatus::AwaitingHuman).then(|| record.next_side.as_str());
        let end = record
            .end
            .as_ref()
            .map(|e| serde_json::to_value(e).unwrap_or(Value::Null));
        self.out.emit(session_status(
            record.status.as_str(),
            json!({ "awaiting": awaiting, "statusText": record.status_text, "end": end }),
        ));
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
            data["awaiting"] = side.into();
        }
        if !record.waiting_on.is_empty() {
            data["waitingOn"] = json!(record.waiting_on);
        }
        if record.status.is_final() {
            // What Agent Protocol reads as a task's last step.
            data["is_last"] = true.into();
        }
        if let Some(end) = end {
            data["end"] = end;
        }
        if let Some(status) = &record.status_text {
            data["statusText"] = status.clone().into();
        }
        self.out.emit(AgentEvent::completed_with(data));
    }

    /// The scope of a side's engine turn: its own session and a turn id derived from this one,
    /// with the caller's deadline.
    fn side_scope(&self, side: Side, record: &ThreadRecord) -> Scope {
        let mut scope = Scope::new(format!("{}#{}", self.scope.session, side.as_str()))
            .with_turn_id(format!("{}#{}", self.turn_id, record.side_turns + 1));
        if let Some(deadline) = self.scope.extensions.get(DEADLINE_KEY) {
            scope = scope.with(DEADLINE_KEY, deadline.clone());
        }
        scope
    }

    async fn prompt_turn(
        &self,
        side: Side,
        config: &PromptSide,
        record: &ThreadRecord,
        context: Vec<String>,
    ) -> Result<SideOutcome, TurnFailure> {
        let engine = self.engine(side, config)?;
        let inbound: Vec<&str> = record.inbound(side).iter().map(|m| m.text.as_str()).collect();
        let mut parts = context;
        parts.push(if inbound.is_empty() {
            "(The other side has nothing to add; go on.)".to_owned()
        } else {
            inbound.join("\n\n")
        });
        let text = parts.join("\n\n");
        let mut events = engine.invoke(self.side_scope(side, record), Prompt::text(text));
        let mut said = String::new();
        let mut outcome = SideOutcome::default();
        let mut terminal = None;
        while let Some(event) = events.next().await {
            match &event {
                AgentEvent::Text { delta } => said.push_str(delta),
                AgentEvent::ToolStarted { name, args, .. } => {
                    if let Some(binding) = config.session_status.as_ref().filter(|b| &b.name == name) {
                        let status = bound_message(binding, args);
                        self.out.emit(session_status(
                            "running",
                            json!({ "side": side.as_str(), "statusText": status }),
                        ));
                        outcome.status = Some(status);
                    }
                }
                _ => {}
            }
            if event.is_terminal() {
                terminal = Some(event);
                break;
            }
            self.out.emit(event);
        }
        match terminal {
            Some(AgentEvent::Completed { data }) => {
                let handoffs: Vec<&str> = self
                    .inner
                    .catalog
                    .get_prompt(&config.prompt)
                    .into_iter()
                    .flat_map(|p| p.tools.iter())
                    .filter(|t| self.inner.catalog.get_agent(t).is_some())
                    .map(String::as_str)
                    .collect();
                apply_stop_rules(config, &handoffs, data.as_ref(), said, &mut outcome);
                Ok(outcome)
            }
            Some(AgentEvent::Failed {
                details,
                retryable,
                code,
            }) => Err(TurnFailure {
                details: format!("{} failed its turn: {details}", side.as_str()),
                retryable,
                code: code.unwrap_or_else(|| codes::INTERNAL.into()),
            }),
            _ => Err(TurnFailure {
                details: format!("{}'s turn ended without a result", side.as_str()),
                retryable: true,
                code: codes::INTERNAL.into(),
            }),
        }
    }

    async fn handler_turn(
        &self,
        side: Side,
        name: &str,
        record: &ThreadRecord,
        context: Vec<String>,
    ) -> Result<SideOutcome, TurnFailure> {
        let handler = self
            .inner
            .handlers
            .get(name)
            .cloned()
            .ok_or_else(|| TurnFailure {
                details: format!("no handler `{name}` is registered"),
                retryable: false,
                code: codes::INTERNAL.into(),
            })?;
        let relationships: Vec<SubagentRelationship> = self
            .side(side)
            .subagents()
            .iter()
            .filter(|r| r.is_enabled())
            .cloned()
            .collect();
        let port = (!relationships.is_empty()).then(|| ChildPort {
            inner: self.inner.me.clone(),
            relationships,
            turn_id: format!("{}#{}", self.turn_id, record.side_turns + 1),
        });
        let mut state = ThreadState::new(&self.scope.session, side, &record.transcript, context, port);
        handler.turn(&mut state).await.map_err(|e| TurnFailure {
            details: format!("handler `{name}` failed: {}", e.message),
            retryable: e.retryable,
            code: codes::INTERNAL.into(),
        })?;
        let message = (!state.replies.is_empty()).then(|| state.replies.join("\n\n"));
        if let Some(message) = &message {
            self.out.emit(AgentEvent::text(message.clone()));
        }
        if let Some(status) = &state.status {
            self.out.emit(session_status(
                "running",
                json!({ "side": side.as_str(), "statusText": status }),
            ));
        }
        let end = state.end.map(|end| match end {
            HandlerEnd::Stop(message) => (
                SessionStatus::Completed,
                SessionEnd {
                    message: Some(message),
                    attachments: None,
                    reason: "handler".into(),
                },
            ),
            HandlerEnd::Fail(message) => (
                SessionStatus::Failed,
                SessionEnd {
                    message: Some(message),
                    attachments: None,
                    reason: "handler".into(),
                },
            ),
        });
        Ok(SideOutcome {
            message,
            status: state.status,
            end,
            handoff: None,
        })
    }

    /// The engine of a prompt side, built once per agent and side.
    fn engine(&self, side: Side, config: &PromptSide) -> Result<Engine, TurnFailure> {
        let key = (self.definition.name.clone(), side);
        let mut engines = self.inner.engines.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(engine) = engines.get(&key) {
            return Ok(engine.clone());
        }
        let engine = build_engine(&self.inner, side, config).map_err(|details| TurnFailure {
            details,
            retryable: false,
            code: codes::INTERNAL.into(),
        })?;
        engines.insert(key, engine.clone());
        Ok(engine)
    }
}

fn unreachable_human() -> Result<SideOutcome, TurnFailure> {
    Err(TurnFailure {
        details: "a human side's turn cannot be run".into(),
        retryable: false,
        code: codes::INTERNAL.into(),
    })
}

fn build_engine(inner: &RuntimeInner, which: Side, side: &PromptSide) -> Result<Engine, String> {
    let prompt = inner
        .catalog
        .get_prompt(&side.prompt)
        .ok_or_else(|| format!("no prompt `{}` is defined", side.prompt))?;
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut handoffs = Vec::new();
    for name in &prompt.tools {
        if let Some(target) = inner.catalog.get_agent(name) {
            // An exposed agent in a prompt's tools is a handoff of this same thread.
            tools.push(handoff_tool(target));
            handoffs.push(name.clone());
            continue;
        }
        tools.push(
            inner
                .tools
                .get(name)
                .cloned()
                .ok_or_else(|| format!("no tool `{name}` is registered"))?,
        );
    }
    for binding in [&side.session_stop, &side.session_fail, &side.session_status]
        .into_iter()
        .flatten()
    {
        if !prompt.tools.contains(&binding.name) {
            tools.push(binding_tool(binding));
        }
    }
    if let Some(stop_tool) = &side.stop_tool {
        if !prompt.tools.contains(stop_tool) {
            let mut binding = SessionToolBinding::new(stop_tool.clone());
            binding.message_property = side.stop_tool_response_property.clone();
            tools.push(binding_tool(&binding));
        }
    }
    let mut composed = false;
    for relationship in side.subagents.iter().filter(|r| r.is_enabled() && !r.hidden) {
        let child = inner
            .catalog
            .get_agent(&relationship.agent)
            .ok_or_else(|| format!("no agent `{}` is defined", relationship.agent))?;
        let description = child
            .tool_description
            .clone()
            .or_else(|| child.description.clone())
            .unwrap_or_else(|| format!("Start a session of agent {} and get its result.", child.name));
        tools.push(subagent_tool(
            inner.me.clone(),
            which,
            relationship.clone(),
            description,
        ));
        composed = true;
    }
    let mut config = inner.engine_config.clone();
    if composed {
        // A child runs inside the call that starts it: give it the turn's time, not a tool's.
        config.tool_timeout = config.tool_timeout.max(config.turn_deadline);
    }
    if let Some(steps) = side.max_steps {
        config.max_rounds = steps;
    }
    if let Some(max_tokens) = prompt.max_tokens {
        config.max_tokens = max_tokens;
    }
    if let Some(temperature) = prompt.temperature {
        config.temperature = temperature;
    }
    let model_id = prompt
        .model
        .clone()
        .unwrap_or_else(|| inner.default_model.clone());
    let policy = SidePolicy {
        ending: binding_tools(side)
            .filter(|n| Some(*n) != side.session_status.as_ref().map(|b| b.name.as_str()))
            .map(str::to_owned)
            .chain(handoffs)
            .collect(),
        go_on: !side.stop_on_response,
        forced: match &prompt.tool_choice {
            Some(ToolChoice::Tool(name)) => Some(name.clone()),
            _ => None,
        },
    };
    let mut builder = Engine::builder()
        .model((inner.models)(&model_id))
        .store(inner.sessions.clone())
        .tools(tools)
        .config(config)
        .turn_policy(policy);
    if !prompt.system.trim().is_empty() {
        builder = builder.system_prompt(prompt.system.clone());
    }
    builder
        .build()
        .map_err(|e| format!("prompt `{}`: {e}", prompt.name))
}

/// The tool that hands the thread to `target`: the side's turn ends, and `target` goes on.
fn handoff_tool(target: &AgentDefinition) -> Arc<dyn Tool> {
    let description = target
        .tool_description
        .clone()
        .or_else(|| target.description.clone())
        .unwrap_or_else(|| format!("Hand this conversation to {}.", target.name));
    let spec = ToolSpec::new(
        target.name.clone(),
        description,
        json!({
            "type": "object",
            "properties": { "message": { "type": "string", "description": "What to tell the person as you hand over." } },
        }),
    );
    let name = target.name.clone();
    Arc::new(tool_fn(spec, move |_input, _ctx| {
        let name = name.clone();
        async move { Ok(json!({ "handedOffTo": name })) }
    }))
}

/// A tool a binding names that no prompt registers: it takes the bound properties and says ok.
fn binding_tool(binding: &SessionToolBinding) -> Arc<dyn Tool> {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    if let Some(message) = &binding.message_property {
        properties.insert(message.clone(), json!({ "type": "string" }));
        required.push(Value::String(message.clone()));
    }
    if let Some(attachments) = &binding.attachments_property {
        properties.insert(
            attachments.clone(),
            json!({ "type": "array", "items": { "type": "string" } }),
        );
    }
    let schema = json!({ "type": "object", "properties": properties, "required": required });
    let spec = ToolSpec::new(
        binding.name.clone(),
        format!("Call {} to record this.", binding.name),
        schema,
    );
    Arc::new(tool_fn(spec, |_input, _ctx| async { Ok(json!({ "ok": true })) }))
}

/// A prompt side's stop rules, for its engine.
#[derive(Debug)]
struct SidePolicy {
    ending: BTreeSet<String>,
    go_on: bool,
    forced: Option<String>,
}

impl TurnPolicy for SidePolicy {
    fn force_tool(&self, step: &StepContext<'_>) -> Option<String> {
        self.forced.clone().filter(|_| step.round == 0)
    }

    fn ends_turn(&self, tool: &str) -> bool {
        self.ending.contains(tool)
    }

    fn continue_after_text(&self, _step: &StepContext<'_>) -> Option<String> {
        if !self.go_on {
            return None;
        }
        let tools: Vec<&str> = self.ending.iter().map(String::as_str).collect();
        Some(if tools.is_empty() {
            format!("{GO_ON} a tool.")
        } else {
            format!("{GO_ON} {}.", tools.join(" or "))
        })
    }
}

/// The binding's message from a call's arguments: the named property, or the whole input.
fn bound_message(binding: &SessionToolBinding, args: &Value) -> String {
    match binding.message_property.as_deref().map(|p| &args[p]) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => args.to_string(),
        Some(other) => other.to_string(),
    }
}

/// The binding, and the input of its call among `calls`.
fn bound_call<'s, 'd>(
    binding: &'s Option<SessionToolBinding>,
    calls: &[(&'d str, &'d Value)],
) -> Option<(&'s SessionToolBinding, &'d Value)> {
    let binding = binding.as_ref()?;
    calls
        .iter()
        .find(|(name, _)| *name == binding.name)
        .map(|(_, input)| (binding, *input))
}

/// Applies the stop rules, in the specification's order, to a completed engine turn.
fn apply_stop_rules(
    side: &PromptSide,
    handoffs: &[&str],
    data: Option<&Value>,
    said: String,
    outcome: &mut SideOutcome,
) {
    let calls: Vec<(&str, &Value)> = data
        .and_then(|d| d.get("stopTools"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c.get("name")?.as_str()?, c.get("input")?)))
        .collect();
    let said = Some(said).filter(|s| !s.trim().is_empty());
    // 1. Session bindings.
    for (binding, status, reason) in [
        (&side.session_stop, SessionStatus::Completed, "session_stop"),
        (&side.session_fail, SessionStatus::Failed, "session_fail"),
    ] {
        if let Some((binding, input)) = bound_call(binding, &calls) {
            let attachments = binding
                .attachments_property
                .as_deref()
                .map(|p| input[p].clone())
                .filter(|v| !v.is_null());
            let message = bound_message(binding, input);
            outcome.message = said.or_else(|| Some(message.clone()));
            outcome.end = Some((
                status,
                SessionEnd {
                    message: Some(message),
                    attachments,
                    reason: reason.into(),
                },
            ));
            return;
        }
    }
    // Then a handoff: the thread goes to the exposed agent the model called.
    if let Some((target, input)) = calls.iter().find(|(name, _)| handoffs.contains(name)) {
        outcome.handoff = Some((*target).to_owned());
        outcome.message = input
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .filter(|m| !m.trim().is_empty())
            .or(said);
        return;
    }
    // 2. The side's stop tool.
    if let Some(stop_tool) = &side.stop_tool {
        if let Some((_, input)) = calls.iter().find(|(name, _)| name == stop_tool) {
            let mut binding = SessionToolBinding::new(stop_tool.clone());
            binding.message_property = side.stop_tool_response_property.clone();
            outcome.message = match side.stop_tool_response_property {
                Some(_) => Some(bound_message(&binding, input)),
                None => said,
            };
            return;
        }
    }
    // 3. A text answer (stopOnResponse), or 4. the step limit: what it said is its message.
    outcome.message = said;
}

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
//! - A **human side** parks the session: `awaiting_human`, until the next `invoke`. A person's
//!   message to a session whose turn is running is queued as a follow-up of that turn (its
//!   `invoke` completes with `data: {"followUp": "queued", "runId"}`), and the running turn takes
//!   it, in the same invocation, when the person's side is next.
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

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt as _;
use tracing::Instrument as _;

use crate::agents::catalog::{Catalog, CatalogError};
use crate::agents::handler::Handler;
use crate::agents::hooks::Hook;
use crate::agents::subagents::{ChildRuntime, Scratchpads, SideScratch};
use crate::agents::thread::{ChildLink, Side, ThreadRecord, ThreadStore, ThreadStoreError};
use crate::agents::validate::Issue;
use crate::engine::model::Model;
use crate::engine::tools::Tool;
use crate::engine::{Emitter, Engine, EngineConfig, turn_stream};
use crate::protocol::{Agent, AgentEvent, EventStream, Prompt, Scope, codes};
use crate::session::{SessionId, SessionStore, TurnId};

mod builder;
mod claim;
mod engines;
mod events;
mod follow_ups;
mod session;
mod stop_rules;

use session::Session;

pub use builder::AgentRuntimeBuilder;

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

/// A runtime that cannot be built, or an agent it does not have.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The definitions' folder cannot be read.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The definitions have errors; every one is listed.
    #[error("the agent definitions have errors:\n{}", builder::listed(.0))]
    Definitions(Vec<Issue>),
    /// No agent of that name is defined.
    #[error("no agent `{0}` is defined")]
    UnknownAgent(String),
    /// The default agent named is not defined.
    #[error("default agent `{0}` is not defined")]
    UnknownDefault(String),
    /// A part the runtime cannot do without was not given: `what` is it, `method` gives it.
    #[error("{what} required (AgentRuntimeBuilder::{method})")]
    Missing {
        /// What is missing, as a sentence's subject: `models are`, `a session store is`.
        what: &'static str,
        /// The builder method that gives it.
        method: &'static str,
    },
}

/// Serves the agents of a [`Catalog`]. Cheap to clone.
#[derive(Clone)]
pub struct AgentRuntime {
    inner: Arc<RuntimeInner>,
}

/// Makes the builder every prompt side's engine starts from: a deployment's tool policy,
/// approvals, file area, UI answers, turn policy, logger and the rest, so that a side keeps every
/// rule the deployment has, and narrows it with its own prompt, tools and policy, never widening
/// it. The default is [`Engine::builder`].
pub type EngineBase = Arc<dyn Fn() -> crate::engine::EngineBuilder + Send + Sync>;

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
    /// What every side's engine starts from: the deployment's equipment.
    engine_base: EngineBase,
    /// What goes after every side's own prompt (the project's instructions, the skills' listing).
    prompt_additions: Option<String>,
    lease: Duration,
    default_agent: Option<String>,
    engines: Mutex<HashMap<(String, Side), Engine>>,
    scratchpads: Scratchpads,
}

impl RuntimeInner {
    /// The scratch of the side turn running in `session`.
    pub(crate) fn scratch(&self, session: &SessionId) -> Option<Arc<Mutex<SideScratch>>> {
        self.scratchpads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(session)
            .cloned()
    }

    fn open_scratch(&self, session: &SessionId, children: &[ChildLink]) {
        let pad = Arc::new(Mutex::new(SideScratch {
            children: children.to_vec(),
            parked: Vec::new(),
        }));
        self.scratchpads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session.to_owned(), pad);
    }

    fn close_scratch(&self, session: &SessionId) -> SideScratch {
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
            return Err(RuntimeError::UnknownAgent(name.to_owned()));
        }
        Ok(DefinedAgent {
            runtime: self.clone(),
            name: name.to_owned(),
        })
    }

    /// A session's state, if it has one.
    pub async fn session(&self, session: &SessionId) -> Result<Option<ThreadRecord>, ThreadStoreError> {
        self.inner.threads.load(session).await
    }
}

/// Runs the agent the scope names (the `agent` extension), or the default agent.
impl Agent for AgentRuntime {
    fn invoke(&self, scope: Scope, prompt: Prompt) -> EventStream {
        let named = scope
            .options
            .agent
            .clone()
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

impl ChildRuntime for RuntimeInner {
    fn scratch(&self, session: &SessionId) -> Option<Arc<Mutex<SideScratch>>> {
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
    let turn_id = scope.turn_id().cloned().unwrap_or_else(TurnId::random);
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

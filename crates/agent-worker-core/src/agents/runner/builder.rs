//! [`AgentRuntimeBuilder`]: a runtime's catalog, models, stores, tools and hooks, every definition
//! checked before it serves.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{AgentRuntime, DEFAULT_SESSION_LEASE, EngineBase, ModelSource, RuntimeError, RuntimeInner};
use crate::agents::catalog::Catalog;
use crate::agents::handler::Handler;
use crate::agents::hooks::{Hook, hook_key};
use crate::agents::relay::{RELAY_PIPE, relay_pipe};
use crate::agents::thread::ThreadStore;
use crate::agents::validate::{Issue, Known, has_errors};
use crate::engine::EngineConfig;
use crate::engine::model::Model;
use crate::engine::tools::Tool;
use crate::session::SessionStore;

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
    engine_base: Option<EngineBase>,
    prompt_additions: Option<String>,
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
        let (catalog, issues) = Catalog::load(folder, &self.known())?;
        if has_errors(&issues) {
            return Err(RuntimeError::Definitions(issues));
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

    /// A hook agents of no package may name in `hooks`, and composed children of no package in
    /// `parentHooks` (the runtime's own namespace).
    pub fn hook(mut self, id: impl Into<String>, hook: impl Hook) -> Self {
        self.hooks.insert(id.into(), Arc::new(hook));
        self
    }

    /// A hook of `package`'s namespace: what agents whose `packageName` is `package` may name
    /// (seed 003 §6: a child's required parent hooks are its own package's).
    pub fn package_hook(mut self, package: &str, id: &str, hook: impl Hook) -> Self {
        self.hooks.insert(hook_key(Some(package), id), Arc::new(hook));
        self
    }

    /// The engine settings every prompt side starts from (`maxSteps`, `maxTokens` and
    /// `temperature` override them per side).
    pub fn engine_config(mut self, config: EngineConfig) -> Self {
        self.engine_config = config;
        self
    }

    /// What every prompt side's engine starts from ([`EngineBase`]): the deployment's
    /// equipment, which each side narrows with its own prompt, tools and policy.
    pub fn engine_base(
        mut self,
        base: impl Fn() -> crate::engine::EngineBuilder + Send + Sync + 'static,
    ) -> Self {
        self.engine_base = Some(Arc::new(base));
        self
    }

    /// What goes after every side's own prompt: the project's instructions and the skills'
    /// listing, the same bytes every turn.
    pub fn prompt_additions(mut self, additions: Option<String>) -> Self {
        self.prompt_additions = additions;
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
            return Err(RuntimeError::Definitions(issues));
        }
        if let Some(name) = &self.default_agent
            && self.catalog.get_agent(name).is_none()
        {
            return Err(RuntimeError::UnknownDefault(name.clone()));
        }
        let (default_model, models) = self.models.ok_or(RuntimeError::Missing {
            what: "models are",
            method: "models",
        })?;
        self.handlers
            .entry(RELAY_PIPE.to_owned())
            .or_insert_with(|| Arc::new(relay_pipe()));
        let sessions = self.sessions.ok_or(RuntimeError::Missing {
            what: "a session store is",
            method: "session_store",
        })?;
        let threads = self.threads.ok_or(RuntimeError::Missing {
            what: "a thread store is",
            method: "thread_store",
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
                engine_base: self
                    .engine_base
                    .unwrap_or_else(|| Arc::new(crate::engine::Engine::builder)),
                prompt_additions: self.prompt_additions,
                lease: self.lease.unwrap_or(DEFAULT_SESSION_LEASE),
                default_agent: self.default_agent,
                engines: Mutex::new(HashMap::new()),
                scratchpads: Mutex::new(HashMap::new()),
            }),
        })
    }
}

/// A catalog's issues, one a line.
pub(super) fn listed(issues: &[Issue]) -> String {
    let lines: Vec<String> = issues.iter().map(ToString::to_string).collect();
    lines.join("\n")
}

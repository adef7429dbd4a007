//! [`Blueprint`]: the agent a deployment's configuration describes, built one way for every host
//! (the Lambda function, `serve`, `poll`, `handle`, `invoke`, `agent-protocol`), whether the
//! agent is the bare engine or a Standard Agents definition.
//!
//! Every engine it builds starts from [`Blueprint::base`]: the configuration's tool policy
//! (with the attachment tools admitted when asked), approvals (in the session store, or in the
//! one given: the realtime server's), the file area, the tab's UI answers, where a turn's stop
//! is asked for besides the store (the realtime server), the configuration's turn policy and `prepareStep` rules, PDFs as documents, and the
//! engine's settings. The bare engine adds the configuration's tools, its typed result and the
//! deployed system prompt; each Standard Agents side adds its own prompt (with the skills'
//! listing and the project's instructions after it), its own tools and its own policy, which
//! narrow what the deployment gives and never widen it. So a deny denies, an approval is asked,
//! a file is read and a UI action is offered alike under either kind of agent.

use std::path::Path;
use std::sync::Arc;

use crate::config::{Configured, NoSystemPrompt};
use agent_worker_core::agents::{AgentRuntimeBuilder, ModelSource, ThreadStore};
use agent_worker_core::engine::attachments::{FileArea, FileUploads};
use agent_worker_core::engine::model::Model;
use agent_worker_core::engine::spending::Spending;
use agent_worker_core::engine::tools::{Tool, examples};
use agent_worker_core::engine::{
    ApprovalSigner, Engine, EngineBuilder, EngineConfig, EngineError, ToolClass,
};
use agent_worker_core::session::{ActionAnswers, ApprovalStore, Blocklist, SessionStore, StopSource};

/// Why the agent a configuration describes cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlueprintError {
    /// Neither the configuration nor the deployment gives a system prompt.
    #[error(transparent)]
    NoSystemPrompt(#[from] NoSystemPrompt),
    /// The engine refused its parts.
    #[error("the engine cannot be built")]
    Engine(#[source] EngineError),
    /// The Standard Agents folder cannot be read.
    #[error("the agents folder {folder} cannot be read")]
    Folder {
        /// The folder.
        folder: String,
        /// Why.
        #[source]
        source: agent_worker_core::agents::RuntimeError,
    },
}

/// The agent a configuration describes, on store `S` (which keeps sessions and approvals). Cheap
/// to clone.
#[derive(Clone)]
pub struct Blueprint<S> {
    store: S,
    configured: Arc<Configured>,
    extra_tools: Vec<Arc<dyn Tool>>,
    system_prompt: Option<String>,
    ui_answers: Option<Arc<dyn ActionAnswers>>,
    stop_source: Option<Arc<dyn StopSource>>,
    approvals: Option<ApprovalSigner>,
    approval_store: Option<Arc<dyn ApprovalStore>>,
    file_area: Option<Arc<dyn FileUploads>>,
    attachment_tools: bool,
    engine: EngineConfig,
    prompt_required: bool,
    spending: Option<Spending>,
    blocklist: Option<Arc<dyn Blocklist>>,
}

impl<S> std::fmt::Debug for Blueprint<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blueprint")
            .field("configured", &self.configured)
            .field("approvals", &self.approvals.is_some())
            .field("approval_store", &self.approval_store)
            .field("stop_source", &self.stop_source)
            .field("file_area", &self.file_area.is_some())
            .finish_non_exhaustive()
    }
}

impl<S> Blueprint<S>
where
    S: SessionStore + ApprovalStore + Clone + 'static,
{
    /// What `configured` describes, its sessions (and approvals) in `store`; nothing else given.
    pub fn new(store: S, configured: Arc<Configured>) -> Self {
        Self {
            store,
            configured,
            extra_tools: Vec::new(),
            system_prompt: None,
            ui_answers: None,
            stop_source: None,
            approvals: None,
            approval_store: None,
            file_area: None,
            attachment_tools: false,
            engine: EngineConfig::default(),
            prompt_required: false,
            spending: None,
            blocklist: None,
        }
    }

    /// The bare engine must have a system prompt, from the configuration or the deployment
    /// ([`NoSystemPrompt`] otherwise): a deployment never runs on a prompt no one gave it.
    #[must_use]
    pub fn requiring_prompt(mut self) -> Self {
        self.prompt_required = true;
        self
    }

    /// Tools beside the configuration's (the example tools a deployment names).
    #[must_use]
    pub fn extra_tools(mut self, tools: Vec<Arc<dyn Tool>>) -> Self {
        self.extra_tools = tools;
        self
    }

    /// The deployment's system prompt (`SYSTEM_PROMPT`, `--system`), where the configuration
    /// gives none.
    #[must_use]
    pub fn system_prompt(mut self, prompt: Option<String>) -> Self {
        self.system_prompt = prompt;
        self
    }

    /// Where the tab's answers to UI actions are read.
    #[must_use]
    pub fn ui_answers(mut self, answers: Arc<dyn ActionAnswers>) -> Self {
        self.ui_answers = Some(answers);
        self
    }

    /// Where a turn's stop is also asked for, beside the session store (the realtime server):
    /// before it starts, and for as long as it runs.
    #[must_use]
    pub fn stop_source(mut self, source: Arc<dyn StopSource>) -> Self {
        self.stop_source = Some(source);
        self
    }

    /// The key that signs approval tokens: calls the policy asks approval for wait for the
    /// person (without it they are refused), in the session store unless
    /// [`approval_store`](Self::approval_store) gives another.
    #[must_use]
    pub fn approvals(mut self, signer: Option<ApprovalSigner>) -> Self {
        self.approvals = signer;
        self
    }

    /// Where approvals wait instead of the session store (the realtime server's store).
    #[must_use]
    pub fn approval_store(mut self, store: Arc<dyn ApprovalStore>) -> Self {
        self.approval_store = Some(store);
        self
    }

    /// Where the files people attach are kept, and content too large for a stored item (see
    /// [`EngineBuilder::keep_large_content`]); with `tools`, the attachment tools are offered.
    #[must_use]
    pub fn file_area(mut self, area: Option<Arc<dyn FileUploads>>, tools: bool) -> Self {
        self.file_area = area;
        self.attachment_tools = tools;
        self
    }

    /// What model calls are reserved against: prices, budgets and their ledger.
    #[must_use]
    pub fn spending(mut self, spending: Option<Spending>) -> Self {
        self.spending = spending;
        self
    }

    /// Where blocked accounts and persons are asked for (the kill switch).
    #[must_use]
    pub fn blocklist(mut self, blocklist: Arc<dyn Blocklist>) -> Self {
        self.blocklist = Some(blocklist);
        self
    }

    /// The engine's settings.
    #[must_use]
    pub fn engine_config(mut self, config: EngineConfig) -> Self {
        self.engine = config;
        self
    }

    /// What every engine of this agent starts from: the deployment's policy, approvals, file
    /// area, UI answers, stop source, turn policy and settings; no model, tools or system
    /// prompt yet.
    pub fn base(&self) -> EngineBuilder {
        let mut policy = self.configured.policy.clone();
        if self.attachment_tools {
            policy = policy.admitting(ToolClass::Attachment);
        }
        let mut builder = Engine::builder()
            .store(self.store.clone())
            .config(self.engine.clone())
            .tool_policy(policy)
            .prices(self.configured.prices.clone())
            .pdf_as_document(self.configured.pdf_as_document);
        if let Some(turns) = &self.configured.turns {
            builder = builder.turn_policy(turns.clone());
        }
        if let Some(answers) = &self.ui_answers {
            builder = builder.ui_answers(answers.clone());
        }
        if let Some(source) = &self.stop_source {
            builder = builder.stop_source(source.clone());
        }
        match (&self.approvals, &self.approval_store) {
            (Some(signer), Some(store)) => builder = builder.shared_approvals(store.clone(), signer.clone()),
            (Some(signer), None) => builder = builder.approvals(self.store.clone(), signer.clone()),
            (None, _) => {}
        }
        if let Some(area) = &self.file_area {
            builder = builder
                .file_area(area.clone() as Arc<dyn FileArea>)
                .keep_large_content(area.clone());
        }
        if let Some(spending) = &self.spending {
            builder = builder.spending(spending.clone());
        }
        if let Some(blocklist) = &self.blocklist {
            builder = builder.blocklist(blocklist.clone());
        }
        builder
    }

    /// The bare engine on `model`: the base, the configuration's tools (and the extra ones it
    /// does not have), its typed result, and the system prompt it gives (or the deployment's).
    pub fn engine(&self, model: Arc<dyn Model>) -> Result<Engine, BlueprintError> {
        let mut builder = self
            .configured
            .equip(self.base().model(model), self.extra_tools.clone());
        let prompt = self
            .configured
            .deployed_prompt(self.system_prompt.as_ref(), self.prompt_required)?;
        if let Some(prompt) = prompt {
            builder = builder.system_prompt(prompt);
        }
        builder.build().map_err(BlueprintError::Engine)
    }

    /// The Standard Agents runtime serving `folder`'s agents on `models` (the default model's
    /// id, and how a prompt's model is made), their threads in `threads`: every side's engine
    /// starts from [`base`](Self::base), the configuration's tools and every example tool are
    /// registered for the prompts to name, and the skills' listing and the project's
    /// instructions go after every side's prompt. The caller adds handlers and hooks, then
    /// builds it.
    pub fn runtime(
        &self,
        folder: &Path,
        default_model: &str,
        models: ModelSource,
        threads: impl ThreadStore,
    ) -> Result<AgentRuntimeBuilder, BlueprintError>
    where
        S: Send + Sync,
    {
        let base = self.clone();
        let builder = AgentRuntimeBuilder::default()
            .tools(
                self.configured
                    .tools_with(examples::NAMES.iter().filter_map(|n| examples::by_name(n))),
            )
            .catalog_dir(folder)
            .map_err(|source| BlueprintError::Folder {
                folder: folder.display().to_string(),
                source,
            })?
            .models(default_model, move |id| models(id))
            .session_store(self.store.clone())
            .thread_store(threads)
            .engine_config(self.engine.clone())
            .engine_base(move || base.base())
            .prompt_additions(self.configured.prompt_additions.clone());
        Ok(builder)
    }
}

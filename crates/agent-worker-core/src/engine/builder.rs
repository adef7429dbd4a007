//! [`EngineBuilder`]: an [`Engine`] put together, every part checked at `build`.

use super::{
    ApprovalSigner, ApprovalStore, Arc, Engine, EngineConfig, EngineError, EngineInner, FILES_ARE_DATA,
    FileArea, Model, SessionStore, StopSource, Tool, ToolPolicy, ToolSource, Toolset, TurnLogger, TurnPolicy,
    admitted, attachments, fmt, live_tools, logger, policy, result, spending, ui,
};

/// Builds an [`Engine`]; a model and a store are required.
#[derive(Default)]
pub struct EngineBuilder {
    model: Option<Arc<dyn Model>>,
    store: Option<Arc<dyn SessionStore>>,
    tools: Vec<Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
    config: EngineConfig,
    system_prompt: Option<String>,
    policy: Option<Arc<dyn TurnPolicy>>,
    tool_policy: Option<Arc<dyn ToolPolicy>>,
    approvals: Option<(Arc<dyn ApprovalStore>, ApprovalSigner)>,
    file_area: Option<Arc<dyn FileArea>>,
    keeping: Option<Arc<dyn attachments::FileUploads>>,
    prices: Option<spending::Prices>,
    ui_answers: Option<Arc<dyn ui::ActionAnswers>>,
    stops: Option<Arc<dyn StopSource>>,
    result_schema: Option<serde_json::Value>,
    pdf_as_document: bool,
    logging: Option<logger::Logging>,
    spending: Option<spending::Spending>,
    blocklist: Option<Arc<dyn crate::session::Blocklist>>,
}

impl fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("model", &self.model)
            .field("store", &self.store)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EngineBuilder {
    /// The model turns run on (required).
    #[must_use]
    pub fn model(mut self, model: impl Model + 'static) -> Self {
        self.model = Some(Arc::new(model));
        self
    }

    /// Where session state lives (required; or [`shared_store`](Self::shared_store)).
    #[must_use]
    pub fn store(mut self, store: impl SessionStore + 'static) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// Where session state lives, a store shared with others (a host's, another engine's).
    #[must_use]
    pub fn shared_store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Adds a tool.
    #[must_use]
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds tools.
    #[must_use]
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Adds tools whose list may change while the engine runs (an MCP server's): each turn
    /// offers the list as it was when the turn started.
    #[must_use]
    pub fn tool_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// Replaces the tuning.
    #[must_use]
    pub fn config(mut self, config: EngineConfig) -> Self {
        self.config = config;
        self
    }

    /// The system prompt: the assistant's identity and rules.
    #[must_use]
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Per-step decisions.
    #[must_use]
    pub fn turn_policy(mut self, policy: impl TurnPolicy + 'static) -> Self {
        self.policy = Some(Arc::new(policy));
        self
    }

    /// Per-step decisions inside those the builder has already: both decide, and `policy`
    /// narrows what the other offers, never widening it ([`policy::Layered`]). Without one
    /// before, as [`turn_policy`](Self::turn_policy).
    #[must_use]
    pub fn narrowing_turn_policy(mut self, policy: impl TurnPolicy + 'static) -> Self {
        let inner: Arc<dyn TurnPolicy> = Arc::new(policy);
        self.policy = Some(match self.policy.take() {
            Some(outer) => Arc::new(policy::Layered::new(outer, inner)),
            None => inner,
        });
        self
    }

    /// Decides per call whether it may run, needs approval, or is denied.
    #[must_use]
    pub fn tool_policy(mut self, policy: impl ToolPolicy + 'static) -> Self {
        self.tool_policy = Some(Arc::new(policy));
        self
    }

    /// Where calls that need the person's approval wait, and the key that signs their tokens.
    /// Without it, such a call is refused and never runs.
    #[must_use]
    pub fn approvals(self, store: impl ApprovalStore + 'static, signer: ApprovalSigner) -> Self {
        self.shared_approvals(Arc::new(store), signer)
    }

    /// As [`approvals`](Self::approvals), with a store shared with others.
    #[must_use]
    pub fn shared_approvals(mut self, store: Arc<dyn ApprovalStore>, signer: ApprovalSigner) -> Self {
        self.approvals = Some((store, signer));
        self
    }

    /// Where a turn's stop is also asked for, beside the store (the realtime server): before
    /// the turn starts, and for as long as it runs. A source that cannot be asked never holds
    /// a turn up or fails it.
    #[must_use]
    pub fn stop_source(mut self, source: Arc<dyn StopSource>) -> Self {
        self.stops = Some(source);
        self
    }

    /// Where the files people attach are kept. With it, a turn's files are given to the model
    /// and the system prompt says files are data; without it, they are reference lines. The
    /// attachment tools (`attachment_list`, `attachment_view`, `attachment_read`) come with it,
    /// offered when the tool policy [admits](ToolPolicy::admits) [`ToolClass::Attachment`].
    #[must_use]
    pub fn file_area(mut self, area: impl FileArea + 'static) -> Self {
        self.file_area = Some(Arc::new(area));
        self
    }

    /// Keeps content too large for a stored item (a result, the person's text or picture over
    /// the configuration's [`inline_limit_bytes`](EngineConfig::inline_limit_bytes)) whole in
    /// `area`, each under its hash, with a reference in the message
    /// ([`ContentKeeper`](attachments::ContentKeeper)). `area` is also the engine's
    /// [file area](Self::file_area) unless one is set, and `attachment_read` is offered, as the
    /// way the model reads the rest of what it is given a first page of.
    #[must_use]
    pub fn keep_large_content(mut self, area: Arc<dyn attachments::FileUploads>) -> Self {
        self.keeping = Some(area);
        self
    }

    /// The price table each model call's cost is estimated from, for its `usage` event
    /// (`costUsd`); [`spending`](Self::spending)'s own table stands first where there is one.
    #[must_use]
    pub fn prices(mut self, prices: spending::Prices) -> Self {
        self.prices = Some(prices);
        self
    }

    /// Copies each turn's log lines at `level` or above to `logger` (a product's own log store),
    /// each with the turn's session and id, beside the program's `tracing` subscriber, which
    /// gets them as ever.
    #[must_use]
    pub fn logger(mut self, logger: impl TurnLogger + 'static, level: tracing::Level) -> Self {
        self.logging = Some(logger::Logging {
            logger: Arc::new(logger),
            level,
        });
        self
    }

    /// With `true`, a PDF the person attaches goes to the model as a document block it reads
    /// itself (pages as pictures and text, so a scanned one or one in tables is read too), where
    /// the model takes documents ([`Model::pdf_document_limit`]) and the PDF fits; else, and by
    /// default, as its text.
    #[must_use]
    pub fn pdf_as_document(mut self, yes: bool) -> Self {
        self.pdf_as_document = yes;
        self
    }

    /// Where the person's tab answers UI actions (the store it writes them to, or the realtime
    /// server). With it, the actions a turn's surface snapshot (`context.oui`) offers are tools
    /// of that turn; without it, none is offered.
    #[must_use]
    pub fn ui_answers(mut self, answers: Arc<dyn ui::ActionAnswers>) -> Self {
        self.ui_answers = Some(answers);
        self
    }

    /// The JSON Schema every turn's typed result must match, unless the turn names its own
    /// (the scope's `resultSchema`): the model gives the result with the `final_result` tool,
    /// and `completed.data.result` carries it. See [`result`].
    #[must_use]
    pub fn result_schema(mut self, schema: serde_json::Value) -> Self {
        self.result_schema = Some(schema);
        self
    }

    /// What model calls are reserved against, and settled in: the prices, the budgets and their
    /// ledger ([`spending`]). Without it nothing is counted but the tokens.
    #[must_use]
    pub fn spending(mut self, spending: spending::Spending) -> Self {
        self.spending = Some(spending);
        self
    }

    /// Where blocked accounts and persons are asked for (the kill switch): a turn of one does
    /// not start, and a running one stops.
    #[must_use]
    pub fn blocklist(mut self, blocklist: Arc<dyn crate::session::Blocklist>) -> Self {
        self.blocklist = Some(blocklist);
        self
    }

    /// Builds the engine, checking every part.
    pub fn build(mut self) -> Result<Engine, EngineError> {
        let model = self.model.ok_or(EngineError::Missing("model"))?;
        let store = self.store.ok_or(EngineError::Missing("store"))?;
        self.config.validate()?;
        if let Some(spending) = &self.spending {
            spending.check_model(model.id())?;
        }
        let result = self
            .result_schema
            .map(result::ResultSchema::new)
            .transpose()?
            .map(Arc::new);
        let keeper = self
            .keeping
            .map(|area| attachments::ContentKeeper::new(area, self.config.inline_limit_bytes));
        if let (None, Some(keeper)) = (&self.file_area, &keeper) {
            self.file_area = Some(keeper.area());
        }
        let mut tools = self.tools;
        if let Some(area) = &self.file_area {
            tools.extend(attachments::attachment_tools(area, keeper.is_some()));
        }
        tools.retain(|tool| admitted(self.tool_policy.as_ref(), tool.as_ref()));
        let generations: Vec<u64> = self.sources.iter().map(|s| s.generation()).collect();
        let offered = Toolset::new(live_tools::tools_of(
            &tools,
            &self.sources,
            self.tool_policy.as_ref(),
        ))?;
        let inner = Arc::new(EngineInner {
            model,
            store,
            tools: offered,
            config: self.config,
            system_prompt: match (&self.file_area, self.system_prompt) {
                (Some(_), Some(prompt)) => Some(format!("{prompt}\n\n{FILES_ARE_DATA}")),
                (Some(_), None) => Some(FILES_ARE_DATA.to_owned()),
                (None, prompt) => prompt,
            },
            file_area: self.file_area,
            keeper,
            prices: self.prices,
            policy: self.policy,
            tool_policy: self.tool_policy,
            approvals: self.approvals,
            ui_answers: self.ui_answers,
            stops: self.stops,
            ui_targets: Arc::default(),
            result,
            pdf_as_document: self.pdf_as_document,
            logging: self.logging,
            spending: self.spending,
            blocklist: self.blocklist,
        });
        let live = (!self.sources.is_empty()).then(|| {
            Arc::new(live_tools::LiveTools::new(
                tools,
                self.sources,
                generations,
                inner.clone(),
            ))
        });
        Ok(Engine { inner, live })
    }
}

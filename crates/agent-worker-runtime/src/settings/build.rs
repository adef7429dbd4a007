//! Building what [`WorkerSettings`] describe: the model, the engine or the Standard Agents
//! runtime, the sinks, the store, the file area.

use std::path::Path;
use std::sync::Arc;

use super::{ApprovalsIn, ModelProvider, SettingsError, SinkKind, UiAnswersFrom, WorkerSettings, error};
use crate::a2a_push::{A2aPushSink, PushDelivery};
use crate::config::Configured;
use crate::{Blueprint, BlueprintError};
use agent_worker_aws::BedrockModel;
use agent_worker_aws::DynamoThreadStore;
use agent_worker_aws::dynamo::{DynamoConfig, DynamoEventLog, DynamoStore};
use agent_worker_contract::{Agent, chain};
use agent_worker_core::agents::AgentRuntime;
use agent_worker_core::engine::ApprovalSigner;
use agent_worker_core::engine::attachments::{FileArea, FileUploads};
use agent_worker_core::engine::model::Model;
use agent_worker_core::engine::tools::{Tool, examples};
use agent_worker_core::sinks::{HttpEmitSink, Sinks, StdoutSink};

/// Model `id` on `provider` (Bedrock on `client`), prompt caching as `caching` says (or as
/// the model supports).
fn model_of(
    provider: &ModelProvider,
    client: aws_sdk_bedrockruntime::Client,
    id: &str,
    caching: Option<bool>,
) -> Arc<dyn Model> {
    match provider {
        ModelProvider::Bedrock => Arc::new(bedrock_model(client, id, caching)),
        ModelProvider::Anthropic { api_key, base_url } => {
            let mut model = agent_worker_models::AnthropicModel::new(api_key.clone(), id);
            if let Some(url) = base_url {
                model = model.base_url(url.clone());
            }
            if let Some(on) = caching {
                model = model.with_prompt_caching(on);
            }
            Arc::new(model)
        }
        ModelProvider::OpenAi {
            api_key,
            base_url,
            file_input,
        } => {
            let model =
                agent_worker_models::OpenAiModel::new(api_key.clone(), id).with_file_input(*file_input);
            Arc::new(match base_url {
                Some(url) => model.base_url(url.clone()),
                None => model,
            })
        }
    }
}

/// Model `id` on `client`, prompt caching as `caching` says (or as the model supports).
fn bedrock_model(client: aws_sdk_bedrockruntime::Client, id: &str, caching: Option<bool>) -> BedrockModel {
    let model = BedrockModel::new(client, id);
    match caching {
        Some(on) => model.with_prompt_caching(on),
        None => model,
    }
}

impl WorkerSettings {
    /// The session store these settings name.
    pub fn store(&self, dynamodb: aws_sdk_dynamodb::Client) -> Result<DynamoStore, SettingsError> {
        let config = DynamoConfig::new(&self.table).map_err(|e| error("TABLE_NAME", chain(&e)))?;
        Ok(DynamoStore::new(dynamodb, config))
    }

    /// The agent and sinks these settings describe, on the given clients: the engine, or with
    /// `AGENTS_DIR` the Standard Agents runtime serving that folder's agents. `files` is the
    /// file area `FILES_BUCKET` names (see [`S3FileArea`](agent_worker_aws::S3FileArea)); it is
    /// required when that is set. Content larger than `INLINE_LIMIT_BYTES` is kept there whole
    /// ([`keep_large_content`](agent_worker_core::engine::EngineBuilder::keep_large_content)).
    ///
    /// `configured` is what the configuration file gives ([`Configured::load`]; the default
    /// when there is none): its tools join the example tools `TOOLS` names, its system prompt
    /// stands where `SYSTEM_PROMPT` is not set, and its policy decides each call.
    pub fn build(
        &self,
        bedrock: aws_sdk_bedrockruntime::Client,
        dynamodb: aws_sdk_dynamodb::Client,
        files: Option<Arc<dyn FileUploads>>,
        configured: &Configured,
    ) -> Result<(Arc<dyn Agent>, Sinks), SettingsError> {
        if (self.files.is_some() || self.files_dir.is_some()) && files.is_none() {
            return Err(error("FILES_BUCKET", "is set, and no file area was given for it"));
        }
        if files.is_none() {
            tracing::info!(
                limit = agent_worker_aws::dynamo::MAX_MESSAGE_BYTES,
                "no file area (FILES_BUCKET or FILES_DIR): a tool's result or a person's message larger than an item holds is cut to fit, saying so"
            );
        }
        let store = self.store(dynamodb)?;
        let sinks = self.sinks(&store)?;
        let blueprint = self.blueprint(store.clone(), files, configured)?;
        let agent: Arc<dyn Agent> = match &self.agents_dir {
            Some(folder) => Arc::new(self.agent_runtime(folder, bedrock, &blueprint, store)?),
            None => {
                let model = model_of(&self.provider, bedrock, &self.model_id, self.prompt_caching);
                Arc::new(blueprint.engine(model).map_err(|e| match e {
                    BlueprintError::NoSystemPrompt(e) => error("SYSTEM_PROMPT", e.to_string()),
                    e => SettingsError::caused_by("engine", "the engine cannot be built", e),
                })?)
            }
        };
        Ok((agent, sinks))
    }

    /// The conversations API on `store`: the tools these settings run with say whose arguments
    /// a conversation may show, and `files` (the file area of [`build`](Self::build)) lose a
    /// deleted conversation's files.
    pub fn conversations(
        &self,
        store: DynamoStore,
        files: Option<Arc<dyn FileArea>>,
        configured: &Configured,
    ) -> agent_worker_core::conversations::Conversations {
        let tools = self.tools_with(configured);
        let mut conversations =
            agent_worker_core::conversations::Conversations::new(store).tools(tools.iter().map(|t| t.spec()));
        if let Some(files) = files {
            conversations = conversations.file_area(files);
        }
        conversations
    }

    /// The example tools `TOOLS` names.
    fn example_tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools.iter().filter_map(|t| examples::by_name(t)).collect()
    }

    /// The tools a turn runs with: `configured`'s, and the example tools `TOOLS` adds to them.
    pub fn tools_with(&self, configured: &Configured) -> Vec<Arc<dyn Tool>> {
        configured.tools_with(self.example_tools())
    }

    /// The file area of the files people attach: the S3 one `FILES_BUCKET` names, on the client
    /// `s3` makes (made only then), or the folder `FILES_DIR` names.
    #[cfg(feature = "s3")]
    pub fn file_area(
        &self,
        s3: impl FnOnce() -> aws_sdk_s3::Client,
    ) -> Option<Arc<dyn agent_worker_core::engine::attachments::FileUploads>> {
        if let Some(f) = &self.files {
            return Some(Arc::new(agent_worker_aws::S3FileArea::new(
                s3(),
                &f.bucket,
                &f.prefix,
            )));
        }
        self.files_dir
            .as_ref()
            .map(|dir| Arc::new(agent_worker_core::engine::attachments::LocalFileArea::new(dir)) as Arc<_>)
    }

    /// What model calls are reserved against: the configuration's prices, its budgets with
    /// these settings' over them, kept in `store`; `None` without a budget. A model without a
    /// price under a budget is refused here, named.
    fn spending(
        &self,
        store: &DynamoStore,
        configured: &Configured,
    ) -> Result<Option<agent_worker_core::engine::spending::Spending>, SettingsError> {
        use agent_worker_core::engine::spending::{SpendLedger, SpendingError};
        let ledger: Arc<dyn SpendLedger> = Arc::new(store.clone());
        configured
            .spending(self.budgets, Some(ledger), &self.model_id)
            .map_err(|e| match e {
                SpendingError::NoPrice(_) => error("MODEL_ID", e.to_string()),
                SpendingError::NoLedger => error("TURN_BUDGET_USD", e.to_string()),
            })
    }

    /// The agent these settings describe, on `store` ([`Blueprint`]): one way for the engine
    /// and for every Standard Agents side.
    fn blueprint(
        &self,
        store: DynamoStore,
        files: Option<Arc<dyn FileUploads>>,
        configured: &Configured,
    ) -> Result<Blueprint<DynamoStore>, SettingsError> {
        let ui_answers: Arc<dyn agent_worker_core::session::ActionAnswers> = match &self.ui_answers {
            UiAnswersFrom::Table => Arc::new(store.clone()),
            UiAnswersFrom::Realtime { url, api_key } => Arc::new(
                agent_worker_core::realtime::RealtimeAnswers::new(url, api_key.clone()).map_err(|e| {
                    SettingsError::caused_by("EMIT_URL", "the tab's answers cannot be read there", e)
                })?,
            ),
        };
        let signer = self
            .approval_secret
            .as_ref()
            .map(|secret| ApprovalSigner::new(secret.as_bytes()))
            .transpose()
            .map_err(|e| error("APPROVAL_SECRET", e.to_string()))?;
        let spending = self.spending(&store, configured)?;
        let blocklist = Arc::new(agent_worker_aws::dynamo::CachedBlocklist::new(store.clone()));
        let mut blueprint = Blueprint::new(store, Arc::new(configured.clone()))
            .extra_tools(self.example_tools())
            .system_prompt(self.system_prompt.clone())
            .ui_answers(ui_answers)
            .approvals(signer)
            .file_area(files, self.attachment_tools)
            .engine_config(self.engine.clone())
            .spending(spending)
            .blocklist(blocklist)
            .requiring_prompt();
        // The realtime server keeps the stops a product's API asks for, and (unless the table
        // is named) approvals.
        if let Some(realtime) = &self.realtime {
            let server =
                agent_worker_core::realtime::RealtimeServer::new(&realtime.url, realtime.api_key.clone())
                    .map_err(|e| {
                        SettingsError::caused_by("EMIT_URL", "the realtime server cannot be asked there", e)
                    })?;
            blueprint = blueprint.stop_source(Arc::new(server.stops()));
            if self.approvals_in == ApprovalsIn::Realtime {
                blueprint = blueprint.approval_store(Arc::new(server.approvals()));
            }
        }
        Ok(blueprint)
    }

    /// The Standard Agents runtime for `folder`: sessions and their state in the table, every
    /// side's engine built from the same [`Blueprint`] as the bare engine, every definition
    /// checked first.
    fn agent_runtime(
        &self,
        folder: &Path,
        bedrock: aws_sdk_bedrockruntime::Client,
        blueprint: &Blueprint<DynamoStore>,
        store: DynamoStore,
    ) -> Result<AgentRuntime, SettingsError> {
        let prompt_caching = self.prompt_caching;
        let provider = self.provider.clone();
        let models: agent_worker_core::agents::ModelSource =
            Arc::new(move |id: &str| model_of(&provider, bedrock.clone(), id, prompt_caching));
        let mut builder = blueprint
            .runtime(folder, &self.model_id, models, DynamoThreadStore::new(store))
            .map_err(|e| SettingsError::caused_by("AGENTS_DIR", "the agents cannot be served", e))?;
        if let Some(name) = &self.default_agent {
            builder = builder.default_agent(name);
        }
        builder.build().map_err(|e| error("AGENTS_DIR", chain(&e)))
    }

    fn sinks(&self, store: &DynamoStore) -> Result<Sinks, SettingsError> {
        let mut sinks = Sinks::new();
        for kind in &self.sinks {
            sinks = match kind {
                SinkKind::Stdout => sinks.with(StdoutSink),
                SinkKind::Dynamo => sinks.with(DynamoEventLog::new(store.clone())),
                SinkKind::Http { url, api_key } => sinks
                    .with(HttpEmitSink::new(url, api_key.clone()).map_err(|e| error("EMIT_URL", chain(&e)))?),
            };
        }
        if let Some(policy) = self.a2a_push {
            let delivery = PushDelivery::new(policy).map_err(|e| error("A2A_PUSH", chain(&e)))?;
            // After the event log: the task pushed at a turn's end is read from it.
            let reads_log = self.sinks.contains(&SinkKind::Dynamo);
            sinks = sinks.with(A2aPushSink::new(store.clone(), delivery).reading_the_log(reads_log));
        }
        Ok(sinks)
    }
}

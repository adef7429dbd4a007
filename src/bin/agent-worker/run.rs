//! `invoke`: one turn (or `--repeat N`) from the command line, its events as JSON lines.

use crate::failure::CliError;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use agent_worker::agents::{DynamoThreadStore, MemoryThreadStore};
use agent_worker::engine::spending::{Budgets, SpendLedger, Spending, SpendingError};
use agent_worker::engine::tools::{Tool, examples};
use agent_worker::engine::{BedrockModel, Engine, ImageFormat};
use agent_worker::hosts::config::Configured;
use agent_worker::hosts::settings::dynamodb_client;
use agent_worker::hosts::worker::config_loader;
use agent_worker::hosts::{Blueprint, BlueprintError};
use agent_worker::protocol::{Agent, AgentEvent, ImageRef, Prompt, RESULT_SCHEMA_KEY, Scope};
use agent_worker::session::dynamo::CachedBlocklist;
use agent_worker::session::{
    ActionAnswers, ApprovalStore, DynamoConfig, DynamoStore, MemoryStore, SessionStore,
};
use agent_worker::session::{SessionId, TurnId};
use base64::Engine as _;
use futures_util::StreamExt;

use crate::{DEFAULT_MODEL_ID, aws_config, bedrock_client};
use agent_worker::protocol::chain;

#[derive(Debug, clap::Args)]
pub(crate) struct InvokeArgs {
    /// The session (conversation) id.
    #[arg(long)]
    pub(crate) session: SessionId,
    /// The person's words.
    #[arg(long)]
    pub(crate) text: String,
    /// The turn's id; a redelivered id does not run again.
    #[arg(long)]
    pub(crate) turn_id: Option<TurnId>,
    /// A picture to send (PNG, JPEG, GIF or WebP); repeatable.
    #[arg(long = "image")]
    pub(crate) images: Vec<PathBuf>,
    /// Run N independent turns in this process, in sessions `<session>-1` … `<session>-N`
    /// (turn ids likewise suffixed), then print `{"turns","tool_calls","failed_turns"}` (and
    /// `peak_rss_kib` on Linux): per-turn cost apart from process start.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) repeat: Option<u32>,
    /// The JSON Schema the turn's typed result must match, as JSON or `@file`: the result
    /// comes on `completed.data.result`.
    #[arg(long)]
    pub(crate) result_schema: Option<String>,
    #[command(flatten)]
    pub(crate) engine: EngineArgs,
}

/// The Bedrock engine the local commands run (`invoke`, `agent-protocol`).
/// Who runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Provider {
    /// Amazon Bedrock (ConverseStream).
    Bedrock,
    /// The Anthropic Messages API.
    Anthropic,
    /// An OpenAI-compatible Chat Completions API.
    Openai,
}

#[derive(Debug, clap::Args)]
pub(crate) struct EngineArgs {
    /// The Bedrock model id or inference profile.
    #[arg(long, env = "MODEL_ID", default_value = DEFAULT_MODEL_ID)]
    pub(crate) model_id: String,
    /// Who runs the model: Amazon Bedrock, the Anthropic API (its key in `ANTHROPIC_API_KEY`;
    /// `--endpoint-url`, or `ANTHROPIC_BASE_URL`, for a gateway), or an OpenAI-compatible API
    /// (`OPENAI_API_KEY`; `--endpoint-url` or `OPENAI_BASE_URL`, with its `/v1`).
    #[arg(long, env = "MODEL_PROVIDER", value_enum, default_value = "bedrock")]
    pub(crate) provider: Provider,
    /// A Bedrock-compatible endpoint, such as the stand-in's.
    #[arg(long, env = "AWS_ENDPOINT_URL_BEDROCK_RUNTIME")]
    pub(crate) endpoint_url: Option<String>,
    /// The AWS region.
    #[arg(long, env = "AWS_REGION")]
    pub(crate) region: Option<String>,
    /// The system prompt.
    #[arg(long)]
    pub(crate) system: Option<String>,
    /// An example tool to enable (current_time, add, word_count); repeatable.
    #[arg(long = "tool")]
    pub(crate) tools: Vec<String>,
    /// Keep sessions in this DynamoDB table rather than in memory.
    #[arg(long, env = "TABLE_NAME")]
    pub(crate) table: Option<String>,
    /// Run a Standard Agents definition from this folder (agents/, prompts/) instead of the
    /// bare engine; `--agent` names it.
    #[arg(long, env = "AGENTS_DIR", requires = "agent")]
    pub(crate) agents_dir: Option<PathBuf>,
    /// The agent of `--agents-dir` to run.
    #[arg(long, requires = "agents_dir")]
    pub(crate) agent: Option<String>,
    #[command(flatten)]
    pub(crate) config: crate::tools::ConfigArgs,
}

impl EngineArgs {
    /// The agent these options describe: the engine, or a Standard Agents definition, both
    /// built from the one [`Blueprint`] of the configuration (its policy, approvals, UI
    /// answers and turn policy reach every side's engine too).
    pub(crate) async fn agent(&self) -> Result<Arc<dyn Agent>, CliError> {
        let shared = aws_config(self.region.as_deref()).await?;
        let waiter = self.job_waiter(&shared)?;
        let configured = Arc::new(self.config.configured(|| config_loader(&shared, waiter)).await?);
        match &self.table {
            Some(table) => {
                let store = self.dynamo_store(&shared, table)?;
                let threads = DynamoThreadStore::new(store.clone());
                // Budgets kept in the table's ledgers, and the kill switch's blocks read there.
                let ledger: Arc<dyn SpendLedger> = Arc::new(store.clone());
                let spending = self.spending(&configured, Some(ledger))?;
                let blocklist = Arc::new(CachedBlocklist::new(store.clone()));
                let blueprint = self
                    .blueprint(store, configured)?
                    .spending(spending)
                    .blocklist(blocklist);
                self.agent_on(&shared, blueprint, threads)
            }
            None => {
                let spending = self.spending(&configured, None)?;
                let blueprint = self.blueprint(MemoryStore::new(), configured)?.spending(spending);
                self.agent_on(&shared, blueprint, MemoryThreadStore::new())
            }
        }
    }

    /// What the configuration's budgets reserve against, in `ledger` (a table's); a budget
    /// across turns without a table is refused, saying so.
    fn spending(
        &self,
        configured: &Configured,
        ledger: Option<Arc<dyn SpendLedger>>,
    ) -> Result<Option<Spending>, CliError> {
        configured
            .spending(Budgets::default(), ledger, &self.model_id)
            .map_err(|e| match e {
                SpendingError::NoLedger => CliError::usage(format!("{e}: give --table")),
                e @ SpendingError::NoPrice(_) => CliError::usage(e.to_string()),
            })
    }

    /// The agent of `configured` on `store`, as these options give it.
    fn blueprint<S>(&self, store: S, configured: Arc<Configured>) -> Result<Blueprint<S>, CliError>
    where
        S: SessionStore + ApprovalStore + ActionAnswers + Clone + 'static,
    {
        Ok(Blueprint::new(store.clone(), configured)
            .extra_tools(tools_named(&self.tools)?)
            .system_prompt(self.system.clone())
            .ui_answers(Arc::new(store)))
    }

    /// The engine, or with `--agents-dir` the Standard Agents definition `--agent` names.
    fn agent_on<S>(
        &self,
        shared: &aws_config::SdkConfig,
        blueprint: Blueprint<S>,
        threads: impl agent_worker::agents::ThreadStore,
    ) -> Result<Arc<dyn Agent>, CliError>
    where
        S: SessionStore + ApprovalStore + Clone + Send + Sync + 'static,
    {
        let (Some(folder), Some(name)) = (&self.agents_dir, &self.agent) else {
            return Ok(Arc::new(self.engine_of(shared, &blueprint)?));
        };
        let client = bedrock_client(shared, self.endpoint_url.as_deref());
        let models: agent_worker::agents::ModelSource = Arc::new(move |id: &str| {
            Arc::new(BedrockModel::new(client.clone(), id)) as Arc<dyn agent_worker::engine::Model>
        });
        let runtime = blueprint
            .runtime(folder, &self.model_id, models, threads)
            .map_err(|e| CliError::usage(format!("--agents-dir {}: {}", folder.display(), chain(&e))))?
            .build()
            .map_err(|e| chain(&e))?;
        Ok(Arc::new(runtime.agent(name).map_err(|e| {
            CliError::usage(format!("--agent {name}: {}", chain(&e)))
        })?))
    }

    /// The bare engine of `blueprint` on the model these options name.
    fn engine_of<S>(
        &self,
        shared: &aws_config::SdkConfig,
        blueprint: &Blueprint<S>,
    ) -> Result<Engine, CliError>
    where
        S: SessionStore + ApprovalStore + Clone + 'static,
    {
        let model: Arc<dyn agent_worker::engine::Model> = match self.provider {
            Provider::Bedrock => Arc::new(BedrockModel::new(
                bedrock_client(shared, self.endpoint_url.as_deref()),
                self.model_id.clone(),
            )),
            Provider::Anthropic => Arc::new(self.anthropic_model()?),
            Provider::Openai => Arc::new(self.openai_model()?),
        };
        blueprint.engine(model).map_err(|e| match e {
            BlueprintError::NoSystemPrompt(e) => CliError::usage(format!("{e} (--system)")),
            e => CliError::usage(chain(&e)),
        })
    }

    /// The model on the Anthropic API: its key from `ANTHROPIC_API_KEY`, its base URL from
    /// `--endpoint-url` or `ANTHROPIC_BASE_URL`.
    fn anthropic_model(&self) -> Result<agent_worker::models::AnthropicModel, CliError> {
        use agent_worker::models::{AnthropicModel, ApiKey};
        let key = std::env::var("ANTHROPIC_API_KEY").unwrap_or_default();
        let key = ApiKey::new(key).map_err(|e| format!("ANTHROPIC_API_KEY: {e}"))?;
        let model = AnthropicModel::new(key, self.model_id.clone());
        let base = self.endpoint_url.clone().or_else(|| {
            std::env::var("ANTHROPIC_BASE_URL")
                .ok()
                .filter(|u| !u.trim().is_empty())
        });
        Ok(match base {
            Some(url) => model.base_url(url),
            None => model,
        })
    }

    /// The model on an OpenAI-compatible API: its key from `OPENAI_API_KEY`, its base URL (with
    /// `/v1`) from `--endpoint-url` or `OPENAI_BASE_URL`, PDFs as `file` parts with
    /// `OPENAI_FILE_INPUT=true`.
    fn openai_model(&self) -> Result<agent_worker::models::OpenAiModel, CliError> {
        use agent_worker::models::{ApiKey, OpenAiModel};
        let key = std::env::var("OPENAI_API_KEY").unwrap_or_default();
        let key = ApiKey::new(key).map_err(|e| format!("OPENAI_API_KEY: {e}"))?;
        let file_input = std::env::var("OPENAI_FILE_INPUT").is_ok_and(|v| v.trim() == "true");
        let model = OpenAiModel::new(key, self.model_id.clone()).with_file_input(file_input);
        let base = self.endpoint_url.clone().or_else(|| {
            std::env::var("OPENAI_BASE_URL")
                .ok()
                .filter(|u| !u.trim().is_empty())
        });
        Ok(match base {
            Some(url) => model.base_url(url),
            None => model,
        })
    }

    /// What waits for jobs to settle: the table's job events, when sessions are kept in one.
    fn job_waiter(
        &self,
        shared: &aws_config::SdkConfig,
    ) -> Result<Option<Arc<dyn agent_worker::engine::tools::openapi::EventWaiter>>, CliError> {
        let Some(table) = &self.table else {
            return Ok(None);
        };
        let jobs = agent_worker::session::dynamo::DynamoJobEvents::new(self.dynamo_store(shared, table)?);
        Ok(Some(Arc::new(jobs)))
    }

    /// The session store in `table`, on `shared`.
    pub(crate) fn dynamo_store(
        &self,
        shared: &aws_config::SdkConfig,
        table: &str,
    ) -> Result<DynamoStore, CliError> {
        let dynamodb = dynamodb_client(
            shared,
            agent_worker::hosts::settings::DEFAULT_STORE_ATTEMPT_TIMEOUT,
        );
        let config =
            DynamoConfig::new(table).map_err(|e| CliError::usage(format!("--table: {}", chain(&e))))?;
        Ok(DynamoStore::new(dynamodb, config))
    }
}

pub(crate) fn tools_named(names: &[String]) -> Result<Vec<Arc<dyn Tool>>, CliError> {
    names
        .iter()
        .flat_map(|n| n.split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|name| {
            examples::by_name(name).ok_or_else(|| {
                CliError::usage(format!(
                    "--tool {name}: no such example tool; the tools are {}",
                    examples::NAMES.join(", ")
                ))
            })
        })
        .collect()
}

pub(crate) fn image(path: &Path) -> Result<ImageRef, CliError> {
    let Some(format) = path
        .extension()
        .and_then(|e| e.to_str())
        .and_then(ImageFormat::from_extension)
    else {
        return Err(CliError::usage(format!(
            "--image {}: the name must end in .png, .jpg, .jpeg, .gif or .webp",
            path.display()
        )));
    };
    let mime_type = format.mime_type();
    let bytes =
        std::fs::read(path).map_err(|e| CliError::usage(format!("--image {}: {e}", path.display())))?;
    Ok(ImageRef {
        mime_type: mime_type.to_owned(),
        data: base64::engine::general_purpose::STANDARD.encode(bytes),
    })
}

/// The `i`th of a repeated run's ids: `id` with `-i` after it, named by the `flag` it came by.
fn repeated<T: std::str::FromStr<Err = agent_worker::session::IdError>>(
    flag: &str,
    id: &str,
    i: u32,
) -> Result<T, CliError> {
    format!("{id}-{i}")
        .parse()
        .map_err(|e| CliError::usage(format!("{flag} {id:?} cannot be repeated: {id}-{i} {e}")))
}

pub(crate) async fn invoke(args: InvokeArgs) -> Result<ExitCode, CliError> {
    let mut prompt = Prompt::text(args.text);
    for path in &args.images {
        prompt = prompt.with_image(image(path)?);
    }
    let agent = args.engine.agent().await?;
    let schema = args.result_schema.as_deref().map(result_schema).transpose()?;
    let scoped = |session: SessionId| match &schema {
        Some(schema) => {
            Scope::new(session).with(RESULT_SCHEMA_KEY, serde_json::Value::Object(schema.clone()))
        }
        None => Scope::new(session),
    };
    let Some(repeat) = args.repeat else {
        let mut scope = scoped(args.session);
        if let Some(turn_id) = args.turn_id {
            scope = scope.with_turn_id(turn_id);
        }
        let ran = print_turn(agent.as_ref(), scope, prompt).await?;
        return Ok(if ran.completed {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    };
    let (mut tool_calls, mut failed_turns) = (0u64, 0u64);
    for i in 1..=repeat {
        let mut scope = scoped(repeated("--session", &args.session, i)?);
        if let Some(turn_id) = &args.turn_id {
            scope = scope.with_turn_id(repeated("--turn-id", turn_id, i)?);
        }
        let ran = print_turn(agent.as_ref(), scope, prompt.clone()).await?;
        tool_calls += ran.tool_calls;
        failed_turns += u64::from(!ran.completed);
    }
    let mut summary =
        serde_json::json!({"turns": repeat, "tool_calls": tool_calls, "failed_turns": failed_turns});
    if let Some(kib) = peak_rss_kib() {
        summary["peak_rss_kib"] = kib.into();
    }
    println!("{summary}");
    Ok(if failed_turns == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A `--result-schema` value: a JSON Schema object, written out or as `@file`.
pub(crate) fn result_schema(arg: &str) -> Result<serde_json::Map<String, serde_json::Value>, CliError> {
    let text = match arg.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| CliError::usage(format!("--result-schema: cannot read {path}: {e}")))?,
        None => arg.to_owned(),
    };
    match serde_json::from_str(&text) {
        Ok(serde_json::Value::Object(schema)) => Ok(schema),
        Ok(other) => Err(CliError::usage(format!(
            "--result-schema: a JSON Schema is an object, not {other}"
        ))),
        Err(e) => Err(CliError::usage(format!("--result-schema: not JSON: {e}"))),
    }
}

/// This process's peak resident memory so far (`VmHWM`), where the system tells it (Linux).
pub(crate) fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// What one printed turn did.
pub(crate) struct Ran {
    pub(crate) completed: bool,
    pub(crate) tool_calls: u64,
}

/// Runs one turn, printing each event as a JSON line and a failure's reason on stderr.
pub(crate) async fn print_turn(agent: &dyn Agent, scope: Scope, prompt: Prompt) -> Result<Ran, CliError> {
    let mut events = agent.invoke(scope, prompt);
    let mut ran = Ran {
        completed: false,
        tool_calls: 0,
    };
    while let Some(event) = events.next().await {
        let line = serde_json::to_string(&event).map_err(|e| format!("cannot print an event: {e}"))?;
        println!("{line}");
        match &event {
            AgentEvent::ToolStarted { .. } => ran.tool_calls += 1,
            AgentEvent::Completed { .. } => ran.completed = true,
            AgentEvent::Failed {
                details,
                code: failure,
                ..
            } => {
                eprintln!(
                    "turn failed ({}): {details}",
                    failure.as_deref().unwrap_or("no code")
                );
            }
            _ => {}
        }
    }
    Ok(ran)
}

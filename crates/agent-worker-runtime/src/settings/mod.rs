//! [`WorkerSettings`]: a worker's configuration from named values, as the Lambda function and
//! the command line take them from their environment.
//!
//! The library never reads the environment: a binary passes a lookup (`|name|
//! std::env::var(name).ok()`), and a missing or invalid value fails here, naming it.
//!
//! | name | required | meaning |
//! | --- | --- | --- |
//! | `TABLE_NAME` | yes | the DynamoDB table of sessions and event logs |
//! | `MODEL_ID` | yes | the Bedrock model id or inference profile (the provider's model id with `MODEL_PROVIDER`) |
//! | `MODEL_PROVIDER` | no | `bedrock` (default); `anthropic`: the Anthropic Messages API, with `ANTHROPIC_API_KEY` (or `ANTHROPIC_API_KEY_SECRET_ARN`) and, for a gateway, `ANTHROPIC_BASE_URL`; `openai`: an OpenAI-compatible API, with `OPENAI_API_KEY` (or `OPENAI_API_KEY_SECRET_ARN`) and `OPENAI_BASE_URL` (with its `/v1`) for another server (`OPENAI_FILE_INPUT=true` where it takes PDFs as `file` parts) |
//! | `TOOLS` | no | comma-separated example tools to enable (`current_time,add,word_count`) |
//! | `SYSTEM_PROMPT` | no | the assistant's identity and rules (wins over the configuration file's persona) |
//! | `AGENT_WORKER_CONFIG` | no | the configuration file of the product's tools, policy and persona ([`config`](super::config)); read by the binaries, which pass what it yields to [`build`](WorkerSettings::build) |
//! | `EVENT_SINKS` | no | comma-separated: `stdout`, `dynamo`, `http` (default `stdout,dynamo`) |
//! | `EMIT_URL`, `EMIT_API_KEY` | with `http` | the realtime server ([`realtime`](agent_worker_core::realtime)): events are `POST`ed to it (`{url}/api/emit`); with a URL, a turn also asks it for its stop (`GET {url}/internal/turns/{turnId}/stop`) beside the table, and approvals wait in its store unless `APPROVAL_STORE=table`; a URL needs its key |
//! | `UI_ANSWERS` | no | where the tab's answers to UI actions are read: `table` (default: written by the container's `POST /turns/{id}/actions/{callId}` or the product's API) or `realtime` (`GET {EMIT_URL}/internal/oui/action-results/{callId}` with `EMIT_API_KEY`) |
//! | `APPROVAL_SECRET` | no | at least 32 bytes: turns approvals on; without it a call that needs approval is refused |
//! | `APPROVAL_STORE` | no | where approvals wait: `realtime` (the realtime server's store, `/internal/approvals`; the default when `EMIT_URL` is set) or `table` (the session table; the default without it) |
//! | `APPROVAL_SECRET_ARN`, `EMIT_API_KEY_SECRET_ARN` | no | instead of the value itself: the Secrets Manager secret holding it (or an SSM parameter: `ssm:<name>` or its ARN), read once at start-up by the binary ([`secrets`](super::secrets)) |
//! | `AGENTS_DIR` | no | a folder of Standard Agents definitions (`agents/`, `prompts/`): turns run the agent their payload's `agent` names, sessions kept in the table |
//! | `DEFAULT_AGENT` | no | with `AGENTS_DIR`: the agent of a turn that names none |
//! | `FILES_BUCKET` | no | the S3 bucket of the files people attach (`<FILES_PREFIX><session>/<id>` and its `.json` reference); with it a turn's files reach the model |
//! | `FILES_PREFIX` | no | with `FILES_BUCKET`: the key prefix (default `attachments/`) |
//! | `FILES_DIR` | no | instead of `FILES_BUCKET`: a local folder of the files people attach (a container with a volume, local runs) |
//! | `INLINE_LIMIT_BYTES` | no | with a file area: the largest block (a tool's result, the person's text or picture) a stored message keeps inline (65536; 1024 to 262144); a larger one is kept whole in the file area under its SHA-256, the message holding its reference |
//! | `PROMPT_CACHING` | no | `true` or `false`: Bedrock prompt caching (default: on for Claude and Nova models) |
//! | `ATTACHMENT_TOOLS` | no | `true`: offer the model `attachment_list`, `attachment_view` and `attachment_read` (needs `FILES_BUCKET`) |
//! | `MAX_ROUNDS`, `MAX_REPEAT_CALLS`, `MAX_TOKENS`, `TEMPERATURE`, `FORCED_TOOL_CHOICE`, `TOOL_TIMEOUT_MS`, `UI_ACTION_TIMEOUT_MS`, `TURN_DEADLINE_MS`, `RETRIES` | no | tuning overrides |
//! | `STOP_GRACE_MS` | no | how long an answer already on its way is still waited for once a stop is seen (2000) |
//! | `TURN_FILE_TOKENS`, `CONVERSATION_FILE_TOKENS` | no | the tokens the files given to the model may carry in one step, and over a conversation (30000, 300000): past them, the costliest file goes as its reference line |
//! | `MODEL_FIRST_CHUNK_TIMEOUT_MS`, `MODEL_CHUNK_TIMEOUT_MS` | no | how long a model's stream may stay silent before its first event, and between two (60000, 30000) |
//! | `LEASE_MARGIN_MS`, `STORE_MARGIN_MS` | no | a turn's lease beyond its deadline (60000); time kept back from the invocation's deadline for storing (10000) |
//! | `MIN_TURN_TIME_MS` | no | the least working time a record needs, beyond the store margin, to start in an invocation (30000, or half the batch's window when shorter); with less it goes back to the queue unclaimed |
//! | `REDRIVE_DELAY_MS`, `REDRIVE_MAX_DELAY_MS` | no | how long a redriven record stays hidden: the first delay, doubling with each receive, up to the longest (5000, 900000) |
//! | `POWERTOOLS_METRICS_NAMESPACE` | no | turns metrics on ([`metrics`](super::metrics)): each turn's figures in CloudWatch's embedded metric format on stdout, in this namespace |
//! | `POWERTOOLS_SERVICE_NAME` | no | the metrics' `service` dimension (`agent-worker`) |
//! | `POWERTOOLS_METRICS_DISABLED` | no | `true`: no metrics, the namespace notwithstanding |
//! | `METRICS_DIMENSIONS` | no | dimensions of your own on every metric besides `service`, `name=value,...` (such as `model=claude,agent=desk`) |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` added) | no | turns traces on ([`traces`](super::traces)): each turn's spans over OTLP/HTTP (`http/json`, the only `OTEL_EXPORTER_OTLP_PROTOCOL` taken), with `OTEL_EXPORTER_OTLP_HEADERS` (`name=value,...`); `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turns them off |
//! | `OTEL_SERVICE_NAME` | no | the traces' `service.name` (else `POWERTOOLS_SERVICE_NAME`, else `agent-worker`) |
//! | `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` | no | `true`: the person's words, the answer, and the arguments and results of tools declared `args_sensitive: false` go in the spans (off) |
//! | `A2A_PUSH` | no | `on` or `off` (default): A2A push notifications, each task's updates POSTed from the worker that runs its turn to the webhooks its caller set ([`a2a_push`](crate::a2a_push)); on, every turn reads its task's webhooks when it begins and when it ends |
//! | `A2A_PUSH_LOOPBACK` | no | `true`: a webhook may be plain `http` on a loopback address (local runs and tests; never a deployment) |
//! | `DYNAMODB_ATTEMPT_TIMEOUT_MS` | no | how long one DynamoDB attempt may take before it is retried (5000; the binaries' clients) |

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::metrics::MetricsConfig;
use super::redrive::RedriveBackoff;
use agent_worker_core::engine::tools::examples;
use agent_worker_core::engine::{ApprovalSigner, EngineConfig};

/// Every name [`WorkerSettings::from_lookup`] reads (the module's table), but the trace
/// settings: `TRACE_SETTINGS`. What sets a worker's values from a
/// list of its own (`template.yaml`'s functions) is checked against this one.
pub const WORKER_SETTINGS: [&str; 54] = [
    "TABLE_NAME",
    "MODEL_ID",
    "MODEL_PROVIDER",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_FILE_INPUT",
    "TOOLS",
    "SYSTEM_PROMPT",
    "EVENT_SINKS",
    "EMIT_URL",
    "EMIT_API_KEY",
    "UI_ANSWERS",
    "APPROVAL_SECRET",
    "APPROVAL_STORE",
    "AGENTS_DIR",
    "DEFAULT_AGENT",
    "FILES_BUCKET",
    "FILES_PREFIX",
    "FILES_DIR",
    "PROMPT_CACHING",
    "ATTACHMENT_TOOLS",
    "MAX_ROUNDS",
    "MAX_REPEAT_CALLS",
    "INLINE_LIMIT_BYTES",
    "TURN_BUDGET_USD",
    "CONVERSATION_BUDGET_USD",
    "PERSON_DAILY_BUDGET_USD",
    "ACCOUNT_DAILY_BUDGET_USD",
    "MAX_TOKENS",
    "TEMPERATURE",
    "FORCED_TOOL_CHOICE",
    "TOOL_TIMEOUT_MS",
    "UI_ACTION_TIMEOUT_MS",
    "TURN_DEADLINE_MS",
    "RETRIES",
    "STOP_GRACE_MS",
    "TURN_FILE_TOKENS",
    "CONVERSATION_FILE_TOKENS",
    "MODEL_FIRST_CHUNK_TIMEOUT_MS",
    "MODEL_CHUNK_TIMEOUT_MS",
    "LEASE_MARGIN_MS",
    "STORE_MARGIN_MS",
    "DYNAMODB_ATTEMPT_TIMEOUT_MS",
    "MIN_TURN_TIME_MS",
    "REDRIVE_DELAY_MS",
    "REDRIVE_MAX_DELAY_MS",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_DISABLED",
    "METRICS_DIMENSIONS",
    "A2A_PUSH",
    "A2A_PUSH_LOOPBACK",
];

/// A value that is missing or cannot be used; `name` is the setting. When what failed was
/// another thing it names (a secret store, a client), that failure is the source.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{name}: {problem}")]
pub struct SettingsError {
    /// The setting's name, such as `TABLE_NAME`.
    pub name: String,
    /// What is wrong with it.
    pub problem: String,
    /// What it failed on, if anything did.
    #[source]
    pub cause: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl SettingsError {
    /// Setting `name` cannot be used: `problem`.
    pub fn new(name: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            problem: problem.into(),
            cause: None,
        }
    }

    /// Setting `name` cannot be used: `problem`, because of `cause`, kept as the source (its
    /// text is not repeated in `problem`: [`chain`](agent_worker_contract::chain) prints both).
    pub fn caused_by(
        name: impl Into<String>,
        problem: impl std::fmt::Display,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            problem: problem.to_string(),
            cause: Some(std::sync::Arc::new(cause)),
        }
    }
}

/// Two settings errors are alike when they name the same setting and problem.
impl PartialEq for SettingsError {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.problem == other.problem
    }
}

impl Eq for SettingsError {}

fn error(name: &str, problem: impl Into<String>) -> SettingsError {
    SettingsError::new(name, problem)
}

/// Where a turn's events go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkKind {
    /// JSON lines on stdout (CloudWatch Logs on Lambda).
    Stdout,
    /// The DynamoDB event log in the session table.
    Dynamo,
    /// `POST {url}/api/emit` with an API key.
    Http {
        /// `EMIT_URL`.
        url: String,
        /// `EMIT_API_KEY`.
        api_key: String,
    },
}

/// Who runs the model.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ModelProvider {
    /// Amazon Bedrock (ConverseStream), on the client the binary makes.
    #[default]
    Bedrock,
    /// The Anthropic Messages API.
    Anthropic {
        /// `ANTHROPIC_API_KEY` (hidden from `Debug`).
        api_key: agent_worker_models::ApiKey,
        /// `ANTHROPIC_BASE_URL`: a gateway's, when set.
        base_url: Option<String>,
    },
    /// An OpenAI-compatible Chat Completions API.
    OpenAi {
        /// `OPENAI_API_KEY` (hidden from `Debug`).
        api_key: agent_worker_models::ApiKey,
        /// `OPENAI_BASE_URL`, with its `/v1`: a gateway's or a local server's, when set.
        base_url: Option<String>,
        /// `OPENAI_FILE_INPUT=true`: the endpoint takes PDFs as `file` parts.
        file_input: bool,
    },
}

/// Where the tab's answers to UI actions are read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum UiAnswersFrom {
    /// The session table.
    #[default]
    Table,
    /// The realtime server: `GET {url}/internal/oui/action-results/{callId}`.
    Realtime {
        /// `EMIT_URL`.
        url: String,
        /// `EMIT_API_KEY`.
        api_key: String,
    },
}

/// The realtime server of seed 004 (`EMIT_URL`, `EMIT_API_KEY`): the server the person's tab is
/// on, which keeps the stops a product's API asks for, and approvals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealtimeSettings {
    /// `EMIT_URL`: its base.
    pub url: String,
    /// `EMIT_API_KEY`: its internal key.
    pub api_key: String,
}

/// Where approvals wait (`APPROVAL_STORE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalsIn {
    /// The session table.
    #[default]
    Table,
    /// The realtime server's approval store.
    Realtime,
}

/// Everything a worker needs besides its AWS clients.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSettings {
    /// `TABLE_NAME`.
    pub table: String,
    /// `MODEL_ID`.
    pub model_id: String,
    /// `TOOLS`, each checked to exist.
    pub tools: Vec<String>,
    /// `SYSTEM_PROMPT`.
    pub system_prompt: Option<String>,
    /// `EVENT_SINKS`.
    pub sinks: Vec<SinkKind>,
    /// The tuning, defaults overridden by the tuning settings.
    pub engine: EngineConfig,
    /// The budgets set here (`TURN_BUDGET_USD`, ...), over the configuration file's.
    pub budgets: agent_worker_core::engine::spending::Budgets,
    /// `APPROVAL_SECRET`: the key approval tokens are signed with.
    pub approval_secret: Option<String>,
    /// `AGENTS_DIR`: Standard Agents definitions to serve instead of the single engine.
    pub agents_dir: Option<PathBuf>,
    /// `DEFAULT_AGENT`: the agent of a turn that names none.
    pub default_agent: Option<String>,
    /// `FILES_BUCKET` and `FILES_PREFIX`: where the files people attach are kept.
    pub files: Option<FilesLocation>,
    /// `FILES_DIR`: a local folder of the files people attach, instead of a bucket.
    pub files_dir: Option<PathBuf>,
    /// `ATTACHMENT_TOOLS`: whether the model may reach the conversation's files with tools.
    pub attachment_tools: bool,
    /// `UI_ANSWERS`: where the tab's answers to UI actions are read.
    pub ui_answers: UiAnswersFrom,
    /// `EMIT_URL` and `EMIT_API_KEY`: the realtime server, when there is one; a turn asks it
    /// for its stop beside the table.
    pub realtime: Option<RealtimeSettings>,
    /// `APPROVAL_STORE`: where approvals wait.
    pub approvals_in: ApprovalsIn,
    /// `MODEL_PROVIDER`: who runs the model.
    pub provider: ModelProvider,
    /// `PROMPT_CACHING`: prompt caching forced on or off; `None` leaves it to the model.
    pub prompt_caching: Option<bool>,
    /// `STORE_MARGIN_MS`: time kept back from an invocation's (or a message's visibility)
    /// deadline for storing the turn and answering.
    pub store_margin: Duration,
    /// `DYNAMODB_ATTEMPT_TIMEOUT_MS`: how long one DynamoDB attempt may take.
    pub store_attempt_timeout: Duration,
    /// `MIN_TURN_TIME_MS`: the least working time a record needs, beyond the store margin, to
    /// start in an invocation.
    pub min_turn_time: Duration,
    /// `REDRIVE_DELAY_MS` and `REDRIVE_MAX_DELAY_MS`: how long a redriven record stays hidden.
    pub redrive: RedriveBackoff,
    /// `POWERTOOLS_METRICS_NAMESPACE` and the rest: each turn's metrics, when on.
    pub metrics: Option<MetricsConfig>,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` and the rest: each turn's trace, when on.
    pub traces: Option<crate::traces::TraceConfig>,
    /// `A2A_PUSH` and `A2A_PUSH_LOOPBACK`: A2A push notifications, when on.
    pub a2a_push: Option<crate::a2a_push::PushPolicy>,
}

/// Time kept back from a Lambda invocation's deadline for storing the turn and answering.
pub const DEFAULT_STORE_MARGIN: Duration = Duration::from_secs(10);

/// The least working time a record needs, beyond the store margin, to start in an invocation.
pub const DEFAULT_MIN_TURN_TIME: Duration = Duration::from_secs(30);

/// How long one DynamoDB call's attempt may take before the SDK gives it up and tries again.
/// DynamoDB answers in milliseconds; an answer that stalls is lost, and a retried write that had
/// landed is recognised by its write token.
pub const DEFAULT_STORE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// A DynamoDB client for the session store on `shared`, whose attempts time out after
/// `attempt_timeout` (see [`DEFAULT_STORE_ATTEMPT_TIMEOUT`]), so that a stalled answer does not
/// hold a turn until its deadline; its requests count toward each turn's `DynamoDBRequests`.
pub fn dynamodb_client(
    shared: &aws_config::SdkConfig,
    attempt_timeout: Duration,
) -> aws_sdk_dynamodb::Client {
    let timeouts = aws_sdk_dynamodb::config::timeout::TimeoutConfig::builder()
        .operation_attempt_timeout(attempt_timeout)
        .build();
    let config = aws_sdk_dynamodb::config::Builder::from(shared)
        .timeout_config(timeouts)
        .interceptor(super::metrics::CountRequests)
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// Where the files people attach are kept in S3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesLocation {
    /// `FILES_BUCKET`.
    pub bucket: String,
    /// `FILES_PREFIX`.
    pub prefix: String,
}

/// The key prefix of attached files when `FILES_PREFIX` is not set.
pub const DEFAULT_FILES_PREFIX: &str = "attachments/";

fn list(value: Option<String>) -> Vec<String> {
    value
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn parsed<T: FromStr>(
    get: &impl Fn(&str) -> Option<String>,
    name: &str,
    into: &mut T,
) -> Result<(), SettingsError>
where
    T::Err: std::fmt::Display,
{
    if let Some(raw) = get(name).filter(|v| !v.trim().is_empty()) {
        *into = raw
            .trim()
            .parse()
            .map_err(|e| error(name, format!("{raw:?} is not valid: {e}")))?;
    }
    Ok(())
}

fn millis(
    get: &impl Fn(&str) -> Option<String>,
    name: &str,
    into: &mut Duration,
) -> Result<(), SettingsError> {
    let mut ms = u64::try_from(into.as_millis()).unwrap_or(u64::MAX);
    parsed(get, name, &mut ms)?;
    *into = Duration::from_millis(ms);
    Ok(())
}

impl WorkerSettings {
    /// Reads the settings through `get`, which answers a setting's value by name.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let required = |name: &str| {
            get(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| error(name, "is not set"))
        };
        let table = required("TABLE_NAME")?;
        let model_id = required("MODEL_ID")?;
        let tools = list(get("TOOLS"));
        if let Some(unknown) = tools.iter().find(|t| examples::by_name(t).is_none()) {
            return Err(error(
                "TOOLS",
                format!(
                    "{unknown:?} is not an example tool; they are {}",
                    examples::NAMES.join(", ")
                ),
            ));
        }
        let sinks = match get("EVENT_SINKS") {
            None => vec![SinkKind::Stdout, SinkKind::Dynamo],
            Some(value) => list(Some(value))
                .iter()
                .map(|s| match s.as_str() {
                    "stdout" => Ok(SinkKind::Stdout),
                    "dynamo" => Ok(SinkKind::Dynamo),
                    "http" => Ok(SinkKind::Http {
                        url: required("EMIT_URL")?,
                        api_key: required("EMIT_API_KEY")?,
                    }),
                    other => Err(error(
                        "EVENT_SINKS",
                        format!("{other:?} is not a sink; use stdout, dynamo, http"),
                    )),
                })
                .collect::<Result<_, _>>()?,
        };
        let mut engine = EngineConfig::default();
        parsed(&get, "MAX_ROUNDS", &mut engine.max_rounds)?;
        parsed(&get, "MAX_REPEAT_CALLS", &mut engine.max_repeat_calls)?;
        parsed(&get, "INLINE_LIMIT_BYTES", &mut engine.inline_limit_bytes)?;
        parsed(&get, "MAX_TOKENS", &mut engine.max_tokens)?;
        parsed(&get, "TEMPERATURE", &mut engine.temperature)?;
        parsed(&get, "FORCED_TOOL_CHOICE", &mut engine.forced_tool_choice)?;
        parsed(&get, "RETRIES", &mut engine.retries)?;
        millis(&get, "TOOL_TIMEOUT_MS", &mut engine.tool_timeout)?;
        millis(&get, "UI_ACTION_TIMEOUT_MS", &mut engine.ui_action_timeout)?;
        millis(&get, "TURN_DEADLINE_MS", &mut engine.turn_deadline)?;
        millis(
            &get,
            "MODEL_FIRST_CHUNK_TIMEOUT_MS",
            &mut engine.first_chunk_timeout,
        )?;
        millis(&get, "MODEL_CHUNK_TIMEOUT_MS", &mut engine.chunk_timeout)?;
        millis(&get, "LEASE_MARGIN_MS", &mut engine.lease_margin)?;
        millis(&get, "STOP_GRACE_MS", &mut engine.stop_grace)?;
        parsed(&get, "TURN_FILE_TOKENS", &mut engine.turn_file_tokens)?;
        parsed(
            &get,
            "CONVERSATION_FILE_TOKENS",
            &mut engine.conversation_file_tokens,
        )?;
        engine.validate().map_err(|e| error("tuning", e.to_string()))?;
        let approval_secret = get("APPROVAL_SECRET").filter(|s| !s.is_empty());
        if let Some(secret) = &approval_secret {
            ApprovalSigner::new(secret.as_bytes()).map_err(|e| error("APPROVAL_SECRET", e.to_string()))?;
        }
        let agents_dir = get("AGENTS_DIR")
            .filter(|s| !s.trim().is_empty())
            .map(PathBuf::from);
        let default_agent = get("DEFAULT_AGENT").filter(|s| !s.trim().is_empty());
        if default_agent.is_some() && agents_dir.is_none() {
            return Err(error(
                "DEFAULT_AGENT",
                "needs AGENTS_DIR, the folder that defines it",
            ));
        }
        let files = get("FILES_BUCKET")
            .filter(|s| !s.trim().is_empty())
            .map(|bucket| FilesLocation {
                bucket,
                prefix: get("FILES_PREFIX").unwrap_or_else(|| DEFAULT_FILES_PREFIX.to_owned()),
            });
        let files_dir = get("FILES_DIR")
            .filter(|s| !s.trim().is_empty())
            .map(PathBuf::from);
        if files.is_some() && files_dir.is_some() {
            return Err(error(
                "FILES_DIR",
                "is set, and so is FILES_BUCKET: set one of them",
            ));
        }
        let mut attachment_tools = false;
        parsed(&get, "ATTACHMENT_TOOLS", &mut attachment_tools)?;
        if attachment_tools && files.is_none() && files_dir.is_none() {
            return Err(error(
                "ATTACHMENT_TOOLS",
                "needs FILES_BUCKET or FILES_DIR, where the files are",
            ));
        }
        let provider = match get("MODEL_PROVIDER").as_deref().map(str::trim) {
            None | Some("" | "bedrock") => ModelProvider::Bedrock,
            Some("anthropic") => ModelProvider::Anthropic {
                api_key: agent_worker_models::ApiKey::new(required("ANTHROPIC_API_KEY")?)
                    .map_err(|e| SettingsError::caused_by("ANTHROPIC_API_KEY", "cannot be used", e))?,
                base_url: get("ANTHROPIC_BASE_URL").filter(|u| !u.trim().is_empty()),
            },
            Some("openai") => ModelProvider::OpenAi {
                api_key: agent_worker_models::ApiKey::new(required("OPENAI_API_KEY")?)
                    .map_err(|e| SettingsError::caused_by("OPENAI_API_KEY", "cannot be used", e))?,
                base_url: get("OPENAI_BASE_URL").filter(|u| !u.trim().is_empty()),
                file_input: get("OPENAI_FILE_INPUT").is_some_and(|v| v.trim() == "true"),
            },
            Some(other) => {
                return Err(error(
                    "MODEL_PROVIDER",
                    format!("{other:?} is not bedrock, anthropic or openai"),
                ));
            }
        };
        let ui_answers = match get("UI_ANSWERS").as_deref().map(str::trim) {
            None | Some("" | "table") => UiAnswersFrom::Table,
            Some("realtime") => UiAnswersFrom::Realtime {
                url: required("EMIT_URL")?,
                api_key: required("EMIT_API_KEY")?,
            },
            Some(other) => return Err(error("UI_ANSWERS", format!("{other:?} is not table or realtime"))),
        };
        let realtime = match get("EMIT_URL").filter(|v| !v.trim().is_empty()) {
            Some(url) => Some(RealtimeSettings {
                url,
                api_key: required("EMIT_API_KEY")?,
            }),
            None => None,
        };
        let approvals_in = match get("APPROVAL_STORE").as_deref().map(str::trim) {
            None | Some("") if realtime.is_some() => ApprovalsIn::Realtime,
            None | Some("" | "table") => ApprovalsIn::Table,
            Some("realtime") if realtime.is_some() => ApprovalsIn::Realtime,
            Some("realtime") => {
                return Err(error(
                    "APPROVAL_STORE",
                    "realtime needs EMIT_URL, the realtime server",
                ));
            }
            Some(other) => {
                return Err(error(
                    "APPROVAL_STORE",
                    format!("{other:?} is not table or realtime"),
                ));
            }
        };
        let mut prompt_caching = None;
        if get("PROMPT_CACHING").is_some_and(|v| !v.trim().is_empty()) {
            let mut on = false;
            parsed(&get, "PROMPT_CACHING", &mut on)?;
            prompt_caching = Some(on);
        }
        let mut store_margin = DEFAULT_STORE_MARGIN;
        millis(&get, "STORE_MARGIN_MS", &mut store_margin)?;
        let mut store_attempt_timeout = DEFAULT_STORE_ATTEMPT_TIMEOUT;
        millis(&get, "DYNAMODB_ATTEMPT_TIMEOUT_MS", &mut store_attempt_timeout)?;
        if store_attempt_timeout.is_zero() {
            return Err(error("DYNAMODB_ATTEMPT_TIMEOUT_MS", "must be longer than zero"));
        }
        let mut min_turn_time = DEFAULT_MIN_TURN_TIME;
        millis(&get, "MIN_TURN_TIME_MS", &mut min_turn_time)?;
        let (mut first, mut longest) = (
            super::redrive::DEFAULT_REDRIVE_DELAY,
            super::redrive::DEFAULT_REDRIVE_MAX_DELAY,
        );
        millis(&get, "REDRIVE_DELAY_MS", &mut first)?;
        millis(&get, "REDRIVE_MAX_DELAY_MS", &mut longest)?;
        let redrive =
            RedriveBackoff::new(first, longest).map_err(|e| error("REDRIVE_DELAY_MS", e.to_string()))?;
        let metrics = metrics::metrics_config(&get)?;
        let traces = traces::trace_config(&get, &provider, &model_id)?;
        let a2a_push = push::push_policy(&get)?;
        Ok(Self {
            a2a_push,
            metrics,
            traces,
            min_turn_time,
            redrive,
            store_margin,
            store_attempt_timeout,
            prompt_caching,
            files,
            files_dir,
            attachment_tools,
            ui_answers,
            realtime,
            approvals_in,
            provider,
            agents_dir,
            default_agent,
            approval_secret,
            table,
            model_id,
            tools,
            system_prompt: get("SYSTEM_PROMPT").filter(|s| !s.trim().is_empty()),
            sinks,
            engine,
            budgets: budgets::budget_settings(&get)?,
        })
    }
}

mod budgets;
mod build;
mod metrics;
mod push;
mod traces;
pub use traces::TRACE_SETTINGS;

#[cfg(test)]
mod tests;

//! `agent-worker`: run turns from the command line, feed a queue, or consume it. (The Bedrock
//! stand-in is a binary of the test kit: `bedrock-stand-in`.)
//!
//! ```text
//! agent-worker invoke --session S --text T [--tool current_time] [--table T] [--endpoint-url URL]
//!                     [--agents-dir examples/agents --agent assistant]
//! agent-worker setup [--table T] [--queue NAME]
//! agent-worker send --queue-url URL --session S --text T [--turn-id ID]
//! agent-worker poll --queue-url URL [--until-empty]
//! agent-worker handle events/one-turn.json
//! agent-worker history --session S        agent-worker events --session S --turn-id T
//! agent-worker stop --session S --turn-id T [--superseded]
//! agent-worker serve --port 8080 --api-key KEY     (the container host)
//! agent-worker agent-protocol [--port 8000] [--workspace ./workspace] [--endpoint-url URL] [--tool T]
//! agent-worker validate examples/agents [--handler NAME] [--hook ID] [--json]
//! ```
//!
//! Configured from the same environment as the Lambda function (`TABLE_NAME`, `MODEL_ID`,
//! `TOOLS`, ...); a flag overrides its variable. Endpoints come from the SDK's standard
//! `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS` and `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`.
//!
//! `invoke` prints every event of the turn as one JSON line on stdout and exits 0 when the
//! turn completed, 1 when it failed (with the details on stderr), 2 on bad usage.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use agent_worker::agents::{AgentRuntime, DynamoThreadStore, MemoryThreadStore};
use agent_worker::engine::tools::{Tool, examples};
use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::hosts::agent_protocol::{
    self, AgentProtocolServer, AgentTaskHandler, DynamoTaskStore, ServerConfig, Workspace,
};
use agent_worker::hosts::lambda::Requeue;
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::hosts::secrets::read_secret_settings;
use agent_worker::hosts::settings::dynamodb_client;
use agent_worker::hosts::sqs_poller::{PollOptions, poll_queue};
use agent_worker::hosts::{AgentTurnPayload, WorkerSettings};
use agent_worker::protocol::{Agent, AgentEvent, ImageRef, Prompt, Scope};
use agent_worker::session::{
    DynamoConfig, DynamoStore, MemoryStore, SessionStore, Stop, StopCause, StopOutcome,
};
use agent_worker::sinks::DynamoEventLog;
use base64::Engine as _;
use clap::{Parser, Subcommand};
use futures_util::StreamExt;
use tracing_subscriber::EnvFilter;

/// The model the command line uses when none is given.
const DEFAULT_MODEL_ID: &str = "us.anthropic.claude-sonnet-4-6";

#[derive(Debug, Parser)]
#[command(
    name = "agent-worker",
    version,
    about = "A Rust agent runtime for AWS serverless"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs one turn and prints its events as JSON lines.
    Invoke(InvokeArgs),
    /// Creates the table (as template.yaml defines it) and, if asked, a FIFO queue with its DLQ.
    Setup(SetupArgs),
    /// Sends one turn to a queue.
    Send(SendArgs),
    /// Consumes a queue as Lambda's event source mapping does.
    Poll(PollArgs),
    /// Runs the Lambda handler once on an SQS event JSON file and prints the batch response.
    Handle(HandleArgs),
    /// Prints a session's stored history, one message a line.
    History(HistoryArgs),
    /// Prints a turn's logged events, one a line.
    Events(EventsArgs),
    /// Asks a turn to stop, whether it is running or still waiting in the queue.
    Stop(StopArgs),
    /// Serves turns over HTTP: the container host.
    Serve(ServeArgs),
    /// Serves the Bedrock engine over Agent Protocol v1 (a task is a session, a step a turn).
    AgentProtocol(AgentProtocolArgs),
    /// Checks a folder of Standard Agents definitions (agents/, prompts/); exits 1 on an error.
    Validate(ValidateArgs),
}

#[derive(Debug, clap::Args)]
struct ValidateArgs {
    /// The folder holding agents/ and prompts/.
    folder: PathBuf,
    /// A handler registered outside this binary (relay_pipe is built in); repeatable.
    #[arg(long = "handler")]
    handlers: Vec<String>,
    /// A hook registered outside this binary; repeatable.
    #[arg(long = "hook")]
    hooks: Vec<String>,
    /// A tool registered outside this binary; repeatable.
    #[arg(long = "tool")]
    tools: Vec<String>,
    /// Print the issues as one JSON list.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The port.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// The address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    host: std::net::IpAddr,
    /// The key callers send in x-api-key (required).
    #[arg(long, env = "AGENT_WORKER_API_KEY", hide_env_values = true)]
    api_key: String,
    /// The most turns that run at once.
    #[arg(long, default_value_t = agent_worker::hosts::container::DEFAULT_MAX_CONCURRENT_TURNS)]
    max_concurrent_turns: usize,
    /// Seconds running turns may go on after SIGTERM before they are stopped.
    #[arg(long, default_value_t = 30)]
    shutdown_grace: u64,
    #[command(flatten)]
    worker: WorkerArgs,
}

#[derive(Debug, clap::Args)]
struct StopArgs {
    /// The session.
    #[arg(long)]
    session: String,
    /// The turn.
    #[arg(long)]
    turn_id: String,
    /// The turn was replaced by the person's next message, rather than stopped by them.
    #[arg(long)]
    superseded: bool,
    #[command(flatten)]
    table: TableArgs,
}

/// The settings the worker commands share with the Lambda function.
#[derive(Debug, clap::Args)]
struct WorkerArgs {
    /// The DynamoDB table.
    #[arg(long, env = "TABLE_NAME")]
    table: Option<String>,
    /// The Bedrock model id or inference profile.
    #[arg(long, env = "MODEL_ID", default_value = DEFAULT_MODEL_ID)]
    model_id: String,
    /// Example tools to enable; repeatable or comma-separated.
    #[arg(long = "tool", env = "TOOLS", value_delimiter = ',')]
    tools: Vec<String>,
    /// A Bedrock-compatible endpoint, such as the stand-in's.
    #[arg(long, env = "AWS_ENDPOINT_URL_BEDROCK_RUNTIME")]
    endpoint_url: Option<String>,
    /// The AWS region.
    #[arg(long, env = "AWS_REGION")]
    region: Option<String>,
    /// Serve the Standard Agents definitions of this folder; each turn's `agent` names one.
    #[arg(long, env = "AGENTS_DIR")]
    agents_dir: Option<PathBuf>,
    /// With --agents-dir: the agent of a turn that names none.
    #[arg(long, env = "DEFAULT_AGENT")]
    default_agent: Option<String>,
}

#[derive(Debug, clap::Args)]
struct SetupArgs {
    /// The table to create.
    #[arg(long, env = "TABLE_NAME", default_value = "agent-worker-sessions")]
    table: String,
    /// Also create a FIFO queue NAME.fifo with the dead-letter queue NAME-dlq.fifo.
    #[arg(long)]
    queue: Option<String>,
    /// The queue's visibility timeout in seconds (at least 6 times the function's timeout).
    #[arg(long, default_value_t = 5400)]
    visibility_timeout: u32,
    /// Receives before a message goes to the dead-letter queue.
    #[arg(long, default_value_t = 5)]
    max_receive_count: u32,
    /// The AWS region.
    #[arg(long, env = "AWS_REGION")]
    region: Option<String>,
}

#[derive(Debug, clap::Args)]
struct SendArgs {
    /// The queue.
    #[arg(long, env = "QUEUE_URL")]
    queue_url: String,
    /// The session (conversation) id.
    #[arg(long)]
    session: String,
    /// The person's words.
    #[arg(long)]
    text: String,
    /// The turn's id (a new one when not given).
    #[arg(long)]
    turn_id: Option<String>,
    /// The person.
    #[arg(long, default_value = "local-user")]
    user_id: String,
    /// The person's account.
    #[arg(long, default_value = "local-account")]
    account_id: String,
    /// The AWS region.
    #[arg(long, env = "AWS_REGION")]
    region: Option<String>,
}

#[derive(Debug, clap::Args)]
struct PollArgs {
    /// The queue.
    #[arg(long, env = "QUEUE_URL")]
    queue_url: String,
    /// Stop once the queue is empty.
    #[arg(long)]
    until_empty: bool,
    #[command(flatten)]
    worker: WorkerArgs,
}

#[derive(Debug, clap::Args)]
struct HandleArgs {
    /// An SQS event JSON file, as Lambda delivers one.
    file: PathBuf,
    #[command(flatten)]
    worker: WorkerArgs,
}

/// A table to read.
#[derive(Debug, clap::Args)]
struct TableArgs {
    /// The table.
    #[arg(long, env = "TABLE_NAME")]
    table: String,
    /// The AWS region.
    #[arg(long, env = "AWS_REGION")]
    region: Option<String>,
}

impl TableArgs {
    async fn store(&self) -> Result<DynamoStore, String> {
        Ok(DynamoStore::new(
            aws_sdk_dynamodb::Client::new(&aws_config(self.region.as_deref()).await),
            DynamoConfig::new(&self.table).map_err(|e| format!("--table: {e}"))?,
        ))
    }
}

#[derive(Debug, clap::Args)]
struct HistoryArgs {
    /// The session.
    #[arg(long)]
    session: String,
    #[command(flatten)]
    table: TableArgs,
}

#[derive(Debug, clap::Args)]
struct EventsArgs {
    /// The session.
    #[arg(long)]
    session: String,
    /// The turn.
    #[arg(long)]
    turn_id: String,
    /// Only events after this position.
    #[arg(long)]
    after: Option<u64>,
    #[command(flatten)]
    table: TableArgs,
}

#[derive(Debug, clap::Args)]
struct InvokeArgs {
    /// The session (conversation) id.
    #[arg(long)]
    session: String,
    /// The person's words.
    #[arg(long)]
    text: String,
    /// The turn's id; a redelivered id does not run again.
    #[arg(long)]
    turn_id: Option<String>,
    /// A picture to send (PNG, JPEG, GIF or WebP); repeatable.
    #[arg(long = "image")]
    images: Vec<PathBuf>,
    /// Run N independent turns in this process, in sessions `<session>-1` … `<session>-N`
    /// (turn ids likewise suffixed), then print `{"turns","tool_calls","failed_turns"}` (and
    /// `peak_rss_kib` on Linux): per-turn cost apart from process start.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: Option<u32>,
    #[command(flatten)]
    engine: EngineArgs,
}

/// The Bedrock engine the local commands run (`invoke`, `agent-protocol`).
#[derive(Debug, clap::Args)]
struct EngineArgs {
    /// The Bedrock model id or inference profile.
    #[arg(long, env = "MODEL_ID", default_value = DEFAULT_MODEL_ID)]
    model_id: String,
    /// A Bedrock-compatible endpoint, such as the stand-in's.
    #[arg(long, env = "AWS_ENDPOINT_URL_BEDROCK_RUNTIME")]
    endpoint_url: Option<String>,
    /// The AWS region.
    #[arg(long, env = "AWS_REGION")]
    region: Option<String>,
    /// The system prompt.
    #[arg(long)]
    system: Option<String>,
    /// An example tool to enable (current_time, add, word_count); repeatable.
    #[arg(long = "tool")]
    tools: Vec<String>,
    /// Keep sessions in this DynamoDB table rather than in memory.
    #[arg(long, env = "TABLE_NAME")]
    table: Option<String>,
    /// Run a Standard Agents definition from this folder (agents/, prompts/) instead of the
    /// bare engine; `--agent` names it.
    #[arg(long, env = "AGENTS_DIR", requires = "agent")]
    agents_dir: Option<PathBuf>,
    /// The agent of `--agents-dir` to run.
    #[arg(long, requires = "agents_dir")]
    agent: Option<String>,
}

impl EngineArgs {
    /// The agent these options describe: the engine, or a Standard Agents definition.
    async fn agent(&self) -> Result<Arc<dyn Agent>, String> {
        let (Some(folder), Some(name)) = (&self.agents_dir, &self.agent) else {
            return Ok(Arc::new(self.engine().await?));
        };
        let client = bedrock_client(self.endpoint_url.as_deref(), self.region.as_deref()).await;
        let builder = AgentRuntime::builder()
            .tools(examples::NAMES.iter().filter_map(|n| examples::by_name(n)))
            .catalog_dir(folder)
            .map_err(|e| format!("--agents-dir {}: {e}", folder.display()))?
            .models(&self.model_id, move |id| {
                Arc::new(BedrockModel::new(client.clone(), id)) as Arc<dyn agent_worker::engine::Model>
            });
        let builder = match &self.table {
            Some(table) => {
                let store = self.dynamo_store(table).await?;
                builder
                    .session_store(store.clone())
                    .thread_store(DynamoThreadStore::new(store))
            }
            None => builder
                .session_store(MemoryStore::new())
                .thread_store(MemoryThreadStore::new()),
        };
        let runtime = builder.build().map_err(|e| e.to_string())?;
        Ok(Arc::new(
            runtime.agent(name).map_err(|e| format!("--agent {name}: {e}"))?,
        ))
    }

    async fn dynamo_store(&self, table: &str) -> Result<DynamoStore, String> {
        let dynamodb = dynamodb_client(
            &aws_config(self.region.as_deref()).await,
            agent_worker::hosts::settings::DEFAULT_STORE_ATTEMPT_TIMEOUT,
        );
        let config = DynamoConfig::new(table).map_err(|e| format!("--table: {e}"))?;
        Ok(DynamoStore::new(dynamodb, config))
    }

    async fn engine(&self) -> Result<Engine, String> {
        let tools = tools(&self.tools)?;
        let client = bedrock_client(self.endpoint_url.as_deref(), self.region.as_deref()).await;
        let mut builder = Engine::builder()
            .model(BedrockModel::new(client, self.model_id.clone()))
            .tools(tools);
        builder = match &self.table {
            Some(table) => builder.store(self.dynamo_store(table).await?),
            None => builder.store(MemoryStore::new()),
        };
        if let Some(system) = &self.system {
            builder = builder.system_prompt(system.clone());
        }
        builder.build().map_err(|e| e.to_string())
    }
}

#[derive(Debug, clap::Args)]
struct AgentProtocolArgs {
    /// The port.
    #[arg(long, default_value_t = agent_protocol::DEFAULT_PORT)]
    port: u16,
    /// The address to listen on (the protocol has no authentication: expose it with care).
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// Where artifact files live.
    #[arg(long, default_value = agent_protocol::DEFAULT_WORKSPACE)]
    workspace: PathBuf,
    /// The largest artifact upload, in bytes.
    #[arg(long, default_value_t = agent_protocol::DEFAULT_UPLOAD_LIMIT)]
    upload_limit: usize,
    #[command(flatten)]
    engine: EngineArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")))
        .with_writer(std::io::stderr)
        .init();
    // One turn at a time needs one thread: a single-threaded runtime spares the cross-thread
    // wake-ups that cost more CPU than the turn itself. Servers and pollers get every core.
    let one_thread = matches!(
        cli.command,
        Command::Invoke(_)
            | Command::Handle(_)
            | Command::Setup(_)
            | Command::Send(_)
            | Command::History(_)
            | Command::Events(_)
            | Command::Stop(_)
    );
    let runtime = if one_thread {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Runtime::new()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Invoke(args) => invoke(args).await,
            Command::Setup(args) => setup(args).await.map(|()| ExitCode::SUCCESS),
            Command::Send(args) => send(args).await.map(|()| ExitCode::SUCCESS),
            Command::Poll(args) => poll(args).await,
            Command::Handle(args) => handle(args).await,
            Command::History(args) => history(args).await.map(|()| ExitCode::SUCCESS),
            Command::Events(args) => events(args).await.map(|()| ExitCode::SUCCESS),
            Command::Stop(args) => stop(args).await.map(|()| ExitCode::SUCCESS),
            Command::Serve(args) => serve(args).await.map(|()| ExitCode::SUCCESS),
            Command::AgentProtocol(args) => agent_protocol_server(args).await.map(|()| ExitCode::SUCCESS),
            Command::Validate(args) => validate(args),
        }
    });
    result.unwrap_or_else(|message| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    })
}

fn tools(names: &[String]) -> Result<Vec<Arc<dyn Tool>>, String> {
    names
        .iter()
        .flat_map(|n| n.split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|name| {
            examples::by_name(name).ok_or_else(|| {
                format!(
                    "--tool {name}: no such example tool; the tools are {}",
                    examples::NAMES.join(", ")
                )
            })
        })
        .collect()
}

fn image(path: &Path) -> Result<ImageRef, String> {
    let mime_type = match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        _ => {
            return Err(format!(
                "--image {}: the name must end in .png, .jpg, .jpeg, .gif or .webp",
                path.display()
            ));
        }
    };
    let bytes = std::fs::read(path).map_err(|e| format!("--image {}: {e}", path.display()))?;
    Ok(ImageRef {
        mime_type: mime_type.to_owned(),
        data: base64::engine::general_purpose::STANDARD.encode(bytes),
    })
}

async fn aws_config(region: Option<&str>) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(region) = region {
        loader = loader.region(aws_config::Region::new(region.to_owned()));
    }
    loader.load().await
}

async fn bedrock_client(endpoint_url: Option<&str>, region: Option<&str>) -> aws_sdk_bedrockruntime::Client {
    let shared = aws_config(region).await;
    let mut config = aws_sdk_bedrockruntime::config::Builder::from(&shared);
    if let Some(url) = endpoint_url {
        config = config.endpoint_url(url);
    }
    aws_sdk_bedrockruntime::Client::from_conf(config.build())
}

async fn invoke(args: InvokeArgs) -> Result<ExitCode, String> {
    let mut prompt = Prompt::text(args.text);
    for path in &args.images {
        prompt = prompt.with_image(image(path)?);
    }
    let agent = args.engine.agent().await?;
    let Some(repeat) = args.repeat else {
        let mut scope = Scope::new(args.session);
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
        let mut scope = Scope::new(format!("{}-{i}", args.session));
        if let Some(turn_id) = &args.turn_id {
            scope = scope.with_turn_id(format!("{turn_id}-{i}"));
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

/// This process's peak resident memory so far (`VmHWM`), where the system tells it (Linux).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// What one printed turn did.
struct Ran {
    completed: bool,
    tool_calls: u64,
}

/// Runs one turn, printing each event as a JSON line and a failure's reason on stderr.
async fn print_turn(agent: &dyn Agent, scope: Scope, prompt: Prompt) -> Result<Ran, String> {
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

impl WorkerArgs {
    /// The Lambda function's settings, flags first, then the environment.
    async fn handler(&self) -> Result<(TurnHandler, WorkerSettings), String> {
        let table = self.table.clone();
        let model_id = self.model_id.clone();
        let tools = self.tools.join(",");
        let agents_dir = self.agents_dir.as_ref().map(|d| d.display().to_string());
        let default_agent = self.default_agent.clone();
        let shared = aws_config(self.region.as_deref()).await;
        let secrets = read_secret_settings(
            |name| std::env::var(name).ok(),
            || aws_sdk_secretsmanager::Client::new(&shared),
        )
        .await
        .map_err(|e| e.to_string())?;
        let settings = WorkerSettings::from_lookup(|name| match name {
            "TABLE_NAME" => table.clone(),
            "MODEL_ID" => Some(model_id.clone()),
            "TOOLS" => Some(tools.clone()),
            "AGENTS_DIR" => agents_dir.clone(),
            "DEFAULT_AGENT" => default_agent.clone(),
            other => secrets.get(other).cloned().or_else(|| std::env::var(other).ok()),
        })
        .map_err(|e| e.to_string())?;
        let bedrock = bedrock_client(self.endpoint_url.as_deref(), self.region.as_deref()).await;
        let dynamodb = dynamodb_client(&shared, settings.store_attempt_timeout);
        let files = settings.s3_file_area(aws_sdk_s3::Client::new(&shared));
        let (agent, sinks) = settings
            .build(bedrock, dynamodb, files)
            .map_err(|e| e.to_string())?;
        Ok((settings.turn_handler(agent, sinks), settings))
    }
}

async fn setup(args: SetupArgs) -> Result<(), String> {
    let shared = aws_config(args.region.as_deref()).await;
    let store = DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&shared),
        DynamoConfig::new(&args.table).map_err(|e| format!("--table: {e}"))?,
    );
    store.create_table().await.map_err(|e| e.to_string())?;
    let mut out = serde_json::json!({ "table": args.table });
    if let Some(name) = &args.queue {
        use aws_sdk_sqs::types::QueueAttributeName as Q;
        let name = name.trim_end_matches(".fifo");
        let sqs = aws_sdk_sqs::Client::new(&shared);
        let fail = |e: aws_sdk_sqs::error::SdkError<_>| {
            format!(
                "creating the queue: {}",
                aws_sdk_sqs::error::DisplayErrorContext(e)
            )
        };
        let dlq_url = sqs
            .create_queue()
            .queue_name(format!("{name}-dlq.fifo"))
            .attributes(Q::FifoQueue, "true")
            .attributes(Q::MessageRetentionPeriod, "1209600")
            .send()
            .await
            .map_err(fail)?
            .queue_url
            .unwrap_or_default();
        let dlq_arn = sqs
            .get_queue_attributes()
            .queue_url(&dlq_url)
            .attribute_names(Q::QueueArn)
            .send()
            .await
            .map_err(|e| format!("reading the DLQ: {}", aws_sdk_sqs::error::DisplayErrorContext(e)))?
            .attributes
            .and_then(|a| a.get(&Q::QueueArn).cloned())
            .unwrap_or_default();
        let redrive =
            serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": args.max_receive_count });
        let queue_url = sqs
            .create_queue()
            .queue_name(format!("{name}.fifo"))
            .attributes(Q::FifoQueue, "true")
            .attributes(Q::VisibilityTimeout, args.visibility_timeout.to_string())
            .attributes(Q::RedrivePolicy, redrive.to_string())
            .send()
            .await
            .map_err(|e| {
                format!(
                    "creating the queue: {}",
                    aws_sdk_sqs::error::DisplayErrorContext(e)
                )
            })?
            .queue_url
            .unwrap_or_default();
        out["queueUrl"] = queue_url.into();
        out["deadLetterQueueUrl"] = dlq_url.into();
    }
    println!("{out}");
    Ok(())
}

async fn send(args: SendArgs) -> Result<(), String> {
    let payload = AgentTurnPayload {
        turn_id: args
            .turn_id
            .unwrap_or_else(|| format!("turn-{}", uuid::Uuid::new_v4().simple())),
        conversation_id: args.session,
        user_id: args.user_id,
        account_id: args.account_id,
        content: args.text,
        images: Vec::new(),
        context: None,
        attachments: Vec::new(),
        approval: None,
        supersedes: Vec::new(),
        agent: None,
    };
    let body = serde_json::to_string(&payload).map_err(|e| e.to_string())?;
    let sqs = aws_sdk_sqs::Client::new(&aws_config(args.region.as_deref()).await);
    let mut request = sqs.send_message().queue_url(&args.queue_url).message_body(body);
    if args.queue_url.ends_with(".fifo") {
        request = request
            .message_group_id(&payload.conversation_id)
            .message_deduplication_id(&payload.turn_id);
    }
    let sent = request
        .send()
        .await
        .map_err(|e| format!("sending the turn: {}", aws_sdk_sqs::error::DisplayErrorContext(e)))?;
    println!(
        "{}",
        serde_json::json!({ "messageId": sent.message_id, "turnId": payload.turn_id, "session": payload.conversation_id })
    );
    Ok(())
}

async fn poll(args: PollArgs) -> Result<ExitCode, String> {
    let (handler, settings) = args.worker.handler().await?;
    let sqs = aws_sdk_sqs::Client::new(&aws_config(args.worker.region.as_deref()).await);
    let handler = handler.requeue(Requeue::new(sqs.clone(), settings.redrive));
    let options = PollOptions {
        until_empty: args.until_empty,
        wait: if args.until_empty {
            std::time::Duration::from_secs(1)
        } else {
            PollOptions::default().wait
        },
        ..PollOptions::default()
    };
    let stats = poll_queue(&sqs, &args.queue_url, &handler, &options, shutdown_signal())
        .await
        .map_err(|e| e.to_string())?;
    eprintln!(
        "polled {}: {} received, {} handled and deleted, {} left to the queue",
        args.queue_url, stats.received, stats.deleted, stats.failed
    );
    Ok(ExitCode::SUCCESS)
}

async fn handle(args: HandleArgs) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let event =
        serde_json::from_str(&text).map_err(|e| format!("{}: not an SQS event: {e}", args.file.display()))?;
    let (handler, settings) = args.worker.handler().await?;
    let deadline = std::time::SystemTime::now() + settings.engine.turn_deadline;
    let response = handler
        .handle_batch(event, Some(deadline))
        .await
        .map_err(|e| e.to_string())?;
    println!("{}", serde_json::to_string(&response).map_err(|e| e.to_string())?);
    Ok(ExitCode::SUCCESS)
}

async fn history(args: HistoryArgs) -> Result<(), String> {
    let store = args.table.store().await?;
    for message in store
        .load_history(&args.session)
        .await
        .map_err(|e| e.to_string())?
    {
        println!("{}", serde_json::to_string(&message).map_err(|e| e.to_string())?);
    }
    Ok(())
}

async fn events(args: EventsArgs) -> Result<(), String> {
    let log = DynamoEventLog::new(args.table.store().await?);
    for logged in log
        .read(&args.session, &args.turn_id, args.after)
        .await
        .map_err(|e| e.to_string())?
    {
        println!(
            "{}",
            serde_json::json!({ "seq": logged.seq, "event": logged.event })
        );
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM (what ECS and systemd send): the poller finishes the batch in
/// hand, deletes what succeeded, and stops.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    eprintln!("stopping: the work in hand is finished first");
}

async fn stop(args: StopArgs) -> Result<(), String> {
    let store = args.table.store().await?;
    let cause = if args.superseded {
        StopCause::Superseded
    } else {
        StopCause::UserStop
    };
    let outcome = store
        .request_stop(&args.session, &args.turn_id, Stop::now(cause))
        .await
        .map_err(|e| e.to_string())?;
    let said = match outcome {
        StopOutcome::Recorded => "recorded: the turn stops when it next looks, or before it starts",
        StopOutcome::AlreadyEnded => "the turn had already ended; nothing changed",
    };
    println!(
        "{}",
        serde_json::json!({ "turnId": args.turn_id, "stop": cause.as_str(), "outcome": said })
    );
    Ok(())
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    use agent_worker::hosts::container::{ContainerConfig, ContainerHost};
    let mut config = ContainerConfig::new(args.api_key).map_err(|e| e.to_string())?;
    config.max_concurrent_turns = args.max_concurrent_turns;
    config.shutdown_grace = std::time::Duration::from_secs(args.shutdown_grace);
    let (handler, settings) = args.worker.handler().await?;
    let dynamodb = dynamodb_client(
        &aws_config(args.worker.region.as_deref()).await,
        settings.store_attempt_timeout,
    );
    let store = settings.store(dynamodb).map_err(|e| e.to_string())?;
    let log = Some(DynamoEventLog::new(store.clone()));
    let host = ContainerHost::new(
        handler,
        std::sync::Arc::new(store),
        log,
        &settings.model_id,
        config,
    );
    let addr = SocketAddr::from((args.host, args.port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    eprintln!(
        "agent-worker serving turns on http://{addr} (model {})",
        settings.model_id
    );
    agent_worker::hosts::container::serve(listener, host, shutdown_signal())
        .await
        .map_err(|e| format!("the server stopped: {e}"))
}

async fn agent_protocol_server(args: AgentProtocolArgs) -> Result<(), String> {
    let agent = args.engine.agent().await?;
    let mut config = ServerConfig::new(Workspace::new(&args.workspace));
    config.upload_limit = args.upload_limit;
    let handler = AgentTaskHandler::new(agent);
    // With a table, tasks live beside the sessions, so replicas share them.
    let (server, kept) = match &args.engine.table {
        Some(table) => {
            let store = args.engine.dynamo_store(table).await?;
            (
                AgentProtocolServer::with_store(handler, DynamoTaskStore::new(store), config),
                format!("table {table}"),
            )
        }
        None => (AgentProtocolServer::new(handler, config), "memory".to_owned()),
    };
    let addr = SocketAddr::from((args.host, args.port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!(
        "Agent Protocol v1 on http://{addr}/ap/v1/agent/tasks (OpenAPI at /openapi.json; model {}; tasks in {kept}; workspace {})",
        args.engine.model_id,
        args.workspace.display()
    );
    agent_protocol::serve(listener, server, shutdown_signal())
        .await
        .map_err(|e| format!("the server stopped: {e}"))
}

fn validate(args: ValidateArgs) -> Result<ExitCode, String> {
    use agent_worker::agents::{Catalog, Known, has_errors};
    let mut known = Known::with_builtins();
    known
        .tools
        .extend(examples::NAMES.iter().map(|n| (*n).to_owned()));
    known.tools.extend(args.tools);
    known.handlers.extend(args.handlers);
    known.hooks.extend(args.hooks);
    let (catalog, issues) = Catalog::load(&args.folder, &known).map_err(|e| e.to_string())?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&issues).map_err(|e| e.to_string())?
        );
    } else {
        for issue in &issues {
            println!("{issue}");
        }
        eprintln!(
            "{}: {} agents, {} prompts, {} errors, {} warnings",
            args.folder.display(),
            catalog.agents().count(),
            catalog.prompts().count(),
            issues
                .iter()
                .filter(|i| i.severity == agent_worker::agents::Severity::Error)
                .count(),
            issues
                .iter()
                .filter(|i| i.severity == agent_worker::agents::Severity::Warning)
                .count(),
        );
    }
    Ok(if has_errors(&issues) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

//! `agent-worker`: run a turn from the command line, or serve the Bedrock stand-in.
//!
//! ```text
//! agent-worker invoke --session S --text T [--tool current_time] [--endpoint-url URL]
//! agent-worker stand-in [--port 4010] [--script replies.json] [--fallback echo|refuse]
//! ```
//!
//! `invoke` prints every event of the turn as one JSON line on stdout and exits 0 when the
//! turn completed, 1 when it failed (with the details on stderr), 2 on bad usage.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use agent_worker::engine::tools::{Tool, examples};
use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::protocol::{Agent, AgentEvent, ImageRef, Prompt, Scope};
use agent_worker::session::MemoryStore;
use agent_worker::testing::{BedrockStandIn, Fallback, Reply};
use base64::Engine as _;
use clap::{Parser, Subcommand, ValueEnum};
use futures_util::StreamExt;
use tracing_subscriber::EnvFilter;

/// The model the command line uses when none is given.
const DEFAULT_MODEL_ID: &str = "us.anthropic.claude-sonnet-4-6";
/// The stand-in's port when none is given.
const DEFAULT_STAND_IN_PORT: u16 = 4010;

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
    /// Serves the wire-level Bedrock stand-in on 127.0.0.1.
    StandIn(StandInArgs),
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
    /// A picture to send (PNG, JPEG, GIF or WebP); repeatable.
    #[arg(long = "image")]
    images: Vec<PathBuf>,
    /// An example tool to enable (current_time, add, word_count); repeatable.
    #[arg(long = "tool")]
    tools: Vec<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FallbackArg {
    /// A small scripted assistant that calls the first tool offered, then reports its result.
    Echo,
    /// 400 ValidationException: the script ran out.
    Refuse,
}

#[derive(Debug, clap::Args)]
struct StandInArgs {
    /// The port on 127.0.0.1.
    #[arg(long, default_value_t = DEFAULT_STAND_IN_PORT)]
    port: u16,
    /// A JSON file holding a list of scripted replies, answered first.
    #[arg(long)]
    script: Option<PathBuf>,
    /// What to answer once the script has run out.
    #[arg(long, value_enum, default_value = "echo")]
    fallback: FallbackArg,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Invoke(args) => invoke(args).await,
            Command::StandIn(args) => stand_in(args).await.map(|()| ExitCode::SUCCESS),
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

async fn bedrock_client(endpoint_url: Option<&str>, region: Option<&str>) -> aws_sdk_bedrockruntime::Client {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(region) = region {
        loader = loader.region(aws_config::Region::new(region.to_owned()));
    }
    let shared = loader.load().await;
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
    let tools = tools(&args.tools)?;
    let client = bedrock_client(args.endpoint_url.as_deref(), args.region.as_deref()).await;
    let mut builder = Engine::builder()
        .model(BedrockModel::new(client, args.model_id))
        .store(MemoryStore::new())
        .tools(tools);
    if let Some(system) = args.system {
        builder = builder.system_prompt(system);
    }
    let engine = builder.build().map_err(|e| e.to_string())?;
    let mut scope = Scope::new(args.session);
    if let Some(turn_id) = args.turn_id {
        scope = scope.with_turn_id(turn_id);
    }
    let mut events = engine.invoke(scope, prompt);
    let mut code = ExitCode::from(1);
    while let Some(event) = events.next().await {
        let line = serde_json::to_string(&event).map_err(|e| format!("cannot print an event: {e}"))?;
        println!("{line}");
        match &event {
            AgentEvent::Completed { .. } => code = ExitCode::SUCCESS,
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
    Ok(code)
}

async fn stand_in(args: StandInArgs) -> Result<(), String> {
    let replies: Vec<Reply> = match &args.script {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("--script {}: {e}", path.display()))?;
            serde_json::from_str(&text)
                .map_err(|e| format!("--script {}: not a list of replies: {e}", path.display()))?
        }
        None => Vec::new(),
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let fallback = match args.fallback {
        FallbackArg::Echo => Fallback::Echo,
        FallbackArg::Refuse => Fallback::Refuse,
    };
    eprintln!(
        "Bedrock stand-in listening on http://{addr} ({} scripted replies)",
        replies.len()
    );
    BedrockStandIn::serve(listener, fallback, replies, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
    .map_err(|e| format!("the stand-in stopped: {e}"))
}

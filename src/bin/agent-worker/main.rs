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
//! agent-worker stop --account A [--person P] [--reason R] [--lift]   (the kill switch)
//! agent-worker serve --port 8080 --api-key KEY     (the container host)
//! agent-worker agent-protocol [--port 8000] [--workspace ./workspace] [--endpoint-url URL] [--tool T]
//! agent-worker validate examples/agents [--handler NAME] [--hook ID] [--json]
//! agent-worker openapi                              (the HTTP API's OpenAPI document)
//! ```
//!
//! Configured from the same environment as the Lambda function (`TABLE_NAME`, `MODEL_ID`,
//! `TOOLS`, ...); a flag overrides its variable. Endpoints come from the SDK's standard
//! `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS` and `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`.
//!
//! `invoke` prints every event of the turn as one JSON line on stdout and exits 0 when the
//! turn completed, 1 when it failed (with the details on stderr), 2 on bad usage.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

mod conversations;
mod eval;
mod failure;
mod queue;
mod record;
mod run;
mod servers;
mod session;
mod tools;
mod validate;

use conversations::ConversationsArgs;
use queue::{HandleArgs, PollArgs, SendArgs, SetupArgs};
use run::InvokeArgs;
use servers::{AgentProtocolArgs, ServeArgs};
use session::{CommandArgs, EventsArgs, HistoryArgs, SessionArgs, StopArgs};
use tools::{ReportArgs, ToolsArgs};
use validate::ValidateArgs;

/// The model the command line uses when none is given.
pub(crate) const DEFAULT_MODEL_ID: &str = "us.anthropic.claude-sonnet-4-6";

#[derive(Debug, Parser)]
#[command(
    name = "agent-worker",
    version,
    about = "A Rust agent runtime for AWS serverless"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
    /// Steers the session's running turn: the words reach the model at its next round boundary.
    Steer(CommandArgs),
    /// Queues a follow-up on the session's running turn: it runs once the turn is otherwise done.
    FollowUp(CommandArgs),
    /// Aborts the session's running turn; what was queued on it does not run.
    Abort(SessionArgs),
    /// Prints what a session is doing: idle or running, its running turn, the commands sent.
    State(SessionArgs),
    /// A person's conversations: list, get (as a chat UI shows one) or delete.
    Conversations(ConversationsArgs),
    /// Prints the tools a configuration yields (where each came from, its effect, whether it
    /// needs approval), or every problem with the configuration.
    Tools(ToolsArgs),
    /// Reports the event that settles a job (as the configuration's documents declare it): a
    /// call waiting for that job on any worker sees it.
    ReportEvent(ReportArgs),
    /// Serves turns over HTTP: the container host.
    Serve(Box<ServeArgs>),
    /// Serves the Bedrock engine over Agent Protocol v1 (a task is a session, a step a turn).
    AgentProtocol(AgentProtocolArgs),
    /// Checks a folder of Standard Agents definitions (agents/, prompts/); exits 1 on an error.
    Validate(ValidateArgs),
    /// Prints the HTTP API's OpenAPI 3.1 document, as `serve` answers it at `/openapi.json`
    /// (the repository keeps it in docs/openapi.json: `make openapi`).
    Openapi,
    /// Records one model call's raw answer as a fixture the Bedrock stand-in replays byte for
    /// byte (needs AWS credentials, or `--endpoint-url`).
    Record(record::RecordArgs),
    /// A small live evaluation on Bedrock: a tool turn, a typed result, an approval, a stopped
    /// turn; pass or fail and cost (needs AWS credentials, or `--endpoint-url`).
    Eval(eval::EvalArgs),
}

pub(crate) fn main() -> ExitCode {
    let cli = Cli::parse();
    // Warnings, but not the SDK's own probing of the instance metadata service for a region or
    // credentials off EC2 (two warnings before every command without AWS_REGION); RUST_LOG
    // shows everything again.
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,aws_config=error")),
        )
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
            | Command::Steer(_)
            | Command::FollowUp(_)
            | Command::Abort(_)
            | Command::State(_)
            | Command::Conversations(_)
            | Command::Tools(_)
            | Command::ReportEvent(_)
            | Command::Record(_)
            | Command::Eval(_)
    );
    let runtime = if one_thread {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Runtime::new()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => return failure::CliError::from(format!("cannot start the async runtime: {e}")).report(),
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Invoke(args) => run::invoke(args).await,
            Command::Setup(args) => queue::setup(args).await.map(|()| ExitCode::SUCCESS),
            Command::Send(args) => queue::send(args).await.map(|()| ExitCode::SUCCESS),
            Command::Poll(args) => queue::poll(args).await,
            Command::Handle(args) => queue::handle(args).await,
            Command::History(args) => session::history(args).await.map(|()| ExitCode::SUCCESS),
            Command::Events(args) => session::events(args).await.map(|()| ExitCode::SUCCESS),
            Command::Stop(args) => session::stop(args).await.map(|()| ExitCode::SUCCESS),
            Command::Steer(args) => session::command(args.steer(), &args.session).await,
            Command::FollowUp(args) => session::command(args.follow_up(), &args.session).await,
            Command::Abort(args) => session::command(args.abort(), &args).await,
            Command::State(args) => session::state(args).await,
            Command::Tools(args) => tools::tools(args).await.map(|()| ExitCode::SUCCESS),
            Command::ReportEvent(args) => tools::report_event(args).await.map(|()| ExitCode::SUCCESS),
            Command::Conversations(args) => conversations::conversations(args)
                .await
                .map(|()| ExitCode::SUCCESS),
            Command::Serve(args) => servers::serve(*args).await.map(|()| ExitCode::SUCCESS),
            Command::AgentProtocol(args) => servers::agent_protocol_server(args)
                .await
                .map(|()| ExitCode::SUCCESS),
            Command::Validate(args) => validate::validate(args),
            Command::Openapi => print_openapi(),
            Command::Record(args) => record::record(args).await.map(|()| ExitCode::SUCCESS),
            Command::Eval(args) => eval::eval(args).await,
        }
    });
    result.unwrap_or_else(failure::CliError::report)
}

/// `openapi`: the document, pretty-printed, on stdout.
fn print_openapi() -> Result<ExitCode, failure::CliError> {
    let document = agent_worker::hosts::container::openapi::document();
    let text = serde_json::to_string_pretty(&document)
        .map_err(|e| failure::CliError::from(format!("cannot write the document: {e}")))?;
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// The AWS SDK's configuration from the environment, in `region` when one is given, its clients
/// trusting the roots `AWS_TLS_ROOTS` names (`agent_worker::hosts::aws_loader`).
pub(crate) async fn aws_config(region: Option<&str>) -> Result<aws_config::SdkConfig, failure::CliError> {
    let loader = agent_worker::hosts::aws_loader::AwsLoader::from_lookup(|name| std::env::var(name).ok())?;
    let mut loader = loader.loader();
    if let Some(region) = region {
        loader = loader.region(aws_config::Region::new(region.to_owned()));
    }
    Ok(loader.load().await)
}

/// A Bedrock client on `shared`, at `endpoint_url` when one is given (the stand-in's).
pub(crate) fn bedrock_client(
    shared: &aws_config::SdkConfig,
    endpoint_url: Option<&str>,
) -> aws_sdk_bedrockruntime::Client {
    let mut config = aws_sdk_bedrockruntime::config::Builder::from(shared);
    if let Some(url) = endpoint_url {
        config = config.endpoint_url(url);
    }
    aws_sdk_bedrockruntime::Client::from_conf(config.build())
}

/// Resolves on Ctrl-C or SIGTERM (what ECS and systemd send): the poller finishes the batch in
/// hand, deletes what succeeded, and stops.
pub(crate) async fn shutdown_signal() {
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

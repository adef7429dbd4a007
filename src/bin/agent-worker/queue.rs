//! The queue family: `setup` (the table and a queue), `send`, `poll` and `handle`, all on the
//! worker the Lambda function would build.

use crate::failure::CliError;
use std::path::PathBuf;
use std::process::ExitCode;

use agent_worker::hosts::lambda::Requeue;
use agent_worker::hosts::sqs_poller::{PollOptions, poll_queue};
use agent_worker::hosts::worker::{Worker, WorkerBuilder, read_settings};
use agent_worker::hosts::{AgentTurnPayload, PayloadCommand, TurnQueue};
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker::session::{SessionId, TurnId};

use crate::{DEFAULT_MODEL_ID, aws_config, bedrock_client, shutdown_signal};
use agent_worker::protocol::chain;

/// The settings the worker commands share with the Lambda function.
#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {
    /// The DynamoDB table.
    #[arg(long, env = "TABLE_NAME")]
    pub(crate) table: Option<String>,
    /// The Bedrock model id or inference profile.
    #[arg(long, env = "MODEL_ID", default_value = DEFAULT_MODEL_ID)]
    pub(crate) model_id: String,
    /// Example tools to enable; repeatable or comma-separated.
    #[arg(long = "tool", env = "TOOLS", value_delimiter = ',')]
    pub(crate) tools: Vec<String>,
    /// A Bedrock-compatible endpoint, such as the stand-in's.
    #[arg(long, env = "AWS_ENDPOINT_URL_BEDROCK_RUNTIME")]
    pub(crate) endpoint_url: Option<String>,
    /// The AWS region.
    #[arg(long, env = "AWS_REGION")]
    pub(crate) region: Option<String>,
    /// Serve the Standard Agents definitions of this folder; each turn's `agent` names one.
    #[arg(long, env = "AGENTS_DIR")]
    pub(crate) agents_dir: Option<PathBuf>,
    /// With --agents-dir: the agent of a turn that names none.
    #[arg(long, env = "DEFAULT_AGENT")]
    pub(crate) default_agent: Option<String>,
    #[command(flatten)]
    pub(crate) config: crate::tools::ConfigArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SetupArgs {
    /// The table to create.
    #[arg(long, env = "TABLE_NAME", default_value = "agent-worker-sessions")]
    pub(crate) table: String,
    /// Also create a FIFO queue NAME.fifo with the dead-letter queue NAME-dlq.fifo.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// The queue's visibility timeout in seconds (at least 6 times the function's timeout).
    #[arg(long, default_value_t = 5400)]
    pub(crate) visibility_timeout: u32,
    /// Receives before a message goes to the dead-letter queue.
    #[arg(long, default_value_t = 5)]
    pub(crate) max_receive_count: u32,
    /// The AWS region.
    #[arg(long, env = "AWS_REGION")]
    pub(crate) region: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SendArgs {
    /// The queue.
    #[arg(long, env = "QUEUE_URL")]
    pub(crate) queue_url: String,
    /// The session (conversation) id.
    #[arg(long)]
    pub(crate) session: SessionId,
    /// The person's words.
    #[arg(long)]
    pub(crate) text: String,
    /// The turn's id (a new one when not given).
    #[arg(long)]
    pub(crate) turn_id: Option<TurnId>,
    /// The person.
    #[arg(long, default_value = "local-user")]
    pub(crate) user_id: String,
    /// The person's account.
    #[arg(long, default_value = "local-account")]
    pub(crate) account_id: String,
    /// The person's own credential for the product's API, for the turn's tools
    /// (`AGENT_WORKER_USER_TOKEN`; the value is never printed).
    #[arg(long, env = "AGENT_WORKER_USER_TOKEN", hide_env_values = true)]
    pub(crate) user_token: Option<String>,
    /// The JSON Schema the turn's typed result must match, as JSON or `@file`.
    #[arg(long)]
    pub(crate) result_schema: Option<String>,
    /// Deliver the text to the conversation's running turn (`steer`, `follow-up`), or `abort`
    /// it, instead of running a turn: sent in the conversation's control group, so that its
    /// running turn does not hold it back.
    #[arg(long, value_enum)]
    pub(crate) command: Option<CommandArg>,
    /// The AWS region.
    #[arg(long, env = "AWS_REGION")]
    pub(crate) region: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PollArgs {
    /// The queue.
    #[arg(long, env = "QUEUE_URL")]
    pub(crate) queue_url: String,
    /// Stop once the queue is empty.
    #[arg(long)]
    pub(crate) until_empty: bool,
    #[command(flatten)]
    pub(crate) worker: WorkerArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct HandleArgs {
    /// An SQS event JSON file, as Lambda delivers one.
    pub(crate) file: PathBuf,
    #[command(flatten)]
    pub(crate) worker: WorkerArgs,
}

impl WorkerArgs {
    /// The worker these arguments describe, built as the Lambda function builds it
    /// ([`WorkerBuilder`]): its settings from the flags first, then Secrets Manager and the
    /// environment; its configuration from `--config` and the tool flags.
    pub(crate) async fn worker(&self) -> Result<Worker, CliError> {
        let tools = self.tools.join(",");
        let agents_dir = self.agents_dir.as_ref().map(|d| d.display().to_string());
        let aws = aws_config(self.region.as_deref()).await?;
        let settings = read_settings(&aws, |name| match name {
            "TABLE_NAME" => self.table.clone(),
            "MODEL_ID" => Some(self.model_id.clone()),
            "TOOLS" => Some(tools.clone()),
            "AGENTS_DIR" => agents_dir.clone(),
            "DEFAULT_AGENT" => self.default_agent.clone(),
            other => std::env::var(other).ok(),
        })
        .await?;
        let builder = WorkerBuilder::new(&aws, settings)?;
        let configured = self.config.configured(|| builder.loader()).await?;
        let bedrock = bedrock_client(&aws, self.endpoint_url.as_deref());
        Ok(builder.build(bedrock, &configured)?)
    }
}

pub(crate) async fn setup(args: SetupArgs) -> Result<(), CliError> {
    let shared = aws_config(args.region.as_deref()).await?;
    let store = DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&shared),
        DynamoConfig::new(&args.table).map_err(|e| CliError::usage(format!("--table: {}", chain(&e))))?,
    );
    store.create_table().await.map_err(|e| chain(&e))?;
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

/// A `send --command`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CommandArg {
    /// At the running turn's next round boundary.
    Steer,
    /// Once the running turn is otherwise done.
    FollowUp,
    /// Stop the running turn.
    Abort,
}

pub(crate) async fn send(args: SendArgs) -> Result<(), CliError> {
    let person = agent_worker::session::Owner::new(args.user_id, args.account_id);
    let turn_id = args.turn_id.unwrap_or_else(TurnId::random);
    let mut payload = AgentTurnPayload::new(turn_id, args.session, &person, args.text);
    payload.user_token = args.user_token.map(agent_worker::protocol::UserToken::new);
    payload.result_schema = args
        .result_schema
        .as_deref()
        .map(crate::run::result_schema)
        .transpose()?;
    payload.command = args.command.map(|command| match command {
        CommandArg::Steer => PayloadCommand::Steer,
        CommandArg::FollowUp => PayloadCommand::FollowUp,
        CommandArg::Abort => PayloadCommand::Abort,
    });
    let payload = payload
        .checked()
        .map_err(|e| CliError::usage(format!("the turn cannot be sent: {e}")))?;
    let sqs = aws_sdk_sqs::Client::new(&aws_config(args.region.as_deref()).await?);
    let sent = TurnQueue::new(sqs, &args.queue_url)
        .send(&payload)
        .await
        .map_err(|e| chain(&e))?;
    println!(
        "{}",
        serde_json::json!({ "messageId": sent.message_id, "turnId": payload.turn_id, "session": payload.conversation_id })
    );
    Ok(())
}

pub(crate) async fn poll(args: PollArgs) -> Result<ExitCode, CliError> {
    let worker = args.worker.worker().await?;
    let sqs = aws_sdk_sqs::Client::new(&worker.aws);
    let handler = worker
        .handler
        .requeue(Requeue::new(sqs.clone(), worker.settings.redrive));
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
        .map_err(|e| chain(&e))?;
    eprintln!(
        "polled {}: {} received, {} handled and deleted, {} left to the queue",
        args.queue_url, stats.received, stats.deleted, stats.failed
    );
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn handle(args: HandleArgs) -> Result<ExitCode, CliError> {
    let text = std::fs::read_to_string(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let event =
        serde_json::from_str(&text).map_err(|e| format!("{}: not an SQS event: {e}", args.file.display()))?;
    let worker = args.worker.worker().await?;
    let deadline = std::time::SystemTime::now() + worker.settings.engine.turn_deadline;
    let response = worker
        .handler
        .handle_batch(event, Some(deadline))
        .await
        .map_err(|e| chain(&e))?;
    println!("{}", serde_json::to_string(&response).map_err(|e| chain(&e))?);
    Ok(ExitCode::SUCCESS)
}

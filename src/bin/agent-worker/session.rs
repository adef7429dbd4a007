//! What the table holds: `history`, `events` (a turn's log from a cursor), `stop`, and the
//! session control plane (`steer`, `follow-up`, `abort`, `state`).

use crate::failure::CliError;
use agent_worker::session::{HistoryStore as _, SignalStore as _};
use std::process::ExitCode;
use std::sync::Arc;

use agent_worker::engine::StoreControl;
use agent_worker::protocol::control::answer;
use agent_worker::protocol::{SessionCommand, SessionControl};
use agent_worker::session::{BlockTarget, DynamoConfig, DynamoStore, Stop, StopCause, StopOutcome};
use agent_worker::session::{SessionId, TurnId};
use agent_worker::sinks::DynamoEventLog;

use crate::aws_config;
use agent_worker::protocol::chain;

#[derive(Debug, clap::Args)]
pub(crate) struct StopArgs {
    /// The session.
    #[arg(long, required_unless_present_any = ["account", "person"], requires = "turn_id")]
    pub(crate) session: Option<SessionId>,
    /// The turn.
    #[arg(long, requires = "session")]
    pub(crate) turn_id: Option<TurnId>,
    /// The turn was replaced by the person's next message, rather than stopped by them.
    #[arg(long, requires = "session")]
    pub(crate) superseded: bool,
    /// Blocks every turn of this account (of this person's, with `--person`): its running
    /// turns stop and its new ones are refused, on every worker, until `--lift`.
    #[arg(long, conflicts_with = "session")]
    pub(crate) account: Option<String>,
    /// Blocks every turn of this person (of `--account`'s, when given).
    #[arg(long, conflicts_with = "session")]
    pub(crate) person: Option<String>,
    /// Lifts the block on `--account` or `--person` instead.
    #[arg(long, conflicts_with = "session")]
    pub(crate) lift: bool,
    /// Why, kept with the block.
    #[arg(long, conflicts_with = "session")]
    pub(crate) reason: Option<String>,
    #[command(flatten)]
    pub(crate) table: TableArgs,
}

/// A table to read.
#[derive(Debug, clap::Args)]
pub(crate) struct TableArgs {
    /// The table.
    #[arg(long, env = "TABLE_NAME")]
    pub(crate) table: String,
    /// The AWS region.
    #[arg(long, env = "AWS_REGION")]
    pub(crate) region: Option<String>,
}

impl TableArgs {
    pub(crate) async fn store(&self) -> Result<DynamoStore, CliError> {
        Ok(DynamoStore::new(
            aws_sdk_dynamodb::Client::new(&aws_config(self.region.as_deref()).await?),
            DynamoConfig::new(&self.table).map_err(|e| CliError::usage(format!("--table: {}", chain(&e))))?,
        ))
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct HistoryArgs {
    /// The session.
    #[arg(long)]
    pub(crate) session: SessionId,
    /// The S3 bucket of the conversation's files: content kept there (a long result, a long
    /// pasted text, a picture) is printed whole instead of as its reference.
    #[arg(long, env = "FILES_BUCKET", conflicts_with = "files_dir")]
    pub(crate) files_bucket: Option<String>,
    /// The key prefix of the files in that bucket.
    #[arg(long, env = "FILES_PREFIX", default_value = agent_worker::hosts::settings::DEFAULT_FILES_PREFIX)]
    pub(crate) files_prefix: String,
    /// Instead of a bucket: the local folder of the conversation's files.
    #[arg(long, env = "FILES_DIR")]
    pub(crate) files_dir: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) table: TableArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct EventsArgs {
    /// The session.
    #[arg(long)]
    pub(crate) session: SessionId,
    /// The turn.
    #[arg(long)]
    pub(crate) turn_id: TurnId,
    /// Only events after this position.
    #[arg(long)]
    pub(crate) after: Option<u64>,
    #[command(flatten)]
    pub(crate) table: TableArgs,
}

pub(crate) async fn history(args: HistoryArgs) -> Result<(), CliError> {
    use agent_worker::engine::attachments::{FileArea, LocalFileArea, restore_kept};
    let store = args.table.store().await?;
    let mut messages = store.load_history(&args.session).await.map_err(|e| chain(&e))?;
    let area: Option<Arc<dyn FileArea>> = match (&args.files_bucket, &args.files_dir) {
        (Some(bucket), _) => {
            let s3 = aws_sdk_s3::Client::new(&aws_config(args.table.region.as_deref()).await?);
            Some(Arc::new(agent_worker::hosts::S3FileArea::new(
                s3,
                bucket,
                &args.files_prefix,
            )))
        }
        (None, Some(dir)) => Some(Arc::new(LocalFileArea::new(dir))),
        (None, None) => None,
    };
    if let Some(area) = area {
        restore_kept(area.as_ref(), &args.session, &mut messages)
            .await
            .map_err(|e| CliError::from(format!("the kept content cannot be read: {e}")))?;
    }
    for message in messages {
        println!("{}", serde_json::to_string(&message).map_err(|e| chain(&e))?);
    }
    Ok(())
}

pub(crate) async fn events(args: EventsArgs) -> Result<(), CliError> {
    let log = DynamoEventLog::new(args.table.store().await?);
    for logged in log
        .read(&args.session, &args.turn_id, args.after)
        .await
        .map_err(|e| chain(&e))?
    {
        println!(
            "{}",
            serde_json::json!({ "seq": logged.seq, "event": logged.event })
        );
    }
    Ok(())
}

/// A session of a table.
#[derive(Debug, clap::Args)]
pub(crate) struct SessionArgs {
    /// The session.
    #[arg(long)]
    pub(crate) session: SessionId,
    #[command(flatten)]
    pub(crate) table: TableArgs,
}

impl SessionArgs {
    pub(crate) fn abort(&self) -> SessionCommand {
        SessionCommand::Abort
    }
}

/// A command with the person's words.
#[derive(Debug, clap::Args)]
pub(crate) struct CommandArgs {
    #[command(flatten)]
    pub(crate) session: SessionArgs,
    /// The person's words.
    #[arg(long)]
    pub(crate) text: String,
}

impl CommandArgs {
    pub(crate) fn steer(&self) -> SessionCommand {
        SessionCommand::Steer {
            prompt: self.text.clone(),
        }
    }

    pub(crate) fn follow_up(&self) -> SessionCommand {
        SessionCommand::FollowUp {
            prompt: self.text.clone(),
        }
    }
}

/// Sends `command` to the session's running turn and prints the answer; exits 1 when it was
/// refused.
pub(crate) async fn command(command: SessionCommand, to: &SessionArgs) -> Result<ExitCode, CliError> {
    let control = StoreControl::new(Arc::new(to.table.store().await?));
    let result = control.dispatch(&to.session, command).await;
    println!("{}", answer(&result));
    Ok(if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Prints what the session is doing.
pub(crate) async fn state(args: SessionArgs) -> Result<ExitCode, CliError> {
    let control = StoreControl::new(Arc::new(args.table.store().await?));
    let state = control
        .state(&args.session)
        .await
        .map_err(|refused| refused.to_string())?;
    println!("{}", serde_json::to_string(&state).map_err(|e| chain(&e))?);
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn stop(args: StopArgs) -> Result<(), CliError> {
    let store = args.table.store().await?;
    let target = match (args.account.clone(), args.person.clone()) {
        (account, Some(user)) => Some(BlockTarget::Person { account, user }),
        (Some(account), None) => Some(BlockTarget::Account(account)),
        (None, None) => None,
    };
    if let Some(target) = target {
        let said = if args.lift {
            match store.lift(&target).await.map_err(|e| chain(&e))? {
                true => "lifted: its new turns run",
                false => "there was no block; nothing changed",
            }
        } else {
            store
                .block(&target, args.reason.as_deref())
                .await
                .map_err(|e| chain(&e))?;
            "blocked: its running turns stop and its new ones are refused, on every worker within seconds"
        };
        println!(
            "{}",
            serde_json::json!({ "target": target.describe(), "outcome": said })
        );
        return Ok(());
    }
    let (Some(session), Some(turn_id)) = (args.session, args.turn_id) else {
        return Err(CliError::usage(
            "give --session and --turn-id, or --account or --person",
        ));
    };
    let cause = if args.superseded {
        StopCause::Superseded
    } else {
        StopCause::UserStop
    };
    let outcome = store
        .request_stop(&session, &turn_id, Stop::now(cause))
        .await
        .map_err(|e| chain(&e))?;
    let said = match outcome {
        StopOutcome::Recorded => "recorded: the turn stops when it next looks, or before it starts",
        StopOutcome::AlreadyEnded => "the turn had already ended; nothing changed",
    };
    println!(
        "{}",
        serde_json::json!({ "turnId": turn_id, "stop": cause.as_str(), "outcome": said })
    );
    Ok(())
}

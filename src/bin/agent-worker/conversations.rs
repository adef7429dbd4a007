//! `conversations list|get|delete`: a person's conversations, as the container's routes answer
//! them, printed as JSON.

use crate::failure::CliError;
use std::sync::Arc;

use agent_worker::conversations::Conversations;
use agent_worker::engine::FileArea;
use agent_worker::engine::tools::examples;
use agent_worker::hosts::S3FileArea;
use agent_worker::session::Owner;

use crate::aws_config;
use crate::session::TableArgs;
use agent_worker::protocol::chain;

#[derive(Debug, clap::Args)]
pub(crate) struct ConversationsArgs {
    #[command(subcommand)]
    pub(crate) action: Action,
    /// The person.
    #[arg(long, global = true)]
    pub(crate) user: Option<String>,
    /// Their account.
    #[arg(long, global = true)]
    pub(crate) account: Option<String>,
    /// The example tools the turns ran with: their declarations say whose arguments are shown.
    #[arg(long, env = "TOOLS", value_delimiter = ',', global = true)]
    pub(crate) tools: Vec<String>,
    /// The S3 bucket of attached files, whose files a deleted conversation takes with it.
    #[arg(long, env = "FILES_BUCKET", global = true)]
    pub(crate) files_bucket: Option<String>,
    /// The key prefix of attached files in that bucket.
    #[arg(long, env = "FILES_PREFIX", default_value = agent_worker::hosts::settings::DEFAULT_FILES_PREFIX, global = true)]
    pub(crate) files_prefix: String,
    #[command(flatten)]
    pub(crate) table: TableArgs,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Action {
    /// Lists the person's conversations, most recent first.
    List {
        /// How many (1–100; 20 when not given).
        #[arg(long)]
        limit: Option<usize>,
        /// Where the page starts (the `cursor` of the one before).
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Prints one conversation as a chat UI shows it.
    Get {
        /// The conversation.
        id: String,
        /// How many messages (1–100; 20 when not given).
        #[arg(long)]
        limit: Option<usize>,
        /// Only messages before this position (the `older` of the page after).
        #[arg(long)]
        before: Option<u64>,
    },
    /// Deletes one conversation: every item of it, and its files.
    Delete {
        /// The conversation.
        id: String,
    },
}

pub(crate) async fn conversations(args: ConversationsArgs) -> Result<(), CliError> {
    let owner = match (args.user.as_deref(), args.account.as_deref()) {
        (Some(user), Some(account)) if !user.trim().is_empty() && !account.trim().is_empty() => {
            Owner::new(user, account)
        }
        _ => {
            return Err(CliError::usage(
                "--user and --account are required: whose conversations?",
            ));
        }
    };
    let tools: Vec<_> = args.tools.iter().filter_map(|t| examples::by_name(t)).collect();
    let mut conversations =
        Conversations::new(args.table.store().await?).tools(tools.iter().map(|t| t.spec()));
    if let Some(bucket) = &args.files_bucket {
        let s3 = aws_sdk_s3::Client::new(&aws_config(args.table.region.as_deref()).await?);
        let area: Arc<dyn FileArea> = Arc::new(S3FileArea::new(s3, bucket, &args.files_prefix));
        conversations = conversations.file_area(area);
    }
    let printed = match args.action {
        Action::List { limit, cursor } => conversations
            .list(&owner, limit, cursor.as_deref())
            .await
            .map(|page| serde_json::to_string_pretty(&page)),
        Action::Get { id, limit, before } => conversations
            .get(&owner, &id, limit, before)
            .await
            .map(|view| serde_json::to_string_pretty(&view)),
        Action::Delete { id } => conversations
            .delete(&owner, &id)
            .await
            .map(|deleted| serde_json::to_string_pretty(&deleted)),
    };
    println!("{}", printed.map_err(|e| chain(&e))?.map_err(|e| chain(&e))?);
    Ok(())
}

//! The configuration of a product's own tools, policy and persona on the command line
//! (`--config`, `--openapi`), and `tools`: what a configuration yields, before it is deployed.

use crate::failure::CliError;
use std::path::PathBuf;

use agent_worker::hosts::config::{
    ActAsConfig, AudienceName, ConfigFile, Configured, Loader, OpenApiSource, TokenHeader,
};
use agent_worker::hosts::mcp::McpServer;
use agent_worker::hosts::worker::config_loader;
use agent_worker::protocol::chain;

#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ConfigArgs {
    /// The configuration (YAML or JSON) of tools, policy and persona: a file, `s3://bucket/key`
    /// or `ssm:<parameter name>`.
    #[arg(long, env = "AGENT_WORKER_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// An OpenAPI document (a file or an https:// URL) whose exposed operations become tools,
    /// besides the configuration's; with --base-url.
    #[arg(long, requires = "base_url")]
    pub(crate) openapi: Option<String>,
    /// Where --openapi's calls go.
    #[arg(long, requires = "openapi")]
    pub(crate) base_url: Option<String>,
    /// With --openapi: the header the person's userToken is sent in (as `Bearer <token>`).
    #[arg(long, default_value = "Authorization", requires = "openapi")]
    pub(crate) token_header: String,
    /// An MCP server (Streamable HTTP) whose tools become tools named `NAME_<tool>`, besides
    /// the configuration's; repeatable.
    #[arg(long = "mcp", value_name = "NAME=URL")]
    pub(crate) mcp: Vec<String>,
}

impl ConfigArgs {
    /// What these arguments configure: the file's, and the document --openapi adds.
    /// `waiter` hears the events that settle jobs (the table's, where there is one).
    pub(crate) async fn configured(&self, loader: impl FnOnce() -> Loader) -> Result<Configured, CliError> {
        let no_config = self.config.as_ref().is_none_or(|p| p.as_os_str().is_empty());
        if no_config && self.openapi.is_none() && self.mcp.is_empty() {
            // Nothing configured: no client is made.
            return Ok(Configured::default());
        }
        let loader = loader();
        let (mut file, base) = match self.config.as_ref().filter(|p| !p.as_os_str().is_empty()) {
            Some(path) => ConfigFile::locate(&path.to_string_lossy(), &loader)
                .await
                .map_err(|e| chain(&e))?,
            None => (ConfigFile::default(), PathBuf::from(".")),
        };
        if let (Some(document), Some(base_url)) = (&self.openapi, &self.base_url) {
            file.openapi.push(OpenApiSource {
                document: document.clone(),
                base_url: base_url.clone(),
                audience: AudienceName::Agents,
                act_as: ActAsConfig {
                    token: Some(TokenHeader {
                        header: self.token_header.clone(),
                        prefix: "Bearer ".into(),
                    }),
                    ..ActAsConfig::default()
                },
                events: None,
            });
        }
        for given in &self.mcp {
            let (name, url) = given
                .split_once('=')
                .ok_or_else(|| CliError::usage(format!("--mcp {given}: give NAME=URL")))?;
            file.mcp.push(McpServer {
                name: name.to_owned(),
                url: Some(url.to_owned()),
                command: None,
                args: Vec::new(),
                headers: Default::default(),
                person_token: None,
                timeout_ms: None,
                allow: None,
                tools: Default::default(),
            });
        }
        Configured::from_file(&file, &base, &loader)
            .await
            .map_err(|problems| {
                let from = self
                    .config
                    .as_ref()
                    .map_or_else(|| "the command line".to_owned(), |p| p.display().to_string());
                CliError::usage(format!("{from} cannot be used:\n- {}", problems.join("\n- ")))
            })
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    /// The event, as the configuration's documents declare it (`report:ready`).
    #[arg(long)]
    pub(crate) event: String,
    /// Its payload (JSON), carrying the job's id in the declared correlation field.
    #[arg(long)]
    pub(crate) payload: String,
    /// The conversation whose call started the job (the call carried it to the product in the
    /// `x-agent-conversation-id` header).
    #[arg(long)]
    pub(crate) conversation: agent_worker::session::SessionId,
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    #[command(flatten)]
    pub(crate) table: crate::session::TableArgs,
}

/// Reports the event that settles a job: a call waiting for it, on any worker, sees it.
pub(crate) async fn report_event(args: ReportArgs) -> Result<(), CliError> {
    let payload: serde_json::Value = serde_json::from_str(&args.payload)
        .map_err(|e| CliError::usage(format!("--payload is not JSON: {e}")))?;
    let aws = crate::aws_config(args.table.region.as_deref()).await?;
    let configured = args.config.configured(|| config_loader(&aws, None)).await?;
    let jobs = agent_worker::hosts::jobs::JobReports::new(
        configured.events,
        agent_worker::session::dynamo::DynamoJobEvents::new(args.table.store().await?),
    );
    let job = jobs
        .report(&args.conversation, &args.event, &payload)
        .await
        .map_err(|e| chain(&e))?;
    println!(
        "{}",
        serde_json::json!({ "job": job, "event": args.event, "conversationId": args.conversation })
    );
    Ok(())
}

#[derive(Debug, clap::Args)]
pub(crate) struct ToolsArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    /// The AWS region (for s3:// documents).
    #[arg(long, env = "AWS_REGION")]
    pub(crate) region: Option<String>,
}

/// Prints every tool the configuration yields, one JSON line each: its name, where it came
/// from, its effect and whether it needs approval. A configuration that cannot be used prints
/// every problem and fails.
pub(crate) async fn tools(args: ToolsArgs) -> Result<(), CliError> {
    let aws = crate::aws_config(args.region.as_deref()).await?;
    let configured = args.config.configured(|| config_loader(&aws, None)).await?;
    for origin in &configured.origins {
        println!("{}", serde_json::to_string(origin).map_err(|e| chain(&e))?);
    }
    for skill in &configured.skills {
        let line = serde_json::json!({ "skill": skill.name, "description": skill.description });
        println!("{line}");
    }
    if let Some(prompt) = configured.system_prompt_over(None) {
        eprintln!("system prompt: {} characters", prompt.chars().count());
    }
    if !configured.reads.is_empty() {
        // An SSM parameter is granted by its ARN: arn:aws:ssm:REGION:ACCOUNT:parameter/NAME.
        eprintln!(
            "reads at start-up (the template's AgentConfigReads): {}",
            configured.reads.join(",")
        );
    }
    Ok(())
}

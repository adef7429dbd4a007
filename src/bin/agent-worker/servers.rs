//! The long-running hosts: `serve` (the container host) and `agent-protocol` (Agent Protocol v1).

use crate::failure::CliError;
use std::net::SocketAddr;
use std::path::PathBuf;

use agent_worker::hosts::agent_protocol::{
    self, AgentProtocolServer, AgentTaskHandler, DynamoTaskStore, ServerConfig, Workspace,
};

use agent_worker::hosts::http_serve::{self, ConnectionLimits};

use crate::queue::WorkerArgs;
use crate::run::EngineArgs;
use crate::{aws_config, shutdown_signal};
use agent_worker::protocol::chain;

/// The limits each connection of a server is served within.
#[derive(Debug, clap::Args)]
pub(crate) struct ConnectionArgs {
    /// Milliseconds a connection may take to send a request head.
    #[arg(long, env = "HTTP_HEADER_TIMEOUT_MS", default_value_t = millis(http_serve::DEFAULT_HEADER_READ_TIMEOUT))]
    pub(crate) header_timeout_ms: u64,
    /// Milliseconds a request body may take to arrive whole.
    #[arg(long, env = "HTTP_BODY_TIMEOUT_MS", default_value_t = millis(http_serve::DEFAULT_BODY_READ_TIMEOUT))]
    pub(crate) body_timeout_ms: u64,
    /// Milliseconds an answer may wait for its client to take a byte.
    #[arg(long, env = "HTTP_SEND_TIMEOUT_MS", default_value_t = millis(http_serve::DEFAULT_SEND_TIMEOUT))]
    pub(crate) send_timeout_ms: u64,
    /// The most connections open at once.
    #[arg(long, env = "HTTP_MAX_CONNECTIONS", default_value_t = http_serve::DEFAULT_MAX_CONNECTIONS)]
    pub(crate) max_connections: usize,
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl ConnectionArgs {
    /// The limits, each at least a millisecond and one connection.
    pub(crate) fn limits(&self) -> ConnectionLimits {
        let ms = |n: u64| std::time::Duration::from_millis(n.max(1));
        ConnectionLimits {
            header_read_timeout: ms(self.header_timeout_ms),
            body_read_timeout: ms(self.body_timeout_ms),
            send_timeout: ms(self.send_timeout_ms),
            max_connections: self.max_connections.max(1),
            ..ConnectionLimits::default()
        }
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// The port (8080; with --agentcore-mcp, 8000).
    #[arg(long)]
    pub(crate) port: Option<u16>,
    /// AgentCore Runtime's MCP mode: the port its MCP contract names (8000), where the MCP
    /// server answers at `/mcp` (it answers there on any port). (`--mcp` names MCP servers
    /// whose tools the agent uses.)
    #[arg(long)]
    pub(crate) agentcore_mcp: bool,
    /// The address to listen on (0.0.0.0; with --console, 127.0.0.1).
    #[arg(long)]
    pub(crate) host: Option<std::net::IpAddr>,
    /// Serve the console page at `/`, for trying the agent in a browser: opened with a token
    /// made at this start and printed as a URL.
    #[arg(long)]
    pub(crate) console: bool,
    /// The person the console acts for.
    #[arg(long, default_value = "console-user", requires = "console")]
    pub(crate) console_user: String,
    /// Their account.
    #[arg(long, default_value = "console", requires = "console")]
    pub(crate) console_account: String,
    /// How the API knows the person: `api-key` (the product's backend holds the key and vouches
    /// for the ids it sends), `jwt` (each request carries the person's own token) or `iam`
    /// (behind Amazon Bedrock AgentCore Runtime with SigV4 callers: the user the runtime passes
    /// in X-Amzn-Bedrock-AgentCore-Runtime-User-Id; only where the runtime alone reaches the port).
    #[arg(long, env = "AUTH", value_enum, default_value = "api-key")]
    pub(crate) auth: AuthArg,
    /// With --auth iam: the account of every person the runtime names.
    #[arg(long, env = "AGENTCORE_ACCOUNT", default_value = agent_worker::hosts::container::DEFAULT_AGENTCORE_ACCOUNT)]
    pub(crate) agentcore_account: String,
    /// With --auth api-key (required then): the key callers send in x-api-key.
    #[arg(long, env = "AGENT_WORKER_API_KEY", hide_env_values = true)]
    pub(crate) api_key: Option<String>,
    #[command(flatten)]
    pub(crate) jwt: JwtArgs,
    /// The most turns that run at once.
    #[arg(long, default_value_t = agent_worker::hosts::container::DEFAULT_MAX_CONCURRENT_TURNS)]
    pub(crate) max_concurrent_turns: usize,
    /// Seconds running turns may go on after SIGTERM before they are stopped.
    #[arg(long, default_value_t = 30)]
    pub(crate) shutdown_grace: u64,
    /// Send each accepted turn to this queue instead of running it here (the serverless
    /// deployment's turns queue: the worker that reads it runs the turn).
    #[arg(long, env = "TURNS_QUEUE_URL")]
    pub(crate) queue_url: Option<String>,
    /// The web origins whose pages may call the API (comma-separated `https://host[:port]`):
    /// their preflights are answered and the answers name them. None by default.
    #[arg(long, env = "ALLOWED_ORIGINS")]
    pub(crate) allowed_origins: Option<String>,
    /// The most event streams open at once (past it, 503).
    #[arg(long, env = "MAX_EVENT_STREAMS", default_value_t = agent_worker::hosts::container::DEFAULT_MAX_EVENT_STREAMS)]
    pub(crate) max_event_streams: usize,
    /// The most event streams one person holds open at once (past it, 429).
    #[arg(long, env = "MAX_EVENT_STREAMS_PER_PERSON", default_value_t = agent_worker::hosts::container::DEFAULT_MAX_EVENT_STREAMS_PER_PERSON)]
    pub(crate) max_event_streams_per_person: usize,
    /// The most event streams the people of one account hold open at once (past it, 429).
    #[arg(long, env = "MAX_EVENT_STREAMS_PER_ACCOUNT", default_value_t = agent_worker::hosts::container::DEFAULT_MAX_EVENT_STREAMS_PER_ACCOUNT)]
    pub(crate) max_event_streams_per_account: usize,
    #[command(flatten)]
    pub(crate) connections: ConnectionArgs,
    #[command(flatten)]
    pub(crate) worker: WorkerArgs,
}

/// How `serve` knows the person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum AuthArg {
    /// The product's backend vouches for the ids it sends, with the API key.
    ApiKey,
    /// Each request carries its person's own JWT, verified against the issuer's keys.
    Jwt,
    /// AgentCore Runtime verified the caller's signature and names the person.
    Iam,
}

/// The tokens `--auth jwt` takes.
#[derive(Debug, clap::Args)]
pub(crate) struct JwtArgs {
    /// The tokens' issuer (`iss`), such as a Cognito user pool's
    /// `https://cognito-idp.<region>.amazonaws.com/<pool id>`.
    #[arg(long, env = "JWT_ISSUER")]
    pub(crate) jwt_issuer: Option<String>,
    /// Their audience (`aud`): a Cognito app client's id.
    #[arg(long, env = "JWT_AUDIENCE")]
    pub(crate) jwt_audience: Option<String>,
    /// The issuer's key set (default: the `jwks_uri` of the issuer's OIDC discovery document,
    /// `<issuer>/.well-known/openid-configuration`; `<issuer>/.well-known/jwks.json` without one).
    #[arg(long, env = "JWKS_URL")]
    pub(crate) jwks_url: Option<String>,
    /// The longest the issuer's keys are kept before they are read again, in seconds (shorter
    /// when the key set's `Cache-Control: max-age` says so).
    #[arg(long, env = "JWKS_MAX_AGE_SECONDS", default_value_t = agent_worker::hosts::jwt::DEFAULT_MAX_AGE.as_secs())]
    pub(crate) jwks_max_age_seconds: u64,
    /// The claim that names the person.
    #[arg(long, env = "JWT_USER_CLAIM", default_value = agent_worker::hosts::jwt::DEFAULT_USER_CLAIM)]
    pub(crate) jwt_user_claim: String,
    /// The claim that names the person's account.
    #[arg(long, env = "JWT_ACCOUNT_CLAIM", conflicts_with = "jwt_account")]
    pub(crate) jwt_account_claim: Option<String>,
    /// One account for every person, instead of a claim.
    #[arg(long, env = "JWT_ACCOUNT")]
    pub(crate) jwt_account: Option<String>,
    /// The product's backend's client ids (comma-separated): a token whose `client_id` (or
    /// `azp`) is one of them is the backend's, not a person's.
    #[arg(long, env = "JWT_BACKEND_CLIENT_IDS")]
    pub(crate) jwt_backend_client_ids: Option<String>,
    /// The scope that makes a token the backend's, not a person's.
    #[arg(long, env = "JWT_BACKEND_SCOPE")]
    pub(crate) jwt_backend_scope: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct AgentProtocolArgs {
    /// The port.
    #[arg(long, default_value_t = agent_protocol::DEFAULT_PORT)]
    pub(crate) port: u16,
    /// The address to listen on. Any but loopback needs --api-key: the protocol knows no
    /// people, so whoever reaches the server reaches every task.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: std::net::IpAddr,
    /// The key every operation's request carries (x-api-key, or Authorization: Bearer); at
    /// least 16 characters.
    #[arg(long, env = "AGENT_WORKER_API_KEY", hide_env_values = true)]
    pub(crate) api_key: Option<String>,
    /// Where artifact files live.
    #[arg(long, default_value = agent_protocol::DEFAULT_WORKSPACE)]
    pub(crate) workspace: PathBuf,
    /// The largest artifact upload, in bytes.
    #[arg(long, default_value_t = agent_protocol::DEFAULT_UPLOAD_LIMIT)]
    pub(crate) upload_limit: usize,
    #[command(flatten)]
    pub(crate) connections: ConnectionArgs,
    #[command(flatten)]
    pub(crate) engine: EngineArgs,
}

pub(crate) async fn serve(args: ServeArgs) -> Result<(), CliError> {
    use agent_worker::hosts::container::ContainerConfig;
    let jwt = &args.jwt;
    let mut config = ContainerConfig::from_lookup(
        |name| match name {
            "AUTH" => Some(match args.auth {
                AuthArg::ApiKey => "api-key".to_owned(),
                AuthArg::Jwt => "jwt".to_owned(),
                // Signed callers; the person the runtime names, below.
                AuthArg::Iam => "iam".to_owned(),
            }),
            "AGENT_WORKER_API_KEY" => args.api_key.clone(),
            "JWT_ISSUER" => jwt.jwt_issuer.clone(),
            "JWT_AUDIENCE" => jwt.jwt_audience.clone(),
            "JWKS_URL" => jwt.jwks_url.clone(),
            "JWKS_MAX_AGE_SECONDS" => Some(jwt.jwks_max_age_seconds.to_string()),
            "JWT_USER_CLAIM" => Some(jwt.jwt_user_claim.clone()),
            "JWT_ACCOUNT_CLAIM" => jwt.jwt_account_claim.clone(),
            "JWT_ACCOUNT" => jwt.jwt_account.clone(),
            "JWT_BACKEND_CLIENT_IDS" => jwt.jwt_backend_client_ids.clone(),
            "JWT_BACKEND_SCOPE" => jwt.jwt_backend_scope.clone(),
            "ALLOWED_ORIGINS" => args.allowed_origins.clone(),
            "AGENT_NAME"
            | "AGENT_DESCRIPTION"
            | "PUBLIC_URL"
            | "AGENT_CARD_SIGNING_KEY"
            | "AGENT_CARD_KEY_ID" => std::env::var(name).ok(),
            _ => None,
        },
        reqwest::Client::new(),
    )?;
    if args.auth == AuthArg::Iam {
        config = config.with_people_named_by_the_runtime(&args.agentcore_account);
    }
    config.max_concurrent_turns = args.max_concurrent_turns;
    config.shutdown_grace = std::time::Duration::from_secs(args.shutdown_grace);
    config.connections = args.connections.limits();
    config.event_streams = agent_worker::hosts::container::StreamCaps {
        host: args.max_event_streams,
        person: args.max_event_streams_per_person,
        account: args.max_event_streams_per_account,
    };
    let worker = args.worker.worker().await?;
    let model = worker.settings.model_id.clone();
    let queue = args
        .queue_url
        .as_ref()
        .map(|url| agent_worker::hosts::TurnQueue::new(aws_sdk_sqs::Client::new(&worker.aws), url));
    let host = agent_worker::hosts::container::ContainerHost::for_worker(worker, config, queue);
    let local = std::net::IpAddr::from([127, 0, 0, 1]);
    let any = std::net::IpAddr::from([0, 0, 0, 0]);
    let ip = args.host.unwrap_or(if args.console { local } else { any });
    let port = args.port.unwrap_or(if args.agentcore_mcp { 8000 } else { 8080 });
    let addr = SocketAddr::from((ip, port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| chain(&e))?;
    if args.agentcore_mcp {
        eprintln!("agent-worker MCP server at http://{addr}/mcp");
    }
    let runs = match &args.queue_url {
        Some(url) => format!("turns sent to {url}"),
        None => format!("model {model}"),
    };
    eprintln!("agent-worker serving turns on http://{addr} ({runs})");
    if args.auth == AuthArg::Iam {
        eprintln!(
            "each request's person is the user AgentCore Runtime names (X-Amzn-Bedrock-AgentCore-Runtime-User-Id), of account {:?}: only the runtime may reach this port",
            args.agentcore_account
        );
    }
    let host = if args.console {
        let console =
            agent_worker::hosts::container::console::Console::new(&args.console_user, &args.console_account);
        // The one line a person (or a test) reads to open the page.
        println!("console: http://{addr}/?token={}", console.token());
        host.console(console).build()
    } else {
        host.build()
    };
    agent_worker::hosts::container::serve(listener, host, shutdown_signal())
        .await
        .map_err(|e| CliError::from(format!("the server stopped: {e}")))
}

pub(crate) async fn agent_protocol_server(args: AgentProtocolArgs) -> Result<(), CliError> {
    let api_key = agent_protocol_key(args.host, args.api_key.clone())?;
    let agent = args.engine.agent().await?;
    let mut config = ServerConfig::new(Workspace::new(&args.workspace));
    config.api_key = api_key;
    config.upload_limit = args.upload_limit;
    config.connections = args.connections.limits();
    let handler = AgentTaskHandler::new(agent);
    // With a table, tasks live beside the sessions, so replicas share them.
    let (server, kept) = match &args.engine.table {
        Some(table) => {
            let shared = aws_config(args.engine.region.as_deref()).await?;
            let store = args.engine.dynamo_store(&shared, table)?;
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
    let addr = listener.local_addr().map_err(|e| chain(&e))?;
    eprintln!(
        "Agent Protocol v1 on http://{addr}/ap/v1/agent/tasks (OpenAPI at /openapi.json; model {}; tasks in {kept}; workspace {})",
        args.engine.model_id,
        args.workspace.display()
    );
    agent_protocol::serve(listener, server, shutdown_signal())
        .await
        .map_err(|e| CliError::from(format!("the server stopped: {e}")))
}

/// The Agent Protocol server's key: required on any address but loopback, since the protocol
/// knows no people and whoever reaches the server reaches every task.
fn agent_protocol_key(
    host: std::net::IpAddr,
    key: Option<String>,
) -> Result<Option<agent_worker::hosts::api_key::ApiKey>, CliError> {
    match key {
        Some(key) => agent_worker::hosts::api_key::ApiKey::new(key)
            .map(Some)
            .map_err(|e| CliError::from(format!("--api-key: {e}"))),
        None if host.is_loopback() => Ok(None),
        None => Err(CliError::from(format!(
            "--host {host} needs --api-key (or AGENT_WORKER_API_KEY): the Agent Protocol knows no people, so whoever reaches the server reaches every task"
        ))),
    }
}

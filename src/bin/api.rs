//! The product's HTTP API as a Lambda function behind a Function URL (response streaming), or
//! behind API Gateway's HTTP API (`API_RESPONSES=buffered`): the
//! same router `agent-worker serve` serves (`hosts::worker::WorkerBuilder::queued_host`), with every turn
//! sent to the turns queue (`TURNS_QUEUE_URL`) for the worker function to run, and a turn's live
//! events streamed from the table.
//!
//! Configured from the environment as the worker function is (`TABLE_NAME`,
//! `AGENT_WORKER_CONFIG`, the file area, keys from Secrets Manager) less what running a model
//! needs ([`NOT_READ`]), plus `TURNS_QUEUE_URL` and how people are known (`AUTH`: `api-key` with
//! `AGENT_WORKER_API_KEY`, or `jwt` with `JWT_ISSUER`, `JWT_AUDIENCE`, ...). A missing or
//! invalid value stops the function at start-up, naming it.

use agent_worker::hosts::api::{Responses, UnknownResponses};
use agent_worker::hosts::config::CONFIG_ENV;
use agent_worker::hosts::container::ContainerConfig;
use agent_worker::hosts::worker::{WorkerBuilder, read_values};
use agent_worker::hosts::{SettingsError, TurnQueue, WorkerSettings};

/// The queue the turns go to.
const TURNS_QUEUE_URL: &str = "TURNS_QUEUE_URL";
/// `streamed` (a Function URL, the default) or `buffered` (behind API Gateway's HTTP API).
const API_RESPONSES: &str = "API_RESPONSES";

/// The worker's settings for running a model and for where a running turn's events go. The API
/// runs no turn, so it does not read them: it needs neither the model's keys nor the grants to
/// read them, and the worker function's settings can be given to it whole.
const NOT_READ: [&str; 10] = [
    "MODEL_PROVIDER",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_API_KEY_SECRET_ARN",
    "OPENAI_API_KEY",
    "OPENAI_API_KEY_SECRET_ARN",
    "EVENT_SINKS",
    "EMIT_URL",
    "EMIT_API_KEY",
    "EMIT_API_KEY_SECRET_ARN",
    "UI_ANSWERS",
];

/// What `MODEL_ID` stands for when it is not set: the worker's settings require one, and the
/// API calls none (its health check says `"model": null`).
const NO_MODEL: &str = "none";

/// One thread: a function instance serves one request at a time.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let (router, responses) = match start().await {
        Ok(started) => started,
        Err(e) => {
            tracing::error!(error = %e, "the function cannot start");
            return Err(e.into());
        }
    };
    agent_worker::hosts::api::run(router, responses).await
}

/// The API the environment describes, and how it answers.
async fn start() -> Result<(axum::Router, Responses), SettingsError> {
    let env = |name: &str| match name {
        _ if NOT_READ.contains(&name) => None,
        "MODEL_ID" => Some(std::env::var(name).unwrap_or_else(|_| NO_MODEL.to_owned())),
        _ => std::env::var(name).ok(),
    };
    let queue_url = env(TURNS_QUEUE_URL)
        .filter(|url| !url.trim().is_empty())
        .ok_or_else(|| {
            SettingsError::new(
                TURNS_QUEUE_URL,
                "is required: the API sends each turn to the worker's queue",
            )
        })?;
    let responses: Responses = env(API_RESPONSES)
        .unwrap_or_default()
        .parse()
        .map_err(|e: UnknownResponses| SettingsError::new(API_RESPONSES, e.to_string()))?;
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let values = read_values(&aws, env).await?;
    let config = ContainerConfig::from_lookup(|name| values.get(name), reqwest::Client::new())?;
    let builder = WorkerBuilder::new(&aws, WorkerSettings::from_lookup(|name| values.get(name))?)?;
    let configured = builder.configured(env(CONFIG_ENV).as_deref()).await?;
    let queue = TurnQueue::new(aws_sdk_sqs::Client::new(&aws), queue_url);
    tracing::info!(table = %builder.settings().table, queue = %queue.url(), "agent worker API ready");
    // The API runs no turn: no agent is built, so no model client is made.
    Ok((
        builder.queued_host(&configured, config, queue).router(),
        responses,
    ))
}

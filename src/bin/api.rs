//! The product's HTTP API as a Lambda function behind a Function URL (response streaming), or
//! behind API Gateway's HTTP API (`API_RESPONSES=buffered`): the
//! same router `agent-worker serve` serves (`hosts::container::ContainerHost::queued_serving`), with every turn
//! sent to the turns queue (`TURNS_QUEUE_URL`) for the worker function to run, and a turn's live
//! events streamed from the table.
//!
//! Configured from the environment as the worker function is (`TABLE_NAME`,
//! `AGENT_WORKER_CONFIG`, the file area, keys from Secrets Manager), but only what it uses of
//! the worker's settings (`hosts::api::API_WORKER_SETTINGS`: nothing of running a model), plus
//! `TURNS_QUEUE_URL` and how people are known (`AUTH`: `api-key` with `AGENT_WORKER_API_KEY`,
//! or `jwt` with `JWT_ISSUER`, `JWT_AUDIENCE`, ...): every name it reads is
//! `hosts::api::api_settings()`. A missing or invalid value stops the function at start-up,
//! naming it.

use agent_worker::hosts::api::{
    API_RESPONSES, NO_MODEL, Responses, TURNS_QUEUE_URL, UnknownResponses, api_settings,
};
use agent_worker::hosts::aws_loader::AwsLoader;
use agent_worker::hosts::config::CONFIG_ENV;
use agent_worker::hosts::container::{ContainerConfig, ContainerHost};
use agent_worker::hosts::worker::{WorkerBuilder, read_values};
use agent_worker::hosts::{SettingsError, TurnQueue, WorkerSettings};
use agent_worker::protocol::ErrorChain;

/// One thread: a function instance serves one request at a time.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let (router, responses) = match start().await {
        Ok(started) => started,
        Err(e) => {
            tracing::error!(error = %ErrorChain(&e), "the function cannot start");
            return Err(e.into());
        }
    };
    agent_worker::hosts::api::run(router, responses).await
}

/// The API the environment describes, and how it answers.
async fn start() -> Result<(axum::Router, Responses), SettingsError> {
    let names = api_settings();
    let env = |name: &str| match name {
        "MODEL_ID" => Some(NO_MODEL.to_owned()),
        _ if names.contains(&name) => std::env::var(name).ok(),
        _ => None,
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
    let aws = AwsLoader::from_lookup(env)?.loader().load().await;
    let values = read_values(&aws, env).await?;
    let mut config = ContainerConfig::from_lookup(|name| values.get(name), reqwest::Client::new())?;
    // One request at a time per instance: an MCP client's answer to an elicitation on a stream
    // would reach another instance.
    config.stream_elicitation = false;
    let builder = WorkerBuilder::new(&aws, WorkerSettings::from_lookup(|name| values.get(name))?)?;
    let configured = builder.configured(env(CONFIG_ENV).as_deref()).await?;
    let queue = TurnQueue::new(aws_sdk_sqs::Client::new(&aws), queue_url);
    tracing::info!(table = %builder.settings().table, queue = %queue.url(), "agent worker API ready");
    // The API runs no turn: no agent is built, so no model client is made.
    Ok((
        ContainerHost::queued_serving(builder.served(&configured), config, queue)
            .build()
            .router(),
        responses,
    ))
}

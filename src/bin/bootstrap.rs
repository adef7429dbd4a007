//! The Lambda function: SQS batches of turns in, partial batch failures out.
//!
//! Configured from the environment (see `agent_worker::hosts::settings`); endpoints through the
//! SDK's standard `AWS_ENDPOINT_URL_DYNAMODB` and `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`. A missing or
//! invalid value stops the function at start-up, naming it.

use agent_worker::hosts::WorkerSettings;
use agent_worker::hosts::lambda::{TurnHandler, run};
use agent_worker::hosts::settings::dynamodb_client;

/// One thread: a function instance serves one invocation at a time (its batch's turns run
/// concurrently on this thread), and below 1,769 MB it has less than one vCPU, where a
/// multi-threaded runtime's cross-thread wake-ups cost more CPU than the turns.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = WorkerSettings::from_lookup(|name| std::env::var(name).ok())?;
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let files = settings.s3_file_area(aws_sdk_s3::Client::new(&aws));
    let (agent, sinks) = settings.build(
        aws_sdk_bedrockruntime::Client::new(&aws),
        dynamodb_client(&aws, settings.store_attempt_timeout),
        files,
    )?;
    tracing::info!(model = %settings.model_id, table = %settings.table, tools = ?settings.tools, agents = ?settings.agents_dir, files = ?settings.files, "agent worker ready");
    run(TurnHandler::new(agent, sinks).store_margin(settings.store_margin)).await
}

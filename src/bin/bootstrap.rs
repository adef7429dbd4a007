//! The Lambda function: SQS batches of turns in, partial batch failures out.
//!
//! Configured from the environment (see `agent_worker::hosts::settings`), keys from Secrets
//! Manager when their `*_SECRET_ARN` is set (`agent_worker::hosts::secrets`); endpoints through
//! the SDK's standard `AWS_ENDPOINT_URL_*`, trusted as `AWS_TLS_ROOTS` says
//! (`agent_worker::hosts::aws_tls`). A missing or invalid value stops the function at
//! start-up, naming it.

use agent_worker::hosts::SettingsError;
use agent_worker::hosts::aws_loader::AwsLoader;
use agent_worker::hosts::config::CONFIG_ENV;
use agent_worker::hosts::lambda::{Requeue, TurnHandler, run};
use agent_worker::hosts::worker::{WorkerBuilder, read_settings};
use agent_worker::protocol::ErrorChain;

/// One thread: a function instance serves one invocation at a time (its batch's turns run
/// concurrently on this thread), and below 1,769 MB it has less than one vCPU, where a
/// multi-threaded runtime's cross-thread wake-ups cost more CPU than the turns.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let handler = match start().await {
        Ok(handler) => handler,
        Err(e) => {
            tracing::error!(error = %ErrorChain(&e), "the function cannot start");
            return Err(e.into());
        }
    };
    run(handler).await
}

/// The handler the environment describes, its keys read from Secrets Manager.
async fn start() -> Result<TurnHandler, SettingsError> {
    let env = |name: &str| std::env::var(name).ok();
    let aws = AwsLoader::from_lookup(env)?.loader().load().await;
    let builder = WorkerBuilder::new(&aws, read_settings(&aws, env).await?)?;
    let configured = builder.configured(env(CONFIG_ENV).as_deref()).await?;
    let worker = builder.build(aws_sdk_bedrockruntime::Client::new(&aws), &configured)?;
    let settings = &worker.settings;
    tracing::info!(model = %settings.model_id, table = %settings.table, tools = ?settings.tools, agents = ?settings.agents_dir, files = ?settings.files, "agent worker ready");
    Ok(worker
        .handler
        .requeue(Requeue::from_config(aws, settings.redrive)))
}

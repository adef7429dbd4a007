//! The Lambda function: SQS batches of turns in, partial batch failures out.
//!
//! Configured from the environment (see `agent_worker::hosts::settings`), keys from Secrets
//! Manager when their `*_SECRET_ARN` is set (`agent_worker::hosts::secrets`); endpoints through
//! the SDK's standard `AWS_ENDPOINT_URL_*`. A missing or invalid value stops the function at
//! start-up, naming it.

use std::sync::Arc;

use agent_worker::engine::StoreControl;
use agent_worker::hosts::config::{CONFIG_ENV, Configured, Loader, Remote};
use agent_worker::hosts::lambda::{Requeue, TurnHandler, run};
use agent_worker::hosts::secrets::{
    AwsSecrets, SECRET_READ_TIMEOUT, read_secret_settings, secrets_manager_client,
};
use agent_worker::hosts::settings::dynamodb_client;
use agent_worker::hosts::{SettingsError, WorkerSettings};
use agent_worker::session::dynamo::DynamoJobEvents;

/// One thread: a function instance serves one invocation at a time (its batch's turns run
/// concurrently on this thread), and below 1,769 MB it has less than one vCPU, where a
/// multi-threaded runtime's cross-thread wake-ups cost more CPU than the turns.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let handler = match start().await {
        Ok(handler) => handler,
        Err(e) => {
            tracing::error!(error = %e, "the function cannot start");
            return Err(e.into());
        }
    };
    run(handler).await
}

/// The handler the environment describes, its keys read from Secrets Manager.
async fn start() -> Result<TurnHandler, SettingsError> {
    let env = |name: &str| std::env::var(name).ok();
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let secrets = read_secret_settings(env, || secrets_manager_client(&aws, SECRET_READ_TIMEOUT)).await?;
    let settings = WorkerSettings::from_lookup(|name| secrets.get(name).cloned().or_else(|| env(name)))?;
    let s3 = aws_sdk_s3::Client::new(&aws);
    let dynamodb = dynamodb_client(&aws, settings.store_attempt_timeout);
    // The clients a configuration needs are made only when there is one.
    let configured = match env(CONFIG_ENV).filter(|path| !path.trim().is_empty()) {
        Some(location) => Configured::load(
            &location,
            &Loader {
                fetch: Some(Arc::new(Remote::new(reqwest::Client::new(), Some(s3.clone())))),
                waiter: Some(Arc::new(DynamoJobEvents::new(settings.store(dynamodb.clone())?))),
                secrets: Some(Arc::new(AwsSecrets::new(&aws))),
            },
        )
        .await
        .map_err(|e| SettingsError::new(CONFIG_ENV, e.to_string()))?,
        None => Configured::default(),
    };
    let files = settings
        .file_area(|| s3)
        .map(|f| f as Arc<dyn agent_worker::engine::FileArea>);
    let control = StoreControl::new(Arc::new(settings.store(dynamodb.clone())?));
    let (agent, sinks) = settings.build(
        aws_sdk_bedrockruntime::Client::new(&aws),
        dynamodb,
        files,
        &configured,
    )?;
    tracing::info!(model = %settings.model_id, table = %settings.table, tools = ?settings.tools, agents = ?settings.agents_dir, files = ?settings.files, "agent worker ready");
    let requeue = Requeue::from_config(aws.clone(), settings.redrive);
    let handler = TurnHandler::from_settings(agent, sinks, &settings);
    #[cfg(feature = "otlp")]
    let handler = handler.traced_tools(&settings.tools_with(&configured));
    Ok(handler.requeue(requeue).control(control))
}

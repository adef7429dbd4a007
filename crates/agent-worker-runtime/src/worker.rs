//! One way to build a worker from its settings. The Lambda function (`bootstrap`), the queue
//! poller (`agent-worker poll`, `handle`) and the container host (`agent-worker serve`) build the
//! same worker in the same steps:
//!
//! 1. [`read_settings`]: the settings a lookup gives (the environment, flags before it), with
//!    those kept in Secrets Manager read first ([`secrets`](super::secrets); [`read_values`]
//!    for a host that reads more than the worker's settings);
//! 2. [`WorkerBuilder::new`]: the store's DynamoDB client and the session store (no request
//!    is sent);
//! 3. the configuration file, if the host has one, loaded with [`WorkerBuilder::loader`] (its
//!    clients are made only then);
//! 4. [`WorkerBuilder::build`]: the agent, its sinks, the runner, the conversations API and the
//!    file area, all on the one store.
//!
//! ```no_run
//! # async fn start() -> Result<(), agent_worker_runtime::SettingsError> {
//! use agent_worker_runtime::config::Configured;
//! use agent_worker_runtime::worker::{WorkerBuilder, read_settings};
//!
//! let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
//! let settings = read_settings(&aws, |name| std::env::var(name).ok()).await?;
//! let builder = WorkerBuilder::new(&aws, settings)?;
//! let worker = builder.build(aws_sdk_bedrockruntime::Client::new(&aws), &Configured::default())?;
//! # let _ = worker;
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::config::{Configured, Loader, Remote};
use super::runner::TurnHandler;
use super::secrets::{AwsSecrets, read_secret_settings};
use super::settings::dynamodb_client;
use super::{SettingsError, WorkerSettings};
use agent_worker_aws::dynamo::DynamoJobEvents;
use agent_worker_aws::dynamo::DynamoStore;
use agent_worker_core::engine::StoreControl;
use agent_worker_core::engine::attachments::{FileArea, FileUploads};
use agent_worker_core::engine::tools::openapi::{EventDeclarations, EventWaiter};

/// The named values a host is configured with: those kept in Secrets Manager first, then what
/// its lookup gives (its flags, its environment).
#[derive(Debug)]
pub struct SettingValues<G> {
    secrets: HashMap<String, String>,
    get: G,
}

impl<G: Fn(&str) -> Option<String>> SettingValues<G> {
    /// The value of setting `name`, if it has one.
    pub fn get(&self, name: &str) -> Option<String> {
        self.secrets.get(name).cloned().or_else(|| (self.get)(name))
    }
}

/// The values `get` gives, with each `<NAME>_SECRET_ARN` it sets read from Secrets Manager on
/// `aws` (a client made only when one is set) and standing for `<NAME>`.
pub async fn read_values<G: Fn(&str) -> Option<String>>(
    aws: &aws_config::SdkConfig,
    get: G,
) -> Result<SettingValues<G>, SettingsError> {
    let secrets = read_secret_settings(&get, || AwsSecrets::new(aws)).await?;
    Ok(SettingValues { secrets, get })
}

/// The worker's settings from [`read_values`].
pub async fn read_settings(
    aws: &aws_config::SdkConfig,
    get: impl Fn(&str) -> Option<String>,
) -> Result<WorkerSettings, SettingsError> {
    let values = read_values(aws, get).await?;
    WorkerSettings::from_lookup(|name| values.get(name))
}

/// What a configuration file is loaded with, on `aws`: documents fetched over HTTPS or from S3
/// (feature `s3`), assertion keys read from Secrets Manager or SSM, and jobs awaited through
/// `waiter` (none: a call that starts a job answers that it was dispatched).
pub fn config_loader(aws: &aws_config::SdkConfig, waiter: Option<Arc<dyn EventWaiter>>) -> Loader {
    #[cfg(feature = "s3")]
    let fetch = Remote::new(reqwest::Client::new(), Some(aws_sdk_s3::Client::new(aws)));
    #[cfg(not(feature = "s3"))]
    let fetch = Remote::new(reqwest::Client::new());
    Loader {
        fetch: Some(Arc::new(fetch)),
        waiter,
        secrets: Some(Arc::new(AwsSecrets::new(aws))),
    }
}

/// A worker on its way: its settings, the AWS configuration and the session store, waiting for
/// the configuration file the host loads (or not) before [`build`](Self::build).
pub struct WorkerBuilder {
    aws: aws_config::SdkConfig,
    settings: WorkerSettings,
    dynamodb: aws_sdk_dynamodb::Client,
    store: DynamoStore,
}

impl fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// The worker `settings` describe, on `aws`: the store's client times its attempts out as
    /// the settings say and counts its requests toward each turn's metrics.
    pub fn new(aws: &aws_config::SdkConfig, settings: WorkerSettings) -> Result<Self, SettingsError> {
        let dynamodb = dynamodb_client(aws, settings.store_attempt_timeout);
        let store = settings.store(dynamodb.clone())?;
        Ok(Self {
            aws: aws.clone(),
            settings,
            dynamodb,
            store,
        })
    }

    /// The settings it is built from.
    pub fn settings(&self) -> &WorkerSettings {
        &self.settings
    }

    /// What a configuration file is loaded with: documents fetched over HTTPS or from S3, jobs
    /// awaited in the worker's table, assertion keys read from Secrets Manager. Its clients are
    /// made here, so a worker with no configuration makes none.
    pub fn loader(&self) -> Loader {
        config_loader(
            &self.aws,
            Some(Arc::new(DynamoJobEvents::new(self.store.clone()))),
        )
    }

    /// The configuration file at `location` (the function's `CONFIG`), loaded with
    /// [`loader`](Self::loader); with none (or a blank one), the default, and no client made.
    pub async fn configured(&self, location: Option<&str>) -> Result<Configured, SettingsError> {
        match location.filter(|path| !path.trim().is_empty()) {
            Some(location) => Configured::load(location, &self.loader())
                .await
                .map_err(|e| SettingsError::new(super::config::CONFIG_ENV, e.to_string())),
            None => Ok(Configured::default()),
        }
    }

    /// The worker, its model on `bedrock` (when the settings choose Bedrock) and `configured`
    /// giving its tools, policy and persona ([`Configured::default`] when there is no
    /// configuration file). A value that cannot be used fails here, naming its setting.
    pub fn build(
        self,
        bedrock: aws_sdk_bedrockruntime::Client,
        configured: &Configured,
    ) -> Result<Worker, SettingsError> {
        let uploads = self.uploads();
        let Self {
            aws,
            settings,
            dynamodb,
            store,
        } = self;
        let files = uploads.clone().map(|f| f as Arc<dyn FileArea>);
        let (agent, sinks) = settings.build(bedrock, dynamodb, uploads.clone(), configured)?;
        // Each turn's cost in its metrics, at the deployment's model's price.
        let mut settings = settings;
        let price = configured.prices.of(&settings.model_id).copied();
        settings.metrics = settings.metrics.take().map(|metrics| metrics.priced(price));
        let handler = TurnHandler::from_settings(agent, sinks, &settings)
            .control(StoreControl::new(Arc::new(store.clone())));
        let handler = handler.traced_tools(&settings.tools_with(configured));
        Ok(Worker {
            handler,
            conversations: settings.conversations(store.clone(), files, configured),
            events: configured.events.clone(),
            uploads,
            store,
            aws,
            settings,
        })
    }
}

impl WorkerBuilder {
    /// Where the files people attach are put, when the settings name a place.
    fn uploads(&self) -> Option<Arc<dyn FileUploads>> {
        #[cfg(feature = "s3")]
        let uploads = self.settings.file_area(|| aws_sdk_s3::Client::new(&self.aws));
        #[cfg(not(feature = "s3"))]
        let uploads = None;
        uploads
    }

    /// What a host that runs no turns serves (the `api` function, whose turns go to the
    /// queue): no agent is built, so no model client is made and no tool is prepared;
    /// conversations, job events and uploads as [`Worker`] has them.
    pub fn served(self, configured: &Configured) -> Served {
        let uploads = self.uploads();
        let files = uploads.clone().map(|f| f as Arc<dyn FileArea>);
        Served {
            conversations: self.settings.conversations(self.store.clone(), files, configured),
            events: configured.events.clone(),
            uploads,
            store: self.store,
            a2a_push: self.settings.a2a_push,
        }
    }
}

/// What a host serves besides turns, on a worker's store: what [`WorkerBuilder::served`] gives.
pub struct Served {
    /// The session store, on the worker's DynamoDB client.
    pub store: DynamoStore,
    /// A person's conversations, on the same store and file area.
    pub conversations: agent_worker_core::conversations::Conversations,
    /// The event declarations of the configuration's documents: what may settle a job.
    pub events: EventDeclarations,
    /// Where the files people attach are put, when the settings name a place.
    pub uploads: Option<Arc<dyn FileUploads>>,
    /// A2A push notifications, when the settings turn them on (`A2A_PUSH`): the workers that
    /// run the turns push to the webhooks the host keeps.
    pub a2a_push: Option<crate::a2a_push::PushPolicy>,
}

impl fmt::Debug for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Served")
            .field("uploads", &self.uploads.is_some())
            .finish_non_exhaustive()
    }
}

/// A worker: what runs turns, and what the hosts around it serve from the same store.
pub struct Worker {
    /// The runner every turn goes through (without a [`Requeue`](super::redrive::Requeue): a
    /// host that reads a queue adds its own).
    pub handler: TurnHandler,
    /// The session store, on the worker's DynamoDB client.
    pub store: DynamoStore,
    /// A person's conversations, on the same store and file area.
    pub conversations: agent_worker_core::conversations::Conversations,
    /// The event declarations of the configuration's documents: what may settle a job.
    pub events: EventDeclarations,
    /// Where the files people attach are put, when the settings name a place.
    pub uploads: Option<Arc<dyn FileUploads>>,
    /// The AWS configuration it was built on.
    pub aws: aws_config::SdkConfig,
    /// The settings it was built from.
    pub settings: WorkerSettings,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("handler", &self.handler)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

//! One update POSTed to one webhook, retried with backoff where another try may help.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::redirect::Policy;
use serde_json::Value;

use super::address::{AddressRefused, CheckedResolver, check_url, refusal_in};
use super::{ATTEMPT_TIMEOUT, ATTEMPTS, FIRST_RETRY_DELAY, PushConfig, PushPolicy};

/// Why a push did not reach its webhook.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The webhook may not be pushed to (its URL, or where its name resolves).
    #[error("the webhook may not be pushed to: {0}")]
    Refused(#[from] AddressRefused),
    /// It answered with a status that is not a success (a redirect included: none is followed).
    #[error("the webhook answered {0}")]
    Status(StatusCode),
    /// It could not be reached, or did not answer in time.
    #[error("the webhook could not be reached: {0}")]
    Unreachable(String),
    /// The client could not be built.
    #[error("the push client cannot be built: {0}")]
    Client(String),
}

impl PushError {
    /// Whether another try may go better: a connection that failed, a timeout, a 408, a 429 or
    /// a 5xx.
    fn retryable(&self) -> bool {
        match self {
            Self::Unreachable(_) => true,
            Self::Status(status) => {
                status.is_server_error()
                    || *status == StatusCode::TOO_MANY_REQUESTS
                    || *status == StatusCode::REQUEST_TIMEOUT
            }
            Self::Refused(_) | Self::Client(_) => false,
        }
    }
}

/// POSTs updates to webhooks under a [`PushPolicy`].
#[derive(Debug, Clone)]
pub struct PushDelivery {
    client: reqwest::Client,
    policy: PushPolicy,
    first_retry: Duration,
    attempt_timeout: Duration,
}

impl PushDelivery {
    /// A delivery under `policy`: each POST within [`ATTEMPT_TIMEOUT`], no redirect followed, no
    /// proxy (the checked addresses are the ones connected to), every name resolved and checked.
    pub fn new(policy: PushPolicy) -> Result<Self, PushError> {
        let client = reqwest::Client::builder()
            .dns_resolver(std::sync::Arc::new(CheckedResolver { policy }))
            .redirect(Policy::none())
            .no_proxy()
            .connect_timeout(ATTEMPT_TIMEOUT / 2)
            .user_agent(concat!("agent-worker/", env!("CARGO_PKG_VERSION"), " (A2A push)"))
            .build()
            .map_err(|e| PushError::Client(agent_worker_contract::chain(&e)))?;
        Ok(Self {
            client,
            policy,
            first_retry: FIRST_RETRY_DELAY,
            attempt_timeout: ATTEMPT_TIMEOUT,
        })
    }

    /// The same delivery, waiting `first` before its second try (tests that retry quickly).
    #[must_use]
    pub fn first_retry(mut self, first: Duration) -> Self {
        self.first_retry = first;
        self
    }

    /// The same delivery, each try given at most `timeout` (tests of a webhook that hangs).
    #[must_use]
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// The policy it pushes under.
    pub fn policy(&self) -> PushPolicy {
        self.policy
    }

    /// POSTs `update` (a `StreamResponse`) to `config`'s webhook with its token and
    /// authentication, up to [`ATTEMPTS`] times.
    pub async fn push(&self, config: &PushConfig, update: &Value) -> Result<(), PushError> {
        let url = check_url(&config.url, self.policy)?;
        let body = update.to_string();
        let mut attempt = 1;
        loop {
            match self.post(url.clone(), config, body.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt < ATTEMPTS && e.retryable() => {
                    let wait = agent_worker_core::engine::jittered_backoff(
                        self.first_retry,
                        self.first_retry.saturating_mul(8),
                        attempt,
                    );
                    tracing::debug!(error = %e, attempt, "a push failed; trying again");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn post(&self, url: reqwest::Url, config: &PushConfig, body: String) -> Result<(), PushError> {
        let mut request = self
            .client
            .post(url)
            .timeout(self.attempt_timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(token) = &config.token {
            request = request.header("X-A2A-Notification-Token", token);
        }
        if let Some(authorization) = config.authorization() {
            request = request.header(reqwest::header::AUTHORIZATION, authorization);
        }
        let response = request.send().await.map_err(|e| match refusal_in(&e) {
            Some(refused) => PushError::Refused(refused),
            None => PushError::Unreachable(agent_worker_contract::chain(&e)),
        })?;
        // The answer's body is never read: its status says all a push needs.
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(PushError::Status(status))
        }
    }
}

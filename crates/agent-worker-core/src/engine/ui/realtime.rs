//! [`RealtimeAnswers`]: the tab's answers to UI actions, read from the realtime server the tab's
//! socket is on (`GET {url}/internal/oui/action-results/{callId}` with its internal key in
//! `x-api-key`): 404 while there is none, else the answer (`{"status": "taken"}`,
//! `{"status": "done", "result", "isError"}`, `{"status": "refused", "reason"}`).

use std::time::Duration;

use async_trait::async_trait;

use crate::Failure;
use crate::session::{ActionAnswer, ActionAnswers, StoreError};
use crate::sinks::API_KEY_HEADER;

/// How long one look may take.
const LOOK_TIMEOUT: Duration = Duration::from_secs(5);

/// Why [`RealtimeAnswers::new`] cannot ask a server.
#[derive(Debug, thiserror::Error)]
pub enum RealtimeError {
    /// The URL given is not an `http(s)://` one.
    #[error("{0:?} is not an http(s) URL")]
    NotHttp(String),
    /// The HTTP client could not be made (its TLS roots, say).
    #[error("the HTTP client cannot be made")]
    Client(#[source] reqwest::Error),
}

/// The realtime server's record of the tab's answers.
#[derive(Debug, Clone)]
pub struct RealtimeAnswers {
    http: reqwest::Client,
    url: String,
    api_key: String,
}

impl RealtimeAnswers {
    /// Answers from the server at `url` (its base, as for the HTTP sink), asked with `api_key`.
    pub fn new(url: &str, api_key: impl Into<String>) -> Result<Self, RealtimeError> {
        let url = url.trim_end_matches('/');
        if !url.starts_with("http://") && !url.starts_with("https://") {
            return Err(RealtimeError::NotHttp(url.to_owned()));
        }
        let http = reqwest::Client::builder()
            .timeout(LOOK_TIMEOUT)
            .build()
            .map_err(RealtimeError::Client)?;
        Ok(Self {
            http,
            url: url.to_owned(),
            api_key: api_key.into(),
        })
    }
}

#[async_trait]
impl ActionAnswers for RealtimeAnswers {
    async fn look(
        &self,
        _session: &str,
        _turn_id: &str,
        call_id: &str,
    ) -> Result<Option<ActionAnswer>, StoreError> {
        let failed = |what: String| StoreError::Backend(Failure::from(what));
        let response = self
            .http
            .get(format!("{}/internal/oui/action-results/{call_id}", self.url))
            .header(API_KEY_HEADER, &self.api_key)
            .send()
            .await
            .map_err(|e| {
                failed(format!(
                    "asking the realtime server for a UI action's answer: {e}"
                ))
            })?;
        match response.status() {
            reqwest::StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => {
                let body = response
                    .bytes()
                    .await
                    .map_err(|e| failed(format!("reading the realtime server's answer: {e}")))?;
                serde_json::from_slice::<ActionAnswer>(&body)
                    .map(Some)
                    .map_err(|e| {
                        StoreError::Corrupt(Failure::from(format!("the realtime server's answer: {e}")))
                    })
            }
            status => Err(failed(format!(
                "the realtime server answered {status} for a UI action's answer"
            ))),
        }
    }
}

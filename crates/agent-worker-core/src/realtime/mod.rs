//! The realtime server of seed 004 (`@ouispec/agent-realtime`): the server the person's tab is
//! connected to, which also keeps what comes back from the tab for a turn on any worker. Its
//! internal routes are asked with its internal key in `x-api-key`:
//!
//! | route | what it answers | here |
//! | --- | --- | --- |
//! | `POST /api/emit` | takes a turn's events | [`HttpEmitSink`](crate::sinks::HttpEmitSink) |
//! | `GET /internal/oui/action-results/{callId}` | the tab's answer to a UI action; 404 while there is none | [`RealtimeAnswers`] |
//! | `GET /internal/turns/{turnId}/stop` | the stop asked for a turn (`{"reason": "user_stop" \| "superseded", "at"?}`); 404 while none was (the product's API asks with `POST /internal/turns/{turnId}/stop`) | [`RealtimeStops`] |
//! | `POST /internal/approvals` | stores a pending approval (its JSON, as [`PendingApproval`](crate::session::PendingApproval) serializes); 409 when its id is taken | [`RealtimeApprovals`] |
//! | `GET /internal/approvals/{approvalId}` | `{"approval", "status"}`; 404 when there is none | [`RealtimeApprovals`] |
//! | `POST /internal/approvals/{approvalId}/settle` | `{"outcome": "redeem" \| "decline" \| "expire"}`: settles it if it is pending; 409 when it was not | [`RealtimeApprovals`] |
//! | `GET /internal/approvals?turnId=T` | `{"approvals": [{"approval", "status"}]}`: a turn's approvals, to withdraw those of a turn the next message replaced | [`RealtimeApprovals`] |
//!
//! A [`RealtimeServer`] is made once from the server's URL and key; each seam is a view of it.

mod answers;
mod approvals;
mod stops;

use std::time::Duration;

use reqwest::{Method, StatusCode, Url};

use crate::Failure;
use crate::session::StoreError;
use crate::sinks::API_KEY_HEADER;

pub use answers::RealtimeAnswers;
pub use approvals::RealtimeApprovals;
pub use stops::RealtimeStops;

/// How long one request to the realtime server may take.
pub const REALTIME_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a [`RealtimeServer`] cannot be asked.
#[derive(Debug, thiserror::Error)]
pub enum RealtimeError {
    /// The URL given is not an `http(s)://` one.
    #[error("{0:?} is not an http(s) URL")]
    NotHttp(String),
    /// The internal key is empty.
    #[error("the realtime server's key is empty")]
    NoKey,
    /// The HTTP client could not be made (its TLS roots, say).
    #[error("the HTTP client cannot be made")]
    Client(#[source] reqwest::Error),
}

/// The realtime server at a base URL, asked with its internal key. Cheap to clone.
#[derive(Clone)]
pub struct RealtimeServer {
    http: reqwest::Client,
    base: Url,
    api_key: String,
}

impl std::fmt::Debug for RealtimeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs.
        f.debug_struct("RealtimeServer")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

impl RealtimeServer {
    /// The server at `url` (its base, as for the HTTP sink), asked with `api_key`.
    pub fn new(url: &str, api_key: impl Into<String>) -> Result<Self, RealtimeError> {
        let trimmed = url.trim_end_matches('/');
        if !trimmed.starts_with("http://") && !trimmed.starts_with("https://") {
            return Err(RealtimeError::NotHttp(url.to_owned()));
        }
        let base = Url::parse(trimmed).map_err(|_| RealtimeError::NotHttp(url.to_owned()))?;
        let api_key = api_key.into();
        if api_key.trim().is_empty() {
            return Err(RealtimeError::NoKey);
        }
        let http = reqwest::Client::builder()
            .timeout(REALTIME_TIMEOUT)
            .build()
            .map_err(RealtimeError::Client)?;
        Ok(Self { http, base, api_key })
    }

    /// The tab's answers to UI actions, as this server keeps them.
    pub fn answers(&self) -> RealtimeAnswers {
        RealtimeAnswers::on(self.clone())
    }

    /// The stops asked for turns, as this server keeps them.
    pub fn stops(&self) -> RealtimeStops {
        RealtimeStops::on(self.clone())
    }

    /// The approval store this server keeps.
    pub fn approvals(&self) -> RealtimeApprovals {
        RealtimeApprovals::on(self.clone())
    }

    /// Sends `method` to the route of `segments` (each escaped as one path segment), with
    /// `query` and a JSON `body`: the status and the body, or why it could not be asked
    /// (`doing` says what was asked, for the error).
    async fn ask(
        &self,
        method: Method,
        segments: &[&str],
        request: Request<'_>,
    ) -> Result<Answer, StoreError> {
        let failed = |what: String| StoreError::Backend(Failure::from(what));
        let doing = request.doing;
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| failed(format!("{}: the realtime server's URL takes no path", self.base)))?
            .pop_if_empty()
            .extend(segments);
        if !request.query.is_empty() {
            url.query_pairs_mut().extend_pairs(request.query);
        }
        let mut builder = self
            .http
            .request(method, url)
            .header(API_KEY_HEADER, &self.api_key);
        if let Some(body) = request.body {
            let bytes = serde_json::to_vec(body).map_err(|e| {
                StoreError::Corrupt(Failure::caused_by(
                    format!("{doing}: the request does not encode"),
                    e,
                ))
            })?;
            builder = builder
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(bytes);
        }
        let response = builder.send().await.map_err(|e| {
            StoreError::Backend(Failure::caused_by(
                format!("{doing}: the realtime server cannot be asked"),
                e,
            ))
        })?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| {
            StoreError::Backend(Failure::caused_by(
                format!("{doing}: the realtime server's answer cannot be read"),
                e,
            ))
        })?;
        Ok(Answer {
            status,
            body: body.to_vec(),
            doing,
        })
    }
}

/// What one request carries besides its route.
#[derive(Default)]
struct Request<'a> {
    /// What it asks, for errors (`"asking for a turn's stop"`).
    doing: &'static str,
    query: &'a [(&'a str, &'a str)],
    body: Option<&'a serde_json::Value>,
}

impl<'a> Request<'a> {
    fn doing(doing: &'static str) -> Self {
        Self {
            doing,
            ..Self::default()
        }
    }
}

/// The realtime server's answer to one request.
struct Answer {
    status: StatusCode,
    body: Vec<u8>,
    doing: &'static str,
}

impl Answer {
    /// Its body as `T`; a body that is not is corrupt.
    fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, StoreError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            StoreError::Corrupt(Failure::caused_by(
                format!("{}: the realtime server's answer does not decode", self.doing),
                e,
            ))
        })
    }

    /// The failure of an answer its route does not give.
    fn unexpected(&self) -> StoreError {
        StoreError::Backend(Failure::from(format!(
            "{}: the realtime server answered {}",
            self.doing, self.status
        )))
    }
}

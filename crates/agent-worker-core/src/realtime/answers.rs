//! [`RealtimeAnswers`]: the tab's answers to UI actions, read from the realtime server the tab's
//! socket is on (`GET {url}/internal/oui/action-results/{callId}`): 404 while there is none,
//! else the answer (`{"status": "taken"}`, `{"status": "done", "result", "isError"}`,
//! `{"status": "refused", "reason"}`).

use async_trait::async_trait;
use reqwest::{Method, StatusCode};

use super::{RealtimeError, RealtimeServer, Request};
use crate::session::{ActionAnswer, ActionAnswers, SessionId, StoreError, TurnId};

/// The realtime server's record of the tab's answers.
#[derive(Debug, Clone)]
pub struct RealtimeAnswers {
    server: RealtimeServer,
}

impl RealtimeAnswers {
    /// Answers from the server at `url` (its base, as for the HTTP sink), asked with `api_key`.
    pub fn new(url: &str, api_key: impl Into<String>) -> Result<Self, RealtimeError> {
        RealtimeServer::new(url, api_key).map(|server| server.answers())
    }

    pub(super) fn on(server: RealtimeServer) -> Self {
        Self { server }
    }
}

#[async_trait]
impl ActionAnswers for RealtimeAnswers {
    async fn look(
        &self,
        _session: &SessionId,
        _turn_id: &TurnId,
        call_id: &str,
    ) -> Result<Option<ActionAnswer>, StoreError> {
        let answer = self
            .server
            .ask(
                Method::GET,
                &["internal", "oui", "action-results", call_id],
                Request::doing("asking for a UI action's answer"),
            )
            .await?;
        match answer.status {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => answer.json().map(Some),
            _ => Err(answer.unexpected()),
        }
    }
}

//! [`RealtimeStops`]: the stops a product's API asked the realtime server for
//! (`POST /internal/turns/{turnId}/stop`), read back by the turn
//! (`GET /internal/turns/{turnId}/stop`): 404 (or 204) while none was asked, else
//! `{"reason": "user_stop" | "superseded", "at": <ms since the epoch>}` (`at` optional).

use async_trait::async_trait;
use reqwest::{Method, StatusCode};
use serde::Deserialize;

use super::{RealtimeServer, Request};
use crate::session::{SessionId, Stop, StopCause, StopSource, StoreError, TurnId};

/// The realtime server's record of the stops asked for turns.
#[derive(Debug, Clone)]
pub struct RealtimeStops {
    server: RealtimeServer,
}

impl RealtimeStops {
    pub(super) fn on(server: RealtimeServer) -> Self {
        Self { server }
    }
}

/// A stop as the realtime server says it.
#[derive(Deserialize)]
struct AskedStop {
    reason: StopCause,
    #[serde(default)]
    at: Option<u64>,
}

#[async_trait]
impl StopSource for RealtimeStops {
    async fn stop_for(&self, _session: &SessionId, turn_id: &TurnId) -> Result<Option<Stop>, StoreError> {
        let answer = self
            .server
            .ask(
                Method::GET,
                &["internal", "turns", turn_id.as_str(), "stop"],
                Request::doing("asking for a turn's stop"),
            )
            .await?;
        match answer.status {
            StatusCode::NOT_FOUND | StatusCode::NO_CONTENT => Ok(None),
            status if status.is_success() => {
                let asked: AskedStop = answer.json()?;
                let mut stop = Stop::now(asked.reason);
                if let Some(at) = asked.at {
                    stop.at = at;
                }
                Ok(Some(stop))
            }
            _ => Err(answer.unexpected()),
        }
    }
}

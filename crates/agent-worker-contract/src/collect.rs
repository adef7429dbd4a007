//! Buffered consumption: fold a turn's stream into its result (Agent Handler §7).

use std::fmt;
use std::future::poll_fn;
use std::pin::pin;

use futures_core::Stream;
use serde_json::Value;

use super::AgentEvent;

/// What a completed turn produced, for callers that want a result rather than a stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Collected {
    /// Every text delta, concatenated.
    pub text: String,
    /// The `data` of the `completed` event, when there was one.
    pub data: Option<Value>,
}

/// A turn that ended with a `failed` event; its fields are the event's, unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{details}")]
pub struct AgentFailure {
    /// What went wrong.
    pub details: String,
    /// Whether re-sending the turn is worth it.
    pub retryable: bool,
    /// The failure's code, when it had one.
    pub code: Option<String>,
}

/// Why [`collect`] returned no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CollectError {
    /// The turn ended with `failed`.
    #[error("the agent failed")]
    Failed(#[from] AgentFailure),
    /// The stream ended without `completed` or `failed`: the agent broke MUST 1.
    #[error("stream ended without a terminal event")]
    NoTerminal,
}

/// Folds a turn's stream into its text and data.
///
/// Text deltas are concatenated; `completed` returns them with its data; `failed` becomes
/// [`CollectError::Failed`]. Thinking, tool, retrying, usage and unknown events are ignored
/// (MUST 4). Events after the terminal are not read.
pub async fn collect<S>(stream: S) -> Result<Collected, CollectError>
where
    S: Stream<Item = AgentEvent>,
{
    let mut stream = pin!(stream);
    let mut text = String::new();
    while let Some(event) = poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
        match event {
            AgentEvent::Text { delta } => text.push_str(&delta),
            AgentEvent::Completed { data } => return Ok(Collected { text, data }),
            AgentEvent::Failed {
                details,
                retryable,
                code,
            } => {
                return Err(AgentFailure {
                    details,
                    retryable,
                    code,
                }
                .into());
            }
            _ => {}
        }
    }
    Err(CollectError::NoTerminal)
}

/// Every text delta of `events`, concatenated: what a turn said, from events already gathered.
pub fn text_of(events: &[AgentEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::Text { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

impl fmt::Display for Collected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;
    use serde_json::json;

    #[test]
    fn text_of_joins_the_text_deltas_alone() {
        let events = [
            AgentEvent::thinking("not this"),
            AgentEvent::text("Hel"),
            AgentEvent::usage(1, 1),
            AgentEvent::text("lo"),
            AgentEvent::completed(),
        ];
        assert_eq!(text_of(&events), "Hello");
    }

    #[tokio::test]
    async fn collects_text_and_data_ignoring_everything_else() {
        let events = vec![
            AgentEvent::thinking("hmm"),
            AgentEvent::text("Hel"),
            AgentEvent::Other(json!({"type":"progress"})),
            AgentEvent::usage(1, 1),
            AgentEvent::text("lo"),
            AgentEvent::completed_with(json!({"n":1})),
            AgentEvent::text("after the terminal: never read"),
        ];
        let got = collect(stream::iter(events)).await.unwrap();
        assert_eq!(got.text, "Hello");
        assert_eq!(got.data, Some(json!({"n":1})));
    }

    #[tokio::test]
    async fn failed_becomes_an_agent_failure_with_its_fields() {
        let events = vec![
            AgentEvent::text("x"),
            AgentEvent::failed("slow down", true, Some("throttled")),
        ];
        let err = collect(stream::iter(events)).await.unwrap_err();
        assert_eq!(
            err,
            CollectError::Failed(AgentFailure {
                details: "slow down".into(),
                retryable: true,
                code: Some("throttled".into()),
            })
        );
    }

    #[tokio::test]
    async fn a_stream_without_terminal_is_its_own_error() {
        let err = collect(stream::iter(vec![AgentEvent::text("x")]))
            .await
            .unwrap_err();
        assert_eq!(err, CollectError::NoTerminal);
    }
}

//! [`Quiet`]: the stall watch on a model's stream.

use std::time::Duration;

use tokio::time::Instant;

use super::model::{ModelError, ModelErrorKind};

/// The stall watch on a model's stream: the first event must come within
/// `first_chunk_timeout`, each next one within `chunk_timeout` of the last. Tool calls that end
/// meanwhile do not reset it. Poll the stream before it: a turn runs only while its caller reads,
/// so events may wait in the stream's buffer while a slow sink holds the caller.
pub(crate) struct Quiet {
    deadline: Instant,
    chunk_timeout: Duration,
    first: Option<Duration>,
}

impl Quiet {
    pub(crate) fn new(config: &super::EngineConfig) -> Self {
        Self {
            deadline: Instant::now() + config.first_chunk_timeout,
            chunk_timeout: config.chunk_timeout,
            first: Some(config.first_chunk_timeout),
        }
    }

    /// An event came.
    pub(crate) fn heard(&mut self) {
        self.first = None;
        self.deadline = Instant::now() + self.chunk_timeout;
    }

    /// Resolves when the stream has been quiet too long.
    pub(crate) async fn elapsed(&self) {
        tokio::time::sleep_until(self.deadline).await;
    }

    /// The timeout, saying which one.
    pub(crate) fn error(&self) -> ModelError {
        let message = match self.first {
            Some(first) => format!(
                "the model sent nothing for {} ms after the request",
                first.as_millis()
            ),
            None => format!(
                "the model's stream went quiet for {} ms",
                self.chunk_timeout.as_millis()
            ),
        };
        ModelError::new(ModelErrorKind::Timeout, message)
    }
}

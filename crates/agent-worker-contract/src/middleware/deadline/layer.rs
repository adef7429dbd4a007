use std::time::Duration;

use tower_layer::Layer;

use super::Deadline;

/// Wraps agents in [`Deadline`].
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer {
    limit: Duration,
}

impl DeadlineLayer {
    /// A layer giving each turn at most `limit`.
    pub const fn new(limit: Duration) -> Self {
        Self { limit }
    }
}

impl<A> Layer<A> for DeadlineLayer {
    type Service = Deadline<A>;

    fn layer(&self, inner: A) -> Deadline<A> {
        Deadline::new(inner, self.limit)
    }
}

use tower_layer::Layer;

use super::Traced;

/// Wraps agents in [`Traced`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceLayer {
    _private: (),
}

impl TraceLayer {
    /// A trace layer.
    pub const fn new() -> Self {
        Self { _private: () }
    }
}

impl<A> Layer<A> for TraceLayer {
    type Service = Traced<A>;

    fn layer(&self, inner: A) -> Traced<A> {
        Traced::new(inner)
    }
}

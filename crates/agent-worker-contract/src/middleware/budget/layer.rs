use tower_layer::Layer;

use super::TokenBudget;

/// Wraps agents in [`TokenBudget`].
#[derive(Debug, Clone, Copy)]
pub struct TokenBudgetLayer {
    max_tokens: u64,
}

impl TokenBudgetLayer {
    /// A layer allowing each turn `max_tokens`.
    pub const fn new(max_tokens: u64) -> Self {
        Self { max_tokens }
    }
}

impl<A> Layer<A> for TokenBudgetLayer {
    type Service = TokenBudget<A>;

    fn layer(&self, inner: A) -> TokenBudget<A> {
        TokenBudget::new(inner, self.max_tokens)
    }
}

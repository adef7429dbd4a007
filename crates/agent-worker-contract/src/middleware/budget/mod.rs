//! [`TokenBudget`]: ends a turn that uses too many tokens with `failed{code:"budget_exceeded"}`.

mod layer;

pub use layer::TokenBudgetLayer;

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

use super::poll_relay;
use crate::{Agent, AgentEvent, EventStream, Prompt, Scope, codes};

/// Caps the tokens one turn of the inner agent may use.
///
/// It counts the [`Usage`](AgentEvent::Usage) events the inner agent streams (input plus output
/// tokens of each model step). The `usage` event that goes over the cap is passed on, then the
/// inner stream is dropped (cancelling its work) and the caller receives `failed` with code
/// [`codes::BUDGET_EXCEEDED`] and `retryable: false`. An agent that reports no usage is never
/// stopped.
#[derive(Debug, Clone)]
pub struct TokenBudget<A> {
    inner: A,
    max_tokens: u64,
}

impl<A> TokenBudget<A> {
    /// Wraps `inner`, allowing each turn `max_tokens`.
    pub const fn new(inner: A, max_tokens: u64) -> Self {
        Self { inner, max_tokens }
    }

    /// The per-turn cap.
    pub fn max_tokens(&self) -> u64 {
        self.max_tokens
    }

    /// The wrapped agent.
    pub fn get_ref(&self) -> &A {
        &self.inner
    }

    /// The wrapped agent, mutably.
    pub fn get_mut(&mut self) -> &mut A {
        &mut self.inner
    }

    /// Unwraps the inner agent.
    pub fn into_inner(self) -> A {
        self.inner
    }
}

impl<A: Agent> Agent for TokenBudget<A> {
    fn invoke(&self, scope: Scope, prompt: Prompt) -> EventStream {
        Box::pin(BudgetStream {
            inner: Some(self.inner.invoke(scope, prompt)),
            max_tokens: self.max_tokens,
            used: 0,
            exceeded: false,
        })
    }
}

struct BudgetStream {
    inner: Option<EventStream>,
    max_tokens: u64,
    used: u64,
    exceeded: bool,
}

impl Stream for BudgetStream {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        let this = &mut *self;
        if this.exceeded {
            this.exceeded = false;
            this.inner = None;
            return Poll::Ready(Some(AgentEvent::failed(
                format!(
                    "the turn used {} tokens, over its budget of {}",
                    this.used, this.max_tokens
                ),
                false,
                Some(codes::BUDGET_EXCEEDED),
            )));
        }
        let polled = poll_relay(&mut this.inner, cx);
        if let Poll::Ready(Some(AgentEvent::Usage {
            input_tokens,
            output_tokens,
            cache_read_tokens,
            cache_write_tokens,
            ..
        })) = &polled
        {
            let step = [input_tokens, output_tokens, cache_read_tokens, cache_write_tokens]
                .into_iter()
                .fold(0u64, |sum, n| sum.saturating_add(*n));
            this.used = this.used.saturating_add(step);
            this.exceeded = this.used > this.max_tokens;
        }
        polled
    }
}

//! [`Deadline`]: ends a turn that runs too long with `failed{code:"deadline"}`.

mod layer;

pub use layer::DeadlineLayer;

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use std::future::Future as _;

use futures_core::Stream;
use tokio::time::{Instant, Sleep};

use super::poll_relay;
use crate::{Agent, AgentEvent, EventStream, Prompt, Scope, codes};

/// Gives every turn of the inner agent at most `limit`, counted from the stream's first poll.
///
/// When the limit passes before the turn's terminal, the inner stream is dropped (which cancels
/// its work, MUST 3) and the caller receives `failed` with code [`codes::DEADLINE`] and
/// `retryable: false`. Every other event passes through unchanged.
#[derive(Debug, Clone)]
pub struct Deadline<A> {
    inner: A,
    limit: Duration,
}

impl<A> Deadline<A> {
    /// Wraps `inner` with a per-turn `limit`.
    pub const fn new(inner: A, limit: Duration) -> Self {
        Self { inner, limit }
    }

    /// The per-turn limit.
    pub fn limit(&self) -> Duration {
        self.limit
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

impl<A: Agent> Agent for Deadline<A> {
    fn invoke(&self, scope: Scope, prompt: Prompt) -> EventStream {
        Box::pin(DeadlineStream {
            inner: Some(self.inner.invoke(scope, prompt)),
            limit: self.limit,
            // Created on the first poll: `invoke` may be called outside a runtime.
            timer: None,
        })
    }
}

struct DeadlineStream {
    inner: Option<EventStream>,
    limit: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl Stream for DeadlineStream {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        let this = &mut *self;
        if this.inner.is_none() {
            return Poll::Ready(None);
        }
        let limit = this.limit;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(Instant::now() + limit)));
        if timer.as_mut().poll(cx).is_ready() {
            this.inner = None;
            return Poll::Ready(Some(AgentEvent::failed(
                format!(
                    "the turn did not finish within its deadline of {} ms",
                    limit.as_millis()
                ),
                false,
                Some(codes::DEADLINE),
            )));
        }
        poll_relay(&mut this.inner, cx)
    }
}

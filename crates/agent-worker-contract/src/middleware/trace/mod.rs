//! [`Traced`]: one `tracing` span per turn.

mod layer;

pub use layer::TraceLayer;

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use tracing::Span;

use super::poll_relay;
use crate::{Agent, AgentEvent, EventStream, Prompt, Scope};

/// Runs every turn of the inner agent inside a `turn` span that carries `session` and
/// `turn_id`, and logs how the turn ended. Events pass through unchanged.
#[derive(Debug, Clone)]
pub struct Traced<A> {
    inner: A,
}

impl<A> Traced<A> {
    /// Wraps `inner`.
    pub const fn new(inner: A) -> Self {
        Self { inner }
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

impl<A: Agent> Agent for Traced<A> {
    fn invoke(&self, scope: Scope, prompt: Prompt) -> EventStream {
        let span = tracing::info_span!(
            "turn",
            session = %scope.session,
            turn_id = scope.turn_id().map_or("", |t| t.as_str()),
        );
        let inner = span.in_scope(|| self.inner.invoke(scope, prompt));
        Box::pin(TracedStream {
            inner: Some(inner),
            span,
            events: 0,
        })
    }
}

struct TracedStream {
    inner: Option<EventStream>,
    span: Span,
    events: u64,
}

impl Stream for TracedStream {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        let polled = poll_relay(&mut this.inner, cx);
        if let Poll::Ready(Some(event)) = &polled {
            this.events += 1;
            match event {
                AgentEvent::Completed { .. } => tracing::info!(events = this.events, "turn completed"),
                AgentEvent::Failed {
                    details,
                    retryable,
                    code,
                } => {
                    tracing::warn!(events = this.events, retryable, code = code.as_deref(), %details, "turn failed")
                }
                _ => tracing::trace!(kind = event.type_name(), "event"),
            }
        }
        polled
    }
}

impl Drop for TracedStream {
    fn drop(&mut self) {
        if self.inner.is_some() {
            let _entered = self.span.enter();
            tracing::info!(events = self.events, "turn cancelled by the caller");
        }
    }
}

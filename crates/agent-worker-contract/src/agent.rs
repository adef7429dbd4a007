//! The [`Agent`] trait, its extension trait [`AgentExt`] and [`agent_fn`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_core::Stream;

use super::collect::{CollectError, Collected, collect};
use super::{AgentEvent, Prompt, Scope};

/// The stream one turn produces: boxed, `Send` and `'static`, so any caller can hold it across
/// tasks and drop it to cancel the turn.
pub type EventStream = Pin<Box<dyn Stream<Item = AgentEvent> + Send + 'static>>;

/// An agent: one call runs one turn and streams its events.
///
/// `invoke` starts nothing by itself: the work happens as the caller polls the stream. What an
/// implementation MUST do (Agent Handler §6):
///
/// 1. **Exactly one terminal.** Consumed to its natural end, the stream's last event is
///    [`Completed`](AgentEvent::Completed) or [`Failed`](AgentEvent::Failed), and nothing
///    follows it.
/// 2. **Failures are events.** Polling never panics. Every failure, bad input included, is a
///    `Failed` event.
/// 3. **Cancellation is prompt.** When the caller drops the stream, in-flight model and tool
///    work is aborted and resources are released. No terminal event is expected.
/// 6. **Portable** (optional). Nothing requires two turns of one session to run in the same
///    process: state is rebuilt from external storage.
///
/// What a caller MUST do: a terminal consumer ignores event types it does not know (MUST 4);
/// a relay forwards them unchanged (MUST 5). [`protocol::conformance`](super::conformance)
/// checks an implementation against these rules.
///
/// # Examples
///
/// An agent that answers with the prompt's text, written with [`agent_fn`]:
///
/// ```
/// use agent_worker_contract::{agent_fn, AgentEvent, AgentExt, Prompt, Scope};
///
/// let echo = agent_fn(|_scope: Scope, prompt: Prompt| {
///     futures_util::stream::iter([AgentEvent::text(prompt.text), AgentEvent::completed()])
/// });
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let answer = echo.collect(Scope::new("s1".parse().unwrap()), Prompt::text("hello")).await.unwrap();
/// assert_eq!(answer.text, "hello");
/// # });
/// ```
///
/// The wrong way: ending without a terminal breaks MUST 1, and `collect` says so.
///
/// ```
/// use agent_worker_contract::{agent_fn, AgentEvent, AgentExt, CollectError, Prompt, Scope};
///
/// let broken = agent_fn(|_: Scope, _: Prompt| futures_util::stream::iter([AgentEvent::text("hi")]));
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let err = broken.collect(Scope::new("s1".parse().unwrap()), Prompt::text("x")).await.unwrap_err();
/// assert!(matches!(err, CollectError::NoTerminal));
/// # });
/// ```
pub trait Agent: Send + Sync {
    /// Runs one turn of `scope.session` on `prompt`, streaming its events.
    fn invoke(&self, scope: Scope, prompt: Prompt) -> EventStream;
}

impl<A: Agent + ?Sized> Agent for Arc<A> {
    fn invoke(&self, scope: Scope, prompt: Prompt) -> EventStream {
        (**self).invoke(scope, prompt)
    }
}

impl<A: Agent + ?Sized> Agent for Box<A> {
    fn invoke(&self, scope: Scope, prompt: Prompt) -> EventStream {
        (**self).invoke(scope, prompt)
    }
}

impl<A: Agent + ?Sized> Agent for &A {
    fn invoke(&self, scope: Scope, prompt: Prompt) -> EventStream {
        (**self).invoke(scope, prompt)
    }
}

/// Conveniences for every [`Agent`]; the trait itself stays one method.
pub trait AgentExt: Agent {
    /// Runs a turn and folds it into its text and data (buffered consumption, §7).
    fn collect(
        &self,
        scope: Scope,
        prompt: Prompt,
    ) -> impl Future<Output = Result<Collected, CollectError>> + Send + 'static {
        collect(self.invoke(scope, prompt))
    }

    /// Wraps this agent in a middleware layer.
    fn layer<L>(self, layer: L) -> L::Service
    where
        L: tower_layer::Layer<Self>,
        Self: Sized,
    {
        layer.layer(self)
    }

    /// Boxes this agent behind an `Arc`, for callers that hold agents of several types.
    fn shared(self) -> Arc<dyn Agent>
    where
        Self: Sized + 'static,
    {
        Arc::new(self)
    }
}

impl<A: Agent + ?Sized> AgentExt for A {}

/// An [`Agent`] made from a function; see [`agent_fn`].
#[derive(Clone, Copy)]
pub struct AgentFn<F> {
    f: F,
}

impl<F> fmt::Debug for AgentFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentFn").finish_non_exhaustive()
    }
}

/// Makes an [`Agent`] from a function that returns a stream of events.
pub fn agent_fn<F, S>(f: F) -> AgentFn<F>
where
    F: Fn(Scope, Prompt) -> S + Send + Sync,
    S: Stream<Item = AgentEvent> + Send + 'static,
{
    AgentFn { f }
}

impl<F, S> Agent for AgentFn<F>
where
    F: Fn(Scope, Prompt) -> S + Send + Sync,
    S: Stream<Item = AgentEvent> + Send + 'static,
{
    fn invoke(&self, scope: Scope, prompt: Prompt) -> EventStream {
        Box::pin((self.f)(scope, prompt))
    }
}

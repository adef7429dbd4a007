//! Middleware: wrappers that are themselves an [`Agent`](super::Agent).
//!
//! Each wrapper relays the inner stream: every event it does not act on, unknown ones included,
//! passes through unchanged (MUST 5), and nothing passes after a terminal (MUST 1). Each comes
//! with a [`tower_layer::Layer`] so that wrappers stack:
//!
//! ```
//! use std::time::Duration;
//! use agent_worker_contract::{agent_fn, AgentEvent, AgentExt, Prompt, Scope};
//! use agent_worker_contract::middleware::{DeadlineLayer, TokenBudgetLayer, TraceLayer};
//!
//! let agent = agent_fn(|_: Scope, _: Prompt| futures_util::stream::iter([AgentEvent::completed()]))
//!     .layer(TokenBudgetLayer::new(50_000))
//!     .layer(DeadlineLayer::new(Duration::from_secs(60)))
//!     .layer(TraceLayer::new());
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! assert!(agent.collect(Scope::new("s".parse().unwrap()), Prompt::text("hi")).await.is_ok());
//! # });
//! ```

mod budget;
mod deadline;
mod trace;

pub use budget::{TokenBudget, TokenBudgetLayer};
pub use deadline::{Deadline, DeadlineLayer};
pub use trace::{TraceLayer, Traced};

use std::task::{Context, Poll};

use super::{AgentEvent, EventStream};

/// Polls a relayed stream, and drops it once it has yielded its terminal event or ended, so
/// that nothing follows a terminal and the inner turn's resources go at once.
fn poll_relay(inner: &mut Option<EventStream>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
    let Some(stream) = inner.as_mut() else {
        return Poll::Ready(None);
    };
    let polled = stream.as_mut().poll_next(cx);
    match &polled {
        Poll::Ready(Some(event)) if event.is_terminal() => *inner = None,
        Poll::Ready(None) => *inner = None,
        _ => {}
    }
    polled
}

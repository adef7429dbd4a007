//! Where a running turn's events go: stdout JSON lines, a DynamoDB event log read back from a
//! cursor, an HTTP emit endpoint, or any [`Sink`] of your own.
//!
//! A sink opens one [`TurnSink`] per turn, so per-turn state (a text buffer, a sequence number)
//! lives there. [`Sinks`] fans events out to several; a sink's failure is logged and never fails
//! the turn.

mod http;
mod pending;
mod stdout;

pub use http::{
    API_KEY_HEADER, EMIT_ATTEMPTS, EMIT_DRAIN, EMIT_RETRY_DELAY, EMIT_TEXT_BYTES, EMIT_TEXT_WINDOW,
    EMIT_TIMEOUT, HttpEmitSink,
};
pub use pending::PendingEvents;
pub use stdout::StdoutSink;

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::Failure;

use async_trait::async_trait;

use crate::protocol::AgentEvent;
use crate::protocol::ErrorChain;

/// The turn a sink is writing for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRef {
    /// The session.
    pub session: crate::session::SessionId,
    /// The turn.
    pub turn_id: crate::session::TurnId,
    /// The payload's `socketRoom`: where a realtime server routes the turn's events. It travels
    /// with every event a sink sends.
    pub socket_room: Option<String>,
}

impl TurnRef {
    /// `turn_id` of `session`, in no socket room.
    pub fn new(session: crate::session::SessionId, turn_id: crate::session::TurnId) -> Self {
        Self {
            session,
            turn_id,
            socket_room: None,
        }
    }

    /// What a sink sends for `event`: the turn, its socket room when it has one, the event.
    pub fn envelope(&self, session_key: &str, event: &AgentEvent) -> serde_json::Value {
        let mut body =
            serde_json::json!({ session_key: self.session, "turnId": self.turn_id, "event": event });
        if let Some(room) = &self.socket_room {
            body["socketRoom"] = room.clone().into();
        }
        body
    }
}

/// A sink that failed to take an event; logged by [`Sinks`], never fatal to a turn. What it
/// says is what was being done; the failure underneath (an SDK's, an HTTP client's) is its
/// source, its text not repeated ([`chain`](crate::protocol::chain) prints both).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(transparent)]
pub struct SinkError(Failure);

impl SinkError {
    /// A sink error that says `context` alone.
    pub fn new(context: impl Into<String>) -> Self {
        Self(Failure::new(context))
    }

    /// A sink error: `context` failed with `source`, kept as its source.
    pub fn caused_by(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self(Failure::caused_by(context, source))
    }
}

/// A destination for turns' events.
///
/// ```
/// use agent_worker_core::protocol::AgentEvent;
/// use agent_worker_core::sinks::{Sink, SinkError, TurnRef, TurnSink};
///
/// /// Counts events.
/// #[derive(Debug, Default)]
/// struct Counter;
///
/// #[derive(Debug, Default)]
/// struct Count(usize);
///
/// #[async_trait::async_trait]
/// impl TurnSink for Count {
///     async fn event(&mut self, _event: &AgentEvent) -> Result<(), SinkError> {
///         self.0 += 1;
///         Ok(())
///     }
/// }
///
/// impl Sink for Counter {
///     fn open(&self, _turn: &TurnRef) -> Box<dyn TurnSink> {
///         Box::new(Count::default())
///     }
/// }
/// ```
pub trait Sink: Send + Sync + fmt::Debug {
    /// Opens the sink for one turn.
    fn open(&self, turn: &TurnRef) -> Box<dyn TurnSink>;
}

/// One turn's view of a sink: it receives the turn's events in order, then `close`.
#[async_trait]
pub trait TurnSink: Send + fmt::Debug {
    /// Takes one event.
    async fn event(&mut self, event: &AgentEvent) -> Result<(), SinkError>;

    /// Writes whatever is buffered. Called once, after the last event.
    async fn close(&mut self) -> Result<(), SinkError> {
        Ok(())
    }

    /// When this sink wants [`flush`](Self::flush) called if no event comes before: a sink that
    /// gathers events into fewer writes says when the oldest it holds must go out. `None` (the
    /// default): it holds nothing back.
    fn flush_due(&self) -> Option<Instant> {
        None
    }

    /// Writes what it has gathered. The host calls it once [`flush_due`](Self::flush_due) has
    /// passed with no event in between.
    async fn flush(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// Several sinks, written together.
#[derive(Debug, Clone, Default)]
pub struct Sinks {
    sinks: Vec<Arc<dyn Sink>>,
}

impl Sinks {
    /// No sinks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a sink.
    #[must_use]
    pub fn with(mut self, sink: impl Sink + 'static) -> Self {
        self.sinks.push(Arc::new(sink));
        self
    }

    /// Opens every sink for one turn.
    pub fn open(&self, turn: &TurnRef) -> OpenSinks {
        OpenSinks {
            turn: turn.clone(),
            open: self.sinks.iter().map(|s| s.open(turn)).collect(),
        }
    }
}

/// Every sink, opened for one turn.
#[derive(Debug)]
pub struct OpenSinks {
    turn: TurnRef,
    open: Vec<Box<dyn TurnSink>>,
}

impl OpenSinks {
    /// Sends one event to every sink; a failure is logged.
    pub async fn event(&mut self, event: &AgentEvent) {
        for sink in &mut self.open {
            if let Err(e) = sink.event(event).await {
                tracing::warn!(turn_id = %self.turn.turn_id, session = %self.turn.session, error = %ErrorChain(&e), "a sink dropped an event");
            }
        }
    }

    /// The soonest any sink wants [`flush`](Self::flush) called, if one does.
    pub fn flush_due(&self) -> Option<Instant> {
        self.open.iter().filter_map(|sink| sink.flush_due()).min()
    }

    /// Flushes every sink whose time has come; a failure is logged.
    pub async fn flush(&mut self) {
        let now = Instant::now();
        for sink in &mut self.open {
            if sink.flush_due().is_some_and(|due| due <= now)
                && let Err(e) = sink.flush().await
            {
                tracing::warn!(turn_id = %self.turn.turn_id, session = %self.turn.session, error = %ErrorChain(&e), "a sink could not write what it gathered; it tries again");
            }
        }
    }

    /// Closes every sink; a failure is logged.
    pub async fn close(mut self) {
        for sink in &mut self.open {
            if let Err(e) = sink.close().await {
                tracing::warn!(turn_id = %self.turn.turn_id, session = %self.turn.session, error = %ErrorChain(&e), "a sink failed to close");
            }
        }
    }
}

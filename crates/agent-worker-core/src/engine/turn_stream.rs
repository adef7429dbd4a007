//! The stream a turn returns: a driver future that does the work, and the events it emits.
//!
//! The driver is polled from inside `poll_next`, so the turn runs as fast as its caller reads
//! and no task is spawned: dropping the stream drops the driver, and with it the model request
//! and every running tool (MUST 3). A panic in the driver becomes a `failed` event (MUST 2), and
//! a driver that ends without a terminal gets one (MUST 1).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use futures_core::Stream;
use futures_util::FutureExt as _;
use tokio::sync::mpsc;

use crate::protocol::{AgentEvent, EventStream, codes};

/// Where a turn's driver sends its events.
#[derive(Debug, Clone)]
pub(crate) struct Emitter {
    tx: mpsc::UnboundedSender<AgentEvent>,
    /// How many events were sent.
    sent: Arc<AtomicUsize>,
}

impl Emitter {
    /// Sends one event to the caller.
    pub(crate) fn emit(&self, event: AgentEvent) {
        // The receiver lives in the stream that polls this driver: it cannot be gone while the
        // driver runs.
        let _ = self.tx.send(event);
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// How many events were sent so far.
    pub(crate) fn sent(&self) -> usize {
        self.sent.load(Ordering::Relaxed)
    }

    /// Returns once the caller has taken every event sent so far. The stream polls its driver
    /// only when it holds no event, so one pause is enough: the driver runs on when the caller,
    /// having taken (and, reading in order, handled) each event, asks for the next.
    pub(crate) async fn handed_over(&self) {
        tokio::task::yield_now().await;
    }
}

type Driver = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Runs `turn` as an [`EventStream`].
pub(crate) fn turn_stream<F, Fut>(turn: F) -> EventStream
where
    F: FnOnce(Emitter) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let driver = turn(Emitter {
        tx: tx.clone(),
        sent: Arc::default(),
    });
    Box::pin(TurnStream {
        driver: Some(Box::pin(AssertUnwindSafe(driver).catch_unwind().map(
            move |result| {
                if let Err(panic) = result {
                    let why = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    tracing::error!(panic = %why, "the turn panicked");
                    let _ = tx.send(AgentEvent::failed(
                        "the agent hit a bug and stopped; the worker's log has the details".to_owned(),
                        false,
                        Some(codes::INTERNAL),
                    ));
                }
            },
        ))),
        rx,
        ended: false,
    })
}

struct TurnStream {
    driver: Option<Driver>,
    rx: mpsc::UnboundedReceiver<AgentEvent>,
    ended: bool,
}

impl TurnStream {
    fn yield_event(&mut self, event: AgentEvent) -> Poll<Option<AgentEvent>> {
        if event.is_terminal() {
            self.ended = true;
            self.driver = None;
        }
        Poll::Ready(Some(event))
    }
}

impl Stream for TurnStream {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        if let Ok(event) = this.rx.try_recv() {
            return this.yield_event(event);
        }
        if let Some(driver) = this.driver.as_mut()
            && driver.as_mut().poll(cx).is_ready()
        {
            this.driver = None;
        }
        match this.rx.poll_recv(cx) {
            Poll::Ready(Some(event)) => this.yield_event(event),
            Poll::Pending if this.driver.is_some() => Poll::Pending,
            // The driver ended and every event was read, with no terminal among them.
            _ => {
                this.ended = true;
                Poll::Ready(Some(AgentEvent::failed(
                    "the agent stopped without saying how the turn ended",
                    false,
                    Some(codes::INTERNAL),
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::collect;
    use futures_util::StreamExt;

    #[tokio::test]
    async fn events_flow_in_order_and_stop_at_the_terminal() {
        let events: Vec<_> = turn_stream(|out| async move {
            out.emit(AgentEvent::text("a"));
            tokio::task::yield_now().await;
            out.emit(AgentEvent::text("b"));
            out.emit(AgentEvent::completed());
            out.emit(AgentEvent::text("never seen"));
        })
        .collect()
        .await;
        assert_eq!(
            events,
            vec![
                AgentEvent::text("a"),
                AgentEvent::text("b"),
                AgentEvent::completed()
            ]
        );
    }

    #[tokio::test]
    async fn a_panicking_driver_ends_with_failed() {
        let err = collect(turn_stream(|out| async move {
            out.emit(AgentEvent::text("a"));
            panic!("boom");
        }))
        .await
        .unwrap_err();
        // The client hears of a bug; what the panic said stays in the log.
        let said = crate::protocol::chain(&err);
        assert!(said.contains("hit a bug") && !said.contains("boom"), "{said}");
    }

    #[tokio::test]
    async fn a_driver_without_terminal_gets_one() {
        let events: Vec<_> = turn_stream(|out| async move { out.emit(AgentEvent::text("a")) })
            .collect()
            .await;
        assert_eq!(events.len(), 2);
        assert!(matches!(&events[1], AgentEvent::Failed { code: Some(c), .. } if c == codes::INTERNAL));
    }
}

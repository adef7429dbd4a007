//! [`HttpEmitSink`]: each event `POST`ed to `{url}/api/emit`, as a realtime server takes them.

use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{PendingEvents, Sink, SinkError, TurnRef, TurnSink};
use crate::protocol::AgentEvent;
use crate::protocol::ErrorChain;

/// Tries per event, the first included.
pub const EMIT_ATTEMPTS: u32 = 3;
/// The wait before the second try; it doubles after each.
pub const EMIT_RETRY_DELAY: Duration = Duration::from_millis(100);
/// How long one request may take.
pub const EMIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long closing a turn waits for its events to go out.
pub const EMIT_DRAIN: Duration = Duration::from_secs(10);
/// The header that carries the API key.
pub const API_KEY_HEADER: &str = "x-api-key";
/// How long a text (or thinking) delta waits for the next ones before it is sent, by default:
/// the deltas of that time go out as one event.
pub const EMIT_TEXT_WINDOW: Duration = Duration::from_millis(100);
/// Merged deltas stop growing at this many bytes.
pub const EMIT_TEXT_BYTES: usize = 4096;

/// Sends every event of a turn to `POST {url}/api/emit` with the API key in `x-api-key`; the
/// body is `{"conversationId":..,"turnId":..,"event":{..}}`.
///
/// Events go out in order from a task of the turn's own, so a slow or dead endpoint never holds
/// the turn up and never fails it. Deltas are batched: consecutive text (or thinking) deltas
/// that come within the text window ([`EMIT_TEXT_WINDOW`] unless
/// [`with_text_window`](Self::with_text_window) says otherwise), or while an earlier event is
/// being sent, go as one event, so a streamed answer costs a few requests, not one per token.
/// No other event waits, and none is reordered. Each event is tried [`EMIT_ATTEMPTS`] times;
/// once one has failed every try, the endpoint is taken as down for the rest of the turn and
/// only the terminal is still tried. Closing sends what is held at once and waits at most
/// [`EMIT_DRAIN`] for what is queued.
#[derive(Debug, Clone)]
pub struct HttpEmitSink {
    client: reqwest::Client,
    endpoint: String,
    api_key: String,
    text_window: Duration,
}

impl HttpEmitSink {
    /// A sink for the server at `base_url` (`http://` or `https://`), with `api_key`.
    pub fn new(base_url: &str, api_key: impl Into<String>) -> Result<Self, SinkError> {
        let base = base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(SinkError::new(format!(
                "the emit URL {base_url:?} must start with http:// or https://"
            )));
        }
        let api_key = api_key.into();
        if api_key.trim().is_empty() {
            return Err(SinkError::new("the emit API key is empty"));
        }
        let client = reqwest::Client::builder()
            .timeout(EMIT_TIMEOUT)
            .build()
            .map_err(|e| SinkError::caused_by("cannot build the HTTP client", e))?;
        Ok(Self {
            client,
            endpoint: format!("{base}/api/emit"),
            api_key,
            text_window: EMIT_TEXT_WINDOW,
        })
    }

    /// How long a delta waits for the next ones before it is sent; zero sends each delta that
    /// finds nothing queued behind it at once.
    #[must_use]
    pub fn with_text_window(mut self, window: Duration) -> Self {
        self.text_window = window;
        self
    }
}

impl Sink for HttpEmitSink {
    fn open(&self, turn: &TurnRef) -> Box<dyn TurnSink> {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(deliver(self.clone(), turn.clone(), rx));
        Box::new(HttpTurn {
            tx: Some(tx),
            task: Some(task),
        })
    }
}

/// One turn's side of the sink. Dropped without `close`, its sender goes with it and the
/// (detached) task still sends what was queued.
#[derive(Debug)]
struct HttpTurn {
    tx: Option<mpsc::UnboundedSender<AgentEvent>>,
    task: Option<JoinHandle<()>>,
}

#[async_trait]
impl TurnSink for HttpTurn {
    async fn event(&mut self, event: &AgentEvent) -> Result<(), SinkError> {
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| SinkError::new("the sink is closed"))?;
        tx.send(event.clone())
            .map_err(|_| SinkError::new("the emit task stopped"))
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.tx = None;
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match tokio::time::timeout(EMIT_DRAIN, task).await {
            Ok(_) => Ok(()),
            Err(_) => Err(SinkError::new(format!(
                "events were still being sent {} s after the turn ended; the rest are dropped",
                EMIT_DRAIN.as_secs()
            ))),
        }
    }
}

/// The turn's events, as they are to be sent: what came while the last one was being sent is
/// merged, and a delta alone waits up to the text window for the ones after it.
#[derive(Debug)]
struct Outbox {
    rx: mpsc::UnboundedReceiver<AgentEvent>,
    pending: PendingEvents,
    /// Whether the turn may still send events.
    open: bool,
    window: Duration,
}

impl Outbox {
    /// The next event to send; `None` once the turn has closed and everything went.
    async fn next(&mut self) -> Option<AgentEvent> {
        if self.pending.is_empty() && self.open {
            match self.rx.recv().await {
                Some(event) => self.pending.push(event),
                None => self.open = false,
            }
        }
        while let Ok(event) = self.rx.try_recv() {
            self.pending.push(event);
        }
        if self.open && self.pending.len() == 1 && self.pending.ends_in_delta() {
            let until = Instant::now() + self.window;
            // More deltas merge into it (the length stays 1) until the window ends, another
            // kind of event comes, or the turn closes.
            while self.pending.len() == 1 {
                match tokio::time::timeout_at(until, self.rx.recv()).await {
                    Ok(Some(event)) => self.pending.push(event),
                    Ok(None) => {
                        self.open = false;
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        self.pending.pop_front()
    }
}

async fn deliver(sink: HttpEmitSink, turn: TurnRef, rx: mpsc::UnboundedReceiver<AgentEvent>) {
    let mut outbox = Outbox {
        rx,
        pending: PendingEvents::new(EMIT_TEXT_BYTES),
        open: true,
        window: sink.text_window,
    };
    let mut down = false;
    while let Some(event) = outbox.next().await {
        if down && !event.is_terminal() {
            continue;
        }
        let body = turn.envelope("conversationId", &event);
        let attempts = if down { 1 } else { EMIT_ATTEMPTS };
        let mut delay = EMIT_RETRY_DELAY;
        let mut last_error = None;
        for attempt in 1..=attempts {
            match post(&sink, &body).await {
                Ok(()) => {
                    last_error = None;
                    break;
                }
                Err(e) => last_error = Some(e),
            }
            if attempt < attempts {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
        if let Some(last_error) = last_error {
            down = true;
            tracing::warn!(
                turn_id = %turn.turn_id,
                session = %turn.session,
                endpoint = %sink.endpoint,
                error = %ErrorChain(&last_error),
                "the emit endpoint did not take an event; the turn goes on without it"
            );
        }
    }
}

async fn post(sink: &HttpEmitSink, body: &serde_json::Value) -> Result<(), SinkError> {
    let response = sink
        .client
        .post(&sink.endpoint)
        .header(API_KEY_HEADER, &sink.api_key)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| SinkError::caused_by("the event was not sent", e))?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(SinkError::new(format!("HTTP {status}")))
    }
}

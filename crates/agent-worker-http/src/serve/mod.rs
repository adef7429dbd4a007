//! Serving a router within limits: the one accept loop of the container host and the Agent
//! Protocol server.
//!
//! `axum::serve` sets no timeout and no cap: a client that opens a socket and sends nothing, or
//! sends a byte a minute, holds it forever, and a few hundred such sockets exhaust the process's
//! file descriptors. Here each connection must send its request head within
//! [`ConnectionLimits::header_read_timeout`] (and the next one's within it, on a kept-alive
//! connection), a request body must arrive whole within
//! [`ConnectionLimits::body_read_timeout`], a client that takes no byte of its response for
//! [`ConnectionLimits::send_timeout`] is dropped, and at most
//! [`ConnectionLimits::max_connections`] are open at once: the next waits in the listen backlog.
//! A handler that works for a long time (a turn, an Agent Protocol step) is not cut short.
//!
//! Each request head is read before hyper reads it ([`head`]), within
//! [`ConnectionLimits::max_target_bytes`], [`ConnectionLimits::max_head_bytes`] and
//! [`ConnectionLimits::max_headers`]: a head hyper would answer itself with an empty body (a
//! target too long, a byte a URL may not hold, too many or too large headers, a malformed
//! length) is answered by the server in its own shape instead ([`serve_answering`]). After a
//! request that asks to switch protocols (`Upgrade`), the bytes pass unread: the switched
//! protocol's, or, when the switch is refused, none, for that answer closes the connection.

mod head;

pub use head::{AnswerRefused, RefusedHead};

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use agent_worker_contract::ErrorChain;
use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::{Instant, Sleep};

/// How long a connection may take to send a request head, by default.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request body may take to arrive whole, by default.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a response may wait for its client to take a byte, by default.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// The most connections open at once, by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// The longest request target (path and query) taken, by default, in bytes.
pub const DEFAULT_MAX_TARGET_BYTES: usize = 16 * 1024;
/// The largest request head taken, by default, in bytes.
pub const DEFAULT_MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most header lines a request may have, by default (hyper's own default).
pub const DEFAULT_MAX_HEADERS: usize = 100;
/// The least hyper buffers of a connection's reads (its own default), in bytes.
const MIN_READ_BUFFER: usize = 8192 + 4096 * 100;

/// The limits every connection is served within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From the first byte a connection may send (or the end of its previous response) to the
    /// end of a request head.
    pub header_read_timeout: Duration,
    /// From a request's head to the end of its body.
    pub body_read_timeout: Duration,
    /// How long a response may wait for its client to take a byte.
    pub send_timeout: Duration,
    /// The most connections open at once.
    pub max_connections: usize,
    /// The longest request target (path and query), in bytes: 414 past it.
    pub max_target_bytes: usize,
    /// The largest request head (its request line and headers), in bytes: 431 past it.
    pub max_head_bytes: usize,
    /// The most header lines a request may have: 431 past it.
    pub max_headers: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_target_bytes: DEFAULT_MAX_TARGET_BYTES,
            max_head_bytes: DEFAULT_MAX_HEAD_BYTES,
            max_headers: DEFAULT_MAX_HEADERS,
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` resolves; then accepts no
/// more connections, lets each open one finish its request in flight, and returns once all are
/// closed. A connection switched to another protocol (a WebSocket's) is its route's from then
/// on: it is neither waited for nor closed here. A refused head is answered
/// `{"error", "field"}` ([`RefusedHead::json`]).
pub async fn serve_within(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_answering(listener, router, limits, RefusedHead::json, shutdown).await
}

/// [`serve_within`], a refused head answered by `answer`, in the router's own shape.
pub async fn serve_answering(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    answer: AnswerRefused,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let body_read_timeout = limits.body_read_timeout;
    let router = router.layer(axum::middleware::from_fn(move |request: Request, next: Next| {
        body_within(request, next, body_read_timeout)
    }));
    let permits = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let heads = head::HeadLimits {
        max_target_bytes: limits.max_target_bytes,
        max_head_bytes: limits.max_head_bytes,
        max_headers: limits.max_headers.max(1),
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    // hyper's own bounds stay past the guard's, so that what it reads it takes.
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_headers(heads.max_headers)
        .max_buf_size(MIN_READ_BUFFER.max(heads.max_head_bytes.saturating_mul(2)));
    // Shutting down: each connection is told (it finishes the request it serves, then
    // closes), and the server waits until every one has ended (each holds a `serving`).
    let (stopping, told) = watch::channel(false);
    let (serving, mut all_ended) = mpsc::channel::<()>(1);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors, or a connection reset before it was taken: the listener
                // goes on after a pause, so one bad moment does not end the server.
                Err(e) => {
                    tracing::warn!(error = %ErrorChain(&e), "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let refusals = head::Refusals::new();
        let watched = Watched::new(stream, limits.send_timeout, permit);
        let io = TokioIo::new(head::Guarded::new(watched, heads, refusals.clone()));
        let service = head::Answering::new(TowerToHyperService::new(router.clone()), refusals, answer);
        // With upgrades: a WebSocket's connection is handed to its route once switched.
        let connection = http.serve_connection(io, service).with_upgrades();
        let (mut told, serving) = (told.clone(), serving.clone());
        tokio::spawn(async move {
            let _serving = serving;
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = async { drop(told.wait_for(|stopping| *stopping).await) } => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %ErrorChain(&e), "a connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    drop(serving);
    // `None` once every connection's task has ended.
    let _ = all_ended.recv().await;
    Ok(())
}

/// Passes the request on with a body that fails once `limit` has passed since its head: a body
/// that trickles in is cut off, not waited for.
async fn body_within(request: Request, next: Next, limit: Duration) -> Response {
    // A request without a body (a GET, a `Content-Length: 0`) has nothing to wait for.
    if axum::body::HttpBody::is_end_stream(request.body()) {
        return next.run(request).await;
    }
    let deadline = Instant::now() + limit;
    let (parts, body) = request.into_parts();
    let mut data = body.into_data_stream();
    let mut ended = false;
    let timed = futures_util::stream::poll_fn(move |cx| {
        if ended {
            return Poll::Ready(None);
        }
        if Instant::now() >= deadline {
            ended = true;
            return Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the request body did not arrive within {} s", limit.as_secs()),
            ))));
        }
        data.poll_next_unpin(cx)
            .map(|item| item.map(|chunk| chunk.map_err(io::Error::other)))
    });
    let body = Body::from_stream(WakeAt::new(timed, deadline));
    next.run(Request::from_parts(parts, body)).await
}

/// A stream polled again at `deadline` too, so that a deadline check inside it runs even when
/// no data arrives to wake it.
struct WakeAt<S> {
    inner: S,
    timer: Pin<Box<Sleep>>,
}

impl<S> WakeAt<S> {
    fn new(inner: S, deadline: Instant) -> Self {
        Self {
            inner,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
        }
    }
}

impl<S: futures_util::Stream + Unpin> futures_util::Stream for WakeAt<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let next = self.inner.poll_next_unpin(cx);
        if next.is_pending() {
            // Registers the wake-up; once past, the inner stream has already seen the deadline.
            let _ = self.timer.as_mut().poll(cx);
        }
        next
    }
}

/// A connection's socket that fails a write its client has not taken for `stall`, and holds one
/// of the server's connection permits while it is open. Reads are not timed here: the head's
/// and the body's own deadlines bound them, and a handler at work reads nothing.
struct Watched {
    stream: TcpStream,
    stall: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    _permit: OwnedSemaphorePermit,
}

impl Watched {
    fn new(stream: TcpStream, stall: Duration, permit: OwnedSemaphorePermit) -> Self {
        Self {
            stream,
            stall,
            timer: None,
            _permit: permit,
        }
    }

    /// Whether a write has waited `stall` for its client; starts the clock on the first wait.
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        let stall = self.stall;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        timer.as_mut().poll(cx).is_ready()
    }

    fn timed_out(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the client took no byte for {} s", self.stall.as_secs()),
        )
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.stream).poll_write(cx, data) {
            Poll::Ready(result) => {
                self.timer = None;
                Poll::Ready(result)
            }
            Poll::Pending if self.stalled(cx) => Poll::Ready(Err(self.timed_out())),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

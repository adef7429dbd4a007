//! Request heads read before hyper reads them, so that every answer, a refusal of a head
//! included, is in the API's shape.
//!
//! hyper answers a head it cannot take (a target over 64 KiB, a byte a URL may not hold, more
//! headers or a larger head than it buffers, a malformed `Content-Length`) itself, with a status
//! and an empty body, before any route runs. [`Guarded`] sits between the socket and hyper and
//! reads each head first, as hyper would (the same parser, `httparse`, and the same rules for a
//! body's length), within [`ConnectionLimits`](super::ConnectionLimits)' smaller bounds: a head
//! hyper would refuse, or one past the bounds, never reaches it. In its place hyper reads a
//! stand-in request (`GET <marker>`, closing the connection), whose path is random for each
//! connection, and the connection's service ([`Answering`]) answers that one with the server's
//! own refusal ([`AnswerRefused`]). A good head, and its body, pass as they came: the guard
//! follows each body's length (`Content-Length`, or chunk by chunk) to find the next head.

mod read;

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use axum::http::{Request, StatusCode};
use axum::response::Response;
use futures_util::FutureExt as _;
use futures_util::future::{Either, Ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use read::{HeadRead, read_head};

/// A request head refused before it reached the router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedHead {
    /// The status it is answered with: 400, 405, 414 or 431.
    pub status: StatusCode,
    /// What was wrong.
    pub message: String,
    /// The part of the request at fault: `method`, `path`, `query`, `version`, `headers`,
    /// `Content-Length` or `Transfer-Encoding`.
    pub field: &'static str,
    /// The path the request asked for, when it could be read (`/` otherwise): which route's
    /// shape the answer takes.
    pub path: String,
}

impl RefusedHead {
    fn new(status: StatusCode, field: &'static str, message: impl Into<String>, path: String) -> Self {
        Self {
            status,
            message: message.into(),
            field,
            path,
        }
    }

    /// The answer in the one refusal shape, `{"error": message, "field": field}`: what a server
    /// without a shape of its own answers.
    pub fn json(&self) -> Response {
        use axum::response::IntoResponse as _;
        let body = serde_json::json!({ "error": self.message, "field": self.field });
        (self.status, axum::Json(body)).into_response()
    }
}

/// How a server answers a refused head: in its routes' shape.
pub type AnswerRefused = fn(&RefusedHead) -> Response;

/// The bounds a head is read within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HeadLimits {
    /// The longest request target (path and query), in bytes.
    pub(super) max_target_bytes: usize,
    /// The largest head, in bytes.
    pub(super) max_head_bytes: usize,
    /// The most header lines.
    pub(super) max_headers: usize,
}

/// What one connection's guard refused, for its service to answer: the stand-in request's path
/// (random, so that no client can send it) and the refusal.
#[derive(Debug, Clone)]
pub(super) struct Refusals {
    marker: Arc<str>,
    refused: Arc<Mutex<Option<RefusedHead>>>,
}

impl Refusals {
    pub(super) fn new() -> Self {
        Self {
            marker: format!("/.refused-head/{}", uuid::Uuid::new_v4().simple()).into(),
            refused: Arc::default(),
        }
    }

    /// The head hyper reads in place of a refused one.
    fn stand_in(&self) -> Vec<u8> {
        format!(
            "GET {} HTTP/1.1\r\nhost: refused\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            self.marker
        )
        .into_bytes()
    }

    fn put(&self, refused: RefusedHead) {
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner) = Some(refused);
    }

    /// The refusal a request to `path` stands in for, if it is the stand-in.
    fn take(&self, path: &str) -> Option<RefusedHead> {
        (path == &*self.marker)
            .then(|| self.refused.lock().unwrap_or_else(PoisonError::into_inner).take())
            .flatten()
    }
}

/// The service one connection is served by: `inner` (the router), except the stand-in of a
/// refused head, which `answer` answers. A request that asked to switch protocols (`Upgrade`)
/// and was not switched (any answer but 101) closes its connection: the guard stopped reading
/// heads after it ([`Framing::Raw`]), so nothing more is taken on that connection.
#[derive(Debug, Clone)]
pub(super) struct Answering<S> {
    inner: S,
    refusals: Refusals,
    answer: AnswerRefused,
}

impl<S> Answering<S> {
    pub(super) fn new(inner: S, refusals: Refusals, answer: AnswerRefused) -> Self {
        Self {
            inner,
            refusals,
            answer,
        }
    }
}

impl<S, B> hyper::service::Service<Request<B>> for Answering<S>
where
    S: hyper::service::Service<Request<B>, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future =
        Either<Ready<Result<Response, Infallible>>, Either<S::Future, ClosingUnlessSwitched<S::Future>>>;

    fn call(&self, request: Request<B>) -> Self::Future {
        if let Some(refused) = self.refusals.take(request.uri().path()) {
            return Either::Left(futures_util::future::ready(Ok((self.answer)(&refused))));
        }
        let upgrade = request.headers().contains_key(axum::http::header::UPGRADE);
        let answered = self.inner.call(request);
        match upgrade {
            false => Either::Right(Either::Left(answered)),
            true => Either::Right(Either::Right(answered.map(close_unless_switched as fn(_) -> _))),
        }
    }
}

/// An answer to a request that asked to switch protocols.
type ClosingUnlessSwitched<F> =
    futures_util::future::Map<F, fn(Result<Response, Infallible>) -> Result<Response, Infallible>>;

/// The answer, closing its connection unless it switched protocols.
fn close_unless_switched(answer: Result<Response, Infallible>) -> Result<Response, Infallible> {
    answer.map(|mut response| {
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            let close = axum::http::HeaderValue::from_static("close");
            response
                .headers_mut()
                .insert(axum::http::header::CONNECTION, close);
        }
        response
    })
}

/// Where the guard is in the bytes the client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// At a request head.
    Head,
    /// In a body of this many bytes more.
    Body(u64),
    /// In a chunked body.
    Chunked(Chunk),
    /// The rest passes unread: a chunked body did not follow the rules, and hyper, which fails
    /// it, closes the connection after it; or a request asked to switch protocols (`Upgrade`),
    /// and what follows is the new protocol's.
    Raw,
    /// A head was refused: its stand-in is all that is left to give.
    Refused,
    /// The client sent its last byte.
    Ended,
}

/// Where the guard is in a chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// At a chunk's size line.
    Size,
    /// In a chunk's data, this many bytes more.
    Data(u64),
    /// At the line end after a chunk's data.
    DataEnd,
    /// In the trailer lines after the last chunk.
    Trailers,
}

/// The longest chunk-size line followed (its extensions included).
const MAX_CHUNK_LINE: usize = 4096;
/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;
/// What a request line holds beside its target, at most: a method, two spaces, the version.
const REQUEST_LINE_SLACK: usize = 64;

/// A connection's socket whose request heads are read before hyper reads them (see the module).
#[derive(Debug)]
pub(super) struct Guarded<IO> {
    io: IO,
    limits: HeadLimits,
    refusals: Refusals,
    framing: Framing,
    /// Bytes read from the client that the guard has not placed yet.
    inbox: Vec<u8>,
    /// Bytes for hyper: a checked head, a body's bytes, or a refused head's stand-in.
    ready: Vec<u8>,
    /// How many of `ready` hyper has taken.
    taken: usize,
}

impl<IO> Guarded<IO> {
    pub(super) fn new(io: IO, limits: HeadLimits, refusals: Refusals) -> Self {
        Self {
            io,
            limits,
            refusals,
            framing: Framing::Head,
            inbox: Vec::new(),
            ready: Vec::new(),
            taken: 0,
        }
    }

    /// Moves the first `n` bytes of the inbox to hyper's.
    fn pass(&mut self, n: usize) {
        self.ready.extend(self.inbox.drain(..n));
    }

    fn refuse(&mut self, refused: RefusedHead) {
        tracing::info!(status = %refused.status, field = refused.field, "a request head was refused");
        self.refusals.put(refused);
        self.inbox.clear();
        self.ready.extend(self.refusals.stand_in());
        self.framing = Framing::Refused;
    }

    /// Places what the inbox holds, as far as it can be placed.
    fn advance(&mut self) {
        while self.step() {}
    }

    /// Places the next part of the inbox; whether anything moved.
    fn step(&mut self) -> bool {
        match self.framing {
            Framing::Head => match read_head(&self.inbox, self.limits) {
                HeadRead::Partial => false,
                HeadRead::Complete(len, next) => {
                    self.pass(len);
                    self.framing = next;
                    true
                }
                HeadRead::Refused(refused) => {
                    self.refuse(refused);
                    true
                }
            },
            Framing::Body(left) => {
                let n = self.inbox.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                if n == 0 {
                    return false;
                }
                self.pass(n);
                self.framing = body_left(left, n, Framing::Head, Framing::Body);
                true
            }
            Framing::Chunked(chunk) => self.chunk(chunk),
            Framing::Raw => {
                let n = self.inbox.len();
                self.pass(n);
                false
            }
            Framing::Refused | Framing::Ended => {
                self.inbox.clear();
                false
            }
        }
    }

    fn chunk(&mut self, chunk: Chunk) -> bool {
        match chunk {
            Chunk::Size => {
                let Some(end) = line_end(&self.inbox) else {
                    if self.inbox.len() > MAX_CHUNK_LINE {
                        self.framing = Framing::Raw;
                        return true;
                    }
                    return false;
                };
                self.framing = match httparse::parse_chunk_size(&self.inbox[..end]) {
                    Ok(httparse::Status::Complete((_, 0))) => Framing::Chunked(Chunk::Trailers),
                    Ok(httparse::Status::Complete((_, size))) => Framing::Chunked(Chunk::Data(size)),
                    _ => Framing::Raw,
                };
                if self.framing != Framing::Raw {
                    self.pass(end);
                }
                true
            }
            Chunk::Data(left) => {
                let n = self.inbox.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                if n == 0 {
                    return false;
                }
                self.pass(n);
                self.framing = body_left(left, n, Framing::Chunked(Chunk::DataEnd), |left| {
                    Framing::Chunked(Chunk::Data(left))
                });
                true
            }
            Chunk::DataEnd => {
                if self.inbox.len() < 2 {
                    return false;
                }
                if self.inbox.starts_with(b"\r\n") {
                    self.pass(2);
                    self.framing = Framing::Chunked(Chunk::Size);
                } else {
                    self.framing = Framing::Raw;
                }
                true
            }
            Chunk::Trailers => {
                let Some(end) = line_end(&self.inbox) else {
                    if self.inbox.len() > self.limits.max_head_bytes {
                        self.framing = Framing::Raw;
                        return true;
                    }
                    return false;
                };
                let last = matches!(&self.inbox[..end], b"\r\n" | b"\n");
                self.pass(end);
                if last {
                    self.framing = Framing::Head;
                }
                true
            }
        }
    }
}

/// The framing after `n` of `left` bytes of a body passed: `done` once none is left.
fn body_left(left: u64, n: usize, done: Framing, more: impl FnOnce(u64) -> Framing) -> Framing {
    match left.saturating_sub(n as u64) {
        0 => done,
        left => more(left),
    }
}

/// The length of the first line of `bytes`, its `\n` included, once it has one.
fn line_end(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n').map(|at| at + 1)
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.taken < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.taken);
                buf.put_slice(&this.ready[this.taken..this.taken + n]);
                this.taken += n;
                if this.taken == this.ready.len() {
                    this.ready.clear();
                    this.taken = 0;
                }
                return Poll::Ready(Ok(()));
            }
            match this.framing {
                // The client sent its last byte: the end of the stream.
                Framing::Ended => return Poll::Ready(Ok(())),
                // Nothing more for hyper after a refused head's stand-in, and no end of the
                // stream either (hyper drops a request whose connection ends as it reads it):
                // it answers the stand-in, which closes the connection.
                Framing::Refused => return Poll::Pending,
                Framing::Raw if this.inbox.is_empty() => return Pin::new(&mut this.io).poll_read(cx, buf),
                _ => {}
            }
            this.advance();
            if this.taken < this.ready.len() {
                continue;
            }
            // More is needed: at most what is left of a body whose bytes the inbox holds none
            // of (so that what follows it waits in the socket), else a chunk.
            let wanted = match this.framing {
                Framing::Body(left) if this.inbox.is_empty() => {
                    usize::try_from(left).unwrap_or(usize::MAX).min(buf.remaining())
                }
                _ => READ_CHUNK,
            }
            .clamp(1, READ_CHUNK);
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk[..wanted]);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
            let got = read.filled();
            if got.is_empty() {
                // The client is done: what it left of a head goes to hyper, which says what it
                // says of a message cut short.
                let rest = std::mem::take(&mut this.inbox);
                this.ready.extend(rest);
                this.framing = Framing::Ended;
                continue;
            }
            this.inbox.extend_from_slice(got);
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;

//! A fault proxy: a TCP listener on 127.0.0.1 in front of moto's server or the Bedrock stand-in
//! that forwards HTTP/1.1 requests as they are, except those a [`Rule`] picks, which get the
//! rule's [`Fault`]: an error answer the upstream never saw, a connection reset, or a request
//! that reaches the upstream and whose answer is lost on the way back (reset or stalled).
//!
//! It works on bytes, not on a client library, so what the AWS SDK sees is what a broken
//! network or a failing service gives it. Each forwarded request goes to the upstream on a
//! connection of its own with `Connection: close`, so the end of its answer is the upstream
//! closing, and an answer streams through as it comes.
//!
//! ```no_run
//! # async fn demo(moto: std::net::SocketAddr) -> std::io::Result<()> {
//! use agent_worker_testkit::fault_proxy::{Fault, FaultProxy, Match, Rule};
//! let proxy = FaultProxy::start(moto).await?;
//! // The next two commits are throttled; the SDK's retries see them.
//! proxy.inject(Rule::new(Match::target("TransactWriteItems"), Fault::dynamo_throttled()).times(2));
//! # Ok(()) }
//! ```

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// Which requests a rule picks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// Every request.
    Any,
    /// An `X-Amz-Target` that ends with `.<operation>`, e.g. `TransactWriteItems`.
    Target(String),
    /// A path that contains this, e.g. `converse-stream`.
    Path(String),
    /// A body that contains this, e.g. `attribute_not_exists(#status)`.
    Body(String),
    /// Every one of these.
    All(Vec<Match>),
    /// Not this.
    Not(Box<Match>),
}

impl Match {
    /// A DynamoDB (or other JSON-protocol) operation by name.
    pub fn target(operation: &str) -> Self {
        Self::Target(operation.to_owned())
    }

    /// A path that contains `part`.
    pub fn path(part: &str) -> Self {
        Self::Path(part.to_owned())
    }

    /// A body that contains `part`.
    pub fn body(part: &str) -> Self {
        Self::Body(part.to_owned())
    }

    /// Both this and `other`.
    #[must_use]
    pub fn and(self, other: Match) -> Self {
        match self {
            Self::All(mut all) => {
                all.push(other);
                Self::All(all)
            }
            one => Self::All(vec![one, other]),
        }
    }

    /// This, but not `other`.
    #[must_use]
    pub fn and_not(self, other: Match) -> Self {
        self.and(Self::Not(Box::new(other)))
    }

    fn picks(&self, request: &Request) -> bool {
        match self {
            Self::Any => true,
            Self::Target(operation) => request
                .header("x-amz-target")
                .and_then(|t| t.rsplit_once('.'))
                .is_some_and(|(_, op)| op == operation),
            Self::Path(part) => request.path.contains(part.as_str()),
            Self::Body(part) => String::from_utf8_lossy(&request.body).contains(part.as_str()),
            Self::All(all) => all.iter().all(|m| m.picks(request)),
            Self::Not(not) => !not.picks(request),
        }
    }
}

/// What a picked request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// This answer; the upstream never sees the request.
    Respond {
        /// The status.
        status: u16,
        /// Headers besides `Content-Length`.
        headers: Vec<(String, String)>,
        /// The body.
        body: String,
    },
    /// The connection is reset once the request is read; the upstream never sees it.
    Reset,
    /// The request reaches the upstream and its whole answer is read; then the connection to
    /// the client is reset: the write landed and the caller does not know.
    LoseResponse,
    /// As [`LoseResponse`](Self::LoseResponse), but the connection stays open and silent: the
    /// caller learns nothing until its own timeout.
    StallResponse,
    /// The request reaches the upstream; the first `after` bytes of its answer reach the
    /// client, then the connection is reset: an answer cut in the middle (of a head, a body, an
    /// event stream).
    CutResponse {
        /// How many bytes of the answer the client gets.
        after: usize,
    },
    /// The request reaches the upstream this long after it came, and its answer is relayed
    /// whole: a service farther away (a round trip `ms` milliseconds longer).
    Delay {
        /// The added time, in milliseconds.
        ms: u64,
    },
}

impl Fault {
    /// A DynamoDB error: the `awsJson1_0` shape the SDK parses.
    pub fn dynamo(status: u16, code: &str, message: &str) -> Self {
        Self::Respond {
            status,
            headers: vec![
                ("Content-Type".into(), "application/x-amz-json-1.0".into()),
                ("x-amzn-ErrorType".into(), code.into()),
            ],
            body: json!({
                "__type": format!("com.amazonaws.dynamodb.v20120810#{code}"),
                "message": message,
            })
            .to_string(),
        }
    }

    /// `ThrottlingException` (400).
    pub fn dynamo_throttled() -> Self {
        Self::dynamo(
            400,
            "ThrottlingException",
            "Rate of requests exceeds the allowed throughput.",
        )
    }

    /// `ProvisionedThroughputExceededException` (400).
    pub fn dynamo_throughput_exceeded() -> Self {
        Self::dynamo(
            400,
            "ProvisionedThroughputExceededException",
            "The level of configured provisioned throughput for the table was exceeded.",
        )
    }

    /// `InternalServerError` (500).
    pub fn dynamo_internal() -> Self {
        Self::dynamo(500, "InternalServerError", "Internal server error")
    }

    /// A transaction cancelled by a conflicting one (`TransactionConflict`), as DynamoDB says it.
    pub fn transaction_conflict() -> Self {
        Self::Respond {
            status: 400,
            headers: vec![
                ("Content-Type".into(), "application/x-amz-json-1.0".into()),
                ("x-amzn-ErrorType".into(), "TransactionCanceledException".into()),
            ],
            body: json!({
                "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
                "Message": "Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict]",
                "CancellationReasons": [{"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}],
            })
            .to_string(),
        }
    }

    /// A Bedrock error: `x-amzn-errortype` and a JSON body, e.g. 429 `ThrottlingException` or
    /// 503 `ServiceUnavailableException`.
    pub fn bedrock(status: u16, error_type: &str, message: &str) -> Self {
        Self::Respond {
            status,
            headers: vec![
                ("Content-Type".into(), "application/json".into()),
                (
                    "x-amzn-errortype".into(),
                    format!("{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
                ),
            ],
            body: json!({ "message": message }).to_string(),
        }
    }

    /// A short name, e.g. `400 ThrottlingException` or `lost response`.
    pub fn name(&self) -> String {
        match self {
            Self::Respond { status, headers, .. } => {
                let kind = headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("x-amzn-errortype"))
                    .map(|(_, v)| v.split(':').next().unwrap_or_default().to_owned())
                    .unwrap_or_default();
                format!("{status} {kind}")
            }
            Self::Reset => "reset".into(),
            Self::LoseResponse => "lost response".into(),
            Self::StallResponse => "stalled response".into(),
            Self::CutResponse { after } => format!("response cut after {after} bytes"),
            Self::Delay { ms } => format!("delayed {ms} ms"),
        }
    }
}

/// A fault for the requests a [`Match`] picks: after `skip` of them, the next `times`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Which requests.
    pub matches: Match,
    /// What they get.
    pub fault: Fault,
    /// Picked requests let through first.
    pub skip: u32,
    /// Picked requests that get the fault, after `skip`.
    pub times: u32,
}

impl Rule {
    /// The next request `matches` picks gets `fault`, once.
    pub fn new(matches: Match, fault: Fault) -> Self {
        Self {
            matches,
            fault,
            skip: 0,
            times: 1,
        }
    }

    /// Lets `skip` picked requests through first.
    #[must_use]
    pub fn after(mut self, skip: u32) -> Self {
        self.skip = skip;
        self
    }

    /// Gives the fault to `times` picked requests.
    #[must_use]
    pub fn times(mut self, times: u32) -> Self {
        self.times = times;
        self
    }
}

/// One fault given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    /// The request: method, path and `X-Amz-Target` when it has one.
    pub request: String,
    /// The fault, e.g. `400 ThrottlingException` or `lost response`.
    pub fault: String,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    rules: Mutex<Vec<Rule>>,
    injected: Mutex<Vec<Injection>>,
    forwarded: Mutex<u64>,
}

/// What `m` guards, even after a panic elsewhere held its lock.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    /// The fault for `request`, if a rule picks it; counts it against the rule.
    fn fault_for(&self, request: &Request) -> Option<Fault> {
        let mut rules = lock(&self.rules);
        let rule = rules
            .iter_mut()
            .find(|r| r.times > 0 && r.matches.picks(request))?;
        if rule.skip > 0 {
            rule.skip -= 1;
            return None;
        }
        rule.times -= 1;
        let fault = rule.fault.clone();
        lock(&self.injected).push(Injection {
            request: request.describe(),
            fault: fault.name(),
        });
        Some(fault)
    }
}

/// A running fault proxy. Dropping it stops the listener.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _stop: oneshot::Sender<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` on a free port of 127.0.0.1, with no rules.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            rules: Mutex::new(Vec::new()),
            injected: Mutex::new(Vec::new()),
            forwarded: Mutex::new(0),
        });
        let (stop, mut stopped) = oneshot::channel::<()>();
        let serving = shared.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        tokio::spawn(serve(client, serving.clone()));
                    }
                }
            }
        });
        Ok(Self {
            addr,
            shared,
            _stop: stop,
        })
    }

    /// Starts a proxy to an endpoint URL such as `http://127.0.0.1:5000`.
    pub async fn in_front_of(endpoint_url: &str) -> io::Result<Self> {
        let authority = endpoint_url.trim_start_matches("http://").trim_end_matches('/');
        let upstream = authority
            .parse()
            .map_err(|_| io::Error::other(format!("not an http://IP:PORT endpoint: {endpoint_url}")))?;
        Self::start(upstream).await
    }

    /// Its endpoint URL, for `endpoint_url`.
    pub fn endpoint_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds a rule. Rules are tried in the order they were added; a request gets the fault of
    /// the first one that picks it and still has faults to give.
    pub fn inject(&self, rule: Rule) {
        lock(&self.shared.rules).push(rule);
    }

    /// Removes every rule.
    pub fn clear(&self) {
        lock(&self.shared.rules).clear();
    }

    /// The faults given so far.
    pub fn injected(&self) -> Vec<Injection> {
        lock(&self.shared.injected).clone()
    }

    /// How many requests reached the upstream (a lost response's included).
    pub fn forwarded(&self) -> u64 {
        *lock(&self.shared.forwarded)
    }
}

/// A request as read off the wire.
#[derive(Debug)]
struct Request {
    method: String,
    path: String,
    /// Header names in lower case, values as sent.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn describe(&self) -> String {
        match self.header("x-amz-target") {
            Some(target) => format!("{} {} {target}", self.method, self.path),
            None => format!("{} {}", self.method, self.path),
        }
    }

    /// The request as the upstream gets it: with `Connection: close`.
    fn to_upstream(&self) -> Vec<u8> {
        let mut head = format!("{} {} HTTP/1.1\r\n", self.method, self.path);
        for (name, value) in &self.headers {
            if name != "connection" && name != "keep-alive" {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
        }
        head.push_str("connection: close\r\n\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// Reads one request; `None` at a clean end of the connection.
async fn read_request(client: &mut TcpStream, buffer: &mut Vec<u8>) -> io::Result<Option<Request>> {
    let head_end = loop {
        if let Some(end) = find(buffer, b"\r\n\r\n") {
            break end;
        }
        let mut chunk = [0u8; 8192];
        let read = client.read(&mut chunk).await?;
        if read == 0 {
            return if buffer.is_empty() {
                Ok(None)
            } else {
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, "request cut short"))
            };
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_owned();
    let path = first.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    if headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"))
    {
        return Err(io::Error::other(
            "the fault proxy takes only requests with a Content-Length",
        ));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let body_start = head_end + 4;
    while buffer.len() < body_start + length {
        let mut chunk = [0u8; 8192];
        let read = client.read(&mut chunk).await?;
        if read == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "body cut short"));
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    let body = buffer[body_start..body_start + length].to_vec();
    buffer.drain(..body_start + length);
    Ok(Some(Request {
        method,
        path,
        headers,
        body,
    }))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Serves one client connection, request by request.
async fn serve(mut client: TcpStream, shared: Arc<Shared>) {
    let mut buffer = Vec::new();
    loop {
        let request = match read_request(&mut client, &mut buffer).await {
            Ok(Some(request)) => request,
            Ok(None) | Err(_) => return,
        };
        let fault = shared.fault_for(&request);
        let kept = match fault {
            None => forward(&request, &mut client, &mut buffer, &shared, Relay::All).await,
            Some(Fault::Respond {
                status,
                headers,
                body,
            }) => respond(&mut client, status, &headers, &body).await,
            Some(Fault::Reset) => {
                reset(client);
                return;
            }
            Some(Fault::LoseResponse) => {
                if forward(&request, &mut client, &mut buffer, &shared, Relay::Nothing).await {
                    reset(client);
                }
                return;
            }
            Some(Fault::CutResponse { after }) => {
                // Whatever the relay ends with, the connection goes: cut there.
                forward(&request, &mut client, &mut buffer, &shared, Relay::First(after)).await;
                reset(client);
                return;
            }
            Some(Fault::Delay { ms }) => {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                forward(&request, &mut client, &mut buffer, &shared, Relay::All).await
            }
            Some(Fault::StallResponse) => {
                if forward(&request, &mut client, &mut buffer, &shared, Relay::Nothing).await {
                    // Silent until the client hangs up.
                    let mut sink = [0u8; 1024];
                    while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
                }
                return;
            }
        };
        if !kept {
            return;
        }
    }
}

/// How much of an upstream answer reaches the client.
#[derive(Debug, Clone, Copy)]
enum Relay {
    /// All of it, as it comes.
    All,
    /// None: it is read whole and dropped.
    Nothing,
    /// Its first bytes, as they come; the rest is not sent.
    First(usize),
}

/// Sends `request` upstream and relays its answer as `relay` says. Whether the client
/// connection can go on (never, once a [`Relay::First`] limit is reached).
async fn forward(
    request: &Request,
    client: &mut TcpStream,
    buffer: &mut Vec<u8>,
    shared: &Shared,
    relay: Relay,
) -> bool {
    let Ok(mut upstream) = TcpStream::connect(shared.upstream).await else {
        let _ = respond(client, 502, &[], "the fault proxy could not reach its upstream").await;
        return false;
    };
    if upstream.write_all(&request.to_upstream()).await.is_err() {
        return false;
    }
    *lock(&shared.forwarded) += 1;
    let (mut client_read, mut client_write) = client.split();
    let mut chunk = vec![0u8; 16 * 1024];
    let mut early = [0u8; 8192];
    let mut listening = !matches!(relay, Relay::Nothing);
    let mut left = match relay {
        Relay::First(after) => after,
        Relay::All | Relay::Nothing => usize::MAX,
    };
    loop {
        tokio::select! {
            read = upstream.read(&mut chunk) => match read {
                Ok(0) => return true,
                Ok(n) if !matches!(relay, Relay::Nothing) => {
                    let sent = n.min(left);
                    if client_write.write_all(&chunk[..sent]).await.is_err() {
                        return false;
                    }
                    left -= sent;
                    if left == 0 {
                        let _ = client_write.flush().await;
                        return false;
                    }
                }
                Ok(_) => {}
                Err(_) => return false,
            },
            // A client that hangs up while the answer is on its way ends it. One that has its
            // answer (its length says so) may send the next request before the upstream has
            // closed: that is kept for the next round.
            read = client_read.read(&mut early), if listening => match read {
                Ok(0) | Err(_) => return false,
                Ok(n) => {
                    buffer.extend_from_slice(&early[..n]);
                    listening = false;
                }
            },
        }
    }
}

async fn respond(client: &mut TcpStream, status: u16, headers: &[(String, String)], body: &str) -> bool {
    let mut head = format!("HTTP/1.1 {status} Fault\r\ncontent-length: {}\r\n", body.len());
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    client.write_all(head.as_bytes()).await.is_ok()
        && client.write_all(body.as_bytes()).await.is_ok()
        && client.flush().await.is_ok()
}

/// Closes the connection with a TCP reset.
fn reset(client: TcpStream) {
    let _ = client.set_zero_linger();
    drop(client);
}

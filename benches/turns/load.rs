//! Load over a long run, as processes: many concurrent sessions through the container host
//! (`agent-worker serve`) and the poller (`agent-worker poll`), both on moto's DynamoDB (and
//! SQS), against the stand-in.
//!
//! Each turn's events go to a small emit receiver here (`EVENT_SINKS=http`), which notes when
//! each turn's terminal event arrived. Per window of turns it reports throughput, the request to
//! end p50/p99 (container), and the worker's resident memory (`VmRSS`). At the end the session
//! checker reads the whole table: every turn stored once, none lost, none run twice. The worker
//! writes each turn's metrics (EMF, on its stdout): the DynamoDB requests and the duration of
//! each turn under load, which split the worker's CPU per turn from the store's queueing.

use std::collections::{BTreeSet, HashMap};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::session_audit::audit;
use agent_worker_testkit::{BedrockStandIn, Fallback, moto};
use serde_json::{Value, json};

use crate::child::{cpu_ms, status_kib};
use crate::inprocess::percentile;

/// Sessions that run side by side: as many as moto's one-at-a-time server keeps up with (at 48
/// its queue held calls past the store's attempt timeout, and turns ended `store_failed`).
const SESSIONS: usize = 32;
/// Turns per session.
const TURNS_PER_SESSION: usize = 10;
/// Turns per reported window.
const WINDOW: usize = 80;
/// The container host's key.
const KEY: &str = "bench-key-0123456789";

/// When each turn's terminal event reached the receiver, and a signal each time one does.
#[derive(Debug, Default)]
struct Ends {
    at: Mutex<HashMap<String, Instant>>,
    changed: tokio::sync::Notify,
}

impl Ends {
    fn note(&self, turn: &str) {
        self.at
            .lock()
            .expect("the bench's lock")
            .insert(turn.to_owned(), Instant::now());
        self.changed.notify_waiters();
    }

    fn len(&self) -> usize {
        self.at.lock().expect("the bench's lock").len()
    }

    fn contains(&self, turn: &str) -> bool {
        self.at.lock().expect("the bench's lock").contains_key(turn)
    }

    /// Waits until `ready` holds, checking it each time a turn ends; false at `deadline`.
    async fn wait_for(&self, deadline: tokio::time::Instant, ready: impl Fn(&Self) -> bool) -> bool {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if ready(self) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return ready(self);
            }
        }
    }
}

/// When each turn was posted.
type Started = Arc<Mutex<HashMap<String, Instant>>>;

/// What both runs need: the stand-in (echoing), the emit receiver and its turn ends, a table.
struct Rig {
    bedrock: BedrockStandIn,
    emit: String,
    ends: Arc<Ends>,
    table: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Rig {
    async fn new(prefix: &str) -> Self {
        let bedrock = BedrockStandIn::bind("127.0.0.1:0".parse().expect("an address"), Fallback::Echo)
            .await
            .expect("the stand-in");
        let (emit, ends, stop) = emit_receiver().await;
        Self {
            bedrock,
            emit,
            ends,
            table: crate::fresh_table(prefix).await,
            _stop: stop,
        }
    }
}

/// Receives `POST /api/emit` and notes each terminal event.
async fn emit_receiver() -> (String, Arc<Ends>, tokio::sync::oneshot::Sender<()>) {
    use axum::routing::post;
    let ends = Arc::new(Ends::default());
    let seen = ends.clone();
    let app = axum::Router::new().route(
        "/api/emit",
        post(move |body: axum::Json<Value>| {
            let seen = seen.clone();
            async move {
                let terminal = matches!(body["event"]["type"].as_str(), Some("completed" | "failed"));
                if terminal && let Some(turn) = body["turnId"].as_str() {
                    seen.note(turn);
                }
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    let stop = agent_worker_testkit::serve_in_background(listener, app);
    (url, ends, stop)
}

/// The worker command, on moto and the stand-in, sending events to `emit`.
fn worker(args: &[&str], table: &str, bedrock: &BedrockStandIn, emit: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"));
    command
        .args(args)
        .env("SYSTEM_PROMPT", "You are a helpful assistant.")
        .args([
            "--table",
            table,
            "--endpoint-url",
            &bedrock.endpoint_url(),
            "--region",
            "us-east-1",
        ])
        .env("AWS_ENDPOINT_URL_DYNAMODB", moto().endpoint())
        .env("AWS_ENDPOINT_URL_SQS", moto().endpoint())
        .env("AWS_ACCESS_KEY_ID", "bench")
        .env("AWS_SECRET_ACCESS_KEY", "bench")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("EVENT_SINKS", "http")
        .env("EMIT_URL", emit)
        .env("EMIT_API_KEY", "bench")
        .env("TOOLS", "")
        .env("RUST_LOG", "warn")
        // moto answers one call at a time, so under load a call waits in its queue for seconds,
        // which DynamoDB's do not: the attempt timeout is for a stalled connection, not for that.
        .env("DYNAMODB_ATTEMPT_TIMEOUT_MS", "30000")
        .env("POWERTOOLS_METRICS_NAMESPACE", "AgentWorkerBench")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    command
}

/// The turn lines of the worker's metrics (those with `Turns`), as it writes them.
type TurnLines = Arc<Mutex<Vec<Value>>>;

/// Reads `child`'s metrics lines from its stdout until it ends.
fn turn_lines(child: &mut tokio::process::Child) -> TurnLines {
    use tokio::io::AsyncBufReadExt as _;
    let stdout = child.stdout.take().expect("the worker's stdout is piped");
    let lines = TurnLines::default();
    let keep = lines.clone();
    tokio::spawn(async move {
        let mut read = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(line)) = read.next_line().await {
            if let Ok(value) = serde_json::from_str::<Value>(&line)
                && value.get("Turns").is_some()
            {
                keep.lock().expect("the bench's lock").push(value);
            }
        }
    });
    lines
}

/// What the worker's metrics say of its turns under load: DynamoDB requests and durations.
fn worker_figures(lines: &TurnLines) -> Value {
    let lines = lines.lock().expect("the bench's lock");
    let figures = |name: &str| {
        let mut values: Vec<f64> = lines.iter().filter_map(|l| l[name].as_f64()).collect();
        values.sort_by(f64::total_cmp);
        values
    };
    let at = |values: &[f64], q: f64| {
        values
            .get(((values.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let requests = figures("DynamoDBRequests");
    let durations = figures("TurnDuration");
    let mean = requests.iter().sum::<f64>() / requests.len().max(1) as f64;
    let mut outcomes = std::collections::BTreeMap::<String, u64>::new();
    for line in lines.iter() {
        let outcome = match line["code"].as_str() {
            Some(code) => format!("{} {code}", line["outcome"].as_str().unwrap_or("?")),
            None => line["outcome"].as_str().unwrap_or("?").to_owned(),
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    println!("  the worker's metrics, turns by outcome: {outcomes:?}");
    println!(
        "  the worker's metrics, {} turns: DynamoDB requests a turn mean {mean:.1}, p50 {:.0}, p99 {:.0}, max {:.0}; turn duration p50 {:.0} ms, p99 {:.0} ms",
        lines.len(),
        at(&requests, 0.5),
        at(&requests, 0.99),
        at(&requests, 1.0),
        at(&durations, 0.5),
        at(&durations, 0.99),
    );
    json!({"turns": lines.len(), "dynamodbRequestsMean": mean,
        "dynamodbRequestsP50": at(&requests, 0.5), "dynamodbRequestsP99": at(&requests, 0.99),
        "turnDurationP50Ms": at(&durations, 0.5), "turnDurationP99Ms": at(&durations, 0.99),
        "outcomes": outcomes})
}

/// The turns, in the order they are sent: round after round over every session.
fn turns(prefix: &str) -> Vec<(String, String)> {
    (0..TURNS_PER_SESSION)
        .flat_map(|round| {
            (0..SESSIONS).map(move |s| (format!("{prefix}-s{s}"), format!("{prefix}-s{s}-t{round}")))
        })
        .collect()
}

fn body(session: &str, turn: &str) -> String {
    json!({"turnId": turn, "conversationId": session, "userId": "u", "accountId": "a", "content": "Hi"})
        .to_string()
}

/// One window's figures.
#[derive(Debug)]
struct Window {
    turns: usize,
    per_second: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    rss_kib: u64,
    /// The worker's CPU time (user + system) per turn in this window.
    cpu_ms_per_turn: f64,
}

impl Window {
    fn json(&self) -> Value {
        json!({"turns": self.turns, "turnsPerSecond": self.per_second, "p50Ms": self.p50_ms,
            "p99Ms": self.p99_ms, "rssKiB": self.rss_kib, "cpuMsPerTurn": self.cpu_ms_per_turn})
    }
}

/// Follows the run: each time another `WINDOW` turns have ended, notes the window.
async fn follow(
    total: usize,
    pid: u32,
    ends: &Ends,
    started: Option<&Started>,
    timeout: Duration,
) -> Vec<Window> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut windows = Vec::new();
    let mut window_start = Instant::now();
    let mut cpu_before = cpu_ms(pid);
    while windows.len() * WINDOW < total {
        let upto = ((windows.len() + 1) * WINDOW).min(total);
        assert!(
            ends.wait_for(deadline, |ends| ends.len() >= upto).await,
            "the run did not finish: {} of {total} turns ended",
            ends.len()
        );
        let now = Instant::now();
        let (p50_ms, p99_ms) = match started {
            Some(started) => {
                let started = started.lock().expect("the bench's lock");
                let ended = ends.at.lock().expect("the bench's lock");
                let mut latencies: Vec<Duration> = ended
                    .iter()
                    .filter(|(_, end)| **end >= window_start && **end <= now)
                    .filter_map(|(id, end)| Some(end.duration_since(*started.get(id)?)))
                    .collect();
                latencies.sort();
                if latencies.is_empty() {
                    (None, None)
                } else {
                    let ms = |d: Duration| d.as_secs_f64() * 1e3;
                    (
                        Some(ms(percentile(&latencies, 0.5))),
                        Some(ms(percentile(&latencies, 0.99))),
                    )
                }
            }
            None => (None, None),
        };
        let turns = upto - windows.len() * WINDOW;
        let cpu_now = cpu_ms(pid);
        let cpu_ms_per_turn = (cpu_now - cpu_before) / turns as f64;
        cpu_before = cpu_now;
        let window = Window {
            cpu_ms_per_turn,
            turns,
            per_second: turns as f64 / now.duration_since(window_start).as_secs_f64(),
            p50_ms,
            p99_ms,
            rss_kib: status_kib(pid, "VmRSS"),
        };
        println!(
            "  turns {upto:>5}: {:>6.1} turns/s, worker CPU {cpu_ms_per_turn:.2} ms/turn, p50 {}, p99 {}, RSS {:.1} MiB",
            window.per_second,
            p50_ms.map_or("-".into(), |v| format!("{v:.0} ms")),
            p99_ms.map_or("-".into(), |v| format!("{v:.0} ms")),
            window.rss_kib as f64 / 1024.0
        );
        windows.push(window);
        window_start = now;
    }
    windows
}

/// Checks the table: every turn stored once, none lost. Returns the JSON figures.
async fn check(
    table: &str,
    sent: &[(String, String)],
    bedrock: &BedrockStandIn,
    windows: &[Window],
    lines: &TurnLines,
) -> Value {
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).expect("a table name"));
    let audit = audit(&store, sent, &BTreeSet::new())
        .await
        .expect("the table reads");
    let answered = bedrock.requests().len();
    let lost = sent.len() - audit.ended;
    let duplicated = answered.saturating_sub(sent.len());
    let worker = worker_figures(lines);
    let first = windows.first().map_or(0, |w| w.rss_kib);
    let peak = windows.iter().map(|w| w.rss_kib).max().unwrap_or(0);
    let last = windows.last().map_or(0, |w| w.rss_kib);
    println!(
        "  {} turns over {SESSIONS} sessions: lost {lost}, duplicated {duplicated}, violations {}; RSS {:.1} MiB after the first window, {:.1} MiB at the end (peak {:.1})",
        sent.len(),
        audit.violations.len(),
        first as f64 / 1024.0,
        last as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    assert_eq!((lost, duplicated), (0, 0), "every turn stored once");
    assert_eq!(audit.violations, Vec::<String>::new());
    json!({
        "turns": sent.len(), "sessions": SESSIONS, "lost": lost, "duplicated": duplicated,
        "violations": audit.violations.len(),
        "windows": windows.iter().map(Window::json).collect::<Vec<_>>(),
        "worker": worker,
    })
}

/// The container host: each session's turns one after another, every session at once.
async fn container() -> Value {
    println!("\n## Container host under load (agent-worker serve, moto's DynamoDB)\n");
    let rig = Rig::new("load-serve").await;
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        probe.local_addr().expect("an address").port()
    };
    let port_arg = port.to_string();
    let mut server = worker(
        &[
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            &port_arg,
            "--api-key",
            KEY,
            "--max-concurrent-turns",
            "64",
        ],
        &rig.table,
        &rig.bedrock,
        &rig.emit,
    )
    .spawn()
    .expect("agent-worker serve starts");
    let lines = turn_lines(&mut server);
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let started_at = Instant::now();
    while client.get(format!("{url}/health")).send().await.is_err() {
        assert!(
            started_at.elapsed() < Duration::from_secs(10),
            "the server did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let sent = turns("serve");
    let started: Started = Arc::default();
    let mut posters = tokio::task::JoinSet::new();
    for session in 0..SESSIONS {
        let (client, url, started, ends) = (client.clone(), url.clone(), started.clone(), rig.ends.clone());
        let mine: Vec<(String, String)> = sent.iter().skip(session).step_by(SESSIONS).cloned().collect();
        posters.spawn(async move {
            for (session, turn) in mine {
                started
                    .lock()
                    .expect("the bench's lock")
                    .insert(turn.clone(), Instant::now());
                loop {
                    let response = client
                        .post(format!("{url}/turns"))
                        .header("x-api-key", KEY)
                        .body(body(&session, &turn))
                        .send()
                        .await
                        .expect("the server answers");
                    match response.status().as_u16() {
                        202 => break,
                        503 => tokio::time::sleep(Duration::from_millis(50)).await,
                        other => panic!("POST /turns answered {other}"),
                    }
                }
                // The session's next turn waits for this one's end, as a person waits for the answer.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(1800);
                assert!(
                    ends.wait_for(deadline, |ends| ends.contains(&turn)).await,
                    "turn {turn} never ended"
                );
            }
        });
    }
    let pid = server.id().expect("the server's pid");
    let windows = follow(
        sent.len(),
        pid,
        &rig.ends,
        Some(&started),
        Duration::from_secs(1800),
    )
    .await;
    while let Some(done) = posters.join_next().await {
        done.expect("a poster");
    }
    let _ = server.kill().await;
    check(&rig.table, &sent, &rig.bedrock, &windows, &lines).await
}

/// The poller: every turn queued first, then one `agent-worker poll` runs them.
async fn poller() -> Value {
    println!("\n## Poller under load (agent-worker poll, moto's SQS and DynamoDB)\n");
    let rig = Rig::new("load-poll").await;
    let sqs = moto().sqs();
    let queue_url = crate::poller::fifo_queue(&sqs, &rig.table, 300).await;
    let sent = turns("poll");
    crate::poller::send_turns(
        &sqs,
        &queue_url,
        sent.iter()
            .map(|(session, turn)| (session.clone(), turn.clone(), body(session, turn))),
    )
    .await;
    let mut child = worker(
        &["poll", "--queue-url", &queue_url],
        &rig.table,
        &rig.bedrock,
        &rig.emit,
    )
    .spawn()
    .expect("agent-worker poll starts");
    let lines = turn_lines(&mut child);
    let pid = child.id().expect("the poller's pid");
    let windows = follow(sent.len(), pid, &rig.ends, None, Duration::from_secs(1800)).await;
    let _ = child.kill().await;
    check(&rig.table, &sent, &rig.bedrock, &windows, &lines).await
}

/// Both runs; returns their figures.
pub(crate) async fn run() -> Value {
    json!({ "container": container().await, "poller": poller().await })
}

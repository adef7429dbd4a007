//! The crash matrix through the processes: a turn whose call adds a note through the desk's API
//! (an OpenAPI tool of the configuration, which sends `Idempotency-Key`) runs under a worker that
//! talks to moto through a fault proxy, and the worker is killed with SIGKILL at each boundary of
//! the turn: `agent-worker poll`, and the Lambda function (`bootstrap` under the Runtime API
//! stand-in, given the queue's message as Lambda would, killed as Lambda ends an invocation whose
//! deadline ran out). A second worker takes the message when it comes back and the dead worker's
//! lease has run out. At every boundary the turn ends once, completed; the
//! desk heard of the note once, or twice with the same key, and added it once; the history passes
//! the session checker; the turn's event log has no gap and one terminal, its last event.
//! (`durable_crashes` runs the same matrix through the handler in process.)

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use agent_worker::protocol::AgentEvent;
use agent_worker::session::{
    DynamoConfig, DynamoStore, HistoryStore as _, TurnLedger as _, TurnStatus, idempotency_key,
};
use agent_worker::sinks::DynamoEventLog;
use agent_worker_testkit::fault_proxy::{Fault, FaultProxy, Match, Rule};
use agent_worker_testkit::session_audit::audit;
use agent_worker_testkit::{BedrockStandIn, DeskApi, LambdaRuntimeApi, Reply, StreamScript, moto, sid, tid};
use serde_json::json;

use crate::crash_recovery::{in_queue, poller_command};
use crate::support;

use support::crash_matrix::{BOUNDARIES, Boundary};

/// The worker that runs the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Host {
    /// `agent-worker poll`.
    Poll,
    /// The Lambda function, `bootstrap`, under the Runtime API stand-in.
    Function,
}

fn hanging() -> Reply {
    StreamScript::new().hang().into_reply()
}

/// Waits until `seen` holds: looked at every 20 ms, for a minute at most (then the test fails
/// rather than hangs).
async fn until(what: &str, seen: impl AsyncFn() -> bool) {
    let look = async {
        while !seen().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), look)
        .await
        .unwrap_or_else(|_| panic!("{what} within a minute"));
}

/// One case: its own table and FIFO queue (the message back 4 s after a worker died with it),
/// model, desk and proxy.
struct Case {
    host: Host,
    boundary: Boundary,
    name: String,
    queue_url: String,
    config: std::path::PathBuf,
    _folder: support::config_files::Folder,
    bedrock: BedrockStandIn,
    desk: DeskApi,
    proxy: FaultProxy,
    store: DynamoStore,
}

impl Case {
    async fn new(host: Host, boundary: Boundary) -> Self {
        let desk = DeskApi::start().await.unwrap();
        let folder = support::config_files::Folder::new();
        let config = support::config_files::desk_config(&folder, &desk);
        let name = format!("poll-matrix-{}", uuid::Uuid::new_v4().simple());
        // A message comes back every 4 s while the killed worker's lease runs out (each time
        // deferred until then): never enough receives for the dead-letter queue, which is not
        // what this matrix looks at.
        let more = ["--visibility-timeout", "4", "--max-receive-count", "20"];
        let created = crate::crash_recovery::set_up(&name, &more).await;
        let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&name).unwrap());
        Self {
            host,
            boundary,
            queue_url: created["queueUrl"].as_str().unwrap().to_owned(),
            name,
            config,
            _folder: folder,
            bedrock: BedrockStandIn::start().await.unwrap(),
            desk,
            proxy: FaultProxy::in_front_of(moto().endpoint()).await.unwrap(),
            store,
        }
    }

    /// A worker with the desk's configuration, talking to moto through the proxy when `proxied`;
    /// a function comes with its Runtime API.
    async fn worker(&self, proxied: bool) -> (tokio::process::Child, Option<LambdaRuntimeApi>) {
        let aws = if proxied {
            self.proxy.endpoint_url()
        } else {
            moto().endpoint().to_owned()
        };
        match self.host {
            Host::Poll => {
                let mut command = poller_command(&self.queue_url, &self.name, &self.bedrock);
                command
                    .env("AGENT_WORKER_CONFIG", &self.config)
                    .env("AWS_ENDPOINT_URL", &aws);
                (command.spawn().expect("the poller starts"), None)
            }
            Host::Function => {
                let api = LambdaRuntimeApi::start().await.unwrap();
                let function = tokio::process::Command::new(env!("CARGO_BIN_EXE_bootstrap"))
                    .env_clear()
                    .envs(api.function_environment(&self.bedrock.endpoint_url(), &aws, &self.name))
                    .env("AGENT_WORKER_CONFIG", &self.config)
                    // The turn's own deadline not so far past the invocation's that it would hand
                    // itself over; the store's margin and the lease's small, as for the poller.
                    .env("TURN_DEADLINE_MS", "30000")
                    .env("STORE_MARGIN_MS", "200")
                    .env("LEASE_MARGIN_MS", "500")
                    .kill_on_drop(true)
                    .spawn()
                    .expect("the function starts");
                (function, Some(api))
            }
        }
    }

    /// The queue's message, once it is there (within a minute), as Lambda hands it over.
    async fn delivered(&self) -> aws_lambda_events::event::sqs::SqsEvent {
        let sqs = moto().sqs();
        let arn = agent_worker_testkit::moto::queue_arn(&sqs, &self.queue_url).await;
        let started = Instant::now();
        loop {
            let received = sqs
                .receive_message()
                .queue_url(&self.queue_url)
                .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .wait_time_seconds(1)
                .send()
                .await
                .unwrap();
            let messages = received.messages.unwrap_or_default();
            if !messages.is_empty() {
                return agent_worker::hosts::sqs_poller::to_sqs_event(
                    messages,
                    Some(&arn),
                    Some("us-east-1"),
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{:?}: the message came back",
                self.boundary
            );
        }
    }

    /// Sends the turn, runs the first worker until the boundary, and kills it there.
    async fn kill_at_the_boundary(&self) {
        use Boundary::*;
        let transact = || Match::target("TransactWriteItems");
        match self.boundary {
            AfterTheClaim => self.bedrock.push(hanging()),
            DuringTheStream => self
                .bedrock
                .push(StreamScript::new().open_text("Let me add").hold().into_reply()),
            BeforeTheCall => {
                self.bedrock.push(support::desk_note_call());
                let checkpoint = transact().and(Match::body("#step"));
                self.proxy.inject(Rule::new(checkpoint, Fault::StallResponse));
            }
            DuringTheCall => {
                self.bedrock.push(support::desk_note_call());
                self.desk.delay_notes(Duration::from_secs(30));
            }
            BeforeItsResult => {
                self.bedrock.push(support::desk_note_call());
                self.bedrock.push(hanging());
                let refused = Fault::dynamo(400, "ValidationException", "refused by the test");
                self.proxy
                    .inject(Rule::new(transact().and(Match::body("#call#")), refused));
            }
            AfterItsResult => {
                self.bedrock.push(support::desk_note_call());
                self.bedrock.push(hanging());
            }
            DuringTheCommit => {
                self.bedrock.push(support::desk_note_call());
                self.bedrock.push(Reply::text("I added the note."));
                let commit = transact().and(Match::body("msg#"));
                self.proxy.inject(Rule::new(commit, Fault::StallResponse));
            }
        }
        let body = json!({"turnId": "t1", "conversationId": "desk-1", "userId": "ana", "accountId": "acme",
            "userToken": DeskApi::token_of("ana"), "content": "Note on T-1 that I called the customer back."});
        moto()
            .sqs()
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body.to_string())
            .message_group_id("desk-1")
            .message_deduplication_id("t1")
            .send()
            .await
            .unwrap();
        let (mut first, mut api) = self.worker(true).await;
        if let Some(api) = &mut api {
            let batch = self.delivered().await;
            api.invoke_with_deadline("req-1", serde_json::to_value(&batch).unwrap(), in_ms(10_000));
        }
        let (s, t) = (sid("desk-1"), tid("t1"));
        let reached = async {
            match self.boundary {
                AfterTheClaim => self.bedrock.requested(1).await,
                DuringTheStream => self.bedrock.holding(1).await,
                BeforeTheCall => {
                    until("the checkpoint landed", async || {
                        self.store.read_journal(&s, &t).await.unwrap().is_some()
                    })
                    .await;
                }
                DuringTheCall => {
                    until("the desk received the note's request", async || {
                        self.desk.calls().iter().any(|c| c.method == "POST")
                    })
                    .await;
                }
                BeforeItsResult => self.bedrock.requested(2).await,
                // The result rides on the log's next window, written within its 250 ms.
                AfterItsResult => {
                    until("the result landed", async || {
                        let journal = self.store.read_journal(&s, &t).await.unwrap();
                        journal.is_some_and(|j| j.results.iter().any(|r| r.call_id == "tu-1"))
                    })
                    .await;
                }
                DuringTheCommit => {
                    until("the commit landed", async || {
                        let record = self.store.turn(&s, &t).await.unwrap();
                        record.is_some_and(|r| r.status == TurnStatus::Completed)
                    })
                    .await;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), reached)
            .await
            .unwrap_or_else(|_| panic!("{:?}: the first worker reached the boundary", self.boundary));
        first.kill().await.unwrap();
        drop(api);
        self.proxy.clear();
        self.desk.delay_notes(Duration::ZERO);
        if self.boundary == DuringTheStream {
            self.bedrock.release();
        }
    }

    /// What the model says to the second worker, which takes the turn over.
    fn second_replies(&self) {
        use Boundary::*;
        match self.boundary {
            AfterTheClaim | DuringTheStream => {
                self.bedrock.push(support::desk_note_call());
                self.bedrock.push(Reply::text("I added the note."));
            }
            BeforeTheCall | DuringTheCall | BeforeItsResult | AfterItsResult => {
                self.bedrock.push(Reply::text("I added the note."));
            }
            DuringTheCommit => {}
        }
    }

    /// Runs a second worker until the queue is empty: a poller, or a function given the message
    /// each time it comes back until its answer reports nothing (then deleted, as Lambda does).
    async fn take_over(&self) {
        self.second_replies();
        let (mut second, api) = self.worker(false).await;
        let sqs = moto().sqs();
        let started = Instant::now();
        if let Some(mut api) = api {
            for attempt in 2.. {
                let batch = self.delivered().await;
                let receipt = batch.records[0].receipt_handle.clone().unwrap();
                let request = format!("req-{attempt}");
                api.invoke_with_deadline(&request, serde_json::to_value(&batch).unwrap(), in_ms(20_000));
                let (what, answer) = tokio::time::timeout(Duration::from_secs(30), api.answer())
                    .await
                    .expect("the function answered within 30 s")
                    .expect("an answer");
                assert_eq!(what, format!("{request}/response"), "{answer}");
                if answer == json!({"batchItemFailures": []}) {
                    sqs.delete_message()
                        .queue_url(&self.queue_url)
                        .receipt_handle(receipt)
                        .send()
                        .await
                        .unwrap();
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "{:?}: the turn was not taken over: {answer}",
                    self.boundary
                );
            }
        }
        while in_queue(&sqs, &self.queue_url).await > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{:?}: the turn was not taken over",
                self.boundary
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        second.kill().await.unwrap();
    }

    async fn check(&self) {
        let (host, boundary) = (self.host, self.boundary);
        let (s, t) = (sid("desk-1"), tid("t1"));
        let record = self.store.turn(&s, &t).await.unwrap().unwrap();
        assert_eq!(record.status, TurnStatus::Completed, "{boundary:?}");
        assert_eq!(
            self.bedrock.pending_replies(),
            0,
            "{boundary:?}: every reply was asked for"
        );
        let key = idempotency_key(&s, &t, "tu-1");
        let posts: Vec<_> = self
            .desk
            .calls()
            .into_iter()
            .filter(|c| c.method == "POST")
            .map(|c| c.idempotency_key)
            .collect();
        let sent = match boundary {
            Boundary::DuringTheCall | Boundary::BeforeItsResult => 2,
            _ => 1,
        };
        assert_eq!(
            posts,
            vec![Some(key); sent],
            "{boundary:?}: the requests and their keys"
        );
        assert_eq!(self.desk.notes().len(), 1, "{boundary:?}: the note added once");
        let history = self.store.load_history(&s).await.unwrap();
        assert_eq!(
            history.len(),
            4,
            "{boundary:?}: the turn stored once: {history:#?}"
        );
        let accepted = [("desk-1".to_owned(), "t1".to_owned())];
        let checked = audit(&self.store, &accepted, &BTreeSet::new()).await.unwrap();
        assert_eq!(checked.violations, Vec::<String>::new(), "{boundary:?}");
        let logged = DynamoEventLog::new(self.store.clone())
            .read("desk-1", "t1", None)
            .await
            .unwrap();
        for (at, event) in logged.iter().enumerate() {
            assert_eq!(event.seq, at as u64, "{boundary:?}: a gap in the log");
        }
        let terminals = logged.iter().filter(|l| l.event.is_terminal()).count();
        assert_eq!(terminals, 1, "{boundary:?}: {logged:#?}");
        assert!(
            matches!(logged.last().unwrap().event, AgentEvent::Completed { .. }),
            "{boundary:?}: {logged:#?}"
        );
        println!(
            "crash matrix through {host:?}: {boundary:?}: completed once, {sent} request(s) with one key, one note"
        );
    }
}

/// Epoch milliseconds `ms` from now: an invocation's deadline.
fn in_ms(ms: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(now.as_millis()).unwrap() + ms
}

async fn matrix(host: Host) {
    for boundary in BOUNDARIES {
        let case = Case::new(host, boundary).await;
        case.kill_at_the_boundary().await;
        case.take_over().await;
        case.check().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_killed_at_any_boundary_ends_the_turn_once_and_adds_the_note_once() {
    matrix(Host::Poll).await;
}

#[cfg(feature = "s3")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_function_killed_at_any_boundary_ends_the_turn_once_and_adds_the_note_once() {
    matrix(Host::Function).await;
}

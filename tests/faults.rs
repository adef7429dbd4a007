//! Faults AWS really produces, injected on the wire by the fault proxy in front of moto's server
//! and the Bedrock stand-in: throttles, 500s, cancelled transactions, writes whose answer is
//! lost, at each step of a turn; 429/503 bursts, broken and stalled streams, resets. After every
//! case the session checker reads the whole table: no violation, nothing run twice, nothing lost.

use crate::support;
use agent_worker::session::{HistoryStore as _, SignalStore as _};

use agent_worker_testkit::{sid, tid};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use agent_worker::engine::tools::{Effect, Tool, ToolSpec, tool_fn};
use agent_worker::engine::{ApprovalSigner, BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::AgentTurnPayload;
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::protocol::AgentEvent;
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::session_audit::{Audit, audit};
use agent_worker_testkit::{
    BedrockStandIn, Fallback, Fault, FaultProxy, Match, Reply, Rule, StreamScript, moto,
};
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use serde_json::{Value, json};
use support::MODEL_ID;

/// DynamoDB on moto behind a fault proxy, Bedrock's stand-in behind another.
struct World {
    table: String,
    dynamo: FaultProxy,
    bedrock: BedrockStandIn,
    model: FaultProxy,
    paid: Arc<AtomicUsize>,
    /// Whether the agent has `pay`.
    with_pay: bool,
}

/// A DynamoDB client as a worker has one: the SDK's standard retries (here with millisecond
/// backoff) and an attempt timeout, so a stalled answer is given up and retried.
fn dynamodb_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("moto", "moto", None, None, "moto"))
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(3)
                .with_initial_backoff(Duration::from_millis(2))
                .with_max_backoff(Duration::from_millis(20)),
        )
        .timeout_config(
            TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_millis(2000))
                .build(),
        )
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

fn config() -> EngineConfig {
    EngineConfig {
        retry_base_delay: Duration::from_millis(1),
        retry_max_delay: Duration::from_millis(4),
        first_chunk_timeout: Duration::from_millis(1000),
        chunk_timeout: Duration::from_millis(1000),
        ..EngineConfig::default()
    }
}

impl World {
    async fn new(fallback: Fallback, with_pay: bool) -> Self {
        let table = format!("faults-{}", uuid::Uuid::new_v4().simple());
        let bedrock = BedrockStandIn::bind("127.0.0.1:0".parse().unwrap(), fallback)
            .await
            .unwrap();
        let world = Self {
            table,
            dynamo: FaultProxy::in_front_of(moto().endpoint()).await.unwrap(),
            model: FaultProxy::start(bedrock.addr()).await.unwrap(),
            bedrock,
            paid: Arc::default(),
            with_pay,
        };
        world.store().create_table().await.unwrap();
        world
    }

    fn store(&self) -> DynamoStore {
        DynamoStore::new(
            dynamodb_client(&self.dynamo.endpoint_url()),
            DynamoConfig::new(&self.table).unwrap(),
        )
    }

    /// The table read straight from moto, past the proxy.
    fn direct_store(&self) -> DynamoStore {
        DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&self.table).unwrap())
    }

    /// `pay`: a transaction, marked as changing something, that counts its runs.
    fn pay(&self) -> Arc<dyn Tool> {
        let paid = self.paid.clone();
        Arc::new(tool_fn(
            ToolSpec::new(
                "pay",
                "Pays an invoice.",
                json!({"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}),
            )
            .effect(Effect::Transaction),
            move |_, _| {
                let paid = paid.clone();
                async move {
                    paid.fetch_add(1, Ordering::SeqCst);
                    Ok(json!({"receipt": "R-1"}))
                }
            },
        ))
    }

    fn handler(&self) -> TurnHandler {
        let store = self.store();
        let bedrock = agent_worker_testkit::client_for(&self.model.endpoint_url());
        let engine = Engine::builder()
            .model(BedrockModel::new(bedrock, MODEL_ID))
            .store(store.clone())
            .approvals(
                store.clone(),
                ApprovalSigner::new(*b"0123456789abcdef0123456789abcdef").unwrap(),
            )
            .tools(self.with_pay.then(|| self.pay()))
            .config(config())
            .build()
            .unwrap();
        TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(store)))
    }

    /// The types of a turn's logged events, in order.
    async fn log_kinds(&self, session: &str, turn: &str) -> Vec<String> {
        DynamoEventLog::new(self.direct_store())
            .read(session, turn, None)
            .await
            .unwrap()
            .into_iter()
            .map(|logged| {
                serde_json::to_value(&logged.event).unwrap()["type"]
                    .as_str()
                    .unwrap_or("?")
                    .to_owned()
            })
            .collect()
    }

    /// The text of a turn's logged events, in order.
    async fn log_text(&self, session: &str, turn: &str) -> String {
        let logged = DynamoEventLog::new(self.direct_store())
            .read(session, turn, None)
            .await
            .unwrap();
        support::text_of(&logged.into_iter().map(|l| l.event).collect::<Vec<_>>())
    }

    async fn audit(&self, accepted: &[(String, String)]) -> Audit {
        audit(&self.direct_store(), accepted, &BTreeSet::new())
            .await
            .unwrap()
    }
}

fn payload(session: &str, turn: &str, text: &str, extra: Value) -> AgentTurnPayload {
    let mut body = json!({"turnId": turn, "conversationId": session, "userId": "ada", "accountId": "acme", "content": text});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    AgentTurnPayload::decode(&body.to_string()).unwrap()
}

fn in_an_hour() -> Option<SystemTime> {
    Some(SystemTime::now() + Duration::from_secs(3600))
}

/// What the queue did with one message over its deliveries.
#[derive(Debug, Default)]
struct Deliveries {
    redriven: u32,
    terminals: Vec<AgentEvent>,
}

/// Delivers a turn as SQS would: again while the handler redrives it (at most `max` times),
/// clearing the faults after the first delivery, as a passing incident does.
async fn deliver(world: &World, turn: &AgentTurnPayload, max: u32) -> Deliveries {
    let handler = world.handler();
    let mut seen = Deliveries::default();
    for delivery in 0..max {
        if delivery == 1 {
            world.dynamo.clear();
            world.model.clear();
        }
        let run = handler.run_turn_to_end(turn, in_an_hour()).await;
        seen.terminals.extend(run.terminal);
        if !run.disposition.is_redrive() {
            return seen;
        }
        seen.redriven += 1;
    }
    seen
}

fn code(event: &AgentEvent) -> Option<&str> {
    match event {
        AgentEvent::Failed { code, .. } => code.as_deref(),
        _ => None,
    }
}

/// One DynamoDB case: where, what, how often, and whether the first delivery is redriven.
struct StoreCase {
    step: &'static str,
    matches: Match,
    fault: Fault,
    times: u32,
    redriven: bool,
}

fn claim() -> Match {
    Match::target("UpdateItem").and(Match::body("attribute_not_exists(#status)"))
}

fn history_read() -> Match {
    Match::target("Query").and(Match::body("msg#"))
}

/// A write of the turn's events by the log itself (a put, or a transaction where the write looks
/// at the turn's signals), not the commit that writes the log's end with the turn's messages.
fn event_write() -> Match {
    Match::body("event#").and_not(Match::body("msg#"))
}

/// An answer slow enough (a pause before each frame, longer than the log's window) that the log
/// writes part of it itself while the turn runs.
fn slow_answer() -> Reply {
    StreamScript::new()
        .text("Hello, here I am.", 2)
        .stop("end_turn")
        .usage(5, 5)
        .chunk_delay(Duration::from_millis(300))
        .into_reply()
}

/// The kinds of a log's events, a run of one kind as one: a window's write that failed is
/// written with the next, its text gathered with what came after.
fn runs(kinds: &[String]) -> Vec<String> {
    let mut runs = kinds.to_vec();
    runs.dedup();
    runs
}

fn commit() -> Match {
    Match::target("TransactWriteItems").and(Match::body("msg#"))
}

fn store_cases() -> Vec<StoreCase> {
    let mut cases = Vec::new();
    for (step, matches) in [
        ("claim", claim()),
        ("history read", history_read()),
        ("event log write", event_write()),
        ("commit", commit()),
    ] {
        // One throttle is absorbed by the SDK's retries; a burst longer than its attempts
        // reaches the turn, which is redriven and stored on redelivery. An event log write that
        // keeps failing does not fail the turn: the log is the client's, the turn is stored. The
        // history is read beside the claim first, in one attempt: a fault there leaves the read
        // to after the claim, with the SDK's attempts, so a burst as long as those attempts is
        // absorbed (the cases below the loop outlast both reads).
        let reaches_turn = step != "event log write" && step != "history read";
        cases.extend([
            StoreCase {
                step,
                matches: matches.clone(),
                fault: Fault::dynamo_throttled(),
                times: 1,
                redriven: false,
            },
            StoreCase {
                step,
                matches: matches.clone(),
                fault: Fault::dynamo_throughput_exceeded(),
                times: 3,
                redriven: reaches_turn,
            },
            StoreCase {
                step,
                matches: matches.clone(),
                fault: Fault::dynamo_internal(),
                times: 3,
                redriven: reaches_turn,
            },
            StoreCase {
                step,
                matches: matches.clone(),
                fault: Fault::Reset,
                times: 1,
                redriven: false,
            },
            StoreCase {
                step,
                matches: matches.clone(),
                fault: Fault::LoseResponse,
                times: 1,
                redriven: false,
            },
            StoreCase {
                step,
                matches: matches.clone(),
                fault: Fault::StallResponse,
                times: 1,
                redriven: false,
            },
            // The answer cut in the middle: inside its head, and a little way into its body.
            StoreCase {
                step,
                matches: matches.clone(),
                fault: Fault::CutResponse { after: 40 },
                times: 1,
                redriven: false,
            },
            StoreCase {
                step,
                matches: matches.clone(),
                fault: Fault::CutResponse { after: 260 },
                times: 1,
                redriven: false,
            },
        ]);
    }
    cases.push(StoreCase {
        step: "commit",
        matches: commit(),
        fault: Fault::transaction_conflict(),
        times: 1,
        redriven: false,
    });
    for fault in [Fault::dynamo_throughput_exceeded(), Fault::dynamo_internal()] {
        cases.push(StoreCase {
            step: "history read, beside the claim and after it",
            matches: history_read(),
            fault,
            times: 4,
            redriven: true,
        });
    }
    cases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_faults_at_each_step_of_a_turn_keep_every_promise() {
    let world = World::new(Fallback::Echo, false).await;
    let mut accepted = Vec::new();
    let mut report = Vec::new();
    for (i, case) in store_cases().into_iter().enumerate() {
        let session = format!("s-{i}");
        let turn = format!("t-{i}");
        // A turn before, so that the session has a history to read.
        let first = deliver(
            &world,
            &payload(&session, &format!("t-{i}-0"), "Hi", json!({})),
            1,
        )
        .await;
        assert_eq!(first.terminals, vec![AgentEvent::completed()]);
        accepted.push((session.clone(), format!("t-{i}-0")));
        world
            .dynamo
            .inject(Rule::new(case.matches.clone(), case.fault.clone()).times(case.times));
        // The log writes itself only while a turn runs long enough; a short turn's log is
        // written with its commit.
        if case.step == "event log write" {
            world.bedrock.push(slow_answer());
        }
        let before = world.dynamo.injected().len();
        let seen = deliver(&world, &payload(&session, &turn, "Hello there", json!({})), 3).await;
        let injected = world.dynamo.injected().len() - before;
        world.dynamo.clear();
        accepted.push((session.clone(), turn.clone()));
        let what = format!("{} at {} ×{}", case.fault.name(), case.step, case.times);
        assert_eq!(injected as u32, case.times, "{what}: every fault was given");
        assert_eq!(seen.redriven > 0, case.redriven, "{what}: {:#?}", seen.terminals);
        assert_eq!(
            seen.terminals.last(),
            Some(&AgentEvent::completed()),
            "{what}: the last delivery completes: {:#?}",
            seen.terminals
        );
        // The client's copy: the event log holds what a clean turn's does (a write that failed
        // was written with the next one), or, after a redrive, ends with the completion.
        let logged = world.log_kinds(&session, &turn).await;
        if case.redriven {
            assert_eq!(
                logged.last().map(String::as_str),
                Some("completed"),
                "{what}: {logged:?}"
            );
        } else {
            let clean = world.log_kinds(&session, &format!("t-{i}-0")).await;
            assert_eq!(runs(&logged), runs(&clean), "{what}: the log is whole");
            if case.step == "event log write" {
                assert_eq!(
                    world.log_text(&session, &turn).await,
                    "Hello, here I am.",
                    "{what}: every word once"
                );
            }
        }
        let history = world
            .direct_store()
            .load_history(&sid(&session))
            .await
            .unwrap()
            .len();
        assert_eq!(
            history, 4,
            "{what}: each turn is stored once (a question and its answer)"
        );
        report.push(what);
    }
    let audit = world.audit(&accepted).await;
    assert_eq!(audit.violations, Vec::<String>::new());
    assert_eq!(audit.sessions, report.len());
    println!(
        "dynamodb faults: {} cases, {} faults injected, {} sessions checked, {} violations",
        report.len(),
        world.dynamo.injected().len(),
        audit.sessions,
        audit.violations.len()
    );
}

#[tokio::test]
async fn bedrock_faults_end_as_the_outcome_table_says() {
    let world = World::new(Fallback::Refuse, true).await;
    let stream = Match::path("converse-stream");
    let mut accepted = Vec::new();
    let mut next = 0;
    // Each case is a new session's first turn.
    let mut turn = || {
        next += 1;
        let (session, turn) = (format!("b-{next}"), format!("bt-{next}"));
        accepted.push((session.clone(), turn.clone()));
        payload(&session, &turn, "Hello there", json!({}))
    };

    // A burst of 429s shorter than the engine's retries: retried, completed.
    world.model.inject(
        Rule::new(
            stream.clone(),
            Fault::bedrock(429, "ThrottlingException", "Too many requests"),
        )
        .times(2),
    );
    world.bedrock.push(Reply::text("Hi."));
    let seen = deliver(&world, &turn(), 1).await;
    assert_eq!(seen.terminals, vec![AgentEvent::completed()]);

    // 503s past the retries: failed `model_unavailable`, told to the client, acknowledged.
    world.model.inject(
        Rule::new(
            stream.clone(),
            Fault::bedrock(503, "ServiceUnavailableException", "Service unavailable"),
        )
        .times(4),
    );
    let seen = deliver(&world, &turn(), 1).await;
    assert_eq!(seen.redriven, 0);
    assert_eq!(code(&seen.terminals[0]), Some("model_unavailable"));

    // A connection reset before any answer: retried, completed.
    world.model.inject(Rule::new(stream.clone(), Fault::Reset));
    world.bedrock.push(Reply::text("Hi again."));
    let seen = deliver(&world, &turn(), 1).await;
    assert_eq!(seen.terminals, vec![AgentEvent::completed()]);

    // An exception mid-stream after output: what was said is kept, `model_stream_interrupted`.
    world.bedrock.push(
        StreamScript::new()
            .text("Half an ans", 2)
            .exception("modelStreamErrorException", "The model stopped")
            .into_reply(),
    );
    let seen = deliver(&world, &turn(), 1).await;
    assert_eq!(code(&seen.terminals[0]), Some("model_stream_interrupted"));
    assert_eq!(seen.redriven, 0);

    // The event stream cut inside its HTTP head, before any event: retried, completed.
    world
        .model
        .inject(Rule::new(stream.clone(), Fault::CutResponse { after: 40 }));
    world.bedrock.push(Reply::text("never seen"));
    world.bedrock.push(Reply::text("Whole this time."));
    let seen = deliver(&world, &turn(), 1).await;
    assert_eq!(seen.terminals, vec![AgentEvent::completed()]);

    // The event stream cut in the middle, after a whole text event: what arrived is kept and
    // marked, `model_stream_interrupted` (retryable), never a finished answer.
    let long = "word ".repeat(400);
    world
        .model
        .inject(Rule::new(stream.clone(), Fault::CutResponse { after: 3_000 }));
    world
        .bedrock
        .push(StreamScript::new().text(&long, 4).stop("end_turn").into_reply());
    let seen = deliver(&world, &turn(), 1).await;
    let (details, retryable, code_of) = support::failure(&seen.terminals);
    assert_eq!(code_of.as_deref(), Some("model_stream_interrupted"), "{details}");
    assert!(retryable, "{details}");

    // A stream that stalls before its first event: the first-chunk timeout, then a retry.
    world.bedrock.push(StreamScript::new().hang().into_reply());
    world.bedrock.push(Reply::text("Sorry for the wait."));
    let seen = deliver(&world, &turn(), 1).await;
    assert_eq!(seen.terminals, vec![AgentEvent::completed()]);

    // A stream that stalls between events, after output: the chunk timeout; the output is kept.
    world
        .bedrock
        .push(StreamScript::new().text("Partly", 1).hang().into_reply());
    let seen = deliver(&world, &turn(), 1).await;
    let (details, _, code_of) = support::failure(&seen.terminals);
    assert_eq!(code_of.as_deref(), Some("model_stream_interrupted"), "{details}");
    assert!(details.contains("went quiet"), "{details}");

    let audit = world.audit(&accepted).await;
    assert_eq!(audit.violations, Vec::<String>::new());
    assert_eq!(audit.sessions, 8);
    assert_eq!(world.bedrock.pending_replies(), 0);
}

#[tokio::test]
async fn an_approved_transaction_runs_once_though_its_turn_is_stored_only_on_redelivery() {
    let world = World::new(Fallback::Refuse, true).await;
    world
        .bedrock
        .push(Reply::tool_call("call-pay", "pay", r#"{"amount": 12}"#));
    let ask = payload("pay-1", "t-ask", "Pay 12", json!({}));
    let seen = deliver(&world, &ask, 1).await;
    assert_eq!(
        seen.terminals,
        vec![AgentEvent::completed_with(
            json!({"stopReason": "approval_required"})
        )]
    );
    let log = world.direct_store();
    let events = agent_worker::sinks::DynamoEventLog::new(log.clone())
        .read("pay-1", "t-ask", None)
        .await
        .unwrap();
    let approval = events
        .iter()
        .find_map(|e| match &e.event {
            AgentEvent::Other(raw) if raw["type"] == "approval_required" => Some(raw.clone()),
            _ => None,
        })
        .expect("an approval event in the log");

    // The decision's turn runs the call, then cannot store: redriven, then redelivered.
    world
        .dynamo
        .inject(Rule::new(commit(), Fault::dynamo_internal()).times(3));
    world.bedrock.push(Reply::text("Paid."));
    world.bedrock.push(Reply::text("It was already paid."));
    let decide = payload(
        "pay-1",
        "t-decide",
        "",
        json!({"approval": {"approvalId": approval["approvalId"], "decision": "approve", "token": approval["token"]}}),
    );
    let seen = deliver(&world, &decide, 3).await;
    assert_eq!(seen.redriven, 1, "{:#?}", seen.terminals);
    assert_eq!(seen.terminals.last(), Some(&AgentEvent::completed()));
    assert_eq!(world.paid.load(Ordering::SeqCst), 1, "the approved call ran once");
    let audit = world
        .audit(&[
            ("pay-1".into(), "t-ask".into()),
            ("pay-1".into(), "t-decide".into()),
        ])
        .await;
    assert_eq!(audit.violations, Vec::<String>::new());
}

/// A turn runs only while its caller reads. A caller held up by a slow sink must not make the
/// model look stalled: what the model sent meanwhile is read before the stall watch is asked.
#[tokio::test]
async fn a_slow_reader_does_not_make_the_model_look_stalled() {
    use agent_worker::protocol::{Agent as _, Prompt, Scope};
    use futures_util::StreamExt as _;
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(
        StreamScript::new()
            .text("One, two, three, four.", 4)
            .stop("end_turn")
            .into_reply(),
    );
    let store = agent_worker::session::MemoryStore::new();
    // The request may take its time; between events the watch is tight.
    let tuning = EngineConfig {
        first_chunk_timeout: Duration::from_secs(5),
        chunk_timeout: Duration::from_millis(500),
        ..config()
    };
    let engine = support::engine(&bedrock, &store, tuning, Vec::new());
    let mut events = engine.invoke(Scope::new("slow".parse().unwrap()), Prompt::text("Count"));
    let first = events.next().await.unwrap();
    // The reader is busy for four times the chunk timeout (a sink write that takes its time):
    // this pause is the fault itself, not a wait for something.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut rest: Vec<AgentEvent> = events.collect().await;
    rest.insert(0, first);
    assert_eq!(rest.last(), Some(&AgentEvent::completed()), "{rest:#?}");
    assert_eq!(support::text_of(&rest), "One, two, three, four.");
}

#[tokio::test]
async fn a_stop_sent_while_a_transaction_holds_the_turn_item_waits_it_out() {
    let proxy = FaultProxy::in_front_of(moto().endpoint()).await.unwrap();
    let table = format!("conflict-{}", uuid::Uuid::new_v4().simple());
    let config = DynamoConfig::new(&table).unwrap();
    let plain = DynamoStore::new(moto().dynamodb(), config.clone());
    plain.create_table().await.unwrap();
    let store = DynamoStore::new(dynamodb_client(&proxy.endpoint_url()), config);
    // DynamoDB refuses a single-item write to an item a transaction in flight touches; the SDK
    // does not retry that.
    proxy.inject(
        Rule::new(
            Match::target("UpdateItem").and(Match::body("stopReason")),
            Fault::dynamo(
                400,
                "TransactionConflictException",
                "Transaction is ongoing for the item",
            ),
        )
        .times(2),
    );
    let stop = agent_worker::session::Stop::now(agent_worker::session::StopCause::UserStop);
    assert_eq!(
        store.request_stop(&sid("c-1"), &tid("t-1"), stop).await.unwrap(),
        agent_worker::session::StopOutcome::Recorded
    );
    assert_eq!(proxy.injected().len(), 2, "both refusals were met and waited out");
    assert_eq!(
        plain.stop_requested(&sid("c-1"), &tid("t-1")).await.unwrap(),
        Some(stop)
    );
}

//! Durable turns on moto: a turn whose worker dies mid-turn (its stream dropped, as a killed
//! process drops everything) is claimed again once its lease is given up, and resumes from its
//! journal: the model is not asked again for the rounds written down, a call with a result is not
//! run again, a call that may have run is sent again with the same idempotency key, or, when its
//! tool takes none, is not run again and the model is told its outcome is unknown. The stored
//! history is the one a turn that never died stores.

use crate::support;

use std::sync::{Arc, Mutex};

use agent_worker::engine::tools::openapi::{ActAsContext, ActAsError, OpenApiOptions, load_openapi_tools};
use agent_worker::engine::tools::{Tool, ToolError, ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::{
    CallResult, Checkpoint, ContentBlock, DynamoConfig, DynamoStore, HistoryStore as _, JOURNAL_VERSION,
    Lease, Message, OpenStep, TurnLedger as _, idempotency_key,
};
use agent_worker_testkit::{BedrockStandIn, DeskApi, Reply, StreamScript, moto, sid, tid};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;

async fn table() -> DynamoStore {
    let table = format!("durable-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    store
}

fn act_as(ctx: &ActAsContext) -> Result<Vec<(String, String)>, ActAsError> {
    let user = ctx.user_id.as_deref().ok_or("the turn names no person")?;
    Ok(DeskApi::act_as(user, ctx.account_id.as_deref().unwrap_or("none")))
}

fn desk_tools(desk: &DeskApi) -> Vec<Arc<dyn Tool>> {
    load_openapi_tools(
        &DeskApi::document(),
        OpenApiOptions::new(desk.url(), act_as).events(DeskApi::events()),
    )
    .unwrap()
}

fn engine(bedrock: &BedrockStandIn, store: &DynamoStore, tools: Vec<Arc<dyn Tool>>) -> Engine {
    Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(store.clone())
        .tools(tools)
        .config(support::config())
        .build()
        .unwrap()
}

fn scope(session: &str, turn: &str) -> Scope {
    Scope::new(session.parse().unwrap())
        .with_turn_id(tid(turn))
        .with("userId", "ana")
        .with("accountId", "acme")
}

const ASK: &str = "Note on T-1 that I called the customer back.";

/// Runs a turn until the model has been asked `requests` times in all, then drops its stream:
/// the worker dies there, with nothing after it run (no release, no commit). Then gives its
/// lease up, as a lease that runs out does.
async fn die_at(
    engine: &Engine,
    bedrock: &BedrockStandIn,
    store: &DynamoStore,
    session: &str,
    turn: &str,
    requests: usize,
) {
    let stream = engine.invoke(scope(session, turn), Prompt::text(ASK));
    let running = tokio::spawn(stream.collect::<Vec<AgentEvent>>());
    bedrock.requested(requests).await;
    running.abort();
    assert!(
        running.await.unwrap_err().is_cancelled(),
        "the turn was still running"
    );
    store.release_turn(&sid(session), &tid(turn)).await.unwrap();
}

async fn run(engine: &Engine, session: &str, turn: &str) -> Vec<AgentEvent> {
    engine
        .invoke(scope(session, turn), Prompt::text(ASK))
        .collect()
        .await
}

fn started(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolStarted { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect()
}

/// The worker dies after the note was added and its result written down, while the model is
/// asked for its answer: the next run asks the model once, and the desk hears of the note once.
#[tokio::test]
async fn a_turn_killed_after_its_tool_ran_completes_without_calling_it_again() {
    let store = table().await;
    let (bedrock, desk) = (
        BedrockStandIn::start().await.unwrap(),
        DeskApi::start().await.unwrap(),
    );
    let engine = engine(&bedrock, &store, desk_tools(&desk));
    bedrock.push(support::desk_note_call());
    bedrock.push(StreamScript::new().open_text("I added").hang().into_reply());
    die_at(&engine, &bedrock, &store, "desk-1", "t1", 2).await;
    assert_eq!(desk.notes().len(), 1);

    bedrock.push(Reply::text("I added the note."));
    let events = run(&engine, "desk-1", "t1").await;
    assert!(
        matches!(support::terminal(&events), AgentEvent::Completed { .. }),
        "{events:?}"
    );
    assert!(started(&events).is_empty(), "no call started again: {events:?}");
    assert_eq!(desk.notes().len(), 1, "the note was added once");
    let posts: Vec<_> = desk.calls().into_iter().filter(|c| c.method == "POST").collect();
    assert_eq!(posts.len(), 1, "the desk was called once: {posts:?}");
    let key = idempotency_key(&sid("desk-1"), &tid("t1"), "tu-1");
    assert_eq!(posts[0].idempotency_key.as_deref(), Some(key.as_str()));
    // The model was asked three times in all: the resumed turn's request carries the result.
    assert_eq!(bedrock.requests().len(), 3);
    assert_eq!(bedrock.last_tool_result(2).unwrap()["toolUseId"], "tu-1");
    assert!(bedrock.last_tool_result(2).unwrap().to_string().contains("N-1"));

    // The same turn on a worker that never died stores the same history.
    let control_store = table().await;
    let (control_bedrock, control_desk) = (
        BedrockStandIn::start().await.unwrap(),
        DeskApi::start().await.unwrap(),
    );
    let control = self::engine(&control_bedrock, &control_store, desk_tools(&control_desk));
    control_bedrock.push(support::desk_note_call());
    control_bedrock.push(Reply::text("I added the note."));
    run(&control, "desk-1", "t1").await;
    let history = store.load_history(&sid("desk-1")).await.unwrap();
    assert_eq!(history, control_store.load_history(&sid("desk-1")).await.unwrap());
    assert_eq!(history.len(), 4, "{history:#?}");
}

/// The tool, the keys its calls carried, and a word each time a call starts.
type HangingOnce = (
    Arc<dyn Tool>,
    Arc<Mutex<Vec<String>>>,
    mpsc::UnboundedReceiver<()>,
);

/// A tool of the engine's own that counts its calls and the keys they carried; its first call
/// never ends (the worker dies during it).
fn hanging_once(idempotent: bool) -> HangingOnce {
    let keys = Arc::new(Mutex::new(Vec::new()));
    let (started, heard) = mpsc::unbounded_channel();
    let seen = keys.clone();
    let spec = ToolSpec::new(
        "send_mail",
        "Sends a mail.",
        json!({"type": "object", "properties": {"to": {"type": "string"}}}),
    )
    .effect(agent_worker::engine::tools::Effect::Mutate)
    .idempotent(idempotent);
    let tool = tool_fn(spec, move |_input: Value, ctx| {
        let (seen, started) = (seen.clone(), started.clone());
        async move {
            let first = {
                let mut keys = seen.lock().unwrap();
                keys.push(ctx.idempotency_key());
                keys.len() == 1
            };
            let _ = started.send(());
            if first {
                std::future::pending::<()>().await;
            }
            Ok::<Value, ToolError>(json!({"sent": true}))
        }
    });
    (Arc::new(tool), keys, heard)
}

/// Runs a turn until its tool has started, then drops it, and gives its lease up.
async fn die_in_tool(engine: &Engine, store: &DynamoStore, heard: &mut mpsc::UnboundedReceiver<()>) {
    let stream = engine.invoke(scope("mail-1", "t1"), Prompt::text(ASK));
    let running = tokio::spawn(stream.collect::<Vec<AgentEvent>>());
    heard.recv().await.unwrap();
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    store.release_turn(&sid("mail-1"), &tid("t1")).await.unwrap();
}

/// A turn whose `send_mail` call (of a tool that takes keys, or not) is killed while it runs,
/// then delivered again and answered with `answer`: its store, the model, and the keys its calls
/// carried, once it has completed.
async fn killed_in_send_mail(
    idempotent: bool,
    answer: &str,
) -> (DynamoStore, BedrockStandIn, Arc<Mutex<Vec<String>>>) {
    let store = table().await;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let (tool, keys, mut heard) = hanging_once(idempotent);
    let engine = engine(&bedrock, &store, vec![tool]);
    bedrock.push(Reply::tool_call(
        "tu-1",
        "send_mail",
        r#"{"to":"ana@example.com"}"#,
    ));
    die_in_tool(&engine, &store, &mut heard).await;
    bedrock.push(Reply::text(answer));
    let events = run(&engine, "mail-1", "t1").await;
    assert!(
        matches!(support::terminal(&events), AgentEvent::Completed { .. }),
        "{events:?}"
    );
    (store, bedrock, keys)
}

#[tokio::test]
async fn a_call_killed_while_it_ran_is_sent_again_with_the_same_key() {
    let (store, bedrock, keys) = killed_in_send_mail(true, "Sent.").await;
    let key = idempotency_key(&sid("mail-1"), &tid("t1"), "tu-1");
    assert_eq!(*keys.lock().unwrap(), [key.clone(), key], "twice, with one key");
    assert_eq!(
        bedrock.requests().len(),
        2,
        "the model was not asked again for the call"
    );
    let history = store.load_history(&sid("mail-1")).await.unwrap();
    assert_eq!(history.len(), 4, "{history:#?}");
    assert_eq!(result_of(&history[2]), (false, json!({"sent": true})));
}

/// The one tool result `message` holds: whether it is an error, and its content.
fn result_of(message: &Message) -> (bool, Value) {
    match message.content.as_slice() {
        [
            ContentBlock::ToolResult {
                content, is_error, ..
            },
        ] => (*is_error, content.clone()),
        other => panic!("not one tool result: {other:?}"),
    }
}

#[tokio::test]
async fn a_call_whose_tool_takes_no_key_is_not_run_again_and_the_model_is_told() {
    let (store, bedrock, keys) = killed_in_send_mail(false, "I could not tell whether it was sent.").await;
    assert_eq!(keys.lock().unwrap().len(), 1, "run at most once");
    let told = bedrock.last_tool_result(1).unwrap();
    assert_eq!(told["toolUseId"], "tu-1");
    assert_eq!(told["status"], "error");
    assert!(told.to_string().contains("outcome is unknown"), "{told}");
    let history = store.load_history(&sid("mail-1")).await.unwrap();
    let (is_error, content) = result_of(&history[2]);
    assert!(
        is_error && content["error"].as_str().unwrap().contains("outcome is unknown"),
        "{content}"
    );
}

fn checkpoint(turn: &str) -> Checkpoint {
    Checkpoint {
        version: JOURNAL_VERSION,
        turn_id: tid(turn),
        messages: vec![Message::user_text("Hi")],
        step: OpenStep {
            answer: Vec::new(),
            calls: vec!["c1".into()],
            started: vec!["c1".into()],
            results: Vec::new(),
        },
        round: 0,
        delivered: Vec::new(),
        started_at_ms: 1,
    }
}

/// A worker whose lease ran out and whose turn another worker took writes nothing of the turn's
/// journal; a turn whose id begins another's reads only its own.
#[tokio::test]
async fn a_journal_is_written_only_under_the_claim_and_read_only_as_its_own() {
    let table = table().await;
    let config = DynamoConfig::new(table.table()).unwrap();
    let (first, second) = (
        DynamoStore::new(moto().dynamodb(), config.clone()),
        DynamoStore::new(moto().dynamodb(), config),
    );
    let (s, t) = (sid("j-1"), tid("t"));
    first
        .claim_turn(&s, &t, Lease(std::time::Duration::ZERO))
        .await
        .unwrap();
    first.write_checkpoint(&s, &t, &checkpoint("t")).await.unwrap();
    second
        .claim_turn(&s, &t, Lease(std::time::Duration::from_secs(60)))
        .await
        .unwrap();
    let result = CallResult {
        call_id: "c1".into(),
        content: json!({"ok": true}),
        is_error: false,
    };
    assert!(
        matches!(
            first.record_result(&s, &t, &result).await,
            Err(agent_worker::session::StoreError::LostLease(_))
        ),
        "the old worker's write landed, or failed for another reason"
    );
    assert!(first.write_checkpoint(&s, &t, &checkpoint("t")).await.is_err());
    second.record_result(&s, &t, &result).await.unwrap();
    // Nor can it give the turn back: the new worker's lease stands.
    first.release_turn(&s, &t).await.unwrap();
    let record = second.turn(&s, &t).await.unwrap().unwrap();
    assert!(
        record.lease_until > std::time::SystemTime::now(),
        "the old worker released the new one's claim"
    );
    let journal = second.read_journal(&s, &t).await.unwrap().unwrap();
    assert_eq!(journal.checkpoint, checkpoint("t"));
    assert_eq!(journal.results, [result]);

    let other = tid("t#m");
    second
        .claim_turn(&s, &other, Lease(std::time::Duration::from_secs(60)))
        .await
        .unwrap();
    second
        .write_checkpoint(&s, &other, &checkpoint("t#m"))
        .await
        .unwrap();
    assert_eq!(
        second.read_journal(&s, &t).await.unwrap().unwrap().checkpoint,
        checkpoint("t")
    );
    assert!(second.read_journal(&s, &tid("u")).await.unwrap().is_none());
}

/// A result handed to the turn's event log ([`TurnLedger::record_result_later`]) is recorded with
/// the log's next write while the turn is this worker's; once another worker took the turn, the
/// log's write carries the events alone. A turn with no log open in the process hands nothing.
#[tokio::test]
async fn a_result_riding_on_the_logs_write_lands_only_under_the_claim() {
    use agent_worker::protocol::AgentEvent;
    use agent_worker::sinks::{DynamoEventLog, Sink as _, TurnRef};

    let table = table().await;
    let config = DynamoConfig::new(table.table()).unwrap();
    let (first, second) = (
        DynamoStore::new(moto().dynamodb(), config.clone()),
        DynamoStore::new(moto().dynamodb(), config),
    );
    let (s, t) = (sid("ride-1"), tid("t"));
    first
        .claim_turn(&s, &t, Lease(std::time::Duration::ZERO))
        .await
        .unwrap();
    first.write_checkpoint(&s, &t, &checkpoint("t")).await.unwrap();
    let result = |id: &str| CallResult {
        call_id: id.into(),
        content: json!({"ok": id}),
        is_error: false,
    };
    let ended = |id: &str| AgentEvent::ToolEnded {
        id: id.into(),
        is_error: false,
        content: json!({"ok": id}),
    };
    assert!(
        !first.record_result_later(&s, &t, &result("c0")),
        "no log of the turn is open: nothing comes to ride on"
    );
    let log = DynamoEventLog::new(first.clone());
    let mut sink = log.open(&TurnRef::new(s.clone(), t.clone()));
    assert!(first.record_result_later(&s, &t, &result("c1")));
    assert!(
        first
            .read_journal(&s, &t)
            .await
            .unwrap()
            .unwrap()
            .results
            .is_empty(),
        "handed over, not written"
    );
    sink.event(&ended("c1")).await.unwrap();
    sink.flush().await.unwrap();
    let journal = first.read_journal(&s, &t).await.unwrap().unwrap();
    assert_eq!(journal.results, [result("c1")], "written with the log's window");

    second
        .claim_turn(&s, &t, Lease(std::time::Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(first.record_result_later(&s, &t, &result("c2")));
    sink.event(&ended("c2")).await.unwrap();
    sink.flush().await.unwrap();
    let logged = log.read(&s, &t, None).await.unwrap();
    assert_eq!(
        logged.iter().map(|l| l.event.clone()).collect::<Vec<_>>(),
        [ended("c1"), ended("c2")],
        "the events are written either way"
    );
    let journal = second.read_journal(&s, &t).await.unwrap().unwrap();
    assert_eq!(
        journal.results,
        [result("c1")],
        "the old worker's result rode along after the turn was taken"
    );
}

/// What the journal costs, counted on the wire: a round whose call changes something writes a
/// checkpoint before the call, one `TransactWriteItems` more than a read's round (five requests,
/// `round_trips`); its result (its tool takes keys) rides on the event log's next write, which
/// here (the log gathering past the turn's end) does not come before the commit stores the
/// turn's history: it costs nothing more.
#[tokio::test]
async fn a_round_that_changes_something_costs_one_write_more_than_a_read() {
    use agent_worker::hosts::lambda::TurnHandler;
    use agent_worker::sinks::{DynamoEventLog, Sinks};
    use agent_worker_testkit::meter::Meter;
    use std::time::{Duration, SystemTime};

    let meter = Meter::default();
    let plain = table().await;
    let store = DynamoStore::new(
        meter.client(&moto().dynamodb()),
        DynamoConfig::new(plain.table()).unwrap(),
    );
    let (bedrock, desk) = (
        BedrockStandIn::start().await.unwrap(),
        DeskApi::start().await.unwrap(),
    );
    let handler = TurnHandler::new(
        engine(&bedrock, &store, desk_tools(&desk)),
        // The log's window past the turn: it writes only with the commit, whatever moto's pace.
        Sinks::new().with(DynamoEventLog::new(store.clone()).gathering_for(Duration::from_secs(600))),
    );
    let deadline = Some(SystemTime::now() + Duration::from_secs(600));
    let record = |turn: &str| {
        let body = json!({"turnId": turn, "conversationId": "desk-m", "userId": "ana", "accountId": "acme", "content": ASK});
        let record = support::lambda_batch::record(&format!("m-{turn}"), &body.to_string());
        support::lambda_batch::batch(vec![record])
    };
    bedrock.push(Reply::text("Hello."));
    assert!(
        handler
            .handle_batch(record("t0"), deadline)
            .await
            .unwrap()
            .batch_item_failures
            .is_empty()
    );
    bedrock.push(support::desk_note_call());
    bedrock.push(Reply::text("Noted."));
    meter.take();
    assert!(
        handler
            .handle_batch(record("t1"), deadline)
            .await
            .unwrap()
            .batch_item_failures
            .is_empty()
    );
    let counts = meter.take();
    let expected: std::collections::BTreeMap<String, u64> = [
        ("UpdateItem", 2),
        ("Query", 1),
        ("GetItem", 1),
        ("TransactWriteItems", 2),
    ]
    .into_iter()
    .map(|(operation, n)| (operation.to_owned(), n))
    .collect();
    assert_eq!(counts.operations, expected);
    assert_eq!(desk.notes().len(), 1);
}

/// A step whose read answers 500 KB beside a call that changes something: the journal keeps the
/// read's result cut to fit an item, as the message that keeps it is, and the turn completes on
/// DynamoDB (an item over 400 KB would fail the journal, and the turn, on every delivery).
#[tokio::test]
async fn a_large_read_beside_a_call_that_changes_something_fits_the_journal() {
    use std::time::Duration;
    let store = table().await;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let read = tool_fn(
        ToolSpec::new("read_report", "Reads the report.", json!({"type": "object"})),
        |_input: Value, _ctx| async { Ok::<Value, ToolError>(json!({"report": "x".repeat(500 * 1024)})) },
    );
    let (write, keys, _heard) = hanging_once(true);
    // The first call of `send_mail` would hang: let it through.
    keys.lock().unwrap().push("before".into());
    let engine = engine(&bedrock, &store, vec![Arc::new(read) as Arc<dyn Tool>, write]);
    bedrock.push(
        StreamScript::new()
            .tool_use("tu-r", "read_report", "{}", 1)
            .tool_use("tu-w", "send_mail", r#"{"to":"ana@example.com"}"#, 1)
            .stop("tool_use")
            // The read ends while the answer still streams: its result is in the checkpoint.
            .chunk_delay(Duration::from_millis(50))
            .into_reply(),
    );
    bedrock.push(Reply::text("Done."));
    let events = run(&engine, "big-1", "t1").await;
    let terminal = support::terminal(&events);
    assert!(matches!(terminal, AgentEvent::Completed { .. }), "{terminal:?}");
    let journal = store
        .read_journal(&sid("big-1"), &tid("t1"))
        .await
        .unwrap()
        .unwrap();
    let kept = &journal.checkpoint.step.results;
    assert_eq!(
        kept.len(),
        1,
        "the read's result, in the checkpoint: {:?}",
        journal.checkpoint.step
    );
    assert!(kept[0].content.to_string().len() < 400 * 1024);
    assert_eq!(
        keys.lock().unwrap().len(),
        2,
        "the call that changes something ran"
    );
}

/// A turn whose policy says `send_mail` ends it, killed while the call ran: resumed, the call
/// runs again with its key and the turn ends there, as it would have, without asking the model.
#[tokio::test]
async fn a_resumed_call_of_a_tool_that_ends_the_turn_ends_it() {
    #[derive(Debug)]
    struct EndsOnMail;
    impl agent_worker::engine::TurnPolicy for EndsOnMail {
        fn ends_turn(&self, tool: &str) -> bool {
            tool == "send_mail"
        }
    }
    let store = table().await;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let (tool, keys, mut heard) = hanging_once(true);
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(store.clone())
        .tools(vec![tool])
        .turn_policy(EndsOnMail)
        .config(support::config())
        .build()
        .unwrap();
    bedrock.push(Reply::tool_call(
        "tu-1",
        "send_mail",
        r#"{"to":"ana@example.com"}"#,
    ));
    die_in_tool(&engine, &store, &mut heard).await;
    let events = run(&engine, "mail-1", "t1").await;
    let AgentEvent::Completed { data: Some(data) } = support::terminal(&events) else {
        panic!("{events:?}");
    };
    assert_eq!(data["stopReason"], "stop_tool", "{data}");
    assert_eq!(data["stopTools"][0]["name"], "send_mail", "{data}");
    assert_eq!(keys.lock().unwrap().len(), 2, "run again, with its key");
    assert_eq!(bedrock.requests().len(), 1, "the model was not asked again");
}

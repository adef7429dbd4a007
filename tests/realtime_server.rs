//! Seed 004's realtime server keeps a turn's stops and approvals. A worker wired as the seed
//! says (events to the realtime server, the tab's answers from it), built from settings alone,
//! asks it for the turn's stop before the turn starts and for as long as it runs, is never failed
//! by a server that errors or cannot be reached, and keeps its approvals in the server's store
//! unless `APPROVAL_STORE=table`. DynamoDB on moto, the model on the Bedrock stand-in, the
//! realtime server on its stand-in.

use crate::support;
use agent_worker::session::HistoryStore as _;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_worker::hosts::WorkerSettings;
use agent_worker::hosts::config::{ConfigFile, Configured, Loader};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope, codes};
use agent_worker::session::{ApprovalStore as _, DynamoConfig, DynamoStore, StopCause};
use agent_worker_testkit::fault_proxy::{Fault, FaultProxy, Match, Rule};
use agent_worker_testkit::{
    BedrockStandIn, REALTIME_KEY, RealtimeStandIn, Reply, StreamScript, moto, sid, tid,
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use support::{MODEL_ID, approval_event, terminal, text_of};

/// How long any one turn of these tests may take.
const TURN_LIMIT: Duration = Duration::from_secs(60);

/// The model, the table and the realtime server of one test.
struct World {
    bedrock: BedrockStandIn,
    table: String,
    store: DynamoStore,
    realtime: RealtimeStandIn,
}

async fn world() -> World {
    let table = format!("realtime-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    World {
        bedrock: BedrockStandIn::start().await.unwrap(),
        table,
        store,
        realtime: RealtimeStandIn::start().await.unwrap(),
    }
}

impl World {
    /// The agent settings build for a worker wired to the realtime server at `url` (its own,
    /// or a proxy's in front of it), with `extra` settings and `configured`.
    fn agent_at(&self, url: &str, extra: &[(&'static str, &str)], configured: &Configured) -> Arc<dyn Agent> {
        let mut values: HashMap<&str, String> = RealtimeStandIn::settings_at(url).into_iter().collect();
        values.extend([
            ("TABLE_NAME", self.table.clone()),
            ("MODEL_ID", MODEL_ID.to_owned()),
            ("SYSTEM_PROMPT", "You are a test assistant.".to_owned()),
            ("STOP_GRACE_MS", "100".to_owned()),
        ]);
        values.extend(extra.iter().map(|(name, value)| (*name, (*value).to_owned())));
        let settings = WorkerSettings::from_lookup(|name| values.get(name).cloned()).unwrap();
        let (agent, _sinks) = settings
            .build(self.bedrock.client(), moto().dynamodb(), None, configured)
            .unwrap();
        agent
    }

    fn agent(&self) -> Arc<dyn Agent> {
        self.agent_at(self.realtime.url(), &[], &Configured::default())
    }
}

fn scope(session: &str, turn: &str) -> Scope {
    Scope::new(sid(session))
        .with_turn_id(tid(turn))
        .with("userId", "ada")
}

/// Runs a whole turn, within [`TURN_LIMIT`].
async fn turn(agent: &Arc<dyn Agent>, scope: Scope, text: &str) -> Vec<AgentEvent> {
    tokio::time::timeout(TURN_LIMIT, agent.invoke(scope, Prompt::text(text)).collect())
        .await
        .expect("the turn ended")
}

/// The product's API asks the realtime server to stop turn `turn_id`, as seed 004 says.
async fn ask_stop(realtime: &RealtimeStandIn, turn_id: &str, reason: &str) {
    let response = reqwest::Client::new()
        .post(format!("{}/internal/turns/{turn_id}/stop", realtime.url()))
        .header("x-api-key", REALTIME_KEY)
        .json(&json!({ "reason": reason }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::ACCEPTED);
}

fn stopped_with(events: &[AgentEvent], reason: &str) {
    assert_eq!(
        terminal(events),
        &AgentEvent::completed_with(json!({ "stopReason": reason })),
        "{events:#?}"
    );
}

#[tokio::test]
async fn a_stop_asked_of_the_realtime_server_before_the_turn_starts_means_the_model_is_never_called() {
    let w = world().await;
    let agent = w.agent();
    ask_stop(&w.realtime, "t1", "user_stop").await;
    let events = turn(&agent, scope("s-before", "t1"), "Hi").await;
    stopped_with(&events, "user_stop");
    assert!(w.bedrock.requests().is_empty(), "the model was never called");
    let history = w.store.load_history(&sid("s-before")).await.unwrap();
    assert_eq!(history.len(), 2, "{history:#?}");
    assert_eq!(history[1].stopped.map(|s| s.reason), Some(StopCause::UserStop));

    // A turn the person's next message replaced while it waited runs nothing at all.
    ask_stop(&w.realtime, "t2", "superseded").await;
    let events = turn(&agent, scope("s-before", "t2"), "Hello?").await;
    assert!(
        matches!(terminal(&events), AgentEvent::Failed { code: Some(code), .. } if code == codes::SUPERSEDED),
        "{events:#?}"
    );
    assert!(w.bedrock.requests().is_empty(), "the model was never called");
    assert_eq!(w.store.load_history(&sid("s-before")).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_stop_asked_of_the_realtime_server_while_the_turn_runs_stops_it() {
    let w = world().await;
    let agent = w.agent();
    // The model says a few words, then goes quiet: only a stop ends this turn in time.
    w.bedrock
        .push(StreamScript::new().open_text("Counting: one").hang().into_reply());
    let mut stream = agent.invoke(scope("s-running", "t1"), Prompt::text("Count"));
    let first = tokio::time::timeout(TURN_LIMIT, stream.next())
        .await
        .expect("the model began")
        .unwrap();
    assert!(matches!(&first, AgentEvent::Text { .. }), "{first:?}");
    ask_stop(&w.realtime, "t1", "user_stop").await;
    let mut events = vec![first];
    events.extend(
        tokio::time::timeout(TURN_LIMIT, stream.collect::<Vec<_>>())
            .await
            .expect("the stop ended the turn"),
    );
    stopped_with(&events, "user_stop");
    assert_eq!(text_of(&events), "Counting: one");
    assert!(
        w.realtime.state().stop_asks("t1") >= 2,
        "asked before it started, then while it ran"
    );
    let history = w.store.load_history(&sid("s-running")).await.unwrap();
    assert_eq!(history[1].text(), "Counting: one");
    assert_eq!(history[1].stopped.map(|s| s.reason), Some(StopCause::UserStop));
}

/// A reply that streams for a few seconds: long enough for the watch to ask while it runs.
fn slow_answer() -> Reply {
    StreamScript::new()
        .text("Still here, and done.", 5)
        .stop("end_turn")
        .chunk_delay(Duration::from_millis(500))
        .into_reply()
}

#[tokio::test]
async fn a_realtime_server_that_errors_or_cannot_be_reached_never_fails_the_turn() {
    let w = world().await;

    // It answers 503 to everything: the turn asks, and runs to its own end.
    w.realtime.failing(true);
    let agent = w.agent();
    w.bedrock.push(slow_answer());
    let events = turn(&agent, scope("s-errors", "t1"), "Hi").await;
    assert_eq!(terminal(&events), &AgentEvent::completed(), "{events:#?}");
    assert_eq!(text_of(&events), "Still here, and done.");
    assert!(
        w.realtime.state().stop_asks("t1") >= 2,
        "asked before it started and while it ran: {:?}",
        w.realtime.state().requests
    );

    // Its connections are reset: the same.
    w.realtime.failing(false);
    let proxy = FaultProxy::in_front_of(w.realtime.url()).await.unwrap();
    proxy.inject(Rule::new(Match::Any, Fault::Reset).times(u32::MAX));
    let agent = w.agent_at(&proxy.endpoint_url(), &[], &Configured::default());
    w.bedrock.push(slow_answer());
    let events = turn(&agent, scope("s-down", "t2"), "Hi").await;
    assert_eq!(terminal(&events), &AgentEvent::completed(), "{events:#?}");
    assert_eq!(text_of(&events), "Still here, and done.");
    let resets = proxy
        .injected()
        .iter()
        .filter(|i| i.request.contains("/internal/turns/t2/stop"))
        .count();
    assert!(
        resets >= 2,
        "asked before it started and while it ran: {:?}",
        proxy.injected()
    );
    assert_eq!(w.realtime.state().stop_asks("t2"), 0, "none got through");
}

/// The configuration of the approval tests: `add` needs the person's approval.
async fn approving_add() -> Configured {
    let file: ConfigFile =
        serde_yaml::from_str("persona: You add numbers.\npolicy:\n  - tools: add\n    decision: approve\n")
            .unwrap();
    Configured::from_file(&file, &std::env::temp_dir(), &Loader::default())
        .await
        .unwrap()
}

const APPROVAL_SECRET: &str = "0123456789abcdef0123456789abcdef";

/// Turn `turn_id` of `session`, in which the model asks to add: the approval it waits for.
async fn ask_to_add(w: &World, agent: &Arc<dyn Agent>, session: &str, turn_id: &str) -> Value {
    w.bedrock.push(Reply::tool_call(
        &format!("call-{turn_id}"),
        "add",
        r#"{"numbers": [20, 22]}"#,
    ));
    let events = turn(agent, scope(session, turn_id), "Add them").await;
    stopped_with(&events, "approval_required");
    approval_event(&events)
}

fn status_at(realtime: &RealtimeStandIn, id: &str) -> Option<String> {
    realtime
        .state()
        .approvals
        .get(id)
        .map(|(_, status)| status.clone())
}

#[tokio::test]
async fn approvals_wait_in_the_realtime_servers_store_unless_the_table_is_named() {
    let w = world().await;
    let configured = approving_add().await;
    let settings = [("TOOLS", "add"), ("APPROVAL_SECRET", APPROVAL_SECRET)];
    let agent = w.agent_at(w.realtime.url(), &settings, &configured);

    let card = ask_to_add(&w, &agent, "s-approve", "t1").await;
    let id = card["approvalId"].as_str().unwrap();
    let (kept, status) = w.realtime.state().approvals[id].clone();
    assert_eq!(status, "pending");
    assert_eq!(
        (
            kept["session"].as_str(),
            kept["turnId"].as_str(),
            kept["tool"].as_str()
        ),
        (Some("s-approve"), Some("t1"), Some("add"))
    );
    assert!(
        w.store
            .get_approval(&sid("s-approve"), id)
            .await
            .unwrap()
            .is_none(),
        "nothing in the table"
    );

    // The person approves: the call runs once, redeemed in the server's store.
    w.bedrock.push(Reply::text("20 + 22 is 42."));
    let decision = json!({"approvalId": id, "decision": "approve", "token": card["token"]});
    let events = turn(
        &agent,
        scope("s-approve", "t2").with("approval", decision.clone()),
        "",
    )
    .await;
    assert_eq!(terminal(&events), &AgentEvent::completed(), "{events:#?}");
    let ran = format!("{id}-approved");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolEnded { id, is_error: false, .. } if *id == ran)),
        "{events:#?}"
    );
    assert_eq!(status_at(&w.realtime, id).as_deref(), Some("redeemed"));
    // The same token again runs nothing.
    w.bedrock.push(Reply::text("Already done."));
    let events = turn(&agent, scope("s-approve", "t3").with("approval", decision), "").await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolStarted { name, .. } if name == "add")),
        "{events:#?}"
    );

    // A turn the person's next message replaces has its card withdrawn in the server's store.
    let card = ask_to_add(&w, &agent, "s-approve", "t4").await;
    let waiting = card["approvalId"].as_str().unwrap();
    w.bedrock.push(Reply::text("Never mind, then."));
    let events = turn(
        &agent,
        scope("s-approve", "t5").with("supersedes", json!(["t4"])),
        "Never mind",
    )
    .await;
    assert_eq!(terminal(&events), &AgentEvent::completed(), "{events:#?}");
    assert_eq!(status_at(&w.realtime, waiting).as_deref(), Some("expired"));

    // With APPROVAL_STORE=table, approvals wait in the table as ever.
    let settings = [
        ("TOOLS", "add"),
        ("APPROVAL_SECRET", APPROVAL_SECRET),
        ("APPROVAL_STORE", "table"),
    ];
    let agent = w.agent_at(w.realtime.url(), &settings, &configured);
    let card = ask_to_add(&w, &agent, "s-table", "t1").await;
    let id = card["approvalId"].as_str().unwrap();
    assert!(w.store.get_approval(&sid("s-table"), id).await.unwrap().is_some());
    assert_eq!(status_at(&w.realtime, id), None);
}

//! The crash matrix of a turn with a call that changes something, on moto through the handler
//! the Lambda function runs: the worker dies (its turn's task dropped, as a killed process drops
//! everything) at each boundary of the turn, its lease is given up, and the turn is delivered
//! again. At every boundary the turn ends once, completed; the call reached its tool once, or
//! twice with the same idempotency key; the history passes the session checker; the turn's
//! event log has no gap, and one terminal, its last event.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agent_worker::engine::tools::{Effect, Tool, ToolError, ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::AgentTurnPayload;
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::protocol::{AgentEvent, codes};
use agent_worker::session::{DynamoConfig, DynamoStore, TurnLedger as _, TurnStatus, idempotency_key};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::fault_proxy::{Fault, FaultProxy, Match, Rule};
use agent_worker_testkit::moto::dynamodb_client;
use agent_worker_testkit::session_audit::audit;
use agent_worker_testkit::{BedrockStandIn, Reply, StreamScript, moto, sid, tid};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use support::crash_matrix::{BOUNDARIES, Boundary};

fn ship_call() -> Reply {
    Reply::tool_call("tu-1", "ship", r#"{"order":"O-1"}"#)
}

fn hanging() -> Reply {
    StreamScript::new().hang().into_reply()
}

/// The world of one case: the table behind a fault proxy, the model, the tool.
struct World {
    proxy: FaultProxy,
    plain: DynamoStore,
    bedrock: BedrockStandIn,
    handler: Arc<TurnHandler>,
    keys: Arc<Mutex<Vec<String>>>,
    block_first: Arc<AtomicBool>,
    started: mpsc::UnboundedReceiver<()>,
}

impl World {
    async fn new() -> Self {
        let table = format!("matrix-{}", uuid::Uuid::new_v4().simple());
        let config = DynamoConfig::new(&table).unwrap();
        let plain = DynamoStore::new(moto().dynamodb(), config.clone());
        plain.create_table().await.unwrap();
        let proxy = FaultProxy::in_front_of(moto().endpoint()).await.unwrap();
        let store = DynamoStore::new(dynamodb_client(&proxy.endpoint_url()), config);
        let bedrock = BedrockStandIn::start().await.unwrap();
        let keys = Arc::new(Mutex::new(Vec::new()));
        let block_first = Arc::new(AtomicBool::new(false));
        let (tell, started) = mpsc::unbounded_channel();
        let (seen, block) = (keys.clone(), block_first.clone());
        let spec = ToolSpec::new("ship", "Ships an order.", json!({"type": "object"})).effect(Effect::Mutate);
        let ship = tool_fn(spec, move |_input: Value, ctx| {
            let (seen, block, tell) = (seen.clone(), block.clone(), tell.clone());
            async move {
                seen.lock().unwrap().push(ctx.idempotency_key());
                let _ = tell.send(());
                if block.swap(false, Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                Ok::<Value, ToolError>(json!({"shipped": "O-1"}))
            }
        });
        let engine = Engine::builder()
            .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
            .store(store.clone())
            .tools(vec![Arc::new(ship) as Arc<dyn Tool>])
            // The stalls this matrix holds a write in last until the worker is killed, however
            // slow a loaded machine makes the read that sees the write land.
            .config(EngineConfig {
                store_timeout: std::time::Duration::from_secs(600),
                ..support::config()
            })
            .build()
            .unwrap();
        let handler = Arc::new(TurnHandler::new(
            engine,
            Sinks::new().with(DynamoEventLog::new(store)),
        ));
        Self {
            proxy,
            plain,
            bedrock,
            handler,
            keys,
            block_first,
            started,
        }
    }

    /// Runs the turn until `boundary`, and drops it there; gives its lease up.
    async fn die_at(&mut self, boundary: Boundary, payload: &AgentTurnPayload) {
        use Boundary::*;
        let transact = || Match::target("TransactWriteItems");
        match boundary {
            AfterTheClaim => self.bedrock.push(hanging()),
            DuringTheStream => self.bedrock.push(
                StreamScript::new()
                    .open_text("Let me ship it")
                    .hold()
                    .into_reply(),
            ),
            BeforeTheCall => {
                self.bedrock.push(ship_call());
                let checkpoint = transact().and(Match::body("#step"));
                self.proxy.inject(Rule::new(checkpoint, Fault::StallResponse));
            }
            DuringTheCall => {
                self.bedrock.push(ship_call());
                self.block_first.store(true, Ordering::SeqCst);
            }
            BeforeItsResult => {
                self.bedrock.push(ship_call());
                self.bedrock.push(hanging());
                let refused = Fault::dynamo(400, "ValidationException", "refused by the test");
                self.proxy
                    .inject(Rule::new(transact().and(Match::body("#call#")), refused));
            }
            AfterItsResult => {
                self.bedrock.push(ship_call());
                self.bedrock.push(hanging());
            }
            DuringTheCommit => {
                self.bedrock.push(ship_call());
                self.bedrock.push(Reply::text("Shipped."));
                let commit = transact().and(Match::body("msg#"));
                self.proxy.inject(Rule::new(commit, Fault::StallResponse));
            }
        }
        let handler = self.handler.clone();
        let turn = payload.clone();
        let running = tokio::spawn(async move { handler.run_turn_to_end(&turn, None).await });
        let (s, t) = (sid("m-1"), tid("t1"));
        match boundary {
            AfterTheClaim => self.bedrock.requested(1).await,
            DuringTheStream => self.bedrock.holding(1).await,
            DuringTheCall => self.started.recv().await.unwrap(),
            BeforeItsResult => self.bedrock.requested(2).await,
            // The result rides on the log's next window, written within its 250 ms.
            AfterItsResult => {
                landed(async || {
                    let journal = self.plain.read_journal(&s, &t).await.unwrap();
                    journal.is_some_and(|j| j.results.iter().any(|r| r.call_id == "tu-1"))
                })
                .await;
            }
            // What landed is seen in the table.
            // What landed (its answer held back by the proxy) is seen in the table; within a
            // minute, or the test fails rather than hangs.
            BeforeTheCall => {
                landed(async || self.plain.read_journal(&s, &t).await.unwrap().is_some()).await;
            }
            DuringTheCommit => {
                landed(async || {
                    let record = self.plain.turn(&s, &t).await.unwrap();
                    record.is_some_and(|r| r.status == TurnStatus::Completed)
                })
                .await;
            }
        }
        running.abort();
        assert!(
            running.await.unwrap_err().is_cancelled(),
            "{boundary:?}: the turn had ended"
        );
        self.proxy.clear();
        if boundary == DuringTheStream {
            self.bedrock.release();
        }
        self.plain.release_turn(&s, &t).await.unwrap();
    }
}

/// Waits until `seen` says the write landed: looked at every 20 ms, for a minute at most.
async fn landed(seen: impl AsyncFn() -> bool) {
    let look = async {
        while !seen().await {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), look)
        .await
        .expect("the write landed within a minute");
}

#[tokio::test]
async fn a_turn_killed_at_any_boundary_ends_once_and_its_call_takes_effect_once() {
    let body = json!({"turnId": "t1", "conversationId": "m-1", "userId": "ana", "accountId": "acme", "content": "Ship order O-1."});
    let payload = AgentTurnPayload::decode(&body.to_string()).unwrap();
    let key = idempotency_key(&sid("m-1"), &tid("t1"), "tu-1");
    for boundary in BOUNDARIES {
        use Boundary::*;
        let mut world = World::new().await;
        world.die_at(boundary, &payload).await;
        // The next delivery: what the model says then.
        match boundary {
            AfterTheClaim | DuringTheStream => {
                world.bedrock.push(ship_call());
                world.bedrock.push(Reply::text("Shipped."));
            }
            BeforeTheCall | DuringTheCall | BeforeItsResult | AfterItsResult => {
                world.bedrock.push(Reply::text("Shipped."));
            }
            DuringTheCommit => {}
        }
        let run = world.handler.run_turn_to_end(&payload, None).await;
        match (boundary, run.terminal) {
            (DuringTheCommit, Some(AgentEvent::Failed { code, .. })) => {
                assert_eq!(code.as_deref(), Some(codes::DUPLICATE_TURN), "{boundary:?}");
            }
            (_, Some(AgentEvent::Completed { .. })) => {}
            (_, other) => panic!("{boundary:?}: ended {other:?}"),
        }
        assert_eq!(
            world.bedrock.pending_replies(),
            0,
            "{boundary:?}: every reply was asked for"
        );

        let record = world.plain.turn(&sid("m-1"), &tid("t1")).await.unwrap().unwrap();
        assert_eq!(record.status, TurnStatus::Completed, "{boundary:?}");
        let keys = world.keys.lock().unwrap().clone();
        let runs = match boundary {
            DuringTheCall | BeforeItsResult => 2,
            _ => 1,
        };
        assert_eq!(
            keys,
            vec![key.clone(); runs],
            "{boundary:?}: the calls and their keys"
        );
        let accepted = [("m-1".to_owned(), "t1".to_owned())];
        let checked = audit(&world.plain, &accepted, &BTreeSet::new()).await.unwrap();
        assert_eq!(checked.violations, Vec::<String>::new(), "{boundary:?}");
        assert_eq!(checked.messages, 4, "{boundary:?}: the turn stored once");
        let logged = DynamoEventLog::new(world.plain.clone())
            .read("m-1", "t1", None)
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
        println!("crash matrix: {boundary:?}: completed once, {runs} call(s) with one key");
    }
}

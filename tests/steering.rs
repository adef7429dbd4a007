//! Steering a running turn, on DynamoDB (moto) and the Bedrock stand-in: the turn runs on one
//! engine, the commands are sent through another over the same table (another instance), and
//! what reaches the model is read from the stand-in's requests. The hosts' ways in (the queue,
//! the command line, HTTP) are in `steering_hosts.rs`.

use crate::support;
use agent_worker::session::HistoryStore as _;

use agent_worker_testkit::{sid, tid};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::protocol::control::{SessionStatus, refusals};
use agent_worker::protocol::{Agent as _, AgentEvent, Prompt, Scope, SessionCommand, SessionControl as _};
use agent_worker::session::ContentBlock;
use agent_worker_testkit::{BedrockStandIn, Reply};
use futures_util::StreamExt as _;
use support::steering::*;
use tokio::sync::Notify;

#[tokio::test]
async fn a_steer_sent_during_a_tool_round_reaches_the_very_next_model_request() {
    let d = deployment(usize::MAX, ONLY_AT_BOUNDARIES).await;
    d.bedrock.push(Reply::tool_call("c1", "wait_for_go", "{}"));
    d.bedrock.push(Reply::text("In metric, then."));
    let turn = d.start("s-steer", "t1", "How far is it?");
    d.tool_started.notified().await;
    assert_eq!(
        d.send("s-steer", steer("Use metric units.")).await,
        Ok("t1".to_owned())
    );
    let state = d.sender.control().state(&sid("s-steer")).await.unwrap();
    assert_eq!(
        (
            state.status,
            state.active_run_id.as_deref(),
            state.commands.steering
        ),
        (SessionStatus::Running, Some("t1"), 1)
    );
    d.go.notify_one();
    let events = turn.await.unwrap();

    assert_eq!(terminals(&events), 1, "{events:?}");
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    assert_eq!(delivered(&events), [("steer".to_owned(), 0)]);
    let requests = d.bedrock.requests();
    assert_eq!(requests.len(), 2, "no request more or less");
    assert_eq!(
        last_message_texts(&requests[1].body),
        ["Use metric units."],
        "the steer rides with the tool's result: {}",
        requests[1].body
    );
    // Kept once, beside the result it came with.
    let history = d.store.load_history(&sid("s-steer")).await.unwrap();
    assert_eq!(history.len(), 4, "{history:?}");
    let steered = &history[2].content;
    assert!(
        matches!(steered[0], ContentBlock::ToolResult { .. }),
        "{steered:?}"
    );
    assert_eq!(steered[1], ContentBlock::text("Use metric units."));
    assert_eq!(format!("{history:?}").matches("Use metric units.").count(), 1);

    // The run has settled: the session is idle, and a steer is refused before it is kept.
    assert_eq!(
        d.send("s-steer", steer("Too late.")).await,
        Err((refusals::NO_ACTIVE_RUN.to_owned(), true))
    );
    assert_eq!(
        d.sender.control().state(&sid("s-steer")).await.unwrap().status,
        SessionStatus::Idle
    );
}

#[tokio::test]
async fn a_steer_to_an_idle_or_unknown_session_is_refused_before_it_is_kept() {
    let d = deployment(usize::MAX, ONLY_AT_BOUNDARIES).await;
    for session in ["never-ran", "s-idle"] {
        assert_eq!(
            d.send(session, steer("Hello?")).await,
            Err((refusals::NO_ACTIVE_RUN.to_owned(), true)),
            "{session}"
        );
    }
    assert_eq!(
        d.send("s-idle", steer("  ")).await,
        Err((refusals::INVALID_COMMAND.to_owned(), false)),
        "an empty prompt is no command"
    );
    assert!(d.bedrock.requests().is_empty());
}

#[tokio::test]
async fn follow_ups_run_in_order_after_the_run_in_the_same_stream_with_one_terminal() {
    let d = deployment(usize::MAX, ONLY_AT_BOUNDARIES).await;
    d.bedrock.push(Reply::tool_call("c1", "wait_for_go", "{}"));
    d.bedrock.push(Reply::text("Done waiting."));
    d.bedrock.push(Reply::text("First answered."));
    d.bedrock.push(Reply::text("Second answered."));
    let turn = d.start("s-follow", "t1", "Wait, then tell me.");
    d.tool_started.notified().await;
    assert_eq!(d.send("s-follow", follow_up("First?")).await, Ok("t1".to_owned()));
    assert_eq!(
        d.send("s-follow", follow_up("Second?")).await,
        Ok("t1".to_owned())
    );
    d.go.notify_one();
    let events = turn.await.unwrap();

    assert_eq!(terminals(&events), 1, "{events:?}");
    assert!(matches!(events.last(), Some(AgentEvent::Completed { .. })));
    assert_eq!(
        delivered(&events),
        [("follow_up".to_owned(), 0), ("follow_up".to_owned(), 1)]
    );
    assert_eq!(
        support::text_of(&events),
        "Done waiting.First answered.Second answered."
    );
    let requests = d.bedrock.requests();
    assert_eq!(requests.len(), 4);
    // The follow-ups wait for the run to be otherwise done: not beside the tool's result.
    assert!(last_message_texts(&requests[1].body).is_empty());
    assert_eq!(last_message_texts(&requests[2].body), ["First?"]);
    assert_eq!(last_message_texts(&requests[3].body), ["Second?"]);
    let history = d.store.load_history(&sid("s-follow")).await.unwrap();
    assert_eq!(history.len(), 8, "{history:?}");
}

#[tokio::test]
async fn a_follow_up_sent_as_the_run_ends_is_run_not_lost() {
    // The model's answer is held at its gate (call 0) while the follow-up is sent: the turn has
    // no round boundary left to read it at, and its commit finds it.
    let d = deployment(0, ONLY_AT_BOUNDARIES).await;
    d.bedrock.push(Reply::text("Hello."));
    d.bedrock.push(Reply::text("And hello again."));
    let turn = d.start("s-late", "t1", "Hi");
    d.model_reached.notified().await;
    assert_eq!(d.send("s-late", follow_up("Again?")).await, Ok("t1".to_owned()));
    d.model_open.notify_one();
    let events = turn.await.unwrap();
    assert_eq!(terminals(&events), 1, "{events:?}");
    assert_eq!(delivered(&events), [("follow_up".to_owned(), 0)]);
    assert_eq!(support::text_of(&events), "Hello.And hello again.");
    assert_eq!(d.bedrock.requests().len(), 2);
    let history = d.store.load_history(&sid("s-late")).await.unwrap();
    assert_eq!(history.len(), 4, "stored once, whole: {history:?}");
}

#[tokio::test]
async fn abort_during_a_follow_up_stops_the_run_and_clears_what_was_queued() {
    // Call 2 is the first follow-up's answer: it is held while the abort is sent.
    let d = deployment(2, Duration::from_millis(20)).await;
    d.bedrock.push(Reply::tool_call("c1", "wait_for_go", "{}"));
    d.bedrock.push(Reply::text("Done waiting."));
    d.bedrock.push(Reply::text("First answered."));
    d.bedrock.push(Reply::text("Second answered."));
    let turn = d.start("s-abort", "t1", "Wait, then tell me.");
    d.tool_started.notified().await;
    d.send("s-abort", follow_up("First?")).await.unwrap();
    d.send("s-abort", follow_up("Second?")).await.unwrap();
    d.go.notify_one();
    d.model_reached.notified().await;
    assert_eq!(
        d.send("s-abort", SessionCommand::Abort).await,
        Ok("t1".to_owned())
    );
    assert_eq!(
        d.send("s-abort", follow_up("Third?")).await,
        Err((refusals::NO_ACTIVE_RUN.to_owned(), true)),
        "an aborted run takes nothing more"
    );
    let events = turn.await.unwrap();
    assert_eq!(terminals(&events), 1, "{events:?}");
    match events.last() {
        Some(AgentEvent::Completed { data: Some(data) }) => assert_eq!(data["stopReason"], "user_stop"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        delivered(&events),
        [("follow_up".to_owned(), 0)],
        "the second never ran"
    );
    assert_eq!(
        d.bedrock.requests().len(),
        2,
        "the held call never reached the model"
    );
    let history = format!("{:?}", d.store.load_history(&sid("s-abort")).await.unwrap());
    assert!(
        history.contains("First?") && !history.contains("Second?"),
        "{history}"
    );
}

#[tokio::test]
async fn on_the_memory_store_commands_sent_after_the_last_boundary_are_run_before_the_commit() {
    use agent_worker::session::MemoryStore;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let (reached, open) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let store = MemoryStore::new();
    let engine = Engine::builder()
        .model(Gated {
            inner: Arc::new(BedrockModel::new(bedrock.client(), support::MODEL_ID)),
            calls: AtomicUsize::new(0),
            at: 1,
            reached: reached.clone(),
            open: open.clone(),
        })
        .store(store.clone())
        .tools(support::example_tools(&["add"]))
        .config(EngineConfig {
            stop_poll_interval: ONLY_AT_BOUNDARIES,
            stop_poll_idle: ONLY_AT_BOUNDARIES,
            ..support::config()
        })
        .build()
        .unwrap();
    bedrock.push(Reply::tool_call("c1", "add", r#"{"numbers": [1, 2]}"#));
    bedrock.push(Reply::text("3."));
    bedrock.push(Reply::text("Briefly: 3."));
    bedrock.push(Reply::text("Yes, 3."));
    let events = tokio::spawn(
        engine
            .invoke(
                Scope::new("s-memory".parse().unwrap()).with_turn_id(tid("t1")),
                Prompt::text("1 + 2?"),
            )
            .collect::<Vec<_>>(),
    );
    // Held at its second call, past its only round boundary: the turn reads these at its commit.
    reached.notified().await;
    assert_eq!(
        engine
            .control()
            .dispatch(&sid("s-memory"), steer("Be brief."))
            .await
            .unwrap()
            .run_id,
        "t1"
    );
    assert_eq!(
        engine
            .control()
            .dispatch(&sid("s-memory"), follow_up("Sure?"))
            .await
            .unwrap()
            .run_id,
        "t1"
    );
    open.notify_one();
    let events = events.await.unwrap();
    assert_eq!(terminals(&events), 1, "{events:?}");
    assert_eq!(
        delivered(&events),
        [("steer".to_owned(), 0), ("follow_up".to_owned(), 1)]
    );
    let requests = bedrock.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(last_message_texts(&requests[2].body), ["Be brief."]);
    assert_eq!(last_message_texts(&requests[3].body), ["Sure?"]);
    let history = store.load_history(&sid("s-memory")).await.unwrap();
    assert_eq!(history.len(), 8, "{history:?}");
}

#[tokio::test]
async fn only_a_running_turn_under_a_live_lease_and_not_stopped_takes_a_command() {
    use agent_worker::session::{
        CommandOutcome, DynamoConfig, DynamoStore, Lease, MemoryStore, Stop, StopCause, TurnCommand,
    };
    let table = format!("commands-{}", uuid::Uuid::new_v4().simple());
    let dynamo = DynamoStore::new(
        agent_worker_testkit::moto().dynamodb(),
        DynamoConfig::new(&table).unwrap(),
    );
    dynamo.create_table().await.unwrap();
    let stores: [(&str, Arc<dyn agent_worker::session::SessionStore>); 2] = [
        ("memory", Arc::new(MemoryStore::new())),
        ("dynamodb", Arc::new(dynamo)),
    ];
    let lease = Lease(Duration::from_secs(60));
    let command = TurnCommand::FollowUp { text: "More?".into() };
    for (name, store) in stores {
        assert_eq!(
            store.add_command(&sid("s"), &tid("t"), &command).await.unwrap(),
            CommandOutcome::NotRunning,
            "{name}: a turn never claimed"
        );
        store.claim_turn(&sid("s"), &tid("t"), lease).await.unwrap();
        assert_eq!(
            store.add_command(&sid("s"), &tid("t"), &command).await.unwrap(),
            CommandOutcome::Accepted { position: 0 },
            "{name}"
        );
        store.release_turn(&sid("s"), &tid("t")).await.unwrap();
        assert_eq!(
            store.add_command(&sid("s"), &tid("t"), &command).await.unwrap(),
            CommandOutcome::NotRunning,
            "{name}: a turn that gave up its claim takes nothing"
        );
        store.claim_turn(&sid("s"), &tid("t"), lease).await.unwrap();
        assert_eq!(
            store.add_command(&sid("s"), &tid("t"), &command).await.unwrap(),
            CommandOutcome::Accepted { position: 1 },
            "{name}: claimed again, it takes them, after the one kept before"
        );
        store
            .request_stop(&sid("s"), &tid("t"), Stop::now(StopCause::UserStop))
            .await
            .unwrap();
        assert_eq!(
            store.add_command(&sid("s"), &tid("t"), &command).await.unwrap(),
            CommandOutcome::NotRunning,
            "{name}: a stopped turn takes nothing more"
        );
        let signals = store.turn_signals(&sid("s"), &tid("t")).await.unwrap();
        assert_eq!(signals.commands.len(), 2, "{name}");
        assert!(signals.stop.is_some(), "{name}");
    }
}

/// An engine whose every turn is sent a follow-up while its first answer is held: what a client
/// that dispatches mid-run sees.
struct Dispatching {
    engine: Engine,
    reached: Arc<Notify>,
    open: Arc<Notify>,
}

impl agent_worker::protocol::Agent for Dispatching {
    fn invoke(&self, scope: Scope, prompt: Prompt) -> agent_worker::protocol::EventStream {
        let (control, session) = (self.engine.control(), scope.session.clone());
        let (reached, open) = (self.reached.clone(), self.open.clone());
        tokio::spawn(async move {
            reached.notified().await;
            let sent = control.dispatch(&sid(&session), follow_up("And again?")).await;
            assert!(sent.is_ok(), "{sent:?}");
            open.notify_one();
        });
        self.engine.invoke(scope, prompt)
    }
}

#[tokio::test]
async fn the_engine_conforms_with_a_dispatch_mid_run_as_without() {
    use agent_worker::protocol::conformance::{Case, Hanging, Limits, Subject, check};
    use agent_worker::session::MemoryStore;
    use agent_worker_testkit::StreamScript;
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("Hello."));
    bedrock.push(Reply::text("Hello again."));
    let (reached, open) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let completing = Dispatching {
        engine: Engine::builder()
            .model(Gated {
                inner: Arc::new(BedrockModel::new(bedrock.client(), support::MODEL_ID)),
                calls: AtomicUsize::new(0),
                at: 0,
                reached: reached.clone(),
                open: open.clone(),
            })
            .store(MemoryStore::new())
            .config(support::config())
            .build()
            .unwrap(),
        reached,
        open,
    };
    let failing = BedrockStandIn::start().await.unwrap();
    failing.push(Reply::http_error(400, "ValidationException", "bad request"));
    let hanging = BedrockStandIn::start().await.unwrap();
    hanging.push(StreamScript::new().open_text("Let me think").hang().into_reply());
    let mut closed = hanging.closed_early();
    let engine_on =
        |stand_in: &BedrockStandIn| support::engine(stand_in, &MemoryStore::new(), support::config(), vec![]);
    let subject = Subject::new(
        Case::new(
            completing,
            Scope::new("c".parse().unwrap()).with_turn_id(tid("t1")),
            Prompt::text("Hi"),
        ),
        Case::new(
            engine_on(&failing),
            Scope::new("f".parse().unwrap()),
            Prompt::text("Hi"),
        ),
        Hanging::new(
            Case::new(
                engine_on(&hanging),
                Scope::new("h".parse().unwrap()),
                Prompt::text("Hi"),
            ),
            async move {
                let _ = closed.wait_for(|n| *n > 0).await;
            },
        ),
    )
    .with_limits(Limits {
        cleanup_within: Duration::from_secs(5),
        ..Limits::default()
    });
    let report = check(subject).await;
    assert!(report.is_conformant(), "{report}");
    assert_eq!(bedrock.requests().len(), 2, "the follow-up ran in the same turn");
}

//! Steering a running turn, on DynamoDB (moto) and the Bedrock stand-in: the turn runs on one
//! engine, the commands are sent through another over the same table (another instance), and
//! what reaches the model is read from the stand-in's requests.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_worker::engine::model::{ModelRequest, ModelStream};
use agent_worker::engine::tools::{ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine, EngineConfig, Model};
use agent_worker::protocol::control::{SessionStatus, refusals};
use agent_worker::protocol::{
    ACCOUNT_ID_KEY, Agent as _, AgentEvent, Prompt, Scope, SessionCommand, SessionControl, USER_ID_KEY,
};
use agent_worker::session::{ContentBlock, DynamoConfig, DynamoStore, SessionStore as _};
use agent_worker_testkit::{BedrockStandIn, Reply, moto};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// A model call that waits at a gate: the real Bedrock client, held before its call `at`.
#[derive(Debug)]
struct Gated {
    inner: Arc<BedrockModel>,
    calls: AtomicUsize,
    at: usize,
    reached: Arc<Notify>,
    open: Arc<Notify>,
}

impl Model for Gated {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let inner = self.inner.clone();
        if call != self.at {
            return inner.stream(request);
        }
        let (reached, open) = (self.reached.clone(), self.open.clone());
        Box::pin(
            futures_util::stream::once(async move {
                reached.notify_one();
                open.notified().await;
                inner.stream(request)
            })
            .flatten(),
        )
    }
}

/// A stop watch too slow to read anything during a test: what a turn takes, it took at a round
/// boundary or at its commit.
const ONLY_AT_BOUNDARIES: Duration = Duration::from_secs(60);

/// Two instances of one deployment: the turn runs on `runner`, commands go through `sender`.
struct Deployment {
    table: String,
    bedrock: BedrockStandIn,
    store: DynamoStore,
    runner: Engine,
    sender: Engine,
    /// The `wait_for_go` tool has started.
    tool_started: Arc<Notify>,
    /// Lets `wait_for_go` end.
    go: Arc<Notify>,
    /// The gated model call has been made.
    model_reached: Arc<Notify>,
    /// Lets the gated model call go on.
    model_open: Arc<Notify>,
}

/// A deployment whose model call `gate_at` waits at the gate, and whose turns look for a stop
/// on their own every `poll` (besides the look at each round boundary).
async fn deployment(gate_at: usize, poll: Duration) -> Deployment {
    let table = format!("steering-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let (tool_started, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (started, release) = (tool_started.clone(), go.clone());
    let wait_for_go = tool_fn(
        ToolSpec::new(
            "wait_for_go",
            "Waits for the go-ahead.",
            json!({"type": "object", "properties": {}}),
        ),
        move |_, _| {
            let (started, release) = (started.clone(), release.clone());
            async move {
                started.notify_one();
                release.notified().await;
                Ok(json!({"went": true}))
            }
        },
    );
    let (model_reached, model_open) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let config = EngineConfig {
        stop_poll_interval: poll,
        stop_grace: Duration::from_millis(50),
        ..support::config()
    };
    let runner = Engine::builder()
        .model(Gated {
            inner: Arc::new(BedrockModel::new(bedrock.client(), support::MODEL_ID)),
            calls: AtomicUsize::new(0),
            at: gate_at,
            reached: model_reached.clone(),
            open: model_open.clone(),
        })
        .store(store.clone())
        .tool(Arc::new(wait_for_go))
        .config(config.clone())
        .build()
        .unwrap();
    // Another instance: its own client, the same table.
    let sender = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(DynamoStore::new(
            moto().dynamodb(),
            DynamoConfig::new(table.clone()).unwrap(),
        ))
        .config(config)
        .build()
        .unwrap();
    Deployment {
        table,
        bedrock,
        store,
        runner,
        sender,
        tool_started,
        go,
        model_reached,
        model_open,
    }
}

impl Deployment {
    /// Starts turn `turn_id` of `session` on the runner, for person `u` of account `a`.
    fn start(&self, session: &str, turn_id: &str, text: &str) -> tokio::task::JoinHandle<Vec<AgentEvent>> {
        let scope = Scope::new(session)
            .with_turn_id(turn_id)
            .with(USER_ID_KEY, "u")
            .with(ACCOUNT_ID_KEY, "a");
        let events = self.runner.invoke(scope, Prompt::text(text));
        tokio::spawn(events.collect())
    }

    async fn send(&self, session: &str, command: SessionCommand) -> Result<String, (String, bool)> {
        self.sender
            .control()
            .dispatch(session, command)
            .await
            .map(|accepted| accepted.run_id)
            .map_err(|refused| (refused.code, refused.retryable))
    }
}

fn steer(text: &str) -> SessionCommand {
    SessionCommand::Steer { prompt: text.into() }
}

fn follow_up(text: &str) -> SessionCommand {
    SessionCommand::FollowUp { prompt: text.into() }
}

/// The texts of a Bedrock request's last message.
fn last_message_texts(body: &Value) -> Vec<String> {
    let messages = body["messages"].as_array().unwrap();
    messages.last().unwrap()["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|block| block["text"].as_str().map(str::to_owned))
        .collect()
}

fn delivered(events: &[AgentEvent]) -> Vec<(String, u64)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Other(v) if v["type"] == "command_delivered" => Some((
                v["kind"].as_str().unwrap().to_owned(),
                v["position"].as_u64().unwrap(),
            )),
            _ => None,
        })
        .collect()
}

fn terminals(events: &[AgentEvent]) -> usize {
    events.iter().filter(|e| e.is_terminal()).count()
}

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
    let state = d.sender.control().state("s-steer").await.unwrap();
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
    let history = d.store.load_history("s-steer").await.unwrap();
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
        d.sender.control().state("s-steer").await.unwrap().status,
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
    let history = d.store.load_history("s-follow").await.unwrap();
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
    let history = d.store.load_history("s-late").await.unwrap();
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
    let history = format!("{:?}", d.store.load_history("s-abort").await.unwrap());
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
            .invoke(Scope::new("s-memory").with_turn_id("t1"), Prompt::text("1 + 2?"))
            .collect::<Vec<_>>(),
    );
    // Held at its second call, past its only round boundary: the turn reads these at its commit.
    reached.notified().await;
    assert_eq!(
        engine
            .control()
            .dispatch("s-memory", steer("Be brief."))
            .await
            .unwrap()
            .run_id,
        "t1"
    );
    assert_eq!(
        engine
            .control()
            .dispatch("s-memory", follow_up("Sure?"))
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
    let history = store.load_history("s-memory").await.unwrap();
    assert_eq!(history.len(), 8, "{history:?}");
}

/// `agent-worker steer|follow-up|abort|state` on the table, as another process.
async fn cli(table: &str, args: &[&str]) -> (bool, Value) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
        .args(args)
        .args(["--table", table, "--region", "us-east-1"])
        .env("AWS_ENDPOINT_URL_DYNAMODB", moto().endpoint())
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let answer = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|_| panic!("{stdout}{}", String::from_utf8_lossy(&output.stderr)));
    (output.status.success(), answer)
}

#[tokio::test]
async fn the_command_line_steers_and_aborts_a_turn_another_process_runs() {
    let d = deployment(usize::MAX, Duration::from_millis(20)).await;
    d.bedrock.push(Reply::tool_call("c1", "wait_for_go", "{}"));
    d.bedrock.push(Reply::text("Fine."));
    let turn = d.start("s-cli", "t1", "Go?");
    d.tool_started.notified().await;
    let (ok, state) = cli(&d.table, &["state", "--session", "s-cli"]).await;
    assert!(ok);
    assert_eq!(
        (&state["status"], &state["activeRunId"]),
        (&json!("running"), &json!("t1"))
    );
    let (ok, answer) = cli(&d.table, &["steer", "--session", "s-cli", "--text", "Hurry."]).await;
    assert!(ok, "{answer}");
    assert_eq!(answer, json!({"ok": true, "runId": "t1"}));
    let (ok, answer) = cli(&d.table, &["abort", "--session", "s-cli"]).await;
    assert!(ok, "{answer}");
    d.go.notify_one();
    let events = turn.await.unwrap();
    assert_eq!(terminals(&events), 1);
    match events.last() {
        Some(AgentEvent::Completed { data: Some(data) }) => assert_eq!(data["stopReason"], "user_stop"),
        other => panic!("{other:?}"),
    }
    let (ok, answer) = cli(&d.table, &["follow-up", "--session", "s-cli", "--text", "More?"]).await;
    assert!(!ok, "refused, and the exit code says so");
    assert_eq!(answer["error"]["code"], refusals::NO_ACTIVE_RUN);
}

/// The container host's control plane over HTTP, on moto and the stand-in.
mod over_http {
    use super::*;
    use agent_worker_testkit::StreamScript;
    use support::container::{KEY, events, post, server, turn};

    async fn get_state(url: &str, query: &str) -> (u16, Value) {
        let response = reqwest::Client::new()
            .get(format!("{url}/sessions/conv-1/state?{query}"))
            .header("x-api-key", KEY)
            .send()
            .await
            .unwrap();
        (
            response.status().as_u16(),
            response.json().await.unwrap_or(Value::Null),
        )
    }

    #[tokio::test]
    async fn commands_reach_the_running_turn_behind_the_key_and_the_owner_check() {
        let quick = EngineConfig {
            stop_poll_interval: Duration::from_millis(20),
            stop_grace: Duration::from_millis(50),
            ..support::config()
        };
        let server = server(4, quick, Duration::from_secs(5)).await;
        // An answer that starts and then waits: the turn stays running.
        server
            .bedrock
            .push(StreamScript::new().open_text("Thinking").hang().into_reply());
        let (status, _) = post(
            &format!("{}/turns", server.url),
            Some(KEY),
            &turn("t1", "conv-1").to_string(),
        )
        .await;
        assert_eq!(status, 202);
        let commands = format!("{}/sessions/conv-1/commands?userId=u&accountId=a", server.url);

        // Polled until the turn has started (with a deadline): the state is what a client reads.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (status, state) = get_state(&server.url, "userId=u&accountId=a").await;
            assert_eq!(status, 200, "{state}");
            if state["status"] == "running" {
                assert_eq!(state["activeRunId"], "t1");
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the turn never started: {state}"
            );
            tokio::task::yield_now().await;
        }
        let (status, answer) = post(&commands, Some(KEY), r#"{"type": "steer", "prompt": "Shorter."}"#).await;
        assert_eq!((status, &answer), (202, &json!({"ok": true, "runId": "t1"})));
        let (_, state) = get_state(&server.url, "userId=u&accountId=a").await;
        assert_eq!(state["commands"], json!({"steering": 1, "followUp": 0}));

        // Someone else's conversation is not there; a command without the key is not heard.
        let (status, _) = post(
            &format!(
                "{}/sessions/conv-1/commands?userId=mallory&accountId=a",
                server.url
            ),
            Some(KEY),
            r#"{"type": "abort"}"#,
        )
        .await;
        assert_eq!(status, 404);
        assert_eq!(post(&commands, None, r#"{"type": "abort"}"#).await.0, 401);
        let (status, answer) = post(&commands, Some(KEY), r#"{"type": "steer"}"#).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (400, &json!("invalid_command"))
        );

        let (status, answer) = post(&commands, Some(KEY), r#"{"type": "abort"}"#).await;
        assert_eq!((status, &answer["ok"]), (202, &json!(true)));
        let all = events(&server, "t1", None).await;
        let last = &all.last().unwrap().1;
        assert_eq!(
            (&last["type"], &last["data"]["stopReason"]),
            (&json!("completed"), &json!("user_stop")),
            "{all:?}"
        );
        let (status, answer) = post(
            &commands,
            Some(KEY),
            r#"{"type": "follow_up", "prompt": "More?"}"#,
        )
        .await;
        assert_eq!(status, 409, "{answer}");
        assert_eq!(
            answer,
            json!({"ok": false, "error": {"code": "no_active_run", "message": "session conv-1 has no running turn to take the command; send a turn instead", "retryable": true}})
        );
    }
}

//! The turn's UI context and the UI actions answered by the person's own tab, through turns on
//! the Bedrock stand-in: what the worker adds to the message (and never to the cached prefix),
//! a UI action's request and its answer through each seam (the store, the table from another
//! process, the realtime server), approvals, and what a stop leaves of each call.

use crate::support;
use agent_worker::session::{HistoryStore as _, SignalStore as _};

use agent_worker_testkit::{sid, tid};
use std::sync::Arc;
use std::time::Duration;

use agent_worker::engine::{ApprovalSigner, BedrockModel, Engine, EngineConfig};
use agent_worker::protocol::{Agent as _, AgentEvent, Prompt, Scope};
use agent_worker::session::{
    ActionAnswer, ActionAnswerStore, ActionAnswers, InputMode, MemoryStore, MessageInput, Stop, StopCause,
};
use agent_worker_testkit::{BedrockStandIn, Reply};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use support::{MODEL_ID, approval_event, config};

fn tasks_surface() -> Value {
    json!({"surfaces": [{"id": "tasks", "title": "Task list", "actions": [
        {"id": "add", "title": "Add a task", "input": {"type": "object",
            "properties": {"title": {"type": "string"}}, "required": ["title"]}},
        {"id": "delete", "title": "Delete a task", "confirm": true,
            "consequence": "The task is gone for good.",
            "input": {"type": "object", "properties": {"id": {"type": "string"}}}}
    ]}]})
}

fn engine_with(
    bedrock: &BedrockStandIn,
    store: &MemoryStore,
    answers: Arc<dyn ActionAnswers>,
    config: EngineConfig,
) -> Engine {
    Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store.clone())
        .approvals(store.clone(), ApprovalSigner::new([9u8; 32]).unwrap())
        .system_prompt("You are the task list's assistant.")
        .ui_answers(answers)
        .config(config)
        .build()
        .unwrap()
}

fn engine(bedrock: &BedrockStandIn, store: &MemoryStore) -> Engine {
    engine_with(bedrock, store, Arc::new(store.clone()), config())
}

fn scope(session: &str, turn: &str, context: Value) -> Scope {
    Scope::new(sid(session))
        .with_turn_id(tid(turn))
        .with("userId", "ana")
        .with("context", context)
}

/// Runs a turn; each `ui_action_requested` is answered by `tab` (as the person's tab would),
/// with what it returns for the request (nothing: no answer).
async fn turn_with_tab(
    engine: &Engine,
    scope: Scope,
    text: &str,
    tab: impl Fn(&Value) -> Option<ActionAnswer>,
    answers: &dyn ActionAnswerStore,
) -> (Vec<AgentEvent>, Vec<Value>) {
    let session = scope.session.clone();
    let turn = scope.turn_id().unwrap().to_owned();
    let mut stream = engine.invoke(scope, Prompt::text(text));
    let (mut events, mut requests) = (Vec::new(), Vec::new());
    while let Some(event) = stream.next().await {
        if let AgentEvent::Other(raw) = &event
            && raw["type"] == "ui_action_requested"
        {
            assert_eq!(raw["turnId"], turn.as_str(), "every request names its turn");
            if let Some(answer) = tab(raw) {
                let call = raw["callId"].as_str().unwrap();
                assert!(answers.record(&session, &turn, call, &answer).await.unwrap());
            }
            requests.push(raw.clone());
        }
        events.push(event);
    }
    (events, requests)
}

fn completed(events: &[AgentEvent]) -> Value {
    match events.last() {
        Some(AgentEvent::Completed { data }) => data.clone().unwrap_or_default(),
        other => panic!("the turn did not complete: {other:?}"),
    }
}

fn tool_results(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap().clone())
        .filter_map(|b| b.get("toolResult").cloned())
        .collect()
}

fn texts_of(message: &Value) -> Vec<String> {
    message["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn what_the_tab_says_goes_on_the_newest_message_only_and_the_cached_prefix_stays() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let engine = engine(&bedrock, &store);
    let spoken = json!({"input": {"mode": "voice", "language": "en-GB"}, "timeZone": "Europe/London", "route": "/tasks"});
    bedrock.push(Reply::text("Hello."));
    let (events, _) = turn_with_tab(
        &engine,
        scope("s-ctx", "t1", spoken),
        "Hi there",
        |_| None,
        &store,
    )
    .await;
    completed(&events);
    bedrock.push(Reply::text("Still here."));
    let (events, _) = turn_with_tab(
        &engine,
        scope("s-ctx", "t2", json!({"route": "/tasks/7"})),
        "And now?",
        |_| None,
        &store,
    )
    .await;
    completed(&events);

    let requests = bedrock.requests();
    let (first, second) = (&requests[0].body, &requests[1].body);
    assert_eq!(first["system"], second["system"], "the system prompt is the same");
    assert_eq!(
        first["toolConfig"], second["toolConfig"],
        "the tools are the same"
    );
    let said = texts_of(&first["messages"][0]);
    assert_eq!(said[0], "Hi there", "the person's words come first");
    assert!(
        said[1].contains("machine-transcribed") && said[1].contains("en-GB"),
        "{said:?}"
    );
    assert!(said[2].starts_with("(On the person's clock it is ") && said[2].contains("Europe/London"));
    assert!(said[3].starts_with("<ui_state>") && said[3].contains("/tasks"));
    // The first message, now history, went as it was stored: the person's words alone.
    assert_eq!(texts_of(&second["messages"][0]), ["Hi there"]);
    let newest = texts_of(&second["messages"][2]);
    assert_eq!(newest[0], "And now?");
    assert!(
        newest[1].contains("/tasks/7") && newest.len() == 2,
        "typed, no zone: {newest:?}"
    );
    let stored = store.load_history(&sid("s-ctx")).await.unwrap();
    assert!(
        !format!("{stored:?}").contains("ui_state") && !format!("{stored:?}").contains("clock"),
        "what the worker adds is never stored"
    );
    // The stored message keeps how the person gave it: spoken, in British English; the second
    // turn's tab said nothing of it.
    assert_eq!(
        stored[0].input,
        Some(MessageInput {
            mode: InputMode::Voice,
            language: Some("en-GB".into())
        })
    );
    assert_eq!(stored[2].input, None);
}

#[tokio::test]
async fn knowledge_follows_the_prompt_and_a_malformed_snapshot_fails_the_turn_naming_it() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let engine = engine(&bedrock, &store);
    let knowing = json!({"uiKnowledge": {"entries": [{"title": "Tasks", "content": "A task has a title."}],
        "recipes": [{"title": "Tidy up", "steps": ["Complete the done ones"]}]}});
    bedrock.push(Reply::text("Noted."));
    let (events, _) = turn_with_tab(&engine, scope("s-know", "t1", knowing), "Help", |_| None, &store).await;
    completed(&events);
    let system = bedrock.requests()[0].body["system"].to_string();
    let (persona, knowledge, workflows) = (
        system.find("task list's assistant").unwrap(),
        system.find("## Platform Knowledge").unwrap(),
        system.find("## Active Workflows").unwrap(),
    );
    assert!(persona < knowledge && knowledge < workflows, "{system}");

    let bad = json!({"oui": {"surfaces": [{"id": "tasks", "actions": [{"id": "add", "input": {"type": "array"}}]}]}});
    let (events, _) = turn_with_tab(&engine, scope("s-know", "t2", bad), "Add one", |_| None, &store).await;
    match events.last() {
        Some(AgentEvent::Failed { details, .. }) => {
            assert!(
                details.contains("context.oui.surfaces[0].actions[0].input"),
                "{details}"
            )
        }
        other => panic!("not failed: {other:?}"),
    }
    assert_eq!(bedrock.requests().len(), 1, "the model was not called");
}

#[tokio::test]
async fn a_ui_action_goes_to_the_tab_and_the_tabs_answer_goes_to_the_model() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let engine = engine(&bedrock, &store);
    bedrock.push(Reply::tool_call("c1", "ui_tasks_add", r#"{"title":"Buy milk"}"#));
    bedrock.push(Reply::text("Added."));
    let added = |_: &Value| {
        Some(ActionAnswer::Done {
            result: json!({"id": "task-1", "title": "Buy milk"}),
            is_error: false,
        })
    };
    let (events, requests) = turn_with_tab(
        &engine,
        scope("s-add", "t1", json!({"oui": tasks_surface()})),
        "Add milk",
        added,
        &store,
    )
    .await;
    completed(&events);
    assert_eq!(requests.len(), 1);
    assert_eq!(
        (
            &requests[0]["surface"],
            &requests[0]["action"],
            &requests[0]["args"],
            &requests[0]["callId"]
        ),
        (
            &json!("tasks"),
            &json!("add"),
            &json!({"title": "Buy milk"}),
            &json!("c1")
        )
    );
    assert!(requests[0].get("approval").is_none());
    let offered = bedrock.requests()[0].body["toolConfig"].to_string();
    assert!(offered.contains("ui_tasks_add") && offered.contains("ui_tasks_delete"));
    let results = tool_results(&bedrock.requests()[1].body);
    assert_eq!(results[0]["content"][0]["json"]["id"], "task-1", "{results:?}");

    // A late request the tab refuses (its turn is no longer current) is kept as not run.
    bedrock.push(Reply::tool_call("c2", "ui_tasks_add", r#"{"title":"Old"}"#));
    bedrock.push(Reply::text("It did not run."));
    let refused = |_: &Value| {
        Some(ActionAnswer::Refused {
            reason: "turn t2 is not the current turn".into(),
        })
    };
    let (events, _) = turn_with_tab(
        &engine,
        scope("s-add", "t2", json!({"oui": tasks_surface()})),
        "Again",
        refused,
        &store,
    )
    .await;
    completed(&events);
    let result = tool_results(&bedrock.requests()[3].body)
        .last()
        .unwrap()
        .to_string();
    assert!(
        result.contains("not run: the person's tab refused the request"),
        "{result}"
    );
}

#[tokio::test]
async fn a_destructive_ui_action_waits_for_the_click_and_its_request_carries_the_approval() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let engine = engine(&bedrock, &store);
    bedrock.push(Reply::tool_call("c1", "ui_tasks_delete", r#"{"id":"task-1"}"#));
    let (events, requests) = turn_with_tab(
        &engine,
        scope("s-del", "t1", json!({"oui": tasks_surface()})),
        "Delete it",
        |_| None,
        &store,
    )
    .await;
    assert_eq!(completed(&events)["stopReason"], "approval_required");
    assert!(requests.is_empty(), "nothing went to the tab before the click");
    let card = approval_event(&events);
    assert_eq!(card["preview"]["title"], "Delete a task");

    bedrock.push(Reply::text("Deleted."));
    let decision = json!({"approvalId": card["approvalId"], "decision": "approve", "token": card["token"]});
    let gone = |_: &Value| {
        Some(ActionAnswer::Done {
            result: json!({"deleted": "task-1"}),
            is_error: false,
        })
    };
    let approved = scope("s-del", "t2", json!({"oui": tasks_surface()})).with("approval", decision);
    let (events, requests) = turn_with_tab(&engine, approved, "", gone, &store).await;
    completed(&events);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["approval"]["approvalId"], card["approvalId"]);
    assert!(
        requests[0]["approval"]["argsHash"]
            .as_str()
            .is_some_and(|h| !h.is_empty())
    );
}

/// A turn whose UI action's answer is not seen while it runs (the call looks once a minute), so
/// that a stop leaves the call to the last look.
fn stop_config() -> EngineConfig {
    EngineConfig {
        ui_answer_poll: Duration::from_secs(60),
        stop_poll_interval: Duration::from_millis(20),
        stop_poll_idle: Duration::from_millis(20),
        stop_grace: Duration::from_millis(100),
        ..config()
    }
}

#[tokio::test]
async fn a_stopped_turn_keeps_one_result_for_each_ui_call_after_a_last_look() {
    for (answer, kept) in [
        (
            Some(ActionAnswer::Done {
                result: json!({"id": "task-9"}),
                is_error: false,
            }),
            "task-9",
        ),
        (Some(ActionAnswer::Taken), "its outcome is unknown"),
        (None, "not run: no tab took the request"),
    ] {
        let bedrock = BedrockStandIn::start().await.unwrap();
        let store = MemoryStore::new();
        let engine = engine_with(&bedrock, &store, Arc::new(store.clone()), stop_config());
        bedrock.push(Reply::tool_call("c1", "ui_tasks_add", r#"{"title":"Call Bo"}"#));
        let session = format!("s-stop-{kept}");
        let mut stream = engine.invoke(
            scope(&session, "t1", json!({"oui": tasks_surface()})),
            Prompt::text("Add it"),
        );
        let mut events = Vec::new();
        while let Some(event) = stream.next().await {
            if let AgentEvent::Other(raw) = &event
                && raw["type"] == "ui_action_requested"
            {
                if let Some(answer) = &answer {
                    store
                        .record(&sid(&session), &tid("t1"), "c1", answer)
                        .await
                        .unwrap();
                }
                store
                    .request_stop(&sid(&session), &tid("t1"), Stop::now(StopCause::UserStop))
                    .await
                    .unwrap();
            }
            events.push(event);
        }
        assert_eq!(completed(&events)["stopReason"], "user_stop", "{kept}");
        let ended: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ToolEnded { content, .. } => Some(content.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(ended.len(), 1, "exactly one result: {ended:?}");
        assert!(ended[0].contains(kept), "{kept}: {ended:?}");
        let stored = format!("{:?}", store.load_history(&sid(&session)).await.unwrap());
        assert!(stored.contains(kept), "the result is stored: {stored}");
        assert_eq!(bedrock.requests().len(), 1, "the model is not called again");
    }
}

/// A new table, and two clients of it: the worker's, and another process's.
async fn two_clients_of_a_table(
    name: &str,
) -> (
    agent_worker::session::DynamoStore,
    agent_worker::session::DynamoStore,
) {
    use agent_worker::session::{DynamoConfig, DynamoStore};
    let table = format!("{name}-{}", uuid::Uuid::new_v4().simple());
    let store_of = || {
        DynamoStore::new(
            agent_worker_testkit::moto().dynamodb(),
            DynamoConfig::new(&table).unwrap(),
        )
    };
    let (worker, other) = (store_of(), store_of());
    worker.create_table().await.unwrap();
    (worker, other)
}

/// An engine on `worker`'s table, reading the tab's answers there every 50 ms.
fn table_engine(bedrock: &BedrockStandIn, worker: &agent_worker::session::DynamoStore) -> Engine {
    Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(worker.clone())
        .ui_answers(Arc::new(worker.clone()))
        .config(EngineConfig {
            ui_answer_poll: Duration::from_millis(50),
            ..config()
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_answer_written_to_the_table_by_another_process_reaches_the_waiting_call() {
    // The product's API (or the container's route) on another process: its own client.
    let (worker, product) = two_clients_of_a_table("ui").await;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = table_engine(&bedrock, &worker);
    bedrock.push(Reply::tool_call(
        "c1",
        "ui_tasks_add",
        r#"{"title":"Water plants"}"#,
    ));
    bedrock.push(Reply::text("Done."));
    let mut stream = engine.invoke(
        scope("s-table", "t1", json!({"oui": tasks_surface()})),
        Prompt::text("Add it"),
    );
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        if matches!(&event, AgentEvent::Other(raw) if raw["type"] == "ui_action_requested") {
            let done = ActionAnswer::Done {
                result: json!({"id": "task-3"}),
                is_error: false,
            };
            assert!(
                product
                    .record(&sid("s-table"), &tid("t1"), "c1", &ActionAnswer::Taken)
                    .await
                    .unwrap()
            );
            assert!(
                product
                    .record(&sid("s-table"), &tid("t1"), "c1", &done)
                    .await
                    .unwrap()
            );
            // A call keeps its first final answer; "taken" never replaces it.
            let other = ActionAnswer::Done {
                result: json!({"id": "task-4"}),
                is_error: false,
            };
            assert!(
                !product
                    .record(&sid("s-table"), &tid("t1"), "c1", &other)
                    .await
                    .unwrap()
            );
            assert!(
                !product
                    .record(&sid("s-table"), &tid("t1"), "c1", &ActionAnswer::Taken)
                    .await
                    .unwrap()
            );
        }
        events.push(event);
    }
    completed(&events);
    let results = tool_results(&bedrock.requests()[1].body);
    assert_eq!(results[0]["content"][0]["json"]["id"], "task-3", "{results:?}");
    assert_eq!(
        worker.look(&sid("s-table"), &tid("t1"), "c1").await.unwrap(),
        Some(ActionAnswer::Done {
            result: json!({"id": "task-3"}),
            is_error: false
        })
    );
}

#[tokio::test]
async fn the_realtime_servers_record_of_the_answer_is_read_with_its_internal_key() {
    use agent_worker::realtime::RealtimeAnswers;
    use agent_worker_testkit::{REALTIME_KEY, RealtimeStandIn};

    // The realtime server's internal route: 404 until the tab has answered; 401 without its key.
    let server = RealtimeStandIn::start().await.unwrap();
    let url = server.url().to_owned();

    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let realtime = RealtimeAnswers::new(&url, REALTIME_KEY).unwrap();
    let engine = engine_with(
        &bedrock,
        &store,
        Arc::new(realtime),
        EngineConfig {
            ui_answer_poll: Duration::from_millis(20),
            ..config()
        },
    );
    bedrock.push(Reply::tool_call(
        "c7",
        "ui_tasks_add",
        r#"{"title":"Post a letter"}"#,
    ));
    bedrock.push(Reply::text("Posted."));
    let mut stream = engine.invoke(
        scope("s-rt", "t1", json!({"oui": tasks_surface()})),
        Prompt::text("Add it"),
    );
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        if let AgentEvent::Other(raw) = &event
            && raw["type"] == "ui_action_requested"
        {
            server.answer("c7", json!({"status": "done", "result": {"id": "task-7"}}));
        }
        events.push(event);
    }
    completed(&events);
    let results = tool_results(&bedrock.requests()[1].body);
    assert_eq!(results[0]["content"][0]["json"]["id"], "task-7", "{results:?}");
    let asked = server.state().requests;
    let looks = asked
        .iter()
        .filter(|r| *r == "GET /internal/oui/action-results/c7")
        .count();
    assert!(looks > 0, "{asked:?}");
    // A key the server does not know reads nothing.
    let stranger = RealtimeAnswers::new(&url, "not-the-key").unwrap();
    assert!(stranger.look(&sid("s-rt"), &tid("t1"), "c7").await.is_err());
}

#[tokio::test]
async fn on_lambda_the_waiting_call_reads_the_answer_the_product_wrote_from_another_process() {
    use agent_worker::hosts::lambda::TurnHandler;
    use agent_worker::sinks::{DynamoEventLog, Sinks};
    use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};

    let (worker, product) = two_clients_of_a_table("ui-lambda").await;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = table_engine(&bedrock, &worker);
    let handler = TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(worker.clone())));
    bedrock.push(Reply::tool_call(
        "c1",
        "ui_tasks_add",
        r#"{"title":"Renew passport"}"#,
    ));
    bedrock.push(Reply::text("Added."));
    let body = json!({"turnId": "t-l1", "conversationId": "s-lambda", "userId": "ana", "accountId": "acme",
        "content": "Add it", "context": {"oui": tasks_surface()}, "socketRoom": "room-ana"});
    let mut record = SqsMessage::default();
    record.message_id = Some("m1".into());
    record.body = Some(body.to_string());
    record.event_source_arn = Some("arn:aws:sqs:us-east-1:000000000000:turns".into());
    let mut batch = SqsEvent::default();
    batch.records = vec![record];
    let running = tokio::spawn(async move {
        handler
            .handle_batch(
                batch,
                Some(std::time::SystemTime::now() + Duration::from_secs(3600)),
            )
            .await
            .unwrap()
    });

    // The product's process: it follows the turn's event log, and answers for the tab.
    let log = DynamoEventLog::new(product.clone());
    let request = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let events = log.read("s-lambda", "t-l1", None).await.unwrap();
            let found = events.iter().find_map(|e| match &e.event {
                AgentEvent::Other(raw) if raw["type"] == "ui_action_requested" => Some(raw.clone()),
                _ => None,
            });
            if let Some(request) = found {
                return request;
            }
            // Look again shortly, as the product's follower of the log would.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the request reached the event log");
    let call = request["callId"].as_str().unwrap();
    let done = ActionAnswer::Done {
        result: json!({"id": "task-5"}),
        is_error: false,
    };
    assert!(
        product
            .record(&sid("s-lambda"), &tid("t-l1"), call, &done)
            .await
            .unwrap()
    );

    let response = running.await.unwrap();
    assert!(response.batch_item_failures.is_empty(), "acknowledged");
    let sent = bedrock.requests()[1].body.to_string();
    assert!(sent.contains("task-5"), "{sent}");
}

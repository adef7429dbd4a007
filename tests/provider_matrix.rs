//! The same turns on both hosts × the three providers, each host built from settings alone (as
//! the binaries build it), each provider against its wire-level stand-in, DynamoDB on moto:
//! the fixture turn (question → tool → answer), and a typed result that the model's first answer
//! breaks. Then the engine's scenarios on each provider's real client: parallel calls, reasoning,
//! the output limit, a stream that breaks mid-answer.

use crate::support;
use agent_worker::session::HistoryStore as _;

use agent_worker_testkit::{sid, tid};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use agent_worker::engine::Engine;
use agent_worker::hosts::WorkerSettings;
use agent_worker::hosts::config::Configured;
use agent_worker::hosts::container::{ContainerConfig, ContainerHost};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::protocol::{AgentEvent, codes};
use agent_worker::session::{ContentBlock, DynamoConfig, DynamoStore, MemoryStore};
use agent_worker::sinks::DynamoEventLog;
use agent_worker_testkit::{Provider, STAND_IN_API_KEY, StandIn, moto};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use serde_json::{Value, json};
use support::container::{KEY, events_at, post};

/// A table of its own on moto, and a store on it.
async fn table() -> (String, DynamoStore) {
    let table = format!("matrix-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    (table, store)
}

/// The worker's settings for `stand_in`'s provider on `table`, with the `add` tool and the
/// events kept in the table.
fn settings(stand_in: &StandIn, table: &str) -> WorkerSettings {
    let mut values: HashMap<&str, String> = stand_in.settings().into_iter().collect();
    values.extend([
        ("TABLE_NAME", table.to_owned()),
        ("TOOLS", "add".to_owned()),
        ("EVENT_SINKS", "dynamo".to_owned()),
        ("SYSTEM_PROMPT", "You are a helpful assistant.".to_owned()),
    ]);
    let settings = WorkerSettings::from_lookup(|name| values.get(name).cloned()).unwrap();
    assert!(
        !format!("{settings:?}").contains(STAND_IN_API_KEY),
        "the key is not in the settings' Debug"
    );
    settings
}

/// The turn handler the settings make, on `stand_in`.
fn handler(stand_in: &StandIn, settings: &WorkerSettings) -> TurnHandler {
    let (agent, sinks) = settings
        .build(
            stand_in.bedrock_client(),
            moto().dynamodb(),
            None,
            &Configured::default(),
        )
        .unwrap();
    TurnHandler::from_settings(agent, sinks, settings)
}

fn fixture_script(stand_in: &StandIn) {
    stand_in.push_tool_call("call_01", "add", r#"{"numbers": [20, 22]}"#);
    stand_in.push_text("20 + 22 is 42.");
}

/// The fixture turn's history: the question, the call, its result, the answer.
async fn assert_fixture_history(store: &DynamoStore, session: &str) {
    let history = store.load_history(&sid(session)).await.unwrap();
    assert_eq!(history.len(), 4, "question, call, result, answer: {history:?}");
    assert!(
        matches!(&history[1].content[0], ContentBlock::ToolUse { name, .. } if name == "add"),
        "{history:?}"
    );
    assert!(format!("{:?}", history[3]).contains("42."));
}

async fn fixture_turn_on_lambda(provider: Provider) {
    let stand_in = StandIn::start(provider).await.unwrap();
    fixture_script(&stand_in);
    let (table, store) = table().await;
    let handler = handler(&stand_in, &settings(&stand_in, &table));
    let mut record = SqsMessage::default();
    record.message_id = Some("m1".into());
    record.body = Some(
        json!({"turnId": "t1", "conversationId": "s-lambda", "userId": "u", "accountId": "a", "content": "20 + 22?"})
            .to_string(),
    );
    record.event_source_arn = Some("arn:aws:sqs:us-east-1:000000000000:turns".into());
    let mut batch = SqsEvent::default();
    batch.records = vec![record];
    let deadline = SystemTime::now() + Duration::from_secs(600);
    let response = handler.handle_batch(batch, Some(deadline)).await.unwrap();
    assert!(response.batch_item_failures.is_empty(), "{provider:?}");
    let bodies = stand_in.request_bodies();
    assert_eq!(bodies.len(), 2, "{provider:?}");
    assert_eq!(provider.offered_tools(&bodies[0]), ["add"], "{provider:?}");
    assert_fixture_history(&store, "s-lambda").await;
}

/// The container host the settings make, serving on 127.0.0.1 until dropped.
struct Container {
    url: String,
    store: DynamoStore,
    stand_in: StandIn,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn container(provider: Provider) -> Container {
    let stand_in = StandIn::start(provider).await.unwrap();
    let (table, store) = table().await;
    let settings = settings(&stand_in, &table);
    let host = ContainerHost::builder(
        handler(&stand_in, &settings),
        Arc::new(store.clone()),
        Some(DynamoEventLog::new(store.clone())),
        &settings.model_id,
        ContainerConfig::new(KEY).unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(crate::support::openapi::serve_checked(
        listener,
        host.build(),
        async move {
            let _ = stopped.await;
        },
    ));
    Container {
        url,
        store,
        stand_in,
        _stop: stop,
    }
}

impl Container {
    /// Posts a turn of session `session` and reads its events to the terminal.
    async fn turn(&self, session: &str, turn_id: &str, extra: Value) -> Vec<Value> {
        let mut body = json!({"turnId": turn_id, "conversationId": session, "userId": "u", "accountId": "a", "content": "20 + 22?"});
        if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
            body.extend(extra);
        }
        let (status, accepted) = post(&format!("{}/turns", self.url), Some(KEY), &body.to_string()).await;
        assert_eq!(status, 202, "{accepted}");
        events_at(&self.url, session, turn_id, None)
            .await
            .into_iter()
            .map(|(_, event)| event)
            .collect()
    }
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

async fn fixture_turn_on_the_container(provider: Provider) {
    let host = container(provider).await;
    fixture_script(&host.stand_in);
    let events = host.turn(&sid("s-container"), &tid("t1"), json!({})).await;
    let kinds = kinds(&events);
    assert_eq!(
        kinds[..2],
        ["tool_started", "tool_ended"],
        "{provider:?}: {events:?}"
    );
    assert_eq!(kinds.last(), Some(&"completed"), "{provider:?}: {events:?}");
    assert!(kinds.contains(&"usage") && kinds.contains(&"text"), "{kinds:?}");
    assert_eq!(events[1]["content"]["sum"], 42.0, "{events:?}");
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "text")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(text, "20 + 22 is 42.");
    assert_fixture_history(&host.store, "s-container").await;
}

#[tokio::test]
async fn the_fixture_turn_runs_on_lambda_on_bedrock() {
    fixture_turn_on_lambda(Provider::Bedrock).await;
}

#[tokio::test]
async fn the_fixture_turn_runs_on_lambda_on_the_anthropic_api() {
    fixture_turn_on_lambda(Provider::Anthropic).await;
}

#[tokio::test]
async fn the_fixture_turn_runs_on_lambda_on_an_openai_compatible_api() {
    fixture_turn_on_lambda(Provider::OpenAi).await;
}

#[tokio::test]
async fn the_fixture_turn_runs_on_the_container_on_bedrock() {
    fixture_turn_on_the_container(Provider::Bedrock).await;
}

#[tokio::test]
async fn the_fixture_turn_runs_on_the_container_on_the_anthropic_api() {
    fixture_turn_on_the_container(Provider::Anthropic).await;
}

#[tokio::test]
async fn the_fixture_turn_runs_on_the_container_on_an_openai_compatible_api() {
    fixture_turn_on_the_container(Provider::OpenAi).await;
}

/// The result a ticket's triage must give.
fn triage_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "category": {"enum": ["billing", "bug", "other"]},
            "sum": {"type": "number"}
        },
        "required": ["category", "sum"],
        "additionalProperties": false
    })
}

/// A typed result: the model adds, then gives a result the schema refuses (a category it does
/// not have), is told what is wrong and forced to the result tool, and gives one that matches.
async fn typed_result(provider: Provider) {
    let host = container(provider).await;
    let stand_in = &host.stand_in;
    stand_in.push_tool_call("call_01", "add", r#"{"numbers": [20, 22]}"#);
    stand_in.push_tool_call("call_02", "final_result", r#"{"category": "refund", "sum": 42}"#);
    stand_in.push_tool_call("call_03", "final_result", r#"{"category": "billing", "sum": 42}"#);
    let events = host
        .turn(
            &sid("s-typed"),
            &tid("t1"),
            json!({"resultSchema": triage_schema()}),
        )
        .await;
    let completed = events.last().unwrap();
    assert_eq!(completed["type"], "completed", "{provider:?}: {events:?}");
    assert_eq!(
        completed["data"]["result"],
        json!({"category": "billing", "sum": 42}),
        "{provider:?}"
    );
    let refused = events
        .iter()
        .find(|e| e["type"] == "tool_ended" && e["isError"] == true)
        .expect("the broken result was refused");
    assert!(
        refused["content"].to_string().contains("refund"),
        "what was wrong is said: {refused}"
    );

    let bodies = stand_in.request_bodies();
    assert_eq!(bodies.len(), 3, "{provider:?}");
    assert_eq!(
        provider.offered_tools(&bodies[0]),
        ["add", "final_result"],
        "{provider:?}"
    );
    assert_eq!(
        provider.forced_tool(&bodies[1]),
        None,
        "{provider:?}: {}",
        bodies[1]
    );
    assert_eq!(
        provider.forced_tool(&bodies[2]).as_deref(),
        Some("final_result"),
        "asked once more, the result tool forced: {provider:?}"
    );

    // The stored history holds no call of the result tool: a later turn without the schema
    // (and so without the tool) reads a plain conversation, on every provider.
    let history = host.store.load_history(&sid("s-typed")).await.unwrap();
    let stored = format!("{history:?}");
    assert!(!stored.contains("\"final_result\""), "{stored}");
    assert!(stored.contains("billing"), "{stored}");
    stand_in.push_text("It was billing.");
    let next = host.turn(&sid("s-typed"), &tid("t2"), json!({})).await;
    assert_eq!(
        next.last().unwrap()["type"],
        "completed",
        "{provider:?}: {next:?}"
    );
    let last = stand_in.request_bodies().pop().unwrap();
    assert_eq!(provider.offered_tools(&last), ["add"], "{provider:?}");
}

#[tokio::test]
async fn a_typed_result_is_checked_asked_again_and_given_on_bedrock() {
    typed_result(Provider::Bedrock).await;
}

#[tokio::test]
async fn a_typed_result_is_checked_asked_again_and_given_on_the_anthropic_api() {
    typed_result(Provider::Anthropic).await;
}

#[tokio::test]
async fn a_typed_result_is_checked_asked_again_and_given_on_an_openai_compatible_api() {
    typed_result(Provider::OpenAi).await;
}

#[tokio::test]
async fn a_result_that_still_does_not_match_fails_the_turn_with_its_own_code_and_keeps_what_was_said() {
    let host = container(Provider::Anthropic).await;
    host.stand_in.push_text("It is a billing question.");
    host.stand_in
        .push_tool_call("call_01", "final_result", r#"{"category": "billing"}"#);
    let events = host
        .turn(
            &sid("s-broken"),
            &tid("t1"),
            json!({"resultSchema": triage_schema()}),
        )
        .await;
    let failed = events.last().unwrap();
    assert_eq!(
        (&failed["type"], &failed["code"], &failed["retryable"]),
        (&json!("failed"), &json!(codes::RESULT_INVALID), &json!(false)),
        "{events:?}"
    );
    let details = failed["details"].as_str().unwrap();
    assert!(details.contains("sum"), "says what is missing: {details}");
    let history = host.store.load_history(&sid("s-broken")).await.unwrap();
    let stored = format!("{history:?}");
    assert!(stored.contains("It is a billing question."), "{stored}");
    assert!(!stored.contains("\"final_result\""), "{stored}");
    let nudged = &host.stand_in.request_bodies()[1];
    assert!(
        nudged.to_string().contains("Give the result now"),
        "the model was told to give it: {nudged}"
    );
}

#[tokio::test]
async fn a_result_schema_that_is_not_one_is_refused_by_name_and_nothing_runs() {
    let host = container(Provider::OpenAi).await;
    let events = host
        .turn(
            &sid("s-bad-schema"),
            &tid("t1"),
            json!({"resultSchema": {"type": 7}}),
        )
        .await;
    let failed = events.last().unwrap();
    assert_eq!(failed["code"], codes::INVALID_PROMPT, "{events:?}");
    assert!(
        failed["details"].as_str().unwrap().contains("resultSchema"),
        "{failed}"
    );
    assert!(host.stand_in.request_bodies().is_empty());
}

/// The fixture's engine on `stand_in`'s model, with a store of its own.
fn engine_on(stand_in: &StandIn) -> (Engine, MemoryStore) {
    let store = MemoryStore::new();
    let engine = Engine::builder()
        .model(stand_in.model())
        .store(store.clone())
        .system_prompt("You are a concise assistant.")
        .tools(support::example_tools(&["add"]))
        .config(support::config())
        .build()
        .unwrap();
    (engine, store)
}

#[tokio::test]
async fn parallel_tool_calls_run_and_both_results_are_kept_on_each_provider() {
    for provider in Provider::ALL {
        let stand_in = StandIn::start(provider).await.unwrap();
        stand_in.push_tool_calls(&[
            ("call_a", "add", r#"{"numbers": [1, 2]}"#),
            ("call_b", "add", r#"{"numbers": [3, 4]}"#),
        ]);
        stand_in.push_text("3 and 7.");
        let (engine, store) = engine_on(&stand_in);
        let events = support::run(&engine, "s-parallel", "1+2 and 3+4?").await;
        assert!(
            matches!(events.last(), Some(AgentEvent::Completed { .. })),
            "{provider:?}: {events:?}"
        );
        let started = events
            .iter()
            .filter(|e| matches!(e, AgentEvent::ToolStarted { .. }))
            .count();
        assert_eq!(started, 2, "{provider:?}");
        let history = store.load_history(&sid("s-parallel")).await.unwrap();
        let results = history[2]
            .content
            .iter()
            .filter(|b| matches!(b, ContentBlock::ToolResult { is_error: false, .. }))
            .count();
        assert_eq!(
            results, 2,
            "{provider:?}: both results in one message: {history:?}"
        );
        assert_eq!(stand_in.request_bodies().len(), 2, "{provider:?}");
    }
}

#[tokio::test]
async fn reasoning_streams_as_thinking_and_keeps_its_signature_where_the_provider_signs() {
    for provider in Provider::ALL {
        let stand_in = StandIn::start(provider).await.unwrap();
        stand_in.push_reasoned("Two and two make four.", "sig-4", "4.");
        let (engine, store) = engine_on(&stand_in);
        let events = support::run(&engine, "s-reasoning", "2+2?").await;
        assert_eq!(
            support::thinking_of(&events),
            "Two and two make four.",
            "{provider:?}"
        );
        assert_eq!(support::text_of(&events), "4.", "{provider:?}");
        let history = store.load_history(&sid("s-reasoning")).await.unwrap();
        let signature = history[1].content.iter().find_map(|b| match b {
            ContentBlock::Reasoning { signature, .. } => Some(signature.clone()),
            _ => None,
        });
        // OpenAI-compatible servers sign nothing: their reasoning is kept unsigned (and so never
        // sent back as a provider's signed reasoning).
        let expected = match provider {
            Provider::OpenAi => None,
            _ => Some("sig-4".to_owned()),
        };
        assert_eq!(signature, Some(expected), "{provider:?}: {history:?}");
    }
}

#[tokio::test]
async fn an_answer_cut_at_the_output_limit_ends_the_turn_saying_so_on_each_provider() {
    for provider in Provider::ALL {
        let stand_in = StandIn::start(provider).await.unwrap();
        stand_in.push_cut_at_limit("The long answer begins");
        let (engine, _) = engine_on(&stand_in);
        let events = support::run(&engine, "s-limit", "Tell me everything.").await;
        match events.last() {
            Some(AgentEvent::Completed { data: Some(data) }) => {
                assert_eq!(data["stopReason"], "output_limit", "{provider:?}")
            }
            other => panic!("{provider:?}: {other:?}"),
        }
        let text = support::text_of(&events);
        assert!(
            text.starts_with("The long answer begins") && text.contains("length limit"),
            "{provider:?}: {text}"
        );
    }
}

#[tokio::test]
async fn a_stream_that_breaks_mid_answer_keeps_what_was_said_and_is_not_replayed_on_each_provider() {
    for provider in Provider::ALL {
        let stand_in = StandIn::start(provider).await.unwrap();
        stand_in.push_broken_after("The first half");
        let (engine, store) = engine_on(&stand_in);
        let events = support::run(&engine, "s-broken", "Go on.").await;
        let (_, _, code) = support::failure(&events);
        assert_eq!(
            code.as_deref(),
            Some(codes::MODEL_STREAM_INTERRUPTED),
            "{provider:?}: {events:?}"
        );
        assert_eq!(stand_in.request_bodies().len(), 1, "{provider:?}: not replayed");
        let history = store.load_history(&sid("s-broken")).await.unwrap();
        let kept = format!("{history:?}");
        assert!(
            kept.contains("The first half") && kept.contains("cut off"),
            "{provider:?}: {kept}"
        );
    }
}

//! The `api` function's event streams are streamed, seen, not assumed: the Runtime API stand-in
//! reads its answers as Lambda does, chunk by chunk, and says when each arrived. A turn's model
//! (the Bedrock stand-in) says its first words and holds its last until the test has seen the
//! turn's first event arrive through the function's answer; only then is it released.
//!
//! Were the answer buffered, the first event could not arrive before the model's last words,
//! which wait for it: the wait for it would run out and the first test fail. The second shows
//! that opposite, on purpose: behind API Gateway (`API_RESPONSES=buffered`) nothing of the
//! answer arrives before the model has finished.

use crate::support;

use std::time::{Duration, Instant};

use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::hosts::runner::TurnHandler;
use agent_worker::hosts::sqs_poller::{PollOptions, PollStats, poll_queue};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::{
    BedrockStandIn, LambdaRuntimeApi, ResponseMode, StreamScript, function_url_event, moto,
};
use serde_json::{Value, json};
use support::api_function::{KEY, ask, body_of, json_of, table_and_queue, whole_answer};
use support::container::sse_events;
use tokio::task::JoinHandle;

/// What the model says before it holds.
const FIRST_WORDS: &str = "The first words of the answer";
/// What it says once released.
const LAST_WORDS: &str = "and the last ones";
/// How a terminal event reads in the stream.
const COMPLETED: &str = "\"type\":\"completed\"";
/// The invocation that follows the turn's events.
const EVENTS: &str = "req-events";

/// An `api` function answering as `responses` says, a turn queued through it, and the worker
/// that reads the queue running that turn, whose model holds after its first words.
struct Deployment {
    bedrock: BedrockStandIn,
    api: LambdaRuntimeApi,
    function: tokio::process::Child,
    worker: JoinHandle<PollStats>,
}

async fn deployed(responses: &str) -> Deployment {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(
        StreamScript::new()
            .text(FIRST_WORDS, 1)
            .hold()
            .text(LAST_WORDS, 1)
            .stop("end_turn")
            .usage(12, 8)
            .into_reply(),
    );
    let (table, store, queue) = table_and_queue().await;
    let sqs = moto().sqs();

    let mut api = LambdaRuntimeApi::start().await.unwrap();
    let mut function = tokio::process::Command::new(env!("CARGO_BIN_EXE_api"))
        .env_clear()
        .envs(api.function_environment(&bedrock.endpoint_url(), moto().endpoint(), &table))
        .env("TURNS_QUEUE_URL", &queue)
        .env("AGENT_WORKER_API_KEY", KEY)
        .env("API_RESPONSES", responses)
        .kill_on_drop(true)
        .spawn()
        .expect("the function starts");
    let turn = json!({"turnId": "t-1", "conversationId": "conv-1", "userId": "ada", "accountId": "acme", "content": "Hi"});
    let headers = [("x-api-key", KEY), ("content-type", "application/json")];
    let event = function_url_event("POST", "/turns", &headers, Some(&turn.to_string()));
    let (status, body) = ask(&mut api, &mut function, "req-turn", event).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(json_of(&body)["queued"], true);

    let engine = Engine::builder()
        .model(BedrockModel::new(
            bedrock.client(),
            "us.anthropic.claude-sonnet-4-6",
        ))
        .store(store.clone())
        .build()
        .unwrap();
    let handler = TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(store)));
    let worker = tokio::spawn(async move {
        let options = PollOptions {
            until_empty: true,
            wait: Duration::from_secs(1),
            ..PollOptions::default()
        };
        poll_queue(&sqs, &queue, &handler, &options, std::future::pending())
            .await
            .unwrap()
    });
    within("the model said its first words", bedrock.holding(1)).await;
    Deployment {
        bedrock,
        api,
        function,
        worker,
    }
}

impl Deployment {
    /// Asks the function for the turn's events, as invocation [`EVENTS`].
    fn follow_the_turn(&self) {
        let path = "/turns/t-1/events?session=conv-1&userId=ada&accountId=acme";
        let event = function_url_event("GET", path, &[("x-api-key", KEY)], None);
        self.api.invoke(EVENTS, event);
    }

    /// Lets the model finish; says when.
    fn release_the_model(&self) -> Instant {
        let released = Instant::now();
        self.bedrock.release();
        released
    }

    /// The turn's events, once the function's answer is whole, and the worker's run of it.
    async fn the_whole_stream(&mut self) -> Vec<(u64, Value)> {
        let answer = whole_answer(&mut self.api, &mut self.function, EVENTS).await;
        let status = answer["prelude"]["statusCode"]
            .as_u64()
            .or_else(|| answer["statusCode"].as_u64());
        let body = body_of(&answer);
        assert_eq!(status, Some(200), "{body}");
        assert!(body.contains(FIRST_WORDS) && body.contains(LAST_WORDS), "{body}");
        assert!(body.contains(COMPLETED), "{body}");
        let stats = within("the worker ran the turn", &mut self.worker).await.unwrap();
        assert_eq!((stats.received, stats.deleted), (1, 1));
        sse_events(&body)
    }
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), future)
        .await
        .unwrap_or_else(|_| panic!("{what} within a minute"))
}

#[tokio::test]
async fn through_a_function_url_a_turn_s_first_event_arrives_before_its_model_has_finished() {
    let mut deployment = deployed("streamed").await;
    deployment.follow_the_turn();
    let early = within(
        "the turn's first event arrived while the model holds (a buffered answer never shows it)",
        deployment.api.answer_when(EVENTS, |answer| {
            answer.body().contains(FIRST_WORDS) || answer.ended.is_some()
        }),
    )
    .await;
    let body = early.body();
    assert_eq!(
        early.ended, None,
        "the answer goes on while the model holds: {body}"
    );
    assert_eq!(early.mode, ResponseMode::Streaming);
    let prelude = early.prelude().expect("the prelude came first");
    assert_eq!(prelude["statusCode"], 200, "{prelude}");
    assert_eq!(
        prelude["headers"]["content-type"], "text/event-stream",
        "{prelude}"
    );
    assert!(!body.contains(LAST_WORDS) && !body.contains(COMPLETED), "{body}");
    let seen_early = sse_events(&body);

    let released = deployment.release_the_model();
    let events = deployment.the_whole_stream().await;
    assert_eq!(
        events.first(),
        seen_early.first(),
        "the turn's first event was among those seen early: {events:?}"
    );
    assert!(events.len() > seen_early.len(), "{events:?}");
    let answer = deployment.api.posted(EVENTS).expect("the answer was recorded");
    let first = answer.seen_at(|body| body.contains(FIRST_WORDS));
    let terminal = answer.seen_at(|body| body.contains(COMPLETED));
    assert!(first.is_some_and(|first| first < released), "{answer:?}");
    assert!(terminal.is_some_and(|terminal| terminal > released), "{answer:?}");
}

#[tokio::test]
async fn behind_api_gateway_nothing_of_the_answer_arrives_before_the_model_has_finished() {
    let mut deployment = deployed("buffered").await;
    deployment.follow_the_turn();
    within(
        "the function took the invocation",
        deployment.api.handed_out(EVENTS),
    )
    .await;
    assert!(deployment.api.posted(EVENTS).is_none());

    let released = deployment.release_the_model();
    let events = deployment.the_whole_stream().await;
    let answer = deployment.api.posted(EVENTS).expect("the answer was recorded");
    assert_eq!(answer.mode, ResponseMode::Buffered);
    assert!(answer.prelude().is_none());
    let first = answer.seen_at(|body| body.contains(FIRST_WORDS));
    assert!(
        first.is_some_and(|first| first > released),
        "the first event arrived only with the last: {answer:?}"
    );
    assert!(
        events.iter().any(|(_, event)| event["type"] == "completed"),
        "{events:?}"
    );
}

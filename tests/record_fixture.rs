//! `agent-worker record` (`make record-fixture`): one model call's raw ConverseStream answer
//! written as a fixture, tried against the stand-in (no account needed): the fixture replays
//! byte for byte through the stand-in and the real SDK to the same answer, holds no credential,
//! and without credentials the command refuses and sends nothing.

use crate::support;

use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::{BedrockStandIn, Reply, StreamScript, moto};
use futures_util::StreamExt;
use serde_json::Value;

const SAID: &str = "A fixture is data recorded once and replayed in every test.";

/// `agent-worker record` against `endpoint`, in an empty `home`, with or without credentials.
async fn record(
    home: &std::path::Path,
    out: &std::path::Path,
    endpoint: &str,
    credentials: bool,
) -> std::process::Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"));
    command
        .args([
            "record",
            "--prompt",
            "What is a fixture?",
            "--endpoint-url",
            endpoint,
            "--out",
        ])
        .arg(out)
        .env_clear()
        .env("HOME", home)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", home.join("none"))
        .env("AWS_SHARED_CREDENTIALS_FILE", home.join("none"));
    if credentials {
        command
            .env("AWS_ACCESS_KEY_ID", "AKIDRECORDTEST0001")
            .env("AWS_SECRET_ACCESS_KEY", "record-test-secret-key");
    }
    command.output().await.unwrap()
}

#[tokio::test]
async fn a_recorded_answer_replays_byte_for_byte_to_the_same_turn_and_holds_no_credential() {
    let live = BedrockStandIn::start().await.unwrap();
    live.push(
        StreamScript::new()
            .text(SAID, 5)
            .stop("end_turn")
            .usage(20, 12)
            .into_reply(),
    );
    let home = std::env::temp_dir().join(format!("record-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&home).unwrap();
    let out = home.join("recorded.json");
    let ran = record(&home, &out, &live.endpoint_url(), true).await;
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("AKIDRECORDTEST0001") && !text.contains("record-test-secret-key"));
    let fixture: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        fixture["response"]["contentType"],
        "application/vnd.amazon.eventstream"
    );
    assert!(
        fixture["request"].to_string().contains("What is a fixture?"),
        "{fixture}"
    );

    // Replayed as it was recorded, through the real SDK and the engine: the same answer.
    let replay = BedrockStandIn::start().await.unwrap();
    replay.push(Reply::Raw {
        status: 200,
        content_type: fixture["response"]["contentType"].as_str().unwrap().to_owned(),
        body_base64: fixture["response"]["bodyBase64"].as_str().unwrap().to_owned(),
    });
    let table = format!("record-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let engine = Engine::builder()
        .model(BedrockModel::new(replay.client(), support::MODEL_ID))
        .store(store)
        .config(support::config())
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = engine
        .invoke(
            Scope::new("replayed".parse().unwrap()),
            Prompt::text("What is a fixture?"),
        )
        .collect()
        .await;
    assert_eq!(support::text_of(&events), SAID);
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    let _ = std::fs::remove_dir_all(home);
}

#[tokio::test]
async fn without_credentials_it_refuses_and_sends_nothing() {
    let live = BedrockStandIn::start().await.unwrap();
    let home = std::env::temp_dir().join(format!("record-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&home).unwrap();
    let out = home.join("recorded.json");
    let ran = record(&home, &out, &live.endpoint_url(), false).await;
    assert!(!ran.status.success());
    let said = String::from_utf8_lossy(&ran.stderr);
    assert!(said.contains("needs AWS credentials"), "{said}");
    assert!(!out.exists(), "no fixture written");
    assert!(live.requests().is_empty(), "nothing was sent");
    let _ = std::fs::remove_dir_all(home);
}

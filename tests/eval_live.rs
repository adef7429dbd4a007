//! `agent-worker eval` (`make eval-live`) tried against the stand-in (no account needed): each
//! scenario's line (a tool turn, a typed result, an approval, a stopped turn, a conversation past
//! its summary) and the summary, with the model's replies scripted as a live model would
//! answer (so every scenario passes), and as a model that ignores the tools (so the tool turn
//! fails, named, and the exit code says so).

mod support;

use agent_worker_testkit::{BedrockStandIn, Reply, StreamScript};
use serde_json::Value;

async fn eval(bedrock: &BedrockStandIn) -> (bool, Vec<Value>) {
    let home = std::env::temp_dir().join(format!("eval-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&home).unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
        .args(["eval", "--endpoint-url", &bedrock.endpoint_url()])
        .env_clear()
        .env("HOME", &home)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ACCESS_KEY_ID", "AKIDEVALTEST")
        .env("AWS_SECRET_ACCESS_KEY", "eval-test-secret")
        .env("MODEL_ID", "us.anthropic.claude-sonnet-4-6")
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(home);
    let lines = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (output.status.success(), lines)
}

#[tokio::test]
async fn every_scenario_passes_when_the_model_answers_as_asked_and_the_cost_is_counted() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    // The tool turn.
    bedrock.push(Reply::tool_call("c1", "current_time", "{}"));
    bedrock.push(Reply::text("It is noon UTC."));
    // The typed result.
    bedrock.push(Reply::tool_call("r1", "final_result", r#"{"city": "Paris"}"#));
    // The approval: asked, then (approved) the call runs once and the model says so.
    bedrock.push(Reply::tool_call("p1", "pay_invoice", r#"{"invoice": "INV-7"}"#));
    bedrock.push(Reply::text("Paid: receipt R-1."));
    // The stopped turn: a story that never ends on its own.
    bedrock.push(
        StreamScript::new()
            .open_text("Once upon a time")
            .hang()
            .into_reply(),
    );
    // The long conversation: four answers and the summary made on the way, all of them teal.
    for _ in 0..5 {
        bedrock.push(Reply::text("OK: your favourite colour is teal."));
    }
    let (passed, lines) = eval(&bedrock).await;
    assert_eq!(lines.len(), 6, "{lines:#?}");
    for line in &lines[..5] {
        assert_eq!(line["passed"], true, "{line}");
        assert!(line["costUsd"].as_f64().is_some(), "{line}");
    }
    let names: Vec<&str> = lines[..5].iter().filter_map(|l| l["scenario"].as_str()).collect();
    assert_eq!(
        names,
        [
            "tool turn",
            "typed result",
            "approval",
            "stopped turn",
            "long conversation"
        ]
    );
    assert_eq!(
        (lines[5]["passed"].as_u64(), lines[5]["failed"].as_u64()),
        (Some(5), Some(0))
    );
    assert!(lines[5]["inputTokens"].as_u64().unwrap() > 0);
    assert_eq!(
        bedrock.pending_replies(),
        0,
        "the summary was asked for: every reply was used"
    );
    assert!(passed);
}

#[tokio::test]
async fn a_model_that_ignores_the_tool_fails_the_tool_turn_by_name() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("I think it is about noon."));
    bedrock.push(Reply::tool_call("r1", "final_result", r#"{"city": "Paris"}"#));
    bedrock.push(Reply::tool_call("p1", "pay_invoice", r#"{"invoice": "INV-7"}"#));
    bedrock.push(Reply::text("Paid."));
    bedrock.push(StreamScript::new().open_text("Once").hang().into_reply());
    for _ in 0..5 {
        bedrock.push(Reply::text("OK: teal."));
    }
    let (passed, lines) = eval(&bedrock).await;
    assert!(!passed, "a failed scenario fails the run");
    assert_eq!(lines[0]["passed"], false, "{}", lines[0]);
    assert_eq!(lines[0]["why"], "the model did not call current_time");
    assert_eq!(lines[5]["failed"], 1);
}

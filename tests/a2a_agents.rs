//! Remote A2A agents as tools (`a2a:` in the configuration), against an A2A 1.0 agent on the
//! official SDK (the test kit's `a2a/echo_agent.py`, on `a2a-sdk`'s own server), through turns on
//! the Bedrock stand-in: its card describes the tool, a call is one message in the conversation's
//! context (the same id when the call is the same), an agent's question comes back as the tool's
//! answer, a failure as an error result, and a card that cannot be read stops the configuration.

use crate::support;
use agent_worker::session::HistoryStore as _;

use agent_worker::hosts::config::{ConfigFile, Configured, Loader};
use agent_worker::protocol::{Agent as _, AgentEvent, Prompt, Scope};
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{A2aEchoAgent, BedrockStandIn, Reply, sid, tid};
use futures_util::StreamExt as _;
use serde_json::Value;
use support::config;

const TOKEN: &str = "echo-agent-token-0123456789";

async fn configured(url: &str, token: &str) -> Result<Configured, Vec<String>> {
    let yaml = format!(
        "a2a:\n  - name: echo_agent\n    url: {url}\n    headers: {{ Authorization: \"Bearer {token}\" }}\n"
    );
    let file: ConfigFile = serde_yaml::from_str(&yaml).unwrap();
    Configured::from_file(&file, &std::env::temp_dir(), &Loader::default()).await
}

/// The latest tool result the model was sent, in its request `request`.
fn tool_result(bedrock: &BedrockStandIn, request: usize) -> Value {
    bedrock.last_tool_result(request).expect("a tool result")
}

#[tokio::test]
async fn a_remote_agent_is_a_tool_its_card_describes_and_a_call_is_one_message_in_the_context() {
    let mut agent = A2aEchoAgent::start(TOKEN).await.unwrap();
    let configured = configured(agent.url(), TOKEN).await.unwrap();
    let origin = configured
        .origins
        .iter()
        .find(|o| o.name == "echo_agent")
        .expect("the tool");
    assert!(origin.source.starts_with("a2a:"), "{origin:?}");
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::tool_call(
        "call-1",
        "echo_agent",
        r#"{"message": "hello over there"}"#,
    ));
    bedrock.push(Reply::text("It said hello back."));
    bedrock.push(Reply::tool_call(
        "call-2",
        "echo_agent",
        r#"{"message": "need input please"}"#,
    ));
    bedrock.push(Reply::text("It asks which account."));
    bedrock.push(Reply::tool_call(
        "call-3",
        "echo_agent",
        r#"{"message": "fail now"}"#,
    ));
    bedrock.push(Reply::text("It could not."));
    let store = MemoryStore::new();
    let engine = configured
        .equip(
            agent_worker::engine::Engine::builder()
                .model(agent_worker::engine::BedrockModel::new(
                    bedrock.client(),
                    support::MODEL_ID,
                ))
                .store(store.clone())
                .config(config()),
            [],
        )
        .build()
        .unwrap();
    let turn = |id: &str| {
        engine
            .invoke(
                Scope::new("conv-a2a".parse().unwrap()).with_turn_id(tid(id)),
                Prompt::text("Ask the agent."),
            )
            .collect::<Vec<AgentEvent>>()
    };
    let events = turn("t1").await;
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    // The card described the tool to the model.
    let offered = &bedrock.requests()[0].body["toolConfig"]["tools"];
    let spec = offered
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["toolSpec"]["name"] == "echo_agent")
        .expect("offered");
    let description = spec["toolSpec"]["description"].as_str().unwrap();
    assert!(
        description.contains("Repeats what it is told") && description.contains("Says back the words"),
        "{description}"
    );
    // One message, in the conversation's context, its id the call's.
    let said = agent.next_message().await.unwrap();
    assert_eq!(said["words"], "hello over there");
    assert_eq!(said["contextId"], "conv-a2a");
    assert_eq!(said["messageId"], "conv-a2a.t1.call-1");
    let result = tool_result(&bedrock, 1);
    assert!(result.to_string().contains("echo: hello over there"), "{result}");

    // The agent needs input: its question is the tool's answer, not a failure.
    turn("t2").await;
    assert_eq!(agent.next_message().await.unwrap()["words"], "need input please");
    let asked = tool_result(&bedrock, 3).to_string();
    assert!(
        asked.contains("Which account?") && asked.contains("needsInput"),
        "{asked}"
    );
    // The agent fails: an error result the model reads.
    turn("t3").await;
    agent.next_message().await.unwrap();
    let failed = tool_result(&bedrock, 5);
    assert_eq!(failed["status"], "error", "{failed}");
    assert!(failed.to_string().contains("cannot do that"), "{failed}");
    assert_eq!(store.load_history(&sid("conv-a2a")).await.unwrap().len(), 12);
}

#[tokio::test]
async fn an_agent_whose_card_cannot_be_read_stops_the_configuration_naming_it() {
    let agent = A2aEchoAgent::start(TOKEN).await.unwrap();
    let problems = configured(agent.url(), "a-wrong-token").await.unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("a2a[0] (echo_agent): its agent card") && p.contains("401")),
        "{problems:?}"
    );
}

/// With `cardKey`, a remote agent is offered only when its card carries that key's signature: an
/// agent whose card the SDK's own signer signed with the key is taken; with another key, or
/// unsigned, the configuration stops, saying why.
#[tokio::test]
async fn a_remote_agents_card_is_taken_only_signed_by_the_key_the_configuration_names() {
    use agent_worker_testkit::test_key;
    let with_key = |url: &str, key: &str| {
        let pem = std::fs::read_to_string(test_key(key)).unwrap();
        format!(
            "a2a:\n  - name: echo_agent\n    url: {url}\n    headers: {{ Authorization: \"Bearer {TOKEN}\" }}\n    cardKey: {}\n",
            serde_json::to_string(&pem).unwrap()
        )
    };
    let load = |yaml: String| async move {
        let file: ConfigFile = serde_yaml::from_str(&yaml).unwrap();
        Configured::from_file(&file, &std::env::temp_dir(), &Loader::default()).await
    };
    let signed = A2aEchoAgent::start_signed(TOKEN, &test_key("card-signing.pem"))
        .await
        .unwrap();
    let taken = load(with_key(signed.url(), "card-signing.pub.pem"))
        .await
        .unwrap();
    assert!(taken.origins.iter().any(|o| o.name == "echo_agent"));
    let refused = load(with_key(signed.url(), "other.pub.pem")).await.unwrap_err();
    assert!(refused.iter().any(|e| e.contains("no signature")), "{refused:?}");
    let unsigned = A2aEchoAgent::start(TOKEN).await.unwrap();
    let refused = load(with_key(unsigned.url(), "card-signing.pub.pem"))
        .await
        .unwrap_err();
    assert!(refused.iter().any(|e| e.contains("not signed")), "{refused:?}");
}

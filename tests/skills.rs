//! Agent Skills and the project's instructions from the configuration (`skills`,
//! `instructions`), through the real Bedrock client, the stand-in and DynamoDB on moto: the
//! skills are listed in the system prompt and a skill's body reaches the model only when it loads
//! it; a malformed skill stops the start naming its file and field; `agent-worker tools` lists
//! them.

use crate::support;

use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::hosts::config::{Configured, Loader};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::{BedrockStandIn, Reply, moto, tid};
use futures_util::StreamExt;
use support::config_files::Folder;

const REFUNDS: &str = "---\nname: refunds\ndescription: How to refund an order. Use it when a customer asks for their money back.\n---\n\n1. Find the order.\n2. Refund it through `orders_refund`, never by hand.\n";
const SHIPPING: &str =
    "---\nname: shipping\ndescription: Where a parcel is and when it comes.\n---\nAsk the carrier first.\n";

fn folder() -> Folder {
    let folder = Folder::new();
    folder.write(
        "agent-worker.yaml",
        "persona: You are the shop's assistant.\ntools: [current_time]\nskills: skills\ninstructions: AGENTS.md\n",
    );
    folder.write("skills/refunds/SKILL.md", REFUNDS);
    folder.write("skills/shipping/SKILL.md", SHIPPING);
    folder.write("AGENTS.md", "# Shop\nAnswer in British English.\n");
    folder
}

#[tokio::test]
async fn skills_are_listed_in_the_prompt_and_a_body_is_loaded_only_when_the_model_asks() {
    let folder = folder();
    let configured = Configured::load(folder.path().join("agent-worker.yaml"), &Loader::default())
        .await
        .unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let table = format!("skills-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let builder = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(store)
        .system_prompt(configured.system_prompt_over(None).unwrap())
        .config(support::config());
    let engine = configured.equip(builder, Vec::new()).build().unwrap();

    bedrock.push(Reply::tool_call("c1", "load_skill", r#"{"name": "refunds"}"#));
    bedrock.push(Reply::text("I will refund it through orders_refund."));
    let events: Vec<AgentEvent> = engine
        .invoke(
            Scope::new("shop-1".parse().unwrap()).with_turn_id(tid("t1")),
            Prompt::text("I want my money back"),
        )
        .collect()
        .await;
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    let requests = bedrock.requests();
    let system = requests[0].body["system"].to_string();
    // The persona, then the project's instructions, then each skill's name and description.
    assert!(system.contains("You are the shop's assistant."), "{system}");
    assert!(system.contains("Answer in British English."), "{system}");
    assert!(system.contains("- refunds: How to refund an order."), "{system}");
    assert!(system.contains("- shipping: Where a parcel is"), "{system}");
    // A body is not in the prompt: the model pays for it only when it loads it.
    assert!(!system.contains("never by hand"), "{system}");
    let offered = requests[0].body["toolConfig"]["tools"].to_string();
    assert!(offered.contains("load_skill"), "{offered}");
    let loaded = bedrock.last_tool_result(1).expect("the skill's body");
    assert!(loaded.to_string().contains("never by hand"), "{loaded}");
    // The same bytes lead the next request: the prompt cache holds.
    assert_eq!(requests[1].body["system"], requests[0].body["system"]);
}

#[tokio::test]
async fn a_malformed_skill_stops_the_start_naming_its_file_and_field() {
    let folder = folder();
    folder.write(
        "skills/broken/SKILL.md",
        "---\nname: broken\n---\nNo description above.\n",
    );
    let config = folder.path().join("agent-worker.yaml");
    let error = Configured::load(&config, &Loader::default()).await.unwrap_err();
    let said = error.to_string();
    assert!(said.contains("skills/broken/SKILL.md"), "{said}");
    assert!(said.contains("description: missing"), "{said}");
}

#[tokio::test]
async fn agent_worker_tools_lists_the_skills() {
    let folder = folder();
    let config = folder.path().join("agent-worker.yaml");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
        .args(["tools", "--config"])
        .arg(&config)
        .env("AWS_REGION", "us-east-1")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(r#""name":"load_skill""#), "{stdout}");
    assert!(stdout.contains(r#"{"skill":"refunds","description":"How to refund an order. Use it when a customer asks for their money back."}"#), "{stdout}");
}

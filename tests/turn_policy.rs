//! The turn's policy from the configuration (`turnPolicy`, `prepareStep`), through the real
//! Bedrock client, the stand-in (and its prompt cache) and DynamoDB on moto: two accounts on one
//! deployment get their own persona and tools, the cache holds within each, and a step is
//! narrowed once the turn has called a tool; from Rust, a step's policy is given every tool of
//! the turn with its class (`allTools`).

mod support;

use std::sync::{Arc, Mutex, PoisonError};

use agent_worker::engine::{
    AdmitClasses, BedrockModel, Engine, LocalFileArea, StepContext, ToolClass, TurnPolicy,
};
use agent_worker::hosts::config::{ConfigFile, Configured, Loader};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope, TurnOptions};
use agent_worker::session::{DynamoConfig, DynamoStore, MemoryStore};
use agent_worker_testkit::{BedrockStandIn, Reply, moto};
use futures_util::StreamExt;
use serde_json::Value;

const CONFIG: &str = r#"
persona: You are the desk's assistant.
tools: [current_time, add, word_count]
turnPolicy:
  - when: { accountId: acme }
    persona: You are Acme's assistant. Acme sells anvils.
    tools: [current_time]
  - when: { accountId: globex, userId: "*@globex.example" }
    systemPrompt: You are Globex's assistant.
    tools: ["word_*", add]
prepareStep:
  - after: current_time
    tools: [add]
"#;

async fn engine(bedrock: &BedrockStandIn) -> Engine {
    let file: ConfigFile = serde_yaml::from_str(CONFIG).unwrap();
    let configured = Configured::from_file(&file, std::path::Path::new("."), &Loader::default())
        .await
        .unwrap();
    let table = format!("turn-policy-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let builder = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(store)
        .system_prompt(configured.system_prompt.clone().unwrap())
        .config(support::config());
    configured.equip(builder, Vec::new()).build().unwrap()
}

async fn turn(engine: &Engine, session: &str, turn: &str, user: &str, account: &str) -> Vec<AgentEvent> {
    let options = TurnOptions {
        user_id: Some(user.into()),
        account_id: Some(account.into()),
        ..TurnOptions::default()
    };
    let scope = Scope::new(session).with_turn_id(turn).with_options(options);
    engine.invoke(scope, Prompt::text("Hello")).collect().await
}

fn system(body: &Value) -> String {
    body["system"].to_string()
}

fn tools(body: &Value) -> Vec<String> {
    let mut names: Vec<String> = body["toolConfig"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["toolSpec"]["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn two_accounts_get_their_own_persona_and_tools_and_the_cache_holds_within_each() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = engine(&bedrock).await;
    for _ in 0..4 {
        bedrock.push(Reply::text("Hello."));
    }
    turn(&engine, "acme-1", "t1", "ann", "acme").await;
    turn(&engine, "globex-1", "t2", "bo@globex.example", "globex").await;
    turn(&engine, "acme-2", "t3", "cy", "acme").await;
    turn(&engine, "other-1", "t4", "dee", "initech").await;
    let requests = bedrock.requests();
    assert_eq!(requests.len(), 4);
    let (acme, globex, acme_again, other) = (&requests[0], &requests[1], &requests[2], &requests[3]);
    assert!(
        system(&acme.body).contains("Acme sells anvils."),
        "{}",
        system(&acme.body)
    );
    assert_eq!(tools(&acme.body), ["current_time"]);
    assert!(system(&globex.body).contains("You are Globex's assistant."));
    assert!(!system(&globex.body).contains("Acme"));
    assert_eq!(tools(&globex.body), ["add", "word_count"]);
    // A turn no rule matches is the deployment's own.
    assert!(system(&other.body).contains("the desk's assistant"));
    assert_eq!(tools(&other.body), ["add", "current_time", "word_count"]);
    // Turns that resolve alike send the same prefix: the second Acme turn reads what the first
    // wrote, though a Globex turn came between.
    assert!(acme.prompt_cache.write_tokens > 0);
    assert_eq!(
        acme_again.prompt_cache.read_tokens,
        acme.prompt_cache.write_tokens
    );
    assert_eq!(globex.prompt_cache.read_tokens, 0, "Globex's prefix is its own");
}

#[tokio::test]
async fn a_step_is_narrowed_once_the_turn_has_called_the_tool_its_rule_names() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = engine(&bedrock).await;
    bedrock.push(Reply::tool_call("c1", "current_time", "{}"));
    bedrock.push(Reply::text("It is noon."));
    let events = turn(&engine, "initech-1", "t1", "dee", "initech").await;
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    let requests = bedrock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(tools(&requests[0].body), ["add", "current_time", "word_count"]);
    assert_eq!(tools(&requests[1].body), ["add"], "after current_time, only add");
}

#[tokio::test]
async fn rules_that_cannot_hold_are_refused_when_the_configuration_is_read() {
    let file: ConfigFile = serde_yaml::from_str(
        "turnPolicy:\n  - tools: [add]\n  - when: { accountId: acme }\n    persona: A\n    systemPrompt: B\nprepareStep:\n  - round: 1\n",
    )
    .unwrap();
    let problems = Configured::from_file(&file, std::path::Path::new("."), &Loader::default())
        .await
        .unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("turnPolicy[1]: never reached")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("give one, not both")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("prepareStep[0]: says nothing")),
        "{problems:?}"
    );
}

/// A `prepareStep` from Rust that reads seed 004's `allTools`: it records what each step is
/// given, and offers the first step only the product's own tools.
/// What one step was given: each tool's name and class.
type StepTools = Vec<(String, ToolClass)>;

#[derive(Debug, Clone, Default)]
struct OwnToolsFirst {
    seen: Arc<Mutex<Vec<StepTools>>>,
}

impl TurnPolicy for OwnToolsFirst {
    fn active_tools(&self, step: &StepContext<'_>) -> Option<Vec<String>> {
        let all: StepTools = step
            .all_tools
            .iter()
            .map(|t| (t.name.to_owned(), t.class))
            .collect();
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).push(all);
        (step.round == 0).then(|| {
            step.all_tools
                .iter()
                .filter(|t| t.class == ToolClass::Backend)
                .map(|t| t.name.to_owned())
                .collect()
        })
    }
}

/// Issue 53 (6): each step's policy is given every tool of the turn with its class, and can
/// narrow a step by class.
#[tokio::test]
async fn a_step_policy_is_given_every_tool_of_the_turn_with_its_class() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let root = std::env::temp_dir().join(format!("step-tools-{}", uuid::Uuid::new_v4().simple()));
    let policy = OwnToolsFirst::default();
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(MemoryStore::new())
        .tools(support::example_tools(&["current_time"]))
        .file_area(LocalFileArea::new(&root))
        .tool_policy(AdmitClasses(vec![ToolClass::Attachment]))
        .turn_policy(policy.clone())
        .config(support::config())
        .build()
        .unwrap();
    bedrock.push(Reply::tool_call("c1", "current_time", "{}"));
    bedrock.push(Reply::text("It is noon."));
    let events = turn(&engine, "files-1", "t1", "dee", "initech").await;
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    let expected: StepTools = [
        ("attachment_list", ToolClass::Attachment),
        ("attachment_read", ToolClass::Attachment),
        ("attachment_view", ToolClass::Attachment),
        ("current_time", ToolClass::Backend),
    ]
    .into_iter()
    .map(|(name, class)| (name.to_owned(), class))
    .collect();
    let seen = policy.seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(seen.len(), 2, "one look a step");
    for mut step in seen {
        step.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(step, expected);
    }
    let requests = bedrock.requests();
    assert_eq!(tools(&requests[0].body), ["current_time"], "by class");
    assert_eq!(tools(&requests[1].body).len(), 4);
    let _ = std::fs::remove_dir_all(&root);
}

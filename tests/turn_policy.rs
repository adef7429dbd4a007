//! The turn's policy from the configuration (`turnPolicy`, `prepareStep`), through the real
//! Bedrock client, the stand-in (and its prompt cache) and DynamoDB on moto: two accounts on one
//! deployment get their own persona and tools, the cache holds within each, and a step is
//! narrowed once the turn has called a tool; from Rust, a step's policy is given every tool of
//! the turn with its class (`allTools`).

use crate::support;

use std::sync::{Arc, Mutex, PoisonError};

use agent_worker::engine::{
    AdmitClasses, BedrockModel, Engine, LocalFileArea, StepContext, ToolClass, TurnPolicy,
};
use agent_worker::hosts::config::{ConfigFile, Configured, Loader};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope, TurnOptions};
use agent_worker::session::{DynamoConfig, DynamoStore, MemoryStore};
use agent_worker_testkit::{BedrockStandIn, Reply, moto, sid, tid};
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
    let scope = Scope::new(sid(session))
        .with_turn_id(tid(turn))
        .with_options(options);
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

/// Issue 53: with a Standard Agents folder, the configuration's policy was ignored — a deny did
/// not deny, a call that needs approval ran, the turn policy's tools were not narrowed. Both
/// kinds of agent are now built from one [`Blueprint`]: the same configuration through the bare
/// engine and through a Standard Agents side gives the same decisions in the model's requests
/// and in the table.
#[tokio::test]
async fn one_configuration_decides_alike_for_the_bare_engine_and_a_standard_agents_side() {
    use agent_worker::agents::DynamoThreadStore;
    use agent_worker::engine::ApprovalSigner;
    use agent_worker::hosts::Blueprint;
    use std::sync::Arc;

    const DENYING: &str = r#"
systemPrompt: You are the desk's assistant.
tools: [current_time, add, word_count]
policy:
  - tools: current_time
    decision: deny
    reason: The clock is off limits here.
  - tools: add
    decision: approve
turnPolicy:
  - tools: [current_time, add]
"#;
    let folder = support::config_files::Folder::new();
    folder.write(
        "agents/desk.yaml",
        "name: desk\nsideA:\n  prompt: desk\nsideB:\n  human: true\n",
    );
    folder.write(
        "prompts/desk.yaml",
        "system: You are the desk's side.\ntools: [current_time, add, word_count]\n",
    );
    let file: ConfigFile = serde_yaml::from_str(DENYING).unwrap();
    let configured = Configured::from_file(&file, std::path::Path::new("."), &Loader::default())
        .await
        .unwrap();
    let table = format!("one-blueprint-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let blueprint = Blueprint::new(store.clone(), Arc::new(configured))
        .ui_answers(Arc::new(store.clone()))
        .approvals(Some(ApprovalSigner::new([7u8; 32]).unwrap()))
        .engine_config(support::config());
    let model = Arc::new(BedrockModel::new(bedrock.client(), support::MODEL_ID));
    let bare: Arc<dyn Agent> = Arc::new(blueprint.engine(model).unwrap());
    let client = bedrock.client();
    let models: agent_worker::agents::ModelSource = Arc::new(move |id: &str| {
        Arc::new(BedrockModel::new(client.clone(), id)) as Arc<dyn agent_worker::engine::Model>
    });
    let runtime = blueprint
        .runtime(
            folder.path(),
            support::MODEL_ID,
            models,
            DynamoThreadStore::new(store.clone()),
        )
        .unwrap()
        .build()
        .unwrap();
    let side: Arc<dyn Agent> = Arc::new(runtime.agent("desk").unwrap());

    for (kind, agent, session) in [("bare", bare, "c-bare"), ("side", side, "c-side")] {
        let asked = bedrock.requests().len();
        // A denied call is refused, saying why; the turn policy offers two of the three tools.
        bedrock.push(Reply::tool_call("c1", "current_time", "{}"));
        bedrock.push(Reply::text("I cannot read the clock."));
        let events = run_turn(agent.as_ref(), session, "t1").await;
        assert!(
            matches!(events.last(), Some(AgentEvent::Completed { .. })),
            "{kind}: {events:?}"
        );
        let requests = bedrock.requests();
        assert_eq!(tools(&requests[asked].body), ["add", "current_time"], "{kind}");
        let refused = bedrock.last_tool_result(asked + 1).unwrap().to_string();
        assert!(
            refused.contains("denied") && refused.contains("off limits"),
            "{kind}: {refused}"
        );

        // A call that needs approval waits for the person; the table keeps what waits.
        bedrock.push(Reply::tool_call("c2", "add", r#"{"a": 1, "b": 2}"#));
        let events = run_turn(agent.as_ref(), session, "t2").await;
        let asked_approval = events
            .iter()
            .any(|e| matches!(e, AgentEvent::Other(raw) if raw["type"] == "approval_required"));
        assert!(asked_approval, "{kind}: {events:?}");
        let waiting = agent_worker_testkit::session_audit::every_item(&table)
            .await
            .unwrap()
            .into_iter()
            .filter(|item| {
                let pk = item["pk"].as_s().unwrap();
                let sk = item["sk"].as_s().unwrap();
                pk.starts_with(&format!("session#{session}")) && sk.starts_with("approval#")
            })
            .count();
        assert_eq!(waiting, 1, "{kind}: the approval waits in the table");
    }
}

async fn run_turn(agent: &dyn Agent, session: &str, turn: &str) -> Vec<AgentEvent> {
    let options = TurnOptions {
        user_id: Some("ann".into()),
        account_id: Some("acme".into()),
        ..TurnOptions::default()
    };
    let scope = Scope::new(sid(session))
        .with_turn_id(tid(turn))
        .with_options(options);
    agent
        .invoke(scope, Prompt::text("What time is it?"))
        .collect()
        .await
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

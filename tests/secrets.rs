//! Secrets and internal detail: the worker's logs, captured whole at TRACE, never hold an
//! approval token, a sensitive tool's arguments, the person's token or a secret header an MCP
//! server is called with; what a client is told of a failure names no
//! table, ARN or account; the text a turn frames (attachments, tool results, API error bodies)
//! cannot close its frame or pose as system text.

use crate::support;

use std::sync::Arc;

use agent_worker::engine::tools::{Effect, ToolSpec, tool_fn};
use agent_worker::engine::{ApprovalSigner, BedrockModel, Engine};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::{ApprovalStatus, ApprovalStore, DynamoConfig, DynamoStore, MemoryStore};
use agent_worker_testkit::{BedrockStandIn, Reply, moto, sid, tid};
use futures_util::StreamExt;
use serde_json::json;
use support::{LogCapture, MODEL_ID, approval_event, config, failure, same_length_forgery};

const PAYEE: &str = "payee-IBAN-DE89370400440532013000";

fn pay_engine(bedrock: &BedrockStandIn, store: &MemoryStore) -> Engine {
    let pay = tool_fn(
        ToolSpec::new(
            "pay",
            "Pays an invoice.",
            json!({"type": "object", "properties": {"to": {"type": "string"}, "amount": {"type": "number"}}}),
        )
        .effect(Effect::Transaction),
        |_, _| async { Ok(json!({"receipt": "R-1"})) },
    );
    Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store.clone())
        .approvals(
            store.clone(),
            ApprovalSigner::new(*b"0123456789abcdef0123456789abcdef").unwrap(),
        )
        .tool(Arc::new(pay))
        .config(config())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn no_log_line_holds_an_approval_token_or_a_sensitive_argument() {
    let logs = LogCapture::default();
    let _guard = tracing::subscriber::set_default(logs.subscriber(tracing::Level::TRACE));
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let engine = pay_engine(&bedrock, &store);
    let args = json!({"to": PAYEE, "amount": 12}).to_string();
    bedrock.push(Reply::tool_call("call-pay", "pay", &args));
    let scope = |turn: &str| {
        Scope::new("s1".parse().unwrap())
            .with_turn_id(tid(turn))
            .with("userId", "ada")
    };
    let events: Vec<AgentEvent> = engine
        .invoke(scope("t1"), Prompt::text("Pay them"))
        .collect()
        .await;
    let approval = approval_event(&events);
    let token = approval["token"].as_str().unwrap().to_owned();

    bedrock.push(Reply::text("Paid."));
    let decided = scope("t2").with(
        "approval",
        json!({"approvalId": approval["approvalId"], "decision": "approve", "token": token}),
    );
    let events: Vec<AgentEvent> = engine.invoke(decided, Prompt::text("")).collect().await;
    assert_eq!(events.last(), Some(&AgentEvent::completed()));
    // A forged token too, for a second approval still waiting: of its length and alphabet, so
    // that only the MAC check can catch it. Its refusal is logged, the token is not.
    bedrock.push(Reply::tool_call("call-pay-2", "pay", &args));
    let events: Vec<AgentEvent> = engine
        .invoke(scope("t3"), Prompt::text("Pay them again"))
        .collect()
        .await;
    let second = approval_event(&events);
    let real = second["token"].as_str().unwrap();
    let forged = same_length_forgery(real);
    assert_eq!(forged.len(), real.len());
    bedrock.push(Reply::text("Refused."));
    let _: Vec<AgentEvent> = engine
        .invoke(
            scope("t4").with(
                "approval",
                json!({"approvalId": second["approvalId"], "decision": "approve", "token": forged}),
            ),
            Prompt::text(""),
        )
        .collect()
        .await;
    let (_, status) = store
        .get_approval(&sid("s1"), second["approvalId"].as_str().unwrap())
        .await
        .unwrap()
        .expect("the second approval");
    assert_eq!(status, ApprovalStatus::Pending, "the forgery redeemed nothing");
    assert!(
        logs.text().contains("the token does not open this call"),
        "the MAC check refused it"
    );

    let logged = logs.text();
    assert!(logged.lines().count() > 5, "the logs were captured: {logged}");
    assert!(logged.contains("t2"), "the turn's span is in the logs: {logged}");
    for secret in [token.as_str(), real, forged.as_str(), PAYEE] {
        assert!(!logged.contains(secret), "{secret} is in the logs:\n{logged}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_client_is_told_what_failed_without_table_names_arns_or_accounts() {
    let logs = LogCapture::default();
    let _guard = tracing::subscriber::set_default(logs.subscriber(tracing::Level::TRACE));
    let bedrock = BedrockStandIn::start().await.unwrap();

    // A store whose table does not exist: the client hears the store failed; the log says which.
    let table = format!("internal-sessions-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store)
        .config(config())
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = engine
        .invoke(
            Scope::new("s1".parse().unwrap()).with_turn_id(tid("t1")),
            Prompt::text("Hi"),
        )
        .collect()
        .await;
    let (details, retryable, code) = failure(&events);
    assert_eq!((code.as_deref(), retryable), (Some("store_failed"), true));
    assert_eq!(details, "the session store failed");

    // Bedrock's access denial names the role, the account and the model's ARN.
    let memory = MemoryStore::new();
    let engine = support::engine(&bedrock, &memory, config(), Vec::new());
    bedrock.push(Reply::HttpError {
        status: 403,
        error_type: "AccessDeniedException".into(),
        body: json!({"message": "User: arn:aws:sts::123456789012:assumed-role/agent-worker-role/fn is not authorized to perform: bedrock:InvokeModelWithResponseStream on resource: arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude"}),
    });
    let events: Vec<AgentEvent> = engine
        .invoke(
            Scope::new("s2".parse().unwrap()).with_turn_id(tid("t1")),
            Prompt::text("Hi"),
        )
        .collect()
        .await;
    let (denied, _, code) = failure(&events);
    assert_eq!(code.as_deref(), Some("model_rejected"));
    assert!(denied.contains("not authorized"), "{denied}");

    // A panic's message stays in the log.
    for said in [&details, &denied] {
        for internal in [
            table.as_str(),
            "arn:",
            "123456789012",
            "agent-worker-role",
            "panicked at",
        ] {
            assert!(!said.contains(internal), "the client was told {internal}: {said}");
        }
    }
    let logged = logs.text();
    assert!(logged.contains(&table), "the log keeps the detail: {logged}");
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn a_call_carries_the_secret_header_and_the_persons_token_and_neither_is_logged() {
    use agent_worker::hosts::secrets::AwsSecrets;
    use agent_worker::protocol::UserToken;

    let logs = LogCapture::default();
    let _guard = tracing::subscriber::set_default(logs.subscriber(tracing::Level::TRACE));
    let server = agent_worker_testkit::EverythingServer::desk().unwrap();
    let moto = agent_worker_testkit::moto();
    let secret = format!("desk-mcp-key-{}", uuid::Uuid::new_v4().simple());
    let api_key = "k-9b1e0c2f-the-desk-service-key";
    moto.secrets_manager()
        .create_secret()
        .name(&secret)
        .secret_string(api_key)
        .send()
        .await
        .unwrap();
    let yaml = format!(
        "mcp:\n  - name: desk\n    url: {}\n    headers: {{ X-Api-Key: {{ secret: {secret} }} }}\n    personToken: {{ header: Authorization, prefix: 'Bearer ' }}\n",
        server.url()
    );
    let file: agent_worker::hosts::config::ConfigFile = serde_yaml::from_str(&yaml).unwrap();
    let loader = agent_worker::hosts::config::Loader {
        secrets: Some(std::sync::Arc::new(AwsSecrets::from_clients(
            moto.secrets_manager(),
            moto.ssm(),
        ))),
        ..Default::default()
    };
    let configured =
        agent_worker::hosts::config::Configured::from_file(&file, &std::env::temp_dir(), &loader)
            .await
            .unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let builder = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(MemoryStore::new())
        .config(config());
    let engine = configured.equip(builder, []).build().unwrap();
    let turn = |session: &str, token: Option<&str>| {
        let mut scope = Scope::new(sid(session)).with_turn_id(tid(&format!("{session}-t1")));
        if let Some(token) = token {
            scope = scope.with_user_token(UserToken::new(token));
        }
        engine
            .invoke(scope, Prompt::text("Who am I?"))
            .collect::<Vec<_>>()
    };

    let token = "tok-ana-5f0a9d7c41";
    bedrock.push(Reply::tool_call("c1", "desk_whoami", "{}"));
    bedrock.push(Reply::text("You are Ana."));
    let first = turn("s-whoami", Some(token)).await;
    assert!(
        matches!(first.last(), Some(AgentEvent::Completed { .. })),
        "{first:?}"
    );
    let result = first
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolEnded {
                is_error: false,
                content,
                ..
            } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the call did not succeed: {first:?}"));
    let seen: serde_json::Value = serde_json::from_str(result["text"].as_str().unwrap()).unwrap();
    assert_eq!(seen["authorization"], sha256_hex(&format!("Bearer {token}")));
    assert_eq!(seen["apiKey"], sha256_hex(api_key));

    // A turn without the person's token makes no call, and the model reads why.
    bedrock.push(Reply::tool_call("c2", "desk_whoami", "{}"));
    bedrock.push(Reply::text("I cannot tell who you are."));
    let events = turn("s-anonymous", None).await;
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
    let refused = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolEnded {
                is_error: true,
                content,
                ..
            } => Some(content.to_string()),
            _ => None,
        })
        .expect("the call ended in error");
    assert!(refused.contains("carries no userToken"), "{refused}");

    let logged = logs.text();
    assert!(
        logged.contains("desk_whoami"),
        "the capture holds the turns' logs: {logged}"
    );
    assert!(!logged.contains(token), "the person's token was logged");
    assert!(!logged.contains(api_key), "the service key was logged");
    let kept = format!("{first:?}{events:?}{:?}", bedrock.requests());
    assert!(!kept.contains(token) && !kept.contains(api_key));
}

//! The kill switch (issue 56): an account or a person blocked by `agent-worker stop --account`
//! or the backend's `PUT /blocks` has its running turns stopped and its queued ones refused
//! until the block is lifted; the backend reads the budgets' ledgers with `GET /usage`. Through
//! the handler and `serve`, on moto's DynamoDB, the model being the Bedrock stand-in.

use crate::support;

use std::sync::Arc;

use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::AgentTurnPayload;
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::protocol::AgentEvent;
use agent_worker::session::{DynamoConfig, DynamoStore, TurnLedger as _};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::{BedrockStandIn, Reply, moto, sid, tid};
use serde_json::json;

async fn store() -> DynamoStore {
    let table = format!("kill-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).unwrap());
    store.create_table().await.unwrap();
    store
}

/// The kill switch (`agent-worker stop --account`): a running turn of the account on one
/// worker stops (`stopReason: "blocked"`), a queued one on another worker is refused
/// (`blocked`, not redriven) without a model call, and once the block is lifted the account's
/// turns run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_account_stops_its_running_turns_and_refuses_its_queued_ones_until_lifted() {
    use agent_worker::protocol::codes;
    use agent_worker::session::dynamo::CachedBlocklist;
    use agent_worker_testkit::StreamScript;
    use std::time::Duration;

    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = store().await;
    let worker = |store: DynamoStore, fresh_for: Duration| {
        let blocks = CachedBlocklist::new(store.clone()).fresh_for(fresh_for);
        let engine = Engine::builder()
            .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
            .store(store.clone())
            .config(EngineConfig {
                stop_poll_interval: Duration::from_millis(100),
                stop_poll_idle: Duration::from_millis(200),
                stop_grace: Duration::from_millis(100),
                ..support::config()
            })
            .blocklist(Arc::new(blocks))
            .build()
            .unwrap();
        Arc::new(TurnHandler::new(
            engine,
            Sinks::new().with(DynamoEventLog::new(store)),
        ))
    };
    let other = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(store.table()).unwrap());
    // The first worker keeps the blocks it read for 100 ms; the second reads them for each look.
    let (first, second) = (
        worker(store.clone(), Duration::from_millis(100)),
        worker(other, Duration::ZERO),
    );
    let turn = |conversation: &str, user: &str, turn: &str| {
        let body = json!({"turnId": turn, "conversationId": conversation, "userId": user, "accountId": "acme", "content": "Export every report."});
        AgentTurnPayload::decode(&body.to_string()).unwrap()
    };
    let kill_switch = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
            .args(["stop", "--table", store.table()])
            .args(args)
            .env("AWS_ENDPOINT_URL", moto().endpoint())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };

    bedrock.push(StreamScript::new().open_text("Exporting").hold().into_reply());
    let running = first.clone();
    let a = tokio::spawn(async move { running.run_turn_to_end(&turn("c-a", "ana", "t1"), None).await });
    bedrock.holding(1).await;
    let said = kill_switch(&["--account", "acme", "--reason", "runaway script"]);
    assert!(said.contains("blocked"), "{said}");
    let stopped = tokio::time::timeout(Duration::from_secs(30), a)
        .await
        .expect("the running turn stopped")
        .unwrap();
    assert_eq!(
        stopped.terminal,
        Some(AgentEvent::completed_with(json!({"stopReason": "blocked"})))
    );
    let queued = second.run_turn_to_end(&turn("c-b", "bo", "t1"), None).await;
    let Some(AgentEvent::Failed {
        code,
        retryable,
        details,
    }) = queued.terminal
    else {
        panic!("not refused: {:?}", queued.terminal)
    };
    assert_eq!(code.as_deref(), Some(codes::BLOCKED));
    assert!(!retryable, "not redriven");
    assert!(details.contains("account acme is blocked"), "{details}");
    assert_eq!(bedrock.requests().len(), 1, "no model call for the refused turn");
    assert!(
        store.turn(&sid("c-b"), &tid("t1")).await.unwrap().is_none(),
        "nothing of it stored"
    );

    let said = kill_switch(&["--account", "acme", "--lift"]);
    assert!(said.contains("lifted"), "{said}");
    bedrock.push(Reply::text("Done."));
    let again = second.run_turn_to_end(&turn("c-b", "bo", "t2"), None).await;
    assert_eq!(again.terminal, Some(AgentEvent::completed()));
}

/// The backend's routes on `serve`: `PUT /blocks` and `DELETE /blocks` (the kill switch) and
/// `GET /usage` (the ledgers). A person's own token (on a host that knows people by their
/// tokens) is refused (403) and changes nothing, as the table shows; the backend's key (on a
/// host that knows it) blocks, reads and lifts.
#[tokio::test]
async fn the_backend_blocks_reads_usage_and_lifts_and_a_person_cannot() {
    use agent_worker::engine::spending::{Ledger, SpendLedger as _};
    use agent_worker::hosts::jwt::{AccountFrom, JwtConfig, JwtVerifier};
    use agent_worker::session::dynamo::CachedBlocklist;
    use agent_worker::session::{BlockTarget, Blocklist as _};
    use agent_worker_testkit::{JwksStandIn, SigningKey};
    use support::container::{KEY, changed, send, server_with_tokens, table};

    let key = SigningKey::rs256("k-1");
    let issuer = JwksStandIn::start(&[&key]).await.unwrap();
    let config = JwtConfig::new(
        issuer.issuer(),
        "app",
        Some(issuer.jwks_url()),
        AccountFrom::Claim("custom:account".into()),
    )
    .unwrap();
    let server = server_with_tokens(JwtVerifier::new(config, reqwest::Client::new())).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let ana = key.token(&json!({"iss": issuer.issuer(), "aud": "app", "sub": "ana", "custom:account": "acme", "iat": now, "exp": now + 3600}));
    let http = reqwest::Client::new();
    let blocks = format!("{}/blocks", server.url);
    let usage = format!(
        "{}/usage?accountId=acme&userId=ana&conversationId=c-1",
        server.url
    );

    let before = table(&server.store).await;
    let (status, said) = send(
        http.put(&blocks)
            .bearer_auth(&ana)
            .json(&json!({"accountId": "acme"})),
        None,
    )
    .await;
    assert_eq!(status, 403, "{said}");
    let (status, said) = send(http.get(&usage).bearer_auth(&ana), None).await;
    assert_eq!(status, 403, "{said}");
    let (status, said) = send(
        http.delete(format!("{blocks}?accountId=acme")).bearer_auth(&ana),
        None,
    )
    .await;
    assert_eq!(status, 403, "{said}");
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );

    // A host that knows the backend by its key.
    let server = support::container::server(2, support::config(), std::time::Duration::from_secs(5)).await;
    let blocks = format!("{}/blocks", server.url);
    let usage = format!(
        "{}/usage?accountId=acme&userId=ana&conversationId=c-1",
        server.url
    );
    let (status, said) = send(
        http.put(&blocks)
            .json(&json!({"accountId": "acme", "userId": "ana", "reason": "runaway"})),
        Some(KEY),
    )
    .await;
    assert_eq!((status, said), (200, json!({"blocked": "person ana"})));
    let blocked = CachedBlocklist::new(server.store.clone());
    let block = blocked
        .block_on(Some("acme"), Some("ana"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(block.reason.as_deref(), Some("runaway"));
    assert!(
        blocked
            .block_on(Some("acme"), Some("bo"))
            .await
            .unwrap()
            .is_none(),
        "ana's alone"
    );

    let ledger = Ledger::Conversation(sid("c-1"));
    server
        .store
        .reserve(
            "r1",
            &[agent_worker::engine::spending::Charge {
                ledger: ledger.clone(),
                limit: 1_000_000,
            }],
            2_500,
        )
        .await
        .unwrap();
    server.store.settle("r1", &[ledger], -1_000).await.unwrap();
    let (status, said) = send(http.get(&usage), Some(KEY)).await;
    assert_eq!(status, 200, "{said}");
    assert_eq!(
        said["conversation"],
        json!({"conversationId": "c-1", "spentUsd": 0.0015})
    );
    assert_eq!(said["account"]["spentUsd"], json!(0.0));
    assert_eq!(said["person"]["userId"], "ana");
    let (status, said) = send(http.get(format!("{usage}&day=tomorrow")), Some(KEY)).await;
    assert_eq!(status, 400, "{said}");

    let lift = format!("{blocks}?accountId=acme&userId=ana");
    let (status, said) = send(http.delete(&lift), Some(KEY)).await;
    assert_eq!((status, said), (200, json!({"lifted": "person ana"})));
    let (status, _) = send(http.delete(&lift), Some(KEY)).await;
    assert_eq!(status, 404, "nothing left to lift");
    let target = BlockTarget::Person {
        account: Some("acme".into()),
        user: "ana".into(),
    };
    assert!(
        !server
            .store
            .blocks()
            .await
            .unwrap()
            .iter()
            .any(|b| b.target == target)
    );
}

//! Approvals through the host and the table: a decision carried on the SQS payload reaches the
//! engine, and arguments tampered in the table after the card was shown are refused.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agent_worker::protocol::AgentEvent;
use agent_worker::session::{DynamoConfig, DynamoStore, MemoryStore};
use agent_worker_testkit::{BedrockStandIn, Reply, moto};
use serde_json::{Value, json};
use support::approvals::*;

/// Keeps every event the host sends to its sinks, as a client receives them.
#[derive(Debug, Default, Clone)]
struct Captured(Arc<std::sync::Mutex<Vec<AgentEvent>>>);

#[derive(Debug)]
struct CapturedTurn(Arc<std::sync::Mutex<Vec<AgentEvent>>>);

impl agent_worker::sinks::Sink for Captured {
    fn open(&self, _turn: &agent_worker::sinks::TurnRef) -> Box<dyn agent_worker::sinks::TurnSink> {
        Box::new(CapturedTurn(self.0.clone()))
    }
}

#[async_trait::async_trait]
impl agent_worker::sinks::TurnSink for CapturedTurn {
    async fn event(&mut self, event: &AgentEvent) -> Result<(), agent_worker::sinks::SinkError> {
        self.0.lock().unwrap().push(event.clone());
        Ok(())
    }
}
use support::*;

#[tokio::test]
async fn a_decision_on_the_sqs_payload_reaches_the_engine() {
    use agent_worker::hosts::AgentTurnPayload;
    use agent_worker::hosts::lambda::TurnHandler;
    use agent_worker::sinks::Sinks;

    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let tools = Tools::new();
    let client = Captured::default();
    let handler = TurnHandler::new(
        engine_with(&bedrock, &store, &tools, config()),
        Sinks::new().with(client.clone()),
    );

    bedrock.push(Reply::tool_call(
        "call-pay",
        "pay",
        r#"{"amount": 12, "to": "acme"}"#,
    ));
    let ask = AgentTurnPayload::decode(
        r#"{"turnId":"t1","conversationId":"s1","userId":"ada","accountId":"a","content":"Pay acme"}"#,
    )
    .unwrap();
    assert!(!handler.run_turn(&ask, None).await.is_redrive());
    let event = approval_event(&client.0.lock().unwrap());

    let decision = json!({
        "turnId": "t2", "conversationId": "s1", "userId": "ada", "accountId": "a", "content": "",
        "approval": {"approvalId": event["approvalId"], "decision": "approve", "token": event["token"]}
    });
    bedrock.push(Reply::text("Paid."));
    let decide = AgentTurnPayload::decode(&decision.to_string()).unwrap();
    assert!(!handler.run_turn(&decide, None).await.is_redrive());
    assert_eq!(tools.paid.load(Ordering::SeqCst), 1);
    assert_eq!(
        *tools.last_args.lock().unwrap(),
        Some(json!({"amount": 12, "to": "acme"}))
    );
}

/// Rewrites approval `id`'s stored body in the table with `change`: what someone with write
/// access to the table could do after the card was shown.
async fn tamper(table: &str, session: &str, id: &str, change: impl Fn(&mut Value)) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let client = moto().dynamodb();
    let key = |name: &str, value: String| (name.to_owned(), AttributeValue::S(value));
    let keys = std::collections::HashMap::from([
        key("pk", format!("session#{session}")),
        key("sk", format!("approval#{id}")),
    ]);
    let item = client
        .get_item()
        .table_name(table)
        .set_key(Some(keys.clone()))
        .send()
        .await
        .unwrap()
        .item
        .expect("the stored approval");
    let mut body: Value = serde_json::from_str(item["approval"].as_s().unwrap()).unwrap();
    change(&mut body);
    client
        .update_item()
        .table_name(table)
        .set_key(Some(keys))
        .update_expression("SET approval = :body")
        .expression_attribute_values(":body", AttributeValue::S(body.to_string()))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn arguments_tampered_in_the_table_after_the_card_was_shown_run_nothing() {
    use agent_worker::hosts::AgentTurnPayload;
    use agent_worker::hosts::lambda::TurnHandler;
    use agent_worker::sinks::Sinks;

    let table = format!("approvals-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    // Two ways in: the arguments alone (their hash no longer matches), and the arguments with
    // a hash recomputed to match (the token's MAC, over the original hash, no longer opens).
    for (case, rehash) in [("arguments", false), ("arguments and their hash", true)] {
        let bedrock = BedrockStandIn::start().await.unwrap();
        let tools = Tools::new();
        let client = Captured::default();
        let engine = engine_with(&bedrock, &store, &tools, config());
        let handler = TurnHandler::new(engine, Sinks::new().with(client.clone()));
        let session = format!("s-{rehash}");
        bedrock.push(Reply::tool_call(
            "call-pay",
            "pay",
            r#"{"amount": 12, "to": "acme"}"#,
        ));
        let ask = AgentTurnPayload::decode(
            &json!({"turnId": "t1", "conversationId": session, "userId": "ada", "accountId": "a", "content": "Pay acme"})
                .to_string(),
        )
        .unwrap();
        assert!(!handler.run_turn(&ask, None).await.is_redrive());
        let event = approval_event(&client.0.lock().unwrap());
        let id = event["approvalId"].as_str().unwrap();
        tamper(&table, &session, id, |body| {
            body["args"] = json!({"amount": 99999, "to": "mallory"});
            if rehash {
                let canonical = r#"{"amount":99999,"to":"mallory"}"#;
                body["argsHash"] = json!(hex_sha256(canonical));
            }
        })
        .await;
        bedrock.push(Reply::text("Understood."));
        let decide = AgentTurnPayload::decode(
            &json!({"turnId": "t2", "conversationId": session, "userId": "ada", "accountId": "a", "content": "",
                "approval": {"approvalId": id, "decision": "approve", "token": event["token"]}})
            .to_string(),
        )
        .unwrap();
        assert!(!handler.run_turn(&decide, None).await.is_redrive(), "{case}");
        assert_eq!(tools.paid.load(Ordering::SeqCst), 0, "{case}: nothing ran");
        let told = told(&bedrock, 1);
        assert!(
            told.contains("the token does not open this call"),
            "{case}: {told}"
        );
    }
}

fn hex_sha256(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

//! Approvals bound to the exact call, on the engine with the Bedrock stand-in (and DynamoDB on
//! moto for the race).

use crate::support;
use agent_worker::session::HistoryStore as _;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_worker::engine::{BedrockModel, Engine, EngineConfig, ToolDecision, ToolPolicy, ToolPolicyContext};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::history::check;
use agent_worker::session::{ApprovalStatus, ApprovalStore, DynamoConfig, DynamoStore, MemoryStore};
use agent_worker_testkit::{BedrockStandIn, Reply, StreamScript, moto, sid};
use futures_util::StreamExt;
use serde_json::{Value, json};
use support::approvals::*;
use support::*;

#[tokio::test]
async fn forged_borrowed_missing_and_malformed_decisions_run_nothing() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let tools = Tools::new();
    let engine = engine_with(&bedrock, &store, &tools, config());
    let first = ask_to_pay(&bedrock, &engine).await;
    // A second approval, for another amount, in the same conversation.
    let second = ask_for_payment(&bedrock, &engine, "t2", r#"{"amount": 900, "to": "mallory"}"#).await;
    let first_token = first["token"].as_str().unwrap();
    let cases: Vec<(&str, Scope, &str)> = vec![
        (
            "a valid token taken from another approval",
            decide("t3", &second, "approve", Some(first_token)),
            "the token does not open this call",
        ),
        (
            "a token of the right length whose MAC is wrong",
            decide("t4", &first, "approve", Some(&same_length_forgery(first_token))),
            "the token does not open this call",
        ),
        (
            "approve without a token",
            decide("t5", &first, "approve", None),
            "the token does not open this call",
        ),
        (
            "an unknown approval id",
            scope("t6").with(
                "approval",
                json!({"approvalId": "ap-unknown", "decision": "approve", "token": first_token}),
            ),
            "there is no such approval",
        ),
        (
            "an unknown decision word",
            decide("t7", &first, "yes please", Some(first_token)),
            "is not a decision",
        ),
    ];
    // Requests 0 and 1 asked for the two approvals; each case is the next.
    for (asked, (name, scope, expected)) in (2..).zip(cases) {
        decision_turn(&bedrock, &engine, scope).await;
        assert_eq!(tools.paid.load(Ordering::SeqCst), 0, "{name}");
        let told = told(&bedrock, asked);
        assert!(told.contains(expected), "{name}: {told}");
    }
    // A decision that carries arguments of its own runs exactly the stored call.
    let smuggled = scope("t8").with(
        "approval",
        json!({"approvalId": first["approvalId"], "decision": "approve", "token": first_token,
            "args": {"amount": 99999, "to": "mallory"}}),
    );
    decision_turn(&bedrock, &engine, smuggled).await;
    assert_eq!(tools.paid.load(Ordering::SeqCst), 1);
    assert_eq!(
        *tools.last_args.lock().unwrap(),
        Some(json!({"amount": 12, "to": "acme"}))
    );
    check(&store.load_history(&sid("s1")).await.unwrap()).unwrap();
}

/// Denies payments once switched on.
#[derive(Debug, Default, Clone)]
struct PaymentsSwitch(Arc<AtomicBool>);

impl PaymentsSwitch {
    /// A switch that denies payments from the start.
    fn off() -> Self {
        let switch = Self::default();
        switch.0.store(true, Ordering::SeqCst);
        switch
    }
}

impl ToolPolicy for PaymentsSwitch {
    fn decide(&self, call: &ToolPolicyContext<'_>) -> ToolDecision {
        if call.tool.name == "pay" && self.0.load(Ordering::SeqCst) {
            ToolDecision::Deny("payments are switched off".into())
        } else {
            ToolDecision::Allow
        }
    }
}

/// An engine with approvals and `policy`.
fn engine_with_policy(
    bedrock: &BedrockStandIn,
    store: &MemoryStore,
    tools: &Tools,
    policy: PaymentsSwitch,
) -> Engine {
    Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store.clone())
        .approvals(store.clone(), signer())
        .tool_policy(policy)
        .tools(tools.list())
        .config(config())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_deny_wins_over_an_approval_given_before_it() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let tools = Tools::new();
    let switch = PaymentsSwitch::default();
    let engine = engine_with_policy(&bedrock, &store, &tools, switch.clone());
    let event = ask_to_pay(&bedrock, &engine).await;
    // The policy changes while the card is shown; the person then approves.
    switch.0.store(true, Ordering::SeqCst);
    decision_turn(
        &bedrock,
        &engine,
        decide("t2", &event, "approve", event["token"].as_str()),
    )
    .await;
    assert_eq!(tools.paid.load(Ordering::SeqCst), 0, "the policy is asked again");
    let told = told(&bedrock, 1);
    assert!(told.contains("the tool policy now denies this call"), "{told}");
    let (_, status) = store
        .get_approval(&sid("s1"), event["approvalId"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, ApprovalStatus::Declined);
}

#[tokio::test]
async fn a_barge_in_withdraws_the_waiting_approval() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let tools = Tools::new();
    let engine = engine_with(&bedrock, &store, &tools, config());
    let event = ask_to_pay(&bedrock, &engine).await;
    // The person writes again instead of deciding: the new turn replaces the one that asked.
    bedrock.push(Reply::text("All right, I will not pay."));
    let _: Vec<_> = engine
        .invoke(
            scope("t2").with("supersedes", json!(["t1"])),
            Prompt::text("Never mind"),
        )
        .collect()
        .await;
    let (_, status) = store
        .get_approval(&sid("s1"), event["approvalId"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, ApprovalStatus::Expired);
    // The card, approved afterwards with its own valid token, runs nothing.
    decision_turn(
        &bedrock,
        &engine,
        decide("t3", &event, "approve", event["token"].as_str()),
    )
    .await;
    assert_eq!(tools.paid.load(Ordering::SeqCst), 0);
    let told = told(&bedrock, 2);
    assert!(told.contains("already expired"), "{told}");
}

#[tokio::test]
async fn a_transaction_waits_for_approval_and_the_model_never_sees_the_token() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let tools = Tools::new();
    let engine = engine_with(&bedrock, &store, &tools, config());
    let event = ask_to_pay(&bedrock, &engine).await;

    assert_eq!(tools.paid.load(Ordering::SeqCst), 0, "nothing ran");
    assert_eq!(
        bedrock.requests().len(),
        1,
        "the turn ended without asking the model again"
    );
    assert_eq!(event["tool"], "pay");
    assert_eq!(event["preview"]["title"], "Pay an invoice");
    assert_eq!(event["preview"]["consequence"], "Money leaves your account.");
    assert_eq!(
        event["preview"]["fields"][0],
        json!({"name": "amount", "label": "Amount (EUR)", "value": 12})
    );
    let token = event["token"].as_str().unwrap();
    let history = store.load_history(&sid("s1")).await.unwrap();
    check(&history).unwrap();
    assert_eq!(
        history.last().unwrap().text(),
        "(A call is waiting for the person's approval; it has not run.)"
    );
    let stored = serde_json::to_string(&history).unwrap();
    assert!(!stored.contains(token) && stored.contains("waiting_for_approval"));
}

#[tokio::test]
async fn approving_runs_exactly_the_stored_call_once_and_tells_the_model() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let tools = Tools::new();
    let engine = engine_with(&bedrock, &store, &tools, config());
    let event = ask_to_pay(&bedrock, &engine).await;
    let token = event["token"].as_str().unwrap();

    bedrock.push(Reply::text("Paid."));
    let events: Vec<_> = engine
        .invoke(decide("t2", &event, "approve", Some(token)), Prompt::text(""))
        .collect()
        .await;
    assert_eq!(terminal(&events), &AgentEvent::completed());
    assert_eq!(tools.paid.load(Ordering::SeqCst), 1);
    assert_eq!(
        *tools.last_args.lock().unwrap(),
        Some(json!({"amount": 12, "to": "acme"}))
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolEnded { is_error: false, .. }))
    );
    let told = bedrock.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(
        told.contains(r#"outcome=\"approved\""#) && told.contains("R-1") && !told.contains(token),
        "{told}"
    );

    // The same token again: nothing runs, and the model is told why.
    bedrock.push(Reply::text("Already done."));
    let _: Vec<_> = engine
        .invoke(decide("t3", &event, "approve", Some(token)), Prompt::text(""))
        .collect()
        .await;
    assert_eq!(tools.paid.load(Ordering::SeqCst), 1);
    let told = bedrock.requests()[2].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(told.contains("already redeemed"), "{told}");
    check(&store.load_history(&sid("s1")).await.unwrap()).unwrap();
}

#[tokio::test]
async fn a_decline_a_tampered_token_a_foreign_person_and_an_expired_approval_run_nothing() {
    type Decide = Box<dyn Fn(&Value) -> Scope>;
    let cases: [(&str, Decide, &str); 3] = [
        (
            "decline",
            Box::new(|e: &Value| decide("t2", e, "decline", None)),
            "declined",
        ),
        (
            "tampered",
            Box::new(|e: &Value| {
                decide(
                    "t2",
                    e,
                    "approve",
                    Some(&same_length_forgery(e["token"].as_str().unwrap())),
                )
            }),
            "the token does not open this call",
        ),
        (
            "foreign",
            Box::new(|e: &Value| decide("t2", e, "approve", e["token"].as_str()).with("userId", "mallory")),
            "belongs to another person",
        ),
    ];
    for (name, scope_for, expected) in cases {
        let bedrock = BedrockStandIn::start().await.unwrap();
        let store = MemoryStore::new();
        let tools = Tools::new();
        let engine = engine_with(&bedrock, &store, &tools, config());
        let event = ask_to_pay(&bedrock, &engine).await;
        bedrock.push(Reply::text("Understood."));
        let _: Vec<_> = engine.invoke(scope_for(&event), Prompt::text("")).collect().await;
        assert_eq!(tools.paid.load(Ordering::SeqCst), 0, "{name}");
        let told = bedrock.requests()[1].body["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .to_string();
        assert!(told.contains(expected), "{name}: {told}");
    }

    // Expired: an approval that lives 1 ms.
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let tools = Tools::new();
    let short = EngineConfig {
        approval_ttl: Duration::from_millis(1),
        ..config()
    };
    let engine = engine_with(&bedrock, &store, &tools, short);
    let event = ask_to_pay(&bedrock, &engine).await;
    // Past the approval's expiry by the wall clock it is checked against.
    tokio::time::sleep(Duration::from_millis(5)).await;
    bedrock.push(Reply::text("Too late."));
    let _: Vec<_> = engine
        .invoke(
            decide("t2", &event, "approve", event["token"].as_str()),
            Prompt::text(""),
        )
        .collect()
        .await;
    assert_eq!(tools.paid.load(Ordering::SeqCst), 0);
    let told = bedrock.requests()[1].body["messages"].to_string();
    assert!(told.contains("expired"), "{told}");
}

#[tokio::test]
async fn a_deny_wins_and_without_a_store_such_a_call_is_refused() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let tools = Tools::new();
    let denied = engine_with_policy(&bedrock, &store, &tools, PaymentsSwitch::off());
    bedrock.push(Reply::tool_call("c1", "pay", r#"{"amount": 1, "to": "x"}"#));
    bedrock.push(Reply::text("Cannot pay."));
    let events = run(&denied, "s1", "Pay").await;
    assert!(events.iter().any(|e| matches!(e, AgentEvent::ToolEnded { is_error: true, content, .. } if content["error"] == "denied: payments are switched off")));
    assert!(!events.iter().any(|e| e.type_name() == "approval_required"));

    let no_store = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(MemoryStore::new())
        .tools(tools.list())
        .config(config())
        .build()
        .unwrap();
    bedrock.push(Reply::tool_call("c2", "pay", r#"{"amount": 1, "to": "x"}"#));
    bedrock.push(Reply::text("Cannot pay."));
    let events = run(&no_store, "s2", "Pay").await;
    assert!(events.iter().any(|e| matches!(e, AgentEvent::ToolEnded { is_error: true, content, .. } if content["error"].as_str().unwrap().contains("no approval store") && content["code"] == "APPROVAL_REQUIRED")));
    assert_eq!(tools.paid.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn no_other_call_of_that_response_runs() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let tools = Tools::new();
    let engine = engine_with(&bedrock, &store, &tools, config());
    // A change asked before the payment, and a read after it.
    bedrock.push(
        StreamScript::new()
            .tool_use("c-record", "record", "{}", 1)
            .tool_use("c-pay", "pay", r#"{"amount": 5, "to": "b"}"#, 1)
            .tool_use("c-look", "lookup", "{}", 1)
            .stop("tool_use")
            .into_reply(),
    );
    let events: Vec<_> = engine
        .invoke(scope("t1"), Prompt::text("Pay and look"))
        .collect()
        .await;
    approval_event(&events);
    let looked = events.iter().find_map(|e| match e {
        AgentEvent::ToolEnded {
            id,
            is_error,
            content,
        } if id == "c-look" => Some((*is_error, content.clone())),
        _ => None,
    });
    let (is_error, content) = looked.unwrap();
    assert!(
        is_error
            && content["error"]
                .as_str()
                .unwrap()
                .contains("waiting for the person's approval")
    );
    // The change that came first did not run either (it used to start at once).
    assert_eq!(tools.recorded.load(Ordering::SeqCst), 0);
    let recorded = events.iter().find_map(|e| match e {
        AgentEvent::ToolEnded { id, content, .. } if id == "c-record" => Some(content.clone()),
        _ => None,
    });
    assert!(
        recorded.is_some_and(|c| c["error"]
            .as_str()
            .unwrap_or_default()
            .contains("waiting for the person's approval")),
        "{events:#?}"
    );
    check(&store.load_history(&sid("s1")).await.unwrap()).unwrap();
}

#[tokio::test]
async fn two_turns_redeeming_one_token_at_once_run_the_call_once() {
    let table = format!("approvals-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).unwrap());
    store.create_table().await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let tools = Tools::new();
    let engine = engine_with(&bedrock, &store, &tools, config());
    bedrock.push(Reply::tool_call(
        "call-pay",
        "pay",
        r#"{"amount": 12, "to": "acme"}"#,
    ));
    let events: Vec<_> = engine.invoke(scope("t1"), Prompt::text("Pay")).collect().await;
    let event = approval_event(&events);
    let token = event["token"].as_str().unwrap().to_owned();

    bedrock.push(Reply::text("One."));
    bedrock.push(Reply::text("Two."));
    let first = engine.invoke(decide("t2", &event, "approve", Some(&token)), Prompt::text(""));
    let second = engine.invoke(decide("t3", &event, "approve", Some(&token)), Prompt::text(""));
    let (a, b) = tokio::join!(first.collect::<Vec<_>>(), second.collect::<Vec<_>>());
    assert_eq!(tools.paid.load(Ordering::SeqCst), 1, "the call ran once");
    // One turn of a conversation runs at a time: the loser either found the other running
    // (refused before anything, `turn_in_progress`, to be delivered again) or ran after it and
    // lost the redemption (the read or the conditional write); either way nothing ran for it.
    let told: Vec<String> = bedrock.requests()[1..]
        .iter()
        .map(|r| r.body["messages"].to_string())
        .collect();
    let refused = told
        .iter()
        .filter(|t| t.contains("Nothing ran: this approval was already"))
        .count();
    let waited = [&a, &b]
        .iter()
        .filter(|events| {
            matches!(terminal(events), AgentEvent::Failed { code: Some(code), .. } if code == "turn_in_progress")
        })
        .count();
    let completed = [&a, &b]
        .iter()
        .filter(|events| terminal(events) == &AgentEvent::completed())
        .count();
    assert_eq!(
        (completed, waited + refused),
        (2 - waited, 1),
        "{told:#?} {a:#?} {b:#?}"
    );
}

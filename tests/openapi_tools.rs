//! Tools from the desk fixture's OpenAPI document, driven by the real engine through the Bedrock
//! stand-in: a read, a refused permission, a transaction held for approval then run once, a job
//! waited for, and what never reaches the API.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use agent_worker::engine::tools::openapi::{
    ActAsContext, ActAsError, JobKey, MemoryEventWaiter, OpenApiOptions, load_openapi_tools,
};
use agent_worker::engine::tools::{Tool, ToolContext, Toolset};
use agent_worker::engine::{ApprovalSigner, BedrockModel, Engine};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{BedrockStandIn, DeskApi, Reply, sid, tid};
use futures_util::StreamExt;
use serde_json::{Value, json};

/// The headers for whoever the turn runs for.
fn act_as(ctx: &ActAsContext) -> Result<Vec<(String, String)>, ActAsError> {
    let user = ctx.user_id.as_deref().ok_or("the turn names no person")?;
    Ok(DeskApi::act_as(user, ctx.account_id.as_deref().unwrap_or("none")))
}

fn tools(desk: &DeskApi, waiter: &Arc<MemoryEventWaiter>) -> Vec<Arc<dyn Tool>> {
    let options = OpenApiOptions::new(desk.url(), act_as)
        .events(DeskApi::events())
        .waiter(waiter.clone());
    load_openapi_tools(&DeskApi::document(), options).unwrap()
}

fn engine(bedrock: &BedrockStandIn, tools: Vec<Arc<dyn Tool>>, approvals: bool) -> Engine {
    let store = MemoryStore::new();
    let mut builder = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(store.clone())
        .tools(tools)
        .config(support::config());
    if approvals {
        builder = builder.approvals(
            store,
            ApprovalSigner::new(*b"0123456789abcdef0123456789abcdef").unwrap(),
        );
    }
    builder.build().unwrap()
}

/// The stand-in, the desk, and an engine with the desk's tools (and approvals, when asked).
async fn world(approvals: bool, waiter: Arc<MemoryEventWaiter>) -> (BedrockStandIn, DeskApi, Engine) {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let desk = DeskApi::start().await.unwrap();
    let engine = engine(&bedrock, tools(&desk, &waiter), approvals);
    (bedrock, desk, engine)
}

fn scope(turn: &str, user: &str) -> Scope {
    Scope::new("desk-1".parse().unwrap())
        .with_turn_id(tid(turn))
        .with("userId", user)
        .with("accountId", "acme")
}

async fn run(engine: &Engine, scope: Scope, text: &str) -> Vec<AgentEvent> {
    engine.invoke(scope, Prompt::text(text)).collect().await
}

fn ended(events: &[AgentEvent]) -> Vec<(bool, Value)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolEnded {
                is_error, content, ..
            } => Some((*is_error, content.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn the_document_loads_into_tools_with_their_declarations() {
    let desk = DeskApi::start().await.unwrap();
    let tools = tools(&desk, &Arc::new(MemoryEventWaiter::new()));
    let names: Vec<&str> = tools.iter().map(|t| t.spec().name.as_str()).collect();
    assert_eq!(
        names,
        [
            "listTickets",
            "getTicket",
            "deleteTicket",
            "refundTicket",
            "addNote",
            "getAuditLog",
            "exportReport"
        ]
    );
    let refund = tools
        .iter()
        .find(|t| t.spec().name == "refundTicket")
        .unwrap()
        .spec();
    assert_eq!(
        refund.consequence.as_deref(),
        Some("The customer is paid back; this cannot be undone.")
    );
    let schema = &refund.input_schema;
    assert_eq!(schema["required"], json!(["ticketId", "amount"]));
    assert!(
        schema["properties"].get("x-desk-account").is_none(),
        "header parameters are never input"
    );
    assert!(
        schema["properties"].get("id").is_none(),
        "readOnly fields are left out"
    );
    assert_eq!(schema["properties"]["reason"]["type"], json!(["string", "null"]));
    assert!(
        tools
            .iter()
            .find(|t| t.spec().name == "deleteTicket")
            .unwrap()
            .spec()
            .destructive
    );
}

#[tokio::test]
async fn a_read_goes_out_as_the_person_and_its_answer_reaches_the_model() {
    let (bedrock, desk, engine) = world(true, Arc::new(MemoryEventWaiter::new())).await;
    bedrock.push(Reply::tool_call("c1", "listTickets", r#"{"status":"open"}"#));
    bedrock.push(Reply::text("You have two open tickets."));
    let events = run(&engine, scope("t1", "bo"), "What is open?").await;
    assert_eq!(support::text_of(&events), "You have two open tickets.");
    let results = ended(&events);
    assert_eq!(results.len(), 1);
    assert!(!results[0].0);
    assert_eq!(results[0].1["tickets"].as_array().unwrap().len(), 2);
    let calls = desk.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].uri, "/tickets?status=open");
    assert_eq!(
        (calls[0].user.as_deref(), calls[0].account.as_deref()),
        (Some("bo"), Some("acme"))
    );
    let told = bedrock.requests()[1].body["messages"].to_string();
    assert!(
        told.contains("Charged twice"),
        "the model read the answer: {told}"
    );
}

#[tokio::test]
async fn a_refused_permission_is_the_tools_error_with_status_and_body() {
    let (bedrock, _desk, engine) = world(true, Arc::new(MemoryEventWaiter::new())).await;
    bedrock.push(Reply::tool_call("c1", "getAuditLog", "{}"));
    bedrock.push(Reply::text("You may not read the audit log."));
    let events = run(&engine, scope("t1", "ana"), "Show me the audit log.").await;
    let results = ended(&events);
    assert!(results[0].0, "{results:?}");
    assert_eq!(results[0].1["details"]["status"], 403);
    assert_eq!(results[0].1["details"]["body"]["missing"], "audit:read");
    let told = bedrock.requests()[1].body["messages"].to_string();
    assert!(told.contains("403") && told.contains("audit:read"), "{told}");
}

#[tokio::test]
async fn a_transaction_waits_for_the_persons_approval_and_runs_once() {
    let (bedrock, desk, engine) = world(true, Arc::new(MemoryEventWaiter::new())).await;
    bedrock.push(Reply::tool_call(
        "c1",
        "refundTicket",
        r#"{"ticketId":"T-1","amount":1200,"reason":"charged twice"}"#,
    ));
    let events = run(&engine, scope("t1", "ana"), "Refund T-1's double charge.").await;
    let asked = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::Other(raw) if raw["type"] == "approval_required" => Some(raw.clone()),
            _ => None,
        })
        .expect("an approval is asked for");
    assert_eq!(
        asked["preview"]["consequence"], "The customer is paid back; this cannot be undone.",
        "{asked}"
    );
    assert!(
        desk.refunds().is_empty() && desk.calls().is_empty(),
        "nothing was sent before the approval"
    );

    let approve = |turn: &str| {
        scope(turn, "ana").with(
            "approval",
            json!({ "approvalId": asked["approvalId"], "decision": "approve", "token": asked["token"] }),
        )
    };
    bedrock.push(Reply::text("Refunded."));
    run(&engine, approve("t2"), "").await;
    let refunds = desk.refunds();
    assert_eq!(refunds.len(), 1);
    assert_eq!(
        (refunds[0]["ticketId"].as_str(), refunds[0]["amount"].as_i64()),
        (Some("T-1"), Some(1200))
    );
    assert_eq!(desk.calls()[0].uri, "/tickets/T-1/refunds");

    bedrock.push(Reply::text("Already done."));
    run(&engine, approve("t3"), "").await;
    assert_eq!(desk.refunds().len(), 1, "an approval opens its call once");
}

#[tokio::test]
async fn without_an_approval_path_a_transaction_answers_approval_required_and_sends_nothing() {
    let (bedrock, desk, engine) = world(false, Arc::new(MemoryEventWaiter::new())).await;
    bedrock.push(Reply::tool_call(
        "c1",
        "refundTicket",
        r#"{"ticketId":"T-1","amount":5}"#,
    ));
    bedrock.push(Reply::text("I cannot do that here."));
    let events = run(&engine, scope("t1", "ana"), "Refund T-1.").await;
    let results = ended(&events);
    assert!(results[0].0);
    assert_eq!(results[0].1["code"], "APPROVAL_REQUIRED");
    assert!(desk.calls().is_empty());
}

/// Runs a turn that exports a report and, once the desk has queued it, publishes `event` for it
/// with `payload` (the report's id added); the turn's tool results.
async fn export_and_settle(
    engine: &Engine,
    desk: &DeskApi,
    waiter: &MemoryEventWaiter,
    turn: &str,
    event: &str,
    mut payload: Value,
) -> Vec<(bool, Value)> {
    let running = run(engine, scope(turn, "ana"), "Export the report.");
    let settle = async {
        let id = desk.next_queued_report().await.unwrap();
        payload["reportId"] = id.clone().into();
        // The call that started the job named its conversation to the desk.
        let started = desk
            .calls()
            .into_iter()
            .rev()
            .find(|c| c.uri.starts_with("/reports"));
        let conversation = started
            .and_then(|c| c.conversation)
            .expect("the call named its conversation");
        assert_eq!(conversation, "desk-1");
        let job = JobKey {
            conversation: sid(&conversation),
            id,
        };
        waiter.until_waited_for(&job).await;
        waiter.publish(&job, event, payload).unwrap();
    };
    let (events, ()) = tokio::join!(running, settle);
    ended(&events)
}

#[tokio::test]
async fn a_job_is_waited_for_until_its_declared_completion() {
    let waiter = Arc::new(MemoryEventWaiter::new());
    let (bedrock, desk, engine) = world(true, waiter.clone()).await;
    bedrock.push(Reply::tool_call("c1", "exportReport", r#"{"month":"2026-11"}"#));
    bedrock.push(Reply::text("Your report is ready."));
    let results = export_and_settle(
        &engine,
        &desk,
        &waiter,
        "t1",
        "report:ready",
        json!({ "url": "https://desk.example/r/1" }),
    )
    .await;
    assert_eq!(results.len(), 1);
    assert!(!results[0].0, "{results:?}");
    assert_eq!(results[0].1["status"], "complete");
    assert_eq!(results[0].1["result"]["url"], "https://desk.example/r/1");

    // A declared failure fails the call with its reason.
    bedrock.push(Reply::tool_call("c2", "exportReport", r#"{"month":"2026-10"}"#));
    bedrock.push(Reply::text("The export failed."));
    let results = export_and_settle(
        &engine,
        &desk,
        &waiter,
        "t2",
        "report:failed",
        json!({ "reason": "the archive is offline" }),
    )
    .await;
    assert!(results[0].0);
    assert!(
        results[0].1["error"]
            .as_str()
            .unwrap()
            .contains("the archive is offline"),
        "{results:?}"
    );
}

fn ctx(user: Option<&str>) -> ToolContext {
    ToolContext {
        session: sid("s"),
        turn_id: tid("t"),
        call_id: "c".into(),
        user_id: user.map(str::to_owned),
        account_id: None,
        user_token: None,
    }
}

#[tokio::test]
async fn calls_that_break_the_schema_or_lack_a_required_header_are_never_sent() {
    let desk = DeskApi::start().await.unwrap();
    let waiter = Arc::new(MemoryEventWaiter::new());
    let toolset = Toolset::new(tools(&desk, &waiter)).unwrap();
    let second = Duration::from_secs(5);
    let undeclared = toolset
        .run(
            "listTickets",
            &json!({ "status": "open", "limit": 5 }),
            ctx(Some("bo")),
            second,
        )
        .await;
    assert!(undeclared.is_error, "{undeclared:?}");
    let bad_month = toolset
        .run(
            "exportReport",
            &json!({ "month": "November" }),
            ctx(Some("ana")),
            second,
        )
        .await;
    assert!(bad_month.is_error, "{bad_month:?}");
    let nobody = toolset
        .run("getTicket", &json!({ "ticketId": "T-1" }), ctx(None), second)
        .await;
    assert!(
        nobody.content.to_string().contains("cannot act as the person"),
        "{nobody:?}"
    );
    assert!(
        desk.calls().is_empty(),
        "none of these reached the API: {:?}",
        desk.calls()
    );

    // act_as that leaves out the refund's required header: the call fails before it is sent.
    let options = OpenApiOptions::new(desk.url(), |ctx: &ActAsContext| {
        Ok(vec![(
            "x-desk-user".to_owned(),
            ctx.user_id.clone().unwrap_or_default(),
        )])
    });
    let partial =
        Toolset::new(load_openapi_tools(&DeskApi::document(), options.events(DeskApi::events())).unwrap())
            .unwrap();
    let refused = partial
        .run(
            "refundTicket",
            &json!({ "ticketId": "T-1", "amount": 5 }),
            ctx(Some("ana")),
            second,
        )
        .await;
    assert!(
        refused.content.to_string().contains("x-desk-account"),
        "{refused:?}"
    );
    assert!(desk.calls().is_empty());

    // A path parameter is encoded, so it cannot leave its segment.
    let read = toolset
        .run(
            "getTicket",
            &json!({ "ticketId": "../audit" }),
            ctx(Some("ana")),
            second,
        )
        .await;
    assert!(read.is_error);
    assert_eq!(read.content["details"]["status"], 404);
    assert_eq!(desk.calls()[0].uri, "/tickets/..%2Faudit");
}

/// Ana exports November's report through `tools`.
async fn export(tools: &Toolset) -> agent_worker::engine::tools::ToolOutcome {
    let month = json!({ "month": "2026-11" });
    tools
        .run("exportReport", &month, ctx(Some("ana")), Duration::from_secs(5))
        .await
}

#[tokio::test]
async fn a_job_without_a_waiter_or_past_its_timeout_answers_dispatched() {
    let desk = DeskApi::start().await.unwrap();
    let options = OpenApiOptions::new(desk.url(), act_as).events(DeskApi::events());
    let no_waiter = Toolset::new(load_openapi_tools(&DeskApi::document(), options).unwrap()).unwrap();
    let dispatched = export(&no_waiter).await;
    assert!(!dispatched.is_error, "{dispatched:?}");
    assert_eq!(dispatched.content["status"], "dispatched");
    assert_eq!(dispatched.content["id"], "RP-1");
    assert_eq!(dispatched.content["response"]["status"], "queued");

    let mut document = DeskApi::document();
    document["paths"]["/reports"]["post"]["x-async-binding"]["timeout"] = json!("1ms");
    let options = OpenApiOptions::new(desk.url(), act_as)
        .events(DeskApi::events())
        .waiter(Arc::new(MemoryEventWaiter::new()));
    let impatient = Toolset::new(load_openapi_tools(&document, options).unwrap()).unwrap();
    let late = export(&impatient).await;
    assert!(!late.is_error, "{late:?}");
    assert_eq!(late.content["status"], "dispatched");
    assert!(
        late.content["reason"]
            .as_str()
            .unwrap()
            .contains("had not settled"),
        "{late:?}"
    );
}

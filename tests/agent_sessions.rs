//! Standard Agents sessions run end to end: the real engine on the Bedrock stand-in, sessions in
//! memory or in DynamoDB on moto. The seed's examples, the stop-rule order, the session turn cap,
//! handlers, and a parked approval gate resumed by another worker.

use crate::support;

use std::sync::Arc;

use agent_worker::agents::{
    AgentRuntime, Catalog, MemoryThreadStore, PromptSide, SessionStatus, SessionToolBinding, SideConfig,
    define_agent,
};
use agent_worker::engine::BedrockModel;
use agent_worker::engine::model::Model;
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{BedrockStandIn, Fallback, Reply, StreamScript, sid, tid};
use futures_util::StreamExt;
use serde_json::json;
use support::agent_sessions::*;

#[tokio::test]
async fn the_assistant_answers_and_parks_on_the_person() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let runtime = runtime(&bedrock, examples());
    let assistant = runtime.agent("assistant").unwrap();
    bedrock.push(Reply::text("Hello!"));
    let events = say(&assistant, "s1", "t1", "Hi").await;
    assert_eq!(support::text_of(&events), "Hello!");
    let data = completed(&events);
    assert_eq!(data["sessionStatus"], "awaiting_human");
    assert_eq!(data["awaiting"], "sideB");
    let seen = statuses(&events);
    assert_eq!(seen.first().unwrap()["side"], "sideA");
    assert_eq!(seen.last().unwrap()["status"], "awaiting_human");

    bedrock.push(Reply::text("Fine, thanks."));
    let events = say(&assistant, "s1", "t2", "How are you?").await;
    assert_eq!(support::text_of(&events), "Fine, thanks.");
    let requests = bedrock.requests();
    assert_eq!(
        texts_sent(&requests[1].body),
        ["Hi", "Hello!", "How are you?"],
        "the prompt side keeps its conversation"
    );
    let record = runtime.session(&sid("s1")).await.unwrap().unwrap();
    assert_eq!(record.side_turns, 2);
    assert_eq!(record.transcript.len(), 4);
    assert_eq!(record.status, SessionStatus::AwaitingHuman);

    // A redelivered turn does not run again.
    assert_eq!(
        failure_code(&say(&assistant, "s1", "t2", "How are you?").await),
        "duplicate_turn"
    );
    assert_eq!(bedrock.requests().len(), 2);
}

#[tokio::test]
async fn worker_and_reviewer_converse_until_the_reviewer_approves() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let runtime = runtime(&bedrock, examples());
    let agent = runtime.agent("asset_subagent").unwrap();
    // The worker answers; the reviewer publishes a status, answers in words (which does not end
    // its turn: stopOnResponse is false), is told to go on, and approves.
    bedrock.push(Reply::text("A tree, 32x32, dark green."));
    bedrock.push(Reply::tool_call(
        "c1",
        "update_asset_status",
        r#"{"status":"reviewing the tree"}"#,
    ));
    bedrock.push(Reply::text("The tree looks right."));
    bedrock.push(Reply::tool_call(
        "c2",
        "approve_asset",
        r#"{"summary":"Tree approved","attachments":["tree.png"]}"#,
    ));
    let events = say(&agent, "asset-1", "t1", "Make a tree sprite.").await;
    let data = completed(&events);
    assert_eq!(data["sessionStatus"], "completed", "{data}");
    assert_eq!(data["end"]["reason"], "session_stop");
    assert_eq!(data["end"]["message"], "Tree approved");
    assert_eq!(data["end"]["attachments"], json!(["tree.png"]));
    assert_eq!(data["sideTurns"], 2);
    assert!(
        statuses(&events)
            .iter()
            .any(|s| s["statusText"] == "reviewing the tree"),
        "sessionStatus publishes: {:?}",
        statuses(&events)
    );

    let requests = bedrock.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(
        texts_sent(&requests[0].body),
        ["Make a tree sprite."],
        "the worker is told the task"
    );
    assert_eq!(
        texts_sent(&requests[1].body),
        ["A tree, 32x32, dark green."],
        "the reviewer sees the worker as the user"
    );
    let nudged = texts_sent(&requests[3].body);
    assert!(
        nudged.last().unwrap().starts_with("Your turn is not over"),
        "{nudged:?}"
    );
    assert!(nudged.last().unwrap().contains("approve_asset"), "{nudged:?}");
    // The bound tools the prompts do not register were provided, with their properties.
    let tools = &requests[1].body["toolConfig"]["tools"];
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolSpec"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"approve_asset") && names.contains(&"update_asset_status"),
        "{names:?}"
    );

    // The session has ended: a further message is refused.
    assert_eq!(
        failure_code(&say(&agent, "asset-1", "t2", "More?").await),
        "session_ended"
    );
}

/// Side A may hand over with a stop tool or end the session; side B answers in words.
fn order_catalog(max_session_turns: Option<u32>) -> Catalog {
    let mut side_a = PromptSide::new("a");
    side_a.stop_tool = Some("hand_over".into());
    side_a.stop_tool_response_property = Some("note".into());
    side_a.session_stop = Some(SessionToolBinding::new("finish").message("result"));
    let mut agent = define_agent("order", SideConfig::Prompt(side_a), SideConfig::prompt("b"));
    agent.max_session_turns = max_session_turns;
    Catalog::new()
        .agent(agent)
        .prompt(prompt("a"))
        .prompt(prompt("b"))
}

#[tokio::test]
async fn a_session_binding_wins_over_the_stop_tool_in_the_same_response() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let runtime = runtime(&bedrock, order_catalog(Some(10)));
    bedrock.push(
        StreamScript::new()
            .tool_use("c1", "hand_over", r#"{"note":"over to you"}"#, 1)
            .tool_use("c2", "finish", r#"{"result":"all done"}"#, 1)
            .stop("tool_use")
            .into_reply(),
    );
    let events = say(&runtime.agent("order").unwrap(), "o1", "t1", "Go.").await;
    let data = completed(&events);
    assert_eq!(data["end"]["reason"], "session_stop");
    assert_eq!(data["end"]["message"], "all done");
    assert_eq!(bedrock.requests().len(), 1, "side B never ran");
}

#[tokio::test]
async fn a_stop_tool_ends_the_side_turn_with_its_response_property() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let runtime = runtime(&bedrock, order_catalog(Some(3)));
    bedrock.push(Reply::tool_call("c1", "hand_over", r#"{"note":"over to you"}"#));
    bedrock.push(Reply::text("Thanks, noted."));
    bedrock.push(Reply::text("Anything else?"));
    let events = say(&runtime.agent("order").unwrap(), "o2", "t1", "Go.").await;
    let data = completed(&events);
    assert_eq!(data["sessionStatus"], "completed");
    assert_eq!(data["end"]["reason"], "max_session_turns");
    assert_eq!(data["sideTurns"], 3);
    let requests = bedrock.requests();
    assert_eq!(
        requests.len(),
        3,
        "the stop tool ended A's turn at once: no step after it"
    );
    assert_eq!(
        texts_sent(&requests[1].body),
        ["over to you"],
        "B heard the stop tool's property"
    );
    // A's next turn: its own call and result are in its history, then B's words.
    let a_again = texts_sent(&requests[2].body);
    assert_eq!(a_again.first().unwrap(), "Go.");
    assert_eq!(a_again.last().unwrap(), "Thanks, noted.");
}

#[tokio::test]
async fn max_session_turns_stops_two_talkative_prompt_sides() {
    let bedrock = BedrockStandIn::bind("127.0.0.1:0".parse().unwrap(), Fallback::Echo)
        .await
        .unwrap();
    let mut agent = define_agent("chatty", SideConfig::prompt("a"), SideConfig::prompt("b"));
    agent.max_session_turns = Some(6);
    let catalog = Catalog::new()
        .agent(agent)
        .prompt(prompt("a"))
        .prompt(prompt("b"));
    let runtime = runtime(&bedrock, catalog);
    let events = say(&runtime.agent("chatty").unwrap(), "c1", "t1", "Talk.").await;
    let data = completed(&events);
    assert_eq!(
        (data["sideTurns"].as_u64(), data["end"]["reason"].as_str()),
        (Some(6), Some("max_session_turns"))
    );
    assert_eq!(bedrock.requests().len(), 6);
    let sides: Vec<String> = statuses(&events)
        .iter()
        .filter(|s| s["status"] == "running")
        .map(|s| s["side"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sides, ["sideA", "sideB", "sideA", "sideB", "sideA", "sideB"]);
}

#[tokio::test]
async fn a_handler_side_answers_and_ends_the_session() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let mut agent = define_agent("shouter", SideConfig::handler("shout"), SideConfig::human());
    // The definition's `env` (seed 003 §2.2) reaches its handler.
    agent.env.insert("SUFFIX".into(), "!".into());
    let runtime = runtime(&bedrock, Catalog::new().agent(agent));
    let shouter = runtime.agent("shouter").unwrap();
    let events = say(&shouter, "h1", "t1", "hello").await;
    assert_eq!(support::text_of(&events), "HELLO!");
    assert_eq!(completed(&events)["statusText"], "shouting");
    let events = say(&shouter, "h1", "t2", "bye").await;
    let data = completed(&events);
    assert_eq!(
        (data["end"]["reason"].as_str(), data["end"]["message"].as_str()),
        (Some("handler"), Some("said goodbye"))
    );
    assert!(bedrock.requests().is_empty(), "no model call on a handler thread");
}

#[tokio::test]
async fn a_session_fail_binding_fails_the_turn_with_its_reason() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let runtime = runtime(&bedrock, examples());
    bedrock.push(Reply::tool_call(
        "c1",
        "fail_asset",
        r#"{"reason":"no tree fits 1x1"}"#,
    ));
    let events = say(
        &runtime.agent("asset_subagent").unwrap(),
        "f1",
        "t1",
        "A 1x1 tree.",
    )
    .await;
    match events.last() {
        Some(AgentEvent::Failed {
            code: Some(code),
            details,
            retryable: false,
        }) => {
            assert_eq!(code, "session_failed");
            assert!(details.contains("no tree fits 1x1"), "{details}");
        }
        other => panic!("expected failed, got {other:?}"),
    }
    assert_eq!(
        runtime.session(&sid("f1")).await.unwrap().unwrap().status,
        SessionStatus::Failed
    );
}

#[tokio::test]
async fn a_parked_approval_gate_is_resumed_by_another_worker() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let (first, second) = two_workers_on_dynamodb(&bedrock).await;

    bedrock.push(Reply::text("May I delete the staging bucket? Approve or reject."));
    let events = say(
        &first.agent("approval_gate").unwrap(),
        "gate-1",
        "t1",
        "Delete the staging bucket.",
    )
    .await;
    assert_eq!(completed(&events)["sessionStatus"], "awaiting_human");

    bedrock.push(Reply::tool_call(
        "c1",
        "record_decision",
        r#"{"decision":"rejected"}"#,
    ));
    let events = say(
        &second.agent("approval_gate").unwrap(),
        "gate-1",
        "t2",
        "No, keep it.",
    )
    .await;
    let data = completed(&events);
    assert_eq!(
        (data["sessionStatus"].as_str(), data["end"]["message"].as_str()),
        (Some("completed"), Some("rejected"))
    );
    let resumed = texts_sent(&bedrock.requests()[1].body);
    assert_eq!(
        resumed,
        [
            "Delete the staging bucket.",
            "May I delete the staging bucket? Approve or reject.",
            "No, keep it."
        ],
        "the second worker read the first one's conversation from DynamoDB"
    );
    let record = first.session(&sid("gate-1")).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Completed);
}

#[tokio::test]
async fn a_message_while_a_turn_runs_becomes_its_follow_up_in_the_same_invocation() {
    use std::sync::atomic::AtomicUsize;
    use tokio::sync::Notify;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let (reached, open) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    // The first model call waits at the gate while the person's next message comes.
    let gated = Arc::new(support::steering::Gated {
        inner: Arc::new(BedrockModel::new(bedrock.client(), support::MODEL_ID)),
        calls: AtomicUsize::new(0),
        at: 0,
        reached: reached.clone(),
        open: open.clone(),
    });
    let runtime = runtime_with(
        move |_| gated.clone() as Arc<dyn Model>,
        examples(),
        MemoryStore::new(),
        MemoryThreadStore::new(),
    );
    let assistant = runtime.agent("assistant").unwrap();
    bedrock.push(Reply::text("Hello."));
    bedrock.push(Reply::text("Yes, still here."));
    let running = tokio::spawn(
        assistant
            .invoke(
                Scope::new("busy".parse().unwrap()).with_turn_id(tid("t1")),
                Prompt::text("Hi"),
            )
            .collect::<Vec<_>>(),
    );
    reached.notified().await;
    let queued = say(&assistant, "busy", "t2", "Are you there?").await;
    assert_eq!(completed(&queued), json!({"followUp": "queued", "runId": "t1"}));
    open.notify_one();
    let events = running.await.unwrap();
    assert_eq!(
        completed(&events)["sessionStatus"],
        "awaiting_human",
        "{events:#?}"
    );
    let delivered = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::Other(v) if v["type"] == "command_delivered"))
        .count();
    assert_eq!(delivered, 1);
    let requests = bedrock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        texts_sent(&requests[1].body),
        ["Hi", "Hello.", "Are you there?"],
        "the follow-up went to the model after the answer it waited for"
    );
    // Its own message, redelivered, runs nothing: the running turn took it.
    assert_eq!(
        failure_code(&say(&assistant, "busy", "t2", "Are you there?").await),
        "duplicate_turn"
    );
}

#[tokio::test]
async fn a_runtime_with_broken_definitions_does_not_build() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let client = bedrock.client();
    let broken = Catalog::new().agent(define_agent("twins", SideConfig::human(), SideConfig::human()));
    let error = AgentRuntime::builder()
        .catalog(broken)
        .models(support::MODEL_ID, move |id| {
            Arc::new(BedrockModel::new(client.clone(), id)) as Arc<dyn Model>
        })
        .session_store(MemoryStore::new())
        .thread_store(MemoryThreadStore::new())
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("both_sides_human"), "{error}");
    // The examples' relay uses the built-in relay_pipe; their assistant needs current_time.
    let error = AgentRuntime::builder().catalog(examples()).build().unwrap_err();
    assert!(error.to_string().contains("undefined_tool"), "{error}");
    assert!(!error.to_string().contains("relay_pipe"), "{error}");
    let error = AgentRuntime::builder().build().unwrap_err();
    assert!(error.to_string().contains("models are required"), "{error}");
}

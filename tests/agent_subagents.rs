//! Standard Agents that compose others, end to end on the Bedrock stand-in: a relay to its child
//! and back, an orchestrator waiting on its approval gate, a child's parent hooks, and a handoff of
//! the thread to the exposed agent.

use crate::support;

use std::sync::Arc;

use agent_worker::agents::{
    AgentRuntime, Catalog, MemoryThreadStore, PromptSide, SessionStatus, SideConfig, define_agent,
};
use agent_worker::engine::BedrockModel;
use agent_worker::engine::model::Model;
use agent_worker::protocol::AgentEvent;
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{BedrockStandIn, Reply, StreamScript, sid};
use support::agent_sessions::*;

#[tokio::test]
async fn the_relay_passes_messages_to_its_child_and_back_without_a_model_of_its_own() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let runtime = runtime(&bedrock, examples());
    let relay = runtime.agent("relay_agent").unwrap();
    bedrock.push(Reply::text("It is noon."));
    let events = say(&relay, "r1", "t1", "What time is it?").await;
    assert_eq!(support::text_of(&events), "It is noon.", "{events:#?}");
    assert_eq!(completed(&events)["sessionStatus"], "awaiting_human");

    bedrock.push(Reply::text("You are welcome."));
    let events = say(&relay, "r1", "t2", "Thanks.").await;
    assert_eq!(support::text_of(&events), "You are welcome.");
    // Every model call was the child's, and the child kept its conversation.
    let requests = bedrock.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| {
        r.body["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("helpful assistant")
    }));
    assert_eq!(
        texts_sent(&requests[1].body),
        ["What time is it?", "It is noon.", "Thanks."]
    );
    let child = runtime
        .session(&sid("r1/assistant_agent/1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(child.parent.as_ref().unwrap().session, "r1");
    assert_eq!(child.status, SessionStatus::AwaitingHuman);
    let parent = runtime.session(&sid("r1")).await.unwrap().unwrap();
    assert_eq!(parent.children.len(), 1, "maxInstances 1: one child, reused");
}

#[tokio::test]
async fn an_orchestrator_waits_for_its_approval_gate_and_resumes_on_another_worker() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let (first, second) = two_workers_on_dynamodb(&bedrock).await;

    // The orchestrator asks for approval twice at once: maxInstances lets one child start.
    bedrock.push(
        StreamScript::new()
            .tool_use(
                "c1",
                "request_approval",
                r#"{"message":"Delete the staging bucket?"}"#,
                1,
            )
            .tool_use("c2", "request_approval", r#"{"message":"Delete it now?"}"#, 1)
            .stop("tool_use")
            .into_reply(),
    );
    bedrock.push(Reply::text("Approve deleting the staging bucket?"));
    bedrock.push(Reply::text("I have asked for approval."));
    let events = say(
        &first.agent("orchestrator").unwrap(),
        "o-1",
        "t1",
        "Delete the staging bucket.",
    )
    .await;
    let data = completed(&events);
    assert_eq!(data["sessionStatus"], "awaiting_child", "{data}");
    let child_session = data["waitingOn"][0].as_str().unwrap().to_owned();
    assert_eq!(child_session, "o-1/request_approval/1");
    let results: Vec<&AgentEvent> = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::ToolEnded { .. }))
        .collect();
    assert_eq!(results.len(), 2);
    let refused = results
        .iter()
        .filter(|e| matches!(e, AgentEvent::ToolEnded { is_error: true, .. }))
        .count();
    assert_eq!(refused, 1, "one call is over maxInstances: {results:?}");
    let child = first.session(&sid(&child_session)).await.unwrap().unwrap();
    assert_eq!(child.status, SessionStatus::AwaitingHuman);

    // The approver answers on the child session, served by another worker: the gate settles,
    // and the orchestrator goes on with the decision.
    bedrock.push(Reply::tool_call(
        "c3",
        "record_decision",
        r#"{"decision":"approved"}"#,
    ));
    bedrock.push(Reply::text("Approved: deleting the staging bucket."));
    let events = say(
        &second.agent("approval_gate").unwrap(),
        &child_session,
        "t2",
        "Approved.",
    )
    .await;
    let data = completed(&events);
    assert_eq!(
        (data["sessionStatus"].as_str(), data["end"]["message"].as_str()),
        (Some("completed"), Some("approved"))
    );
    assert!(
        support::text_of(&events).contains("Approved: deleting the staging bucket."),
        "the parent's words stream here"
    );
    let told = statuses(&events);
    assert!(
        told.iter()
            .any(|s| s["status"] == "resuming" && s["session"] == "o-1"),
        "{told:?}"
    );
    let requests = bedrock.requests();
    let resumed = texts_sent(&requests.last().unwrap().body);
    assert_eq!(resumed.last().unwrap(), "[request_approval] completed: approved");
    let parent = second.session(&sid("o-1")).await.unwrap().unwrap();
    assert_eq!(parent.status, SessionStatus::AwaitingHuman);
    assert!(parent.waiting_on.is_empty());
    assert!(parent.children.iter().all(|c| c.ended));
}

/// Issue 53 (6): a child that settles after its parent parked on it gives the parent its
/// result's attachments, as a child that settles at once does in its tool result.
#[tokio::test]
async fn a_child_resumed_after_parking_gives_its_parent_the_attachments() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let mut presenter = PromptSide::new("presenter");
    presenter.session_stop = Some(agent_worker::agents::SessionToolBinding {
        attachments_property: Some("files".into()),
        ..agent_worker::agents::SessionToolBinding::new("record_decision").message("decision")
    });
    let mut gate = define_agent("gate", SideConfig::Prompt(presenter), SideConfig::human());
    gate.expose_as_tool = true;
    let mut boss = PromptSide::new("boss");
    boss.subagents = vec![agent_worker::agents::SubagentRelationship::new("gate")];
    let catalog = Catalog::new()
        .agent(gate)
        .agent(define_agent(
            "boss",
            SideConfig::Prompt(boss),
            SideConfig::human(),
        ))
        .prompt(prompt("presenter"))
        .prompt(prompt("boss"));
    let runtime = runtime(&bedrock, catalog);

    bedrock.push(Reply::tool_call(
        "c1",
        "gate",
        r#"{"message":"Approve the report?"}"#,
    ));
    bedrock.push(Reply::text("May I publish the report?"));
    bedrock.push(Reply::text("I have asked for approval."));
    let events = say(
        &runtime.agent("boss").unwrap(),
        "b-1",
        "t1",
        "Publish the report.",
    )
    .await;
    assert_eq!(
        completed(&events)["sessionStatus"],
        "awaiting_child",
        "{events:#?}"
    );

    bedrock.push(Reply::tool_call(
        "c2",
        "record_decision",
        r#"{"decision":"approved","files":["reports/q3.pdf"]}"#,
    ));
    bedrock.push(Reply::text("Published."));
    let events = say(&runtime.agent("gate").unwrap(), "b-1/gate/1", "t2", "Approved.").await;
    let data = completed(&events);
    assert_eq!(data["end"]["attachments"][0], "reports/q3.pdf", "{data}");
    let requests = bedrock.requests();
    let told = texts_sent(&requests.last().unwrap().body);
    assert_eq!(
        told.last().unwrap(),
        "[gate] completed: approved\nattachments: [\"reports/q3.pdf\"]"
    );
}

fn composing_catalog(hidden: bool, optional_off: bool) -> Catalog {
    let mut child = define_agent("mailer", SideConfig::prompt("child"), SideConfig::human());
    child.expose_as_tool = true;
    child.parent_hooks = vec![agent_worker::agents::ParentHookRequirement {
        hook: "mail_context".into(),
        reason: "Shows the coordinator what mail arrived.".into(),
        stage: Some(agent_worker::agents::HookStage::BeforeParent),
    }];
    let mut side = PromptSide::new("boss");
    side.subagents = vec![agent_worker::agents::SubagentRelationship {
        hidden,
        optional: optional_off,
        enabled: optional_off.then_some(false),
        ..agent_worker::agents::SubagentRelationship::new("mailer")
    }];
    Catalog::new()
        .agent(child)
        .agent(define_agent(
            "boss",
            SideConfig::Prompt(side),
            SideConfig::human(),
        ))
        .prompt(prompt("child"))
        .prompt(prompt("boss"))
}

/// Where the composing runtime registers the `mail_context` hook.
#[derive(Clone, Copy)]
enum HookAt {
    Nowhere,
    /// The runtime's own namespace (`hook`).
    Runtime,
    /// A package's namespace (`package_hook`).
    Package(&'static str),
}

fn composing_runtime(
    bedrock: &BedrockStandIn,
    catalog: Catalog,
    with_hook: bool,
) -> Result<AgentRuntime, String> {
    let at = if with_hook {
        HookAt::Runtime
    } else {
        HookAt::Nowhere
    };
    composing_runtime_at(bedrock, catalog, at)
}

fn composing_runtime_at(
    bedrock: &BedrockStandIn,
    catalog: Catalog,
    at: HookAt,
) -> Result<AgentRuntime, String> {
    let client = bedrock.client();
    let builder = AgentRuntime::builder()
        .catalog(catalog)
        .models(support::MODEL_ID, move |id| {
            Arc::new(BedrockModel::new(client.clone(), id)) as Arc<dyn Model>
        })
        .session_store(MemoryStore::new())
        .thread_store(MemoryThreadStore::new())
        .engine_config(support::config());
    let hook = agent_worker::agents::hook_fn(|ctx: agent_worker::agents::HookContext| async move {
        Ok(Some(format!("Context for {}: 3 new emails.", ctx.session)))
    });
    let builder = match at {
        HookAt::Nowhere => builder,
        HookAt::Runtime => builder.hook("mail_context", hook),
        HookAt::Package(package) => builder.package_hook(package, "mail_context", hook),
    };
    builder.build().map_err(|e| e.to_string())
}

/// Seed 003 §6: a child's required parent hook is looked for in the child's own package's
/// namespace, and an agent's own hooks in its own; one registered elsewhere fails closed.
#[tokio::test]
async fn hooks_are_looked_for_in_the_namespace_of_the_package_that_declares_them() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let packaged = |package: &str| {
        let mut catalog = composing_catalog(false, false);
        let mut child = catalog.get_agent("mailer").unwrap().clone();
        child.package_name = Some(package.to_owned());
        catalog = catalog.agent(child);
        catalog
    };
    for wrong in [HookAt::Runtime, HookAt::Package("calendar")] {
        let error = composing_runtime_at(&bedrock, packaged("mail"), wrong).unwrap_err();
        assert!(
            error.contains("missing_parent_hook") && error.contains("package `mail`'s namespace"),
            "{error}"
        );
    }
    let runtime = composing_runtime_at(&bedrock, packaged("mail"), HookAt::Package("mail")).unwrap();
    bedrock.push(Reply::text("Noted."));
    say(&runtime.agent("boss").unwrap(), "b-pkg", "t1", "Any news?").await;
    assert_eq!(
        texts_sent(&bedrock.requests().last().unwrap().body)[0],
        "Context for b-pkg: 3 new emails.\n\nAny news?"
    );

    // An agent's own hook: its package's, or refused when the runtime has it only elsewhere.
    let mut boss = composing_catalog(false, true).get_agent("boss").unwrap().clone();
    boss.package_name = Some("office".into());
    boss.hooks = vec!["mail_context".into()];
    let own = |catalog: Catalog, at| composing_runtime_at(&bedrock, catalog.agent(boss.clone()), at);
    let error = own(composing_catalog(false, true), HookAt::Package("mail")).unwrap_err();
    assert!(
        error.contains("undefined_hook") && error.contains("hooks[0]") && error.contains("`office`"),
        "{error}"
    );
    let runtime = own(composing_catalog(false, true), HookAt::Package("office")).unwrap();
    bedrock.push(Reply::text("Noted."));
    say(&runtime.agent("boss").unwrap(), "b-own", "t1", "Any news?").await;
    assert_eq!(
        texts_sent(&bedrock.requests().last().unwrap().body)[0],
        "Context for b-own: 3 new emails.\n\nAny news?"
    );
}

#[tokio::test]
async fn composing_a_child_activates_its_parent_hooks_or_fails_closed() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let error = composing_runtime(&bedrock, composing_catalog(false, false), false).unwrap_err();
    assert!(
        error.contains("missing_parent_hook") && error.contains("mail_context"),
        "{error}"
    );

    for hidden in [false, true] {
        let runtime = composing_runtime(&bedrock, composing_catalog(hidden, false), true).unwrap();
        bedrock.push(Reply::text("Noted."));
        say(
            &runtime.agent("boss").unwrap(),
            &format!("b-{hidden}"),
            "t1",
            "Any news?",
        )
        .await;
        let request = bedrock.requests().last().unwrap().body.clone();
        let sent = texts_sent(&request);
        assert_eq!(
            sent[0],
            format!("Context for b-{hidden}: 3 new emails.\n\nAny news?"),
            "hidden={hidden}"
        );
        let tools: Vec<String> = request["toolConfig"]["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|t| t["toolSpec"]["name"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            tools.contains(&"mailer".to_owned()),
            !hidden,
            "a hidden relationship is no tool: {tools:?}"
        );
    }

    // An optional relationship switched off is not composed: no tool, no hook, none required.
    let runtime = composing_runtime(&bedrock, composing_catalog(false, true), false).unwrap();
    bedrock.push(Reply::text("Nothing."));
    say(&runtime.agent("boss").unwrap(), "b-off", "t1", "Any news?").await;
    assert_eq!(
        texts_sent(&bedrock.requests().last().unwrap().body),
        ["Any news?"]
    );
}

fn handoff_catalog() -> Catalog {
    let mut triage = prompt("triage");
    triage.tools = vec!["billing".into()];
    let mut billing = define_agent("billing", SideConfig::prompt("billing"), SideConfig::human());
    billing.expose_as_tool = true;
    billing.tool_description = Some("Billing questions: charges, refunds, invoices.".into());
    Catalog::new()
        .agent(define_agent(
            "triage",
            SideConfig::prompt("triage"),
            SideConfig::human(),
        ))
        .agent(billing)
        .prompt(triage)
        .prompt(prompt("billing"))
}

#[tokio::test]
async fn a_handoff_gives_the_same_thread_to_the_exposed_agent() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let runtime = runtime(&bedrock, handoff_catalog());
    let triage = runtime.agent("triage").unwrap();
    bedrock.push(Reply::tool_call(
        "c1",
        "billing",
        r#"{"message":"Passing you to billing."}"#,
    ));
    bedrock.push(Reply::text("I see the double charge on your card."));
    let events = say(&triage, "h-1", "t1", "I was charged twice.").await;
    assert!(
        statuses(&events)
            .iter()
            .any(|s| s["status"] == "handoff" && s["to"] == "billing")
    );
    assert_eq!(completed(&events)["sessionStatus"], "awaiting_human");
    let requests = bedrock.requests();
    assert_eq!(
        requests[1].body["system"][0]["text"], "You are billing.",
        "billing took the turn"
    );
    let history = texts_sent(&requests[1].body);
    assert_eq!(
        history.first().unwrap(),
        "I was charged twice.",
        "the thread's history is kept"
    );
    assert!(
        history
            .last()
            .unwrap()
            .contains("triage handed this conversation to billing"),
        "{history:?}"
    );

    // The person goes on talking to the thread they started; billing has it now.
    bedrock.push(Reply::text("Refund on its way."));
    let events = say(&triage, "h-1", "t2", "Thanks.").await;
    assert_eq!(support::text_of(&events), "Refund on its way.");
    assert_eq!(
        bedrock.requests()[2].body["system"][0]["text"],
        "You are billing."
    );
    let record = runtime.session(&sid("h-1")).await.unwrap().unwrap();
    assert_eq!(
        (record.agent.as_str(), record.handed_off_from.as_slice()),
        ("billing", &["triage".to_owned()][..])
    );
}

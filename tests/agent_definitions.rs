//! Standard Agents definitions: every definition-time error with its path, in one pass; the
//! seed's examples under `examples/agents/` load and validate.

use std::path::Path;

use agent_worker::agents::validate::{check_document, codes};
use agent_worker::agents::{
    Catalog, Issue, Known, ParentHookRequirement, PromptDefinition, PromptSide, SessionToolBinding, Severity,
    SideConfig, SubagentRelationship, define_agent, has_errors,
};
use serde_json::{Value, json};

fn known() -> Known {
    let mut known = Known::default();
    known
        .tools
        .extend(["current_time".to_owned(), "search".to_owned()]);
    known.handlers.insert("relay_pipe".into());
    known.hooks.insert("gmail_context".into());
    known
}

/// The (code, path) of each error, in the order of the document.
fn errors(issues: &[Issue]) -> Vec<(String, String)> {
    issues
        .iter()
        .filter(|i| i.severity == Severity::Error)
        .map(|i| (i.code.clone(), i.path.clone()))
        .collect()
}

fn structural(document: Value) -> Vec<(String, String)> {
    let (decoded, issues) = check_document(&document, "test");
    assert_eq!(decoded.is_some(), !has_errors(&issues), "{issues:?}");
    errors(&issues)
}

fn pair(code: &str, path: &str) -> (String, String) {
    (code.to_owned(), path.to_owned())
}

#[test]
fn a_side_needs_exactly_one_backing() {
    assert_eq!(
        structural(
            json!({ "name": "a", "sideA": { "label": "x" }, "sideB": { "human": true, "prompt": "p" } })
        ),
        [
            pair(codes::SIDE_WITHOUT_BACKING, "sideA"),
            pair(codes::SIDE_WITH_MULTIPLE_BACKINGS, "sideB")
        ]
    );
    // No implicit human side B.
    assert_eq!(
        structural(json!({ "name": "a", "sideA": { "prompt": "p" } })),
        [pair(codes::MISSING_PROPERTY, "sideB")]
    );
}

#[test]
fn a_human_side_takes_only_human_and_label() {
    let found = structural(json!({
        "name": "a",
        "sideA": { "prompt": "p" },
        "sideB": {
            "human": true,
            "label": "You",
            "subagents": [{ "agent": "child" }],
            "sessionStop": { "name": "done" },
            "maxSteps": 3,
            "stopOnResponse": false,
            "colour": "blue"
        }
    }));
    assert_eq!(
        found,
        [
            pair(codes::SUBAGENTS_ON_HUMAN_SIDE, "sideB.subagents"),
            pair(codes::BINDING_ON_NON_PROMPT_SIDE, "sideB.sessionStop"),
            pair(codes::BINDING_ON_NON_PROMPT_SIDE, "sideB.maxSteps"),
            pair(codes::BINDING_ON_NON_PROMPT_SIDE, "sideB.stopOnResponse"),
            pair(codes::PROPERTY_NOT_ALLOWED_ON_HUMAN_SIDE, "sideB.colour"),
        ]
    );
}

#[test]
fn bindings_and_step_limits_belong_on_prompt_sides_in_object_form() {
    let found = structural(json!({
        "name": "a",
        "sideA": { "handler": "relay_pipe", "sessionFail": { "name": "f" }, "stopTool": "t", "stopToolResponseProperty": "r" },
        "sideB": {
            "prompt": "p",
            "sessionStop": "approve",
            "sessionStatus": { "messageProperty": "status" },
            "sessionFail": { "name": "fail", "messageProperty": "reason" }
        }
    }));
    assert_eq!(
        found,
        [
            pair(codes::BINDING_ON_NON_PROMPT_SIDE, "sideA.sessionFail"),
            pair(codes::BINDING_ON_NON_PROMPT_SIDE, "sideA.stopTool"),
            pair(
                codes::BINDING_ON_NON_PROMPT_SIDE,
                "sideA.stopToolResponseProperty"
            ),
            pair(codes::BINDING_NOT_OBJECT_FORM, "sideB.sessionStop"),
            pair(codes::MISSING_PROPERTY, "sideB.sessionStatus.name"),
        ]
    );
}

#[test]
fn wrong_types_are_named_by_path() {
    assert_eq!(
        structural(
            json!({ "name": "a", "sideA": { "prompt": "p", "maxSteps": "many" }, "sideB": { "human": true } })
        ),
        [pair(codes::INVALID_VALUE, "sideA.maxSteps")]
    );
    // One pass: a file's structural error does not hide its wrong values, each named.
    assert_eq!(
        structural(json!({
            "name": 7, "maxSessionTurns": 0, "env": { "A": 1 },
            "sideA": { "prompt": "p", "handler": "h", "stopOnResponse": "yes" }, "sideB": { "human": true }
        })),
        [
            pair(codes::INVALID_VALUE, "name"),
            pair(codes::INVALID_VALUE, "maxSessionTurns"),
            pair(codes::INVALID_VALUE, "env"),
            pair(codes::INVALID_VALUE, "sideA.stopOnResponse"),
            pair(codes::SIDE_WITH_MULTIPLE_BACKINGS, "sideA"),
        ]
    );
    assert_eq!(
        structural(
            json!({ "name": "a", "sideA": { "prompt": "p" }, "sideB": { "human": false }, "extra": 1 })
        ),
        [
            pair(codes::UNKNOWN_PROPERTY, "extra"),
            pair(codes::INVALID_VALUE, "sideB.human")
        ]
    );
}

fn prompt_with_tools(name: &str, tools: &[&str]) -> PromptDefinition {
    let mut prompt = PromptDefinition::new(name, "be useful");
    prompt.tools = tools.iter().map(|t| (*t).to_owned()).collect();
    prompt
}

#[test]
fn references_names_and_hooks_are_checked_across_definitions() {
    let child = {
        let mut child = define_agent("child", SideConfig::prompt("p"), SideConfig::human());
        child.expose_as_tool = true;
        child.parent_hooks = vec![
            ParentHookRequirement {
                hook: "gmail_context".into(),
                reason: "context".into(),
                stage: None,
            },
            ParentHookRequirement {
                hook: "unloadable".into(),
                reason: "sync".into(),
                stage: None,
            },
            ParentHookRequirement {
                hook: "gmail_context".into(),
                reason: "again".into(),
                stage: None,
            },
        ];
        child
    };
    let mut side_a = PromptSide::new("p");
    side_a.subagents = vec![
        SubagentRelationship {
            as_name: Some("search".into()),
            ..SubagentRelationship::new("child")
        },
        SubagentRelationship {
            as_name: Some("stop_session".into()),
            ..SubagentRelationship::new("child")
        },
        SubagentRelationship::new("ghost"),
    ];
    side_a.stop_tool = Some("finish".into());
    let mut side_b = PromptSide::new("missing_prompt");
    side_b.subagents = vec![
        SubagentRelationship {
            as_name: Some("search".into()),
            ..SubagentRelationship::new("child")
        },
        SubagentRelationship {
            as_name: Some("finish_b".into()),
            ..SubagentRelationship::new("child")
        },
        SubagentRelationship {
            as_name: Some("finish_b".into()),
            optional: true,
            enabled: Some(false),
            ..SubagentRelationship::new("child")
        },
    ];
    side_b.max_steps = Some(0);
    let parent = define_agent("parent", SideConfig::Prompt(side_a), SideConfig::Prompt(side_b));
    let relay = define_agent("relay", SideConfig::handler("nope"), SideConfig::human());
    let twins = define_agent("twins", SideConfig::human(), SideConfig::human());
    let catalog = Catalog::new()
        .agent(child)
        .agent(parent)
        .agent(relay)
        .agent(twins)
        .prompt(prompt_with_tools(
            "p",
            &["search", "current_time", "undefined_tool"],
        ));
    let issues = catalog.validate(&known());
    let by_source = |source: &str| -> Vec<(String, String)> {
        errors(
            &issues
                .iter()
                .filter(|i| i.source == source)
                .cloned()
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(by_source("p"), [pair(codes::UNDEFINED_TOOL, "tools[2]")]);
    assert_eq!(
        by_source("child"),
        [pair(codes::DUPLICATE_PARENT_HOOK, "parentHooks[2].hook")]
    );
    assert_eq!(
        by_source("relay"),
        [pair(codes::UNDEFINED_HANDLER, "sideA.handler")]
    );
    assert_eq!(by_source("twins"), [pair(codes::BOTH_SIDES_HUMAN, "sideB")]);
    assert_eq!(
        by_source("parent"),
        [
            pair(codes::MISSING_PARENT_HOOK, "sideA.subagents[0].agent"),
            pair(codes::RELATIONSHIP_COLLIDES_WITH_TOOL, "sideA.subagents[0].as"),
            pair(codes::MISSING_PARENT_HOOK, "sideA.subagents[1].agent"),
            pair(codes::RELATIONSHIP_NAME_RESERVED, "sideA.subagents[1].as"),
            pair(codes::UNDEFINED_AGENT, "sideA.subagents[2].agent"),
            pair(codes::UNDEFINED_PROMPT, "sideB.prompt"),
            pair(codes::INVALID_VALUE, "sideB.maxSteps"),
            pair(codes::MISSING_PARENT_HOOK, "sideB.subagents[0].agent"),
            pair(codes::RELATIONSHIP_ON_BOTH_SIDES, "sideB.subagents[0].as"),
            pair(codes::MISSING_PARENT_HOOK, "sideB.subagents[1].agent"),
            pair(codes::DUPLICATE_RELATIONSHIP, "sideB.subagents[2].as"),
        ]
    );
    // Two prompt sides without a cap draw a warning, not an error.
    assert!(
        issues
            .iter()
            .any(|i| i.code == codes::NO_SESSION_TURN_CAP && i.severity == Severity::Warning)
    );
    // A relationship name that collides with a stop binding's tool is caught too.
    let mut side = PromptSide::new("p");
    side.session_stop = Some(SessionToolBinding::new("done"));
    side.subagents = vec![SubagentRelationship {
        as_name: Some("done".into()),
        ..SubagentRelationship::new("child")
    }];
    let lone = Catalog::new()
        .agent(define_agent(
            "lone",
            SideConfig::Prompt(side),
            SideConfig::human(),
        ))
        .agent(define_agent(
            "child",
            SideConfig::prompt("p"),
            SideConfig::human(),
        ))
        .prompt(prompt_with_tools("p", &[]));
    assert_eq!(
        errors(&lone.validate(&known())),
        [pair(
            codes::RELATIONSHIP_COLLIDES_WITH_TOOL,
            "sideA.subagents[0].as"
        )]
    );
}

#[test]
fn an_issue_reads_as_one_line_and_serializes_with_its_four_fields() {
    let issues = Catalog::new()
        .agent(define_agent("twins", SideConfig::human(), SideConfig::human()))
        .validate(&known());
    assert_eq!(
        issues[0].to_string(),
        "error [both_sides_human] twins at sideB: both sides are human: reserved, and rejected in Standard Agents 0.2.0"
    );
    let wire = serde_json::to_value(&issues[0]).unwrap();
    for field in ["code", "severity", "message", "path"] {
        assert!(wire.get(field).is_some(), "{field}");
    }
    assert_eq!(wire["severity"], "error");
}

#[test]
fn the_seed_examples_load_and_validate() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents");
    let (catalog, issues) = Catalog::load(&folder, &known()).unwrap();
    assert!(issues.is_empty(), "{issues:#?}");
    for name in [
        "assistant",
        "asset_subagent",
        "relay_agent",
        "assistant_agent",
        "approval_gate",
        "orchestrator",
    ] {
        assert!(catalog.get_agent(name).is_some(), "{name}");
    }
    let worker = catalog.get_agent("asset_subagent").unwrap();
    let SideConfig::Prompt(reviewer) = &worker.side_b else {
        panic!("a prompt side")
    };
    assert!(!reviewer.stop_on_response);
    assert_eq!(
        reviewer
            .session_stop
            .as_ref()
            .unwrap()
            .message_property
            .as_deref(),
        Some("summary")
    );
    assert_eq!(
        catalog.get_prompt("assistant").unwrap().tools,
        ["current_time"],
        "a prompt takes its file's name"
    );
}

#[test]
fn a_folder_with_broken_files_reports_each_one() {
    let folder = std::env::temp_dir().join(format!("agents-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(folder.join("agents")).unwrap();
    std::fs::create_dir_all(folder.join("prompts")).unwrap();
    std::fs::write(
        folder.join("agents/a.yaml"),
        "name: a\nsideA: {prompt: p}\nsideB: {human: true, subagents: []}\n",
    )
    .unwrap();
    std::fs::write(folder.join("agents/b.json"), "{ not json").unwrap();
    std::fs::write(folder.join("prompts/p.yaml"), "system: hi\nmodle: typo\n").unwrap();
    // Every problem of one file at once: two wrong values and an unknown property.
    std::fs::write(
        folder.join("prompts/q.yaml"),
        "system: 3\ntools: [a, 1]\ntemprature: 0.2\n",
    )
    .unwrap();
    let (_, issues) = Catalog::load(&folder, &known()).unwrap();
    let found: Vec<(String, String, String)> = issues
        .iter()
        .map(|i| (i.source.clone(), i.code.clone(), i.path.clone()))
        .collect();
    assert!(
        found.contains(&(
            "prompts/p.yaml".into(),
            codes::UNKNOWN_PROPERTY.into(),
            "modle".into()
        )),
        "{found:?}"
    );
    let in_q: Vec<(String, String)> = found
        .iter()
        .filter(|(source, _, _)| source == "prompts/q.yaml")
        .map(|(_, code, path)| (code.clone(), path.clone()))
        .collect();
    assert_eq!(
        in_q,
        [
            pair(codes::INVALID_VALUE, "system"),
            pair(codes::INVALID_VALUE, "tools"),
            pair(codes::UNKNOWN_PROPERTY, "temprature"),
        ]
    );
    assert!(
        found.contains(&(
            "agents/a.yaml".into(),
            codes::SUBAGENTS_ON_HUMAN_SIDE.into(),
            "sideB.subagents".into()
        )),
        "{found:?}"
    );
    assert!(
        found.contains(&("agents/b.json".into(), codes::INVALID_VALUE.into(), String::new())),
        "{found:?}"
    );
    let _ = std::fs::remove_dir_all(&folder);
}

#[test]
fn a_handoff_needs_an_exposed_agent_with_the_same_human_side() {
    let mut hub = prompt_with_tools("hub", &["closed", "flipped"]);
    hub.system = "route".into();
    let closed = define_agent("closed", SideConfig::prompt("hub"), SideConfig::human());
    let mut flipped = define_agent("flipped", SideConfig::human(), SideConfig::prompt("hub"));
    flipped.expose_as_tool = true;
    let front = define_agent("front", SideConfig::prompt("hub"), SideConfig::human());
    let catalog = Catalog::new()
        .agent(closed)
        .agent(flipped)
        .agent(front)
        .prompt(hub);
    let issues = catalog.validate(&known());
    let front: Vec<(String, String)> = errors(
        &issues
            .iter()
            .filter(|i| i.source == "front")
            .cloned()
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        front,
        [
            pair(codes::AGENT_NOT_EXPOSED, "sideA.prompt"),
            pair(codes::HANDOFF_SURFACE_MISMATCH, "sideA.prompt"),
        ]
    );
}

/// The (code, path) of each issue named by `source`, errors and warnings, in report order.
fn of_source(issues: &[Issue], source: &str) -> Vec<(String, String)> {
    issues
        .iter()
        .filter(|i| i.source == source)
        .map(|i| (i.code.clone(), i.path.clone()))
        .collect()
}

/// What `tests/fixtures/agents/one_pass` holds, file by file: every problem, each by its path.
fn one_pass_expected() -> Vec<(&'static str, Vec<(String, String)>)> {
    vec![
        (
            "agents/broken.yaml",
            vec![
                // The structural pass.
                pair(codes::INVALID_VALUE, "maxSessionTurns"),
                pair(codes::UNKNOWN_PROPERTY, "colour"),
                pair(codes::MISSING_PROPERTY, "parentHooks[0].reason"),
                pair(codes::INVALID_VALUE, "parentHooks[1].stage"),
                pair(codes::INVALID_VALUE, "sideA.maxSteps"),
                pair(codes::INVALID_VALUE, "sideA.subagents[0].maxInstances"),
                pair(codes::MISSING_PROPERTY, "sideA.subagents[1].agent"),
                pair(codes::UNKNOWN_PROPERTY, "sideA.subagents[2].colour"),
                pair(codes::INVALID_VALUE, "sideB.subagents[0]"),
                // The references, of what could be read; entries keep their place in the file.
                pair(codes::UNDEFINED_HOOK, "hooks[0]"),
                pair(codes::DUPLICATE_PARENT_HOOK, "parentHooks[1].hook"),
                pair(codes::UNDEFINED_AGENT, "sideA.subagents[0].agent"),
                pair(codes::MISSING_PARENT_HOOK, "sideA.subagents[2].agent"),
                pair(codes::RELATIONSHIP_NAME_RESERVED, "sideA.subagents[2].as"),
                pair(codes::MISSING_PARENT_HOOK, "sideA.subagents[3].agent"),
                pair(codes::RELATIONSHIP_COLLIDES_WITH_TOOL, "sideA.subagents[3].as"),
                pair(codes::UNDEFINED_HANDLER, "sideB.handler"),
            ],
        ),
        (
            "agents/dupe.yaml",
            vec![
                pair(codes::INVALID_VALUE, "sideA.stopOnResponse"),
                pair(codes::PROPERTY_NOT_ALLOWED_ON_HUMAN_SIDE, "sideB.colour"),
                pair(codes::DUPLICATE_NAME, "name"),
                pair(codes::UNDEFINED_PROMPT, "sideA.prompt"),
            ],
        ),
        ("agents/helper.yaml", vec![]),
        (
            "agents/twins.yaml",
            vec![
                pair(codes::INVALID_VALUE, "sideB.label"),
                pair(codes::BOTH_SIDES_HUMAN, "sideB"),
            ],
        ),
        (
            "prompts/flawed.yaml",
            vec![
                pair(codes::INVALID_VALUE, "tools"),
                pair(codes::UNKNOWN_PROPERTY, "modle"),
            ],
        ),
    ]
}

/// Issue 53 (4): one load names every problem of every file, structural and reference alike,
/// each by its file and path: a structural error hides no reference error, each entry of
/// `subagents` and `parentHooks` is checked by itself, and a prompt with a problem is still known
/// by its name (no false `undefined_prompt`).
#[test]
fn one_load_names_every_problem_of_every_file_by_its_path() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents/one_pass");
    let (catalog, issues) = Catalog::load(&folder, &known()).unwrap();
    for (source, expected) in one_pass_expected() {
        assert_eq!(of_source(&issues, source), expected, "{source}: {issues:#?}");
    }
    assert_eq!(
        issues.len(),
        one_pass_expected().iter().map(|(_, e)| e.len()).sum::<usize>(),
        "every issue names its file: {issues:#?}"
    );
    assert!(
        !issues
            .iter()
            .any(|i| i.code == codes::UNDEFINED_PROMPT && i.message.contains("flawed")),
        "{issues:#?}"
    );
    // The catalog serves only what decoded whole.
    assert_eq!(
        catalog.agents().map(|a| a.name.as_str()).collect::<Vec<_>>(),
        ["helper"]
    );
    assert_eq!(catalog.prompts().count(), 0);
}

//! Definition-time validation: every problem in one pass, as `{code, severity, message, path}`.
//!
//! Two passes share one report. [`check_document`] looks at an agent as written (JSON or YAML),
//! where a side can have no backing or two, or a binding can be a bare string; [`validate`] looks
//! at decoded definitions together with the prompts, handlers, tools and hooks they refer to.
//! Paths are written as `sideA.subagents[0].as`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod hooks;

use super::definition::{AgentDefinition, PromptDefinition, PromptSide, SideConfig};

/// Tool names the runtime keeps for its own lifecycle tools; no relationship may take one.
pub const RESERVED_TOOL_NAMES: &[&str] = &[
    "stop_session",
    "fail_session",
    "session_status",
    "message_subagent",
    "end_subagent",
];

/// Every issue code this module reports.
pub mod codes {
    /// §8.1: both sides are human.
    pub const BOTH_SIDES_HUMAN: &str = "both_sides_human";
    /// §8.2: `subagents` on a human side.
    pub const SUBAGENTS_ON_HUMAN_SIDE: &str = "subagents_on_human_side";
    /// §8.3: a side with no backing.
    pub const SIDE_WITHOUT_BACKING: &str = "side_without_backing";
    /// §8.3: a side with more than one of `human`, `prompt`, `handler`.
    pub const SIDE_WITH_MULTIPLE_BACKINGS: &str = "side_with_multiple_backings";
    /// §8.4: a handler side names an undefined handler.
    pub const UNDEFINED_HANDLER: &str = "undefined_handler";
    /// §8.4: a prompt side names an undefined prompt.
    pub const UNDEFINED_PROMPT: &str = "undefined_prompt";
    /// §8.5: one relationship name on both sides.
    pub const RELATIONSHIP_ON_BOTH_SIDES: &str = "relationship_name_on_both_sides";
    /// §8.5: a relationship name that is also a tool's name.
    pub const RELATIONSHIP_COLLIDES_WITH_TOOL: &str = "relationship_name_collides_with_tool";
    /// §8.5: a relationship name the runtime reserves.
    pub const RELATIONSHIP_NAME_RESERVED: &str = "relationship_name_reserved";
    /// §8.5: one relationship name twice on a side.
    pub const DUPLICATE_RELATIONSHIP: &str = "duplicate_relationship_name";
    /// §8.6: session bindings, `maxSteps` or stop bindings on a side that is not a prompt side.
    pub const BINDING_ON_NON_PROMPT_SIDE: &str = "binding_on_non_prompt_side";
    /// §8.7: a session binding that is not an object.
    pub const BINDING_NOT_OBJECT_FORM: &str = "binding_not_object_form";
    /// §1.2: a human side with a property other than `human` and `label`.
    pub const PROPERTY_NOT_ALLOWED_ON_HUMAN_SIDE: &str = "property_not_allowed_on_human_side";
    /// §6: a hook id twice in `parentHooks`.
    pub const DUPLICATE_PARENT_HOOK: &str = "duplicate_parent_hook";
    /// §6: a composed child requires a parent hook the runtime does not have in the child's
    /// package namespace (fails closed).
    pub const MISSING_PARENT_HOOK: &str = "missing_parent_hook";
    /// An agent's own `hooks` names a hook its package namespace does not have.
    pub const UNDEFINED_HOOK: &str = "undefined_hook";
    /// A relationship with an agent that is not defined.
    pub const UNDEFINED_AGENT: &str = "undefined_agent";
    /// A prompt that names a tool the runtime does not have.
    pub const UNDEFINED_TOOL: &str = "undefined_tool";
    /// A required property is missing.
    pub const MISSING_PROPERTY: &str = "missing_property";
    /// A property this kind of definition does not have.
    pub const UNKNOWN_PROPERTY: &str = "unknown_property";
    /// A property whose value has the wrong type or is out of range.
    pub const INVALID_VALUE: &str = "invalid_value";
    /// Two agents (or two prompts) with one name.
    pub const DUPLICATE_NAME: &str = "duplicate_name";
    /// §5: a prompt hands off to an agent that is not `exposeAsTool`.
    pub const AGENT_NOT_EXPOSED: &str = "agent_not_exposed";
    /// §5: a handoff whose target's human side is not the thread's.
    pub const HANDOFF_SURFACE_MISMATCH: &str = "handoff_surface_mismatch";
    /// Two prompt sides and no `maxSessionTurns`: nothing outside stops them (a warning).
    pub const NO_SESSION_TURN_CAP: &str = "no_session_turn_cap";
}

/// How bad an issue is: an error rejects the definition; a warning does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The definition is rejected.
    Error,
    /// Worth knowing; the definition stands.
    Warning,
}

/// One problem with a definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issue {
    /// What kind of problem (a constant of [`codes`]).
    pub code: String,
    /// How bad.
    pub severity: Severity,
    /// What is wrong, for a person.
    pub message: String,
    /// Where, inside the definition: `sideA.subagents[0].as`.
    pub path: String,
    /// Which definition: the agent's or prompt's name, or the file.
    pub source: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{severity} [{}] {}", self.code, self.source)?;
        if !self.path.is_empty() {
            write!(f, " at {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Whether `issues` hold an error.
pub fn has_errors(issues: &[Issue]) -> bool {
    issues.iter().any(|i| i.severity == Severity::Error)
}

/// What the runtime has registered, for the references definitions make.
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// Handler names.
    pub handlers: BTreeSet<String>,
    /// Tool names.
    pub tools: BTreeSet<String>,
    /// Hooks, each by its key in its package's namespace ([`hook_key`](super::hook_key)).
    pub hooks: BTreeSet<String>,
}

impl Known {
    /// What every runtime has: the built-in handlers (`relay_pipe`).
    pub fn with_builtins() -> Self {
        let mut known = Self::default();
        known.handlers.insert(super::relay::RELAY_PIPE.to_owned());
        known
    }
}

struct Report<'a> {
    source: &'a str,
    issues: &'a mut Vec<Issue>,
}

impl Report<'_> {
    fn error(&mut self, code: &str, path: impl Into<String>, message: impl Into<String>) {
        self.push(code, Severity::Error, path, message);
    }

    fn warning(&mut self, code: &str, path: impl Into<String>, message: impl Into<String>) {
        self.push(code, Severity::Warning, path, message);
    }

    fn push(&mut self, code: &str, severity: Severity, path: impl Into<String>, message: impl Into<String>) {
        self.issues.push(Issue {
            code: code.to_owned(),
            severity,
            message: message.into(),
            path: path.into(),
            source: self.source.to_owned(),
        });
    }
}

const SIDE_NAMES: [&str; 2] = ["sideA", "sideB"];
const BACKINGS: [&str; 3] = ["human", "prompt", "handler"];
const SESSION_BINDINGS: [&str; 3] = ["sessionStop", "sessionFail", "sessionStatus"];
const PROMPT_ONLY: [&str; 7] = [
    "sessionStop",
    "sessionFail",
    "sessionStatus",
    "maxSteps",
    "stopOnResponse",
    "stopTool",
    "stopToolResponseProperty",
];
const PROMPT_SIDE_KEYS: [&str; 10] = [
    "prompt",
    "label",
    "subagents",
    "stopOnResponse",
    "stopTool",
    "stopToolResponseProperty",
    "maxSteps",
    "sessionStop",
    "sessionFail",
    "sessionStatus",
];
const AGENT_KEYS: [&str; 16] = [
    "name",
    "sideA",
    "sideB",
    "maxSessionTurns",
    "title",
    "description",
    "icon",
    "exposeAsTool",
    "toolDescription",
    "env",
    "hooks",
    "parentHooks",
    "packageName",
    "version",
    "author",
    "license",
];

/// Checks an agent as written and decodes it when it has no structural error. `source` names it
/// in the issues (a file, say).
pub fn check_document(document: &Value, source: &str) -> (Option<AgentDefinition>, Vec<Issue>) {
    let mut issues = Vec::new();
    let mut report = Report {
        source,
        issues: &mut issues,
    };
    let Some(object) = document.as_object() else {
        report.error(codes::INVALID_VALUE, "", "an agent definition must be an object");
        return (None, issues);
    };
    if !object.contains_key("name") {
        report.error(
            codes::MISSING_PROPERTY,
            "name",
            "an agent needs a `name` (a string)",
        );
    }
    for (path, message) in super::kinds::wrong_kinds(object, &super::kinds::AGENT, "") {
        report.error(codes::INVALID_VALUE, path, message);
    }
    for key in object.keys().filter(|k| !AGENT_KEYS.contains(&k.as_str())) {
        report.error(
            codes::UNKNOWN_PROPERTY,
            key.clone(),
            format!("an agent has no property `{key}`"),
        );
    }
    for side in SIDE_NAMES {
        match object.get(side) {
            None => report.error(
                codes::MISSING_PROPERTY,
                side,
                format!(
                    "`{side}` is required: both sides are explicit (write `{{ human: true }}` for a person)"
                ),
            ),
            Some(value) => check_side(value, side, &mut report),
        }
    }
    if has_errors(&issues) {
        return (None, issues);
    }
    match serde_path_to_error::deserialize::<_, AgentDefinition>(document) {
        Ok(definition) => (Some(definition), issues),
        Err(e) => {
            let path = e.path().to_string();
            let mut report = Report {
                source,
                issues: &mut issues,
            };
            report.error(
                codes::INVALID_VALUE,
                if path == "." { String::new() } else { path },
                e.into_inner().to_string(),
            );
            (None, issues)
        }
    }
}

fn check_side(value: &Value, side: &str, report: &mut Report<'_>) {
    let Some(object) = value.as_object() else {
        report.error(codes::INVALID_VALUE, side, "a side must be an object");
        return;
    };
    for (path, message) in super::kinds::wrong_kinds(object, &super::kinds::SIDE, side) {
        report.error(codes::INVALID_VALUE, path, message);
    }
    let backings: Vec<&str> = BACKINGS.into_iter().filter(|b| object.contains_key(*b)).collect();
    match backings.as_slice() {
        [] => report.error(
            codes::SIDE_WITHOUT_BACKING,
            side,
            "a side needs exactly one of `human`, `prompt` or `handler`; it has none",
        ),
        [_] => {}
        many => report.error(
            codes::SIDE_WITH_MULTIPLE_BACKINGS,
            side,
            format!(
                "a side needs exactly one of `human`, `prompt` or `handler`; it has {}",
                many.join(", ")
            ),
        ),
    }
    let backing = match backings.as_slice() {
        [one] => *one,
        _ => return,
    };
    if let Some(subagents) = object.get("subagents") {
        if backing == "human" {
            report.error(
                codes::SUBAGENTS_ON_HUMAN_SIDE,
                format!("{side}.subagents"),
                "a human side cannot own subagents: nothing on it can call them",
            );
        } else {
            check_subagents(subagents, side, report);
        }
    }
    for key in object.keys() {
        let path = format!("{side}.{key}");
        let key = key.as_str();
        if key == backing || key == "label" || key == "subagents" {
            continue;
        }
        if backing != "prompt" && PROMPT_ONLY.contains(&key) {
            report.error(
                codes::BINDING_ON_NON_PROMPT_SIDE,
                path,
                format!("`{key}` belongs on a prompt side; a {backing} side's turn ends on its own"),
            );
        } else if backing == "human" {
            report.error(
                codes::PROPERTY_NOT_ALLOWED_ON_HUMAN_SIDE,
                path,
                format!("a human side takes only `human` and `label`, not `{key}`"),
            );
        } else if backing == "prompt" && PROMPT_SIDE_KEYS.contains(&key) {
            if SESSION_BINDINGS.contains(&key) {
                check_binding(&object[key], &path, report);
            }
        } else {
            report.error(
                codes::UNKNOWN_PROPERTY,
                path,
                format!("a {backing} side has no property `{key}`"),
            );
        }
    }
    match (backing, &object[backing]) {
        ("human", Value::Bool(true)) => {}
        ("human", _) => report.error(
            codes::INVALID_VALUE,
            format!("{side}.human"),
            "`human` must be `true`",
        ),
        (_, Value::String(name)) if !name.trim().is_empty() => {}
        (_, _) => report.error(
            codes::INVALID_VALUE,
            format!("{side}.{backing}"),
            format!("`{backing}` must name a {backing}"),
        ),
    }
}

fn check_binding(value: &Value, path: &str, report: &mut Report<'_>) {
    match value.as_object() {
        None => report.error(
            codes::BINDING_NOT_OBJECT_FORM,
            path,
            "a session binding must be an object: `{ name, messageProperty?, attachmentsProperty? }`",
        ),
        Some(object) if !object.get("name").is_some_and(Value::is_string) => {
            report.error(
                codes::MISSING_PROPERTY,
                format!("{path}.name"),
                "a session binding needs the tool's `name`",
            );
        }
        Some(_) => {}
    }
}

fn check_subagents(value: &Value, side: &str, report: &mut Report<'_>) {
    let Some(list) = value.as_array() else {
        report.error(
            codes::INVALID_VALUE,
            format!("{side}.subagents"),
            "`subagents` must be a list",
        );
        return;
    };
    for (i, relationship) in list.iter().enumerate() {
        if !relationship.get("agent").is_some_and(Value::is_string) {
            report.error(
                codes::MISSING_PROPERTY,
                format!("{side}.subagents[{i}].agent"),
                "a relationship needs the child `agent`'s name",
            );
        }
    }
}

/// Checks decoded agents and prompts together with what the runtime has registered: references,
/// relationship names, parent hooks, and the rules that hold across sides.
pub fn validate(agents: &[AgentDefinition], prompts: &[PromptDefinition], known: &Known) -> Vec<Issue> {
    let mut issues = Vec::new();
    let prompt_by_name: BTreeMap<&str, &PromptDefinition> =
        prompts.iter().map(|p| (p.name.as_str(), p)).collect();
    let agent_by_name: BTreeMap<&str, &AgentDefinition> =
        agents.iter().map(|a| (a.name.as_str(), a)).collect();
    let mut seen = BTreeSet::new();
    for prompt in prompts {
        let mut report = Report {
            source: &prompt.name,
            issues: &mut issues,
        };
        if !seen.insert(("prompt", prompt.name.as_str())) {
            report.error(
                codes::DUPLICATE_NAME,
                "name",
                format!("another prompt is named `{}`", prompt.name),
            );
        }
        for (i, tool) in prompt.tools.iter().enumerate() {
            // An agent in a prompt's tools is a handoff, checked with the agents that use it.
            if !known.tools.contains(tool) && !agent_by_name.contains_key(tool.as_str()) {
                report.error(
                    codes::UNDEFINED_TOOL,
                    format!("tools[{i}]"),
                    format!("no tool `{tool}` is registered"),
                );
            }
        }
    }
    for agent in agents {
        let mut report = Report {
            source: &agent.name,
            issues: &mut issues,
        };
        if !seen.insert(("agent", agent.name.as_str())) {
            report.error(
                codes::DUPLICATE_NAME,
                "name",
                format!("another agent is named `{}`", agent.name),
            );
        }
        check_agent(agent, &prompt_by_name, &agent_by_name, known, &mut report);
    }
    issues
}

fn check_agent(
    agent: &AgentDefinition,
    prompts: &BTreeMap<&str, &PromptDefinition>,
    agents: &BTreeMap<&str, &AgentDefinition>,
    known: &Known,
    report: &mut Report<'_>,
) {
    if agent.side_a.is_human() && agent.side_b.is_human() {
        report.error(
            codes::BOTH_SIDES_HUMAN,
            "sideB",
            "both sides are human: reserved, and rejected in Standard Agents 0.2.0",
        );
    }
    if agent.max_session_turns == Some(0) {
        report.error(
            codes::INVALID_VALUE,
            "maxSessionTurns",
            "`maxSessionTurns` must be at least 1",
        );
    }
    if matches!(
        (&agent.side_a, &agent.side_b),
        (SideConfig::Prompt(_), SideConfig::Prompt(_))
    ) && agent.max_session_turns.is_none()
    {
        report.warning(
            codes::NO_SESSION_TURN_CAP,
            "maxSessionTurns",
            "two prompt sides and no `maxSessionTurns`: nothing outside the models stops them",
        );
    }
    hooks::check_declared(agent, known, report);
    let mut names_by_side: [BTreeSet<&str>; 2] = Default::default();
    for (index, (side_name, side)) in [("sideA", &agent.side_a), ("sideB", &agent.side_b)]
        .into_iter()
        .enumerate()
    {
        let tools = side_tools(side, prompts);
        match side {
            SideConfig::Human(_) => {}
            SideConfig::Prompt(p) => {
                let handoffs = prompts
                    .get(p.prompt.as_str())
                    .into_iter()
                    .flat_map(|d| d.tools.iter())
                    .filter_map(|t| agents.get(t.as_str()));
                for target in handoffs {
                    let at = format!("{side_name}.prompt");
                    if !target.expose_as_tool {
                        report.error(
                            codes::AGENT_NOT_EXPOSED,
                            at.clone(),
                            format!(
                                "prompt `{}` hands off to `{}`, which is not exposeAsTool",
                                p.prompt, target.name
                            ),
                        );
                    }
                    let surface = |a: &AgentDefinition| {
                        [(&a.side_a, "sideA"), (&a.side_b, "sideB")]
                            .into_iter()
                            .find(|(s, _)| s.is_human())
                            .map(|(_, n)| n)
                    };
                    match (surface(agent), surface(target)) {
                        (Some(ours), Some(theirs)) if ours == theirs => {}
                        (ours, theirs) => report.error(
                            codes::HANDOFF_SURFACE_MISMATCH,
                            at,
                            format!(
                                "a handoff keeps the person where they are: this thread's human side is {}, `{}`'s is {}",
                                ours.unwrap_or("none"),
                                target.name,
                                theirs.unwrap_or("none")
                            ),
                        ),
                    }
                }
                if !prompts.contains_key(p.prompt.as_str()) {
                    report.error(
                        codes::UNDEFINED_PROMPT,
                        format!("{side_name}.prompt"),
                        format!("no prompt `{}` is defined", p.prompt),
                    );
                }
                if p.max_steps == Some(0) {
                    report.error(
                        codes::INVALID_VALUE,
                        format!("{side_name}.maxSteps"),
                        "`maxSteps` must be at least 1",
                    );
                }
            }
            SideConfig::Handler(h) => {
                if !known.handlers.contains(&h.handler) {
                    report.error(
                        codes::UNDEFINED_HANDLER,
                        format!("{side_name}.handler"),
                        format!("no handler `{}` is registered", h.handler),
                    );
                }
            }
        }
        for (i, relationship) in side.subagents().iter().enumerate() {
            let at = format!("{side_name}.subagents[{i}]");
            let name = relationship.tool_name();
            let name_path = if relationship.as_name.is_some() {
                format!("{at}.as")
            } else {
                format!("{at}.agent")
            };
            match agents.get(relationship.agent.as_str()) {
                None => report.error(
                    codes::UNDEFINED_AGENT,
                    format!("{at}.agent"),
                    format!("no agent `{}` is defined", relationship.agent),
                ),
                Some(child) if relationship.is_enabled() => {
                    hooks::check_composed(child, &format!("{at}.agent"), known, report);
                }
                Some(_) => {}
            }
            if !names_by_side[index].insert(name) {
                report.error(
                    codes::DUPLICATE_RELATIONSHIP,
                    name_path.clone(),
                    format!("relationship name `{name}` is used twice on this side"),
                );
            }
            if index == 1 && names_by_side[0].contains(name) {
                report.error(
                    codes::RELATIONSHIP_ON_BOTH_SIDES,
                    name_path.clone(),
                    format!("relationship name `{name}` is on both sides"),
                );
            }
            if tools.contains(name) {
                report.error(
                    codes::RELATIONSHIP_COLLIDES_WITH_TOOL,
                    name_path.clone(),
                    format!("relationship name `{name}` is also a tool of this side"),
                );
            }
            if RESERVED_TOOL_NAMES.contains(&name) {
                report.error(
                    codes::RELATIONSHIP_NAME_RESERVED,
                    name_path,
                    format!("relationship name `{name}` is reserved for the runtime's lifecycle tools"),
                );
            }
        }
    }
}

/// The tool names a side's model sees besides its relationships: its prompt's tools and the
/// tools its bindings name.
fn side_tools<'a>(side: &'a SideConfig, prompts: &BTreeMap<&str, &'a PromptDefinition>) -> BTreeSet<&'a str> {
    let SideConfig::Prompt(p) = side else {
        return BTreeSet::new();
    };
    let mut tools: BTreeSet<&str> = prompts
        .get(p.prompt.as_str())
        .map(|d| d.tools.iter().map(String::as_str).collect())
        .unwrap_or_default();
    tools.extend(binding_tools(p));
    tools
}

/// The tools a prompt side's bindings name.
pub(crate) fn binding_tools(side: &PromptSide) -> impl Iterator<Item = &str> {
    [&side.session_stop, &side.session_fail, &side.session_status]
        .into_iter()
        .flatten()
        .map(|b| b.name.as_str())
        .chain(side.stop_tool.as_deref())
}

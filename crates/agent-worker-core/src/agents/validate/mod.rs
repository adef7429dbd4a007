//! Definition-time validation: every problem in one pass, as `{code, severity, message, path}`.
//!
//! Two passes share one report. [`check_document`] looks at an agent as written (JSON or YAML),
//! where a side can have no backing or two, a binding can be a bare string, or an entry of
//! `subagents` or `parentHooks` can hold a wrong value; [`validate`] looks at definitions
//! together with the prompts, handlers, tools and hooks they refer to. A file with a structural
//! problem does not skip the second pass: it sees what could be read of it (`draft`), so one
//! run names every problem of every file.
//! Paths are written as `sideA.subagents[0].as`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

mod document;
pub(crate) mod draft;
mod hooks;

pub use document::check_document;
use draft::{AgentDraft, PromptDraft};

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

/// Checks agents and prompts together with what the runtime has registered: references,
/// relationship names, parent hooks, and the rules that hold across sides. Each issue is named by
/// its agent's or prompt's name.
pub fn validate(agents: &[AgentDefinition], prompts: &[PromptDefinition], known: &Known) -> Vec<Issue> {
    let agents: Vec<AgentDraft> = agents.iter().cloned().map(AgentDraft::whole).collect();
    let prompts: Vec<PromptDraft> = prompts.iter().cloned().map(PromptDraft::whole).collect();
    validate_drafts(&agents, &prompts, known)
}

/// [`validate`] of what could be read of each definition, each issue named by its draft's source.
pub(crate) fn validate_drafts(agents: &[AgentDraft], prompts: &[PromptDraft], known: &Known) -> Vec<Issue> {
    let mut issues = Vec::new();
    let prompt_by_name: BTreeMap<&str, &PromptDraft> =
        prompts.iter().map(|p| (p.definition.name.as_str(), p)).collect();
    let agent_by_name: BTreeMap<&str, &AgentDraft> =
        agents.iter().map(|a| (a.definition.name.as_str(), a)).collect();
    let mut seen = BTreeSet::new();
    for draft in prompts {
        let prompt = &draft.definition;
        let mut report = Report {
            source: &draft.source,
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
                    format!("tools[{}]", draft.tool_at(i)),
                    format!("no tool `{tool}` is registered"),
                );
            }
        }
    }
    for draft in agents {
        let mut report = Report {
            source: &draft.source,
            issues: &mut issues,
        };
        let name = draft.definition.name.as_str();
        if !seen.insert(("agent", name)) {
            report.error(
                codes::DUPLICATE_NAME,
                "name",
                format!("another agent is named `{name}`"),
            );
        }
        check_agent(draft, &prompt_by_name, &agent_by_name, known, &mut report);
    }
    issues
}

fn check_agent(
    draft: &AgentDraft,
    prompts: &BTreeMap<&str, &PromptDraft>,
    agents: &BTreeMap<&str, &AgentDraft>,
    known: &Known,
    report: &mut Report<'_>,
) {
    let agent = &draft.definition;
    let sides = [draft.side(0), draft.side(1)];
    if sides.iter().all(|s| s.is_some_and(SideConfig::is_human)) {
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
    if matches!(sides, [Some(SideConfig::Prompt(_)), Some(SideConfig::Prompt(_))])
        && agent.max_session_turns.is_none()
    {
        report.warning(
            codes::NO_SESSION_TURN_CAP,
            "maxSessionTurns",
            "two prompt sides and no `maxSessionTurns`: nothing outside the models stops them",
        );
    }
    hooks::check_declared(draft, known, report);
    let mut names_by_side: [BTreeSet<&str>; 2] = Default::default();
    for (index, (side_name, side)) in ["sideA", "sideB"].into_iter().zip(sides).enumerate() {
        // A side that could not be read has been named by the structural pass.
        let Some(side) = side else {
            continue;
        };
        let tools = side_tools(side, prompts);
        match side {
            SideConfig::Human(_) => {}
            SideConfig::Prompt(p) => {
                check_handoffs(draft, side_name, p, prompts, agents, report);
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
            let at = format!("{side_name}.subagents[{}]", draft.subagent_at(index, i));
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

/// §5: each agent prompt side `p` of `draft` hands off to is exposed, and keeps the person on
/// the same side. Where a side of either could not be read, where the person is stays unknown.
fn check_handoffs(
    draft: &AgentDraft,
    side_name: &str,
    p: &PromptSide,
    prompts: &BTreeMap<&str, &PromptDraft>,
    agents: &BTreeMap<&str, &AgentDraft>,
    report: &mut Report<'_>,
) {
    let handoffs = prompts
        .get(p.prompt.as_str())
        .into_iter()
        .flat_map(|d| d.definition.tools.iter())
        .filter_map(|t| agents.get(t.as_str()));
    let surface = |a: &AgentDraft| {
        [(a.side(0), "sideA"), (a.side(1), "sideB")]
            .into_iter()
            .find(|(s, _)| s.is_some_and(SideConfig::is_human))
            .map(|(_, n)| n)
    };
    for target in handoffs {
        let at = format!("{side_name}.prompt");
        let target_name = &target.definition.name;
        if !target.definition.expose_as_tool {
            report.error(
                codes::AGENT_NOT_EXPOSED,
                at.clone(),
                format!(
                    "prompt `{}` hands off to `{target_name}`, which is not exposeAsTool",
                    p.prompt
                ),
            );
        }
        if !draft.sides_known() || !target.sides_known() {
            continue;
        }
        match (surface(draft), surface(target)) {
            (Some(ours), Some(theirs)) if ours == theirs => {}
            (ours, theirs) => report.error(
                codes::HANDOFF_SURFACE_MISMATCH,
                at,
                format!(
                    "a handoff keeps the person where they are: this thread's human side is {}, `{target_name}`'s is {}",
                    ours.unwrap_or("none"),
                    theirs.unwrap_or("none")
                ),
            ),
        }
    }
}

/// The tool names a side's model sees besides its relationships: its prompt's tools and the
/// tools its bindings name.
fn side_tools<'a>(side: &'a SideConfig, prompts: &BTreeMap<&str, &'a PromptDraft>) -> BTreeSet<&'a str> {
    let SideConfig::Prompt(p) = side else {
        return BTreeSet::new();
    };
    let mut tools: BTreeSet<&str> = prompts
        .get(p.prompt.as_str())
        .map(|d| d.definition.tools.iter().map(String::as_str).collect())
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

//! The hooks a definition names, checked against the runtime's (seed 003 §6): an agent's own
//! `hooks` and a composed child's `parentHooks` are looked for in the namespace of the package
//! that declares them (the agent's `packageName`; the runtime's own for an agent of no package).

use std::collections::BTreeSet;

use super::draft::AgentDraft;
use super::{Known, Report, codes};
use crate::agents::definition::AgentDefinition;
use crate::agents::hooks::hook_key;

/// `agent`'s own declarations: each of its `hooks` registered in its namespace, and no hook
/// required twice in its `parentHooks`.
pub(super) fn check_declared(draft: &AgentDraft, known: &Known, report: &mut Report<'_>) {
    let agent = &draft.definition;
    for (i, id) in agent.hooks.iter().enumerate() {
        if !known.hooks.contains(&hook_key(agent.package_name.as_deref(), id)) {
            report.error(
                codes::UNDEFINED_HOOK,
                format!("hooks[{}]", draft.hook_at(i)),
                format!("hook `{id}` is not registered{}", namespace(agent)),
            );
        }
    }
    let mut required = BTreeSet::new();
    for (i, requirement) in agent.parent_hooks.iter().enumerate() {
        if !required.insert(requirement.hook.as_str()) {
            report.error(
                codes::DUPLICATE_PARENT_HOOK,
                format!("parentHooks[{}].hook", draft.parent_hook_at(i)),
                format!("hook `{}` is required twice", requirement.hook),
            );
        }
    }
}

/// A parent composing `child` (at `path`): every hook the child requires is registered in the
/// child's namespace, or composition fails closed.
pub(super) fn check_composed(draft: &AgentDraft, path: &str, known: &Known, report: &mut Report<'_>) {
    let child = &draft.definition;
    for (h, requirement) in child.parent_hooks.iter().enumerate() {
        let h = draft.parent_hook_at(h);
        if !known
            .hooks
            .contains(&hook_key(child.package_name.as_deref(), &requirement.hook))
        {
            report.error(
                codes::MISSING_PARENT_HOOK,
                path,
                format!(
                    "composing `{}` requires hook `{}` (its parentHooks[{h}]: {}), which is not registered{}; composition fails closed",
                    child.name,
                    requirement.hook,
                    requirement.reason,
                    namespace(child)
                ),
            );
        }
    }
}

/// Where `agent`'s hooks were looked for, as words after "not registered".
fn namespace(agent: &AgentDefinition) -> String {
    match &agent.package_name {
        Some(package) => format!(" in package `{package}`'s namespace"),
        None => String::new(),
    }
}

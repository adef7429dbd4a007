//! The structural pass: an agent as written (JSON or YAML), where a side can have no backing or
//! two, a binding can be a bare string, or an entry of `subagents` or `parentHooks` can hold a
//! wrong value. Every problem is named at once, each entry's too; none stops the checks across
//! definitions, which look at what [`draft`](super::draft) could read.

use serde_json::{Map, Value};

use super::{Issue, Report, codes, has_errors};
use crate::agents::definition::AgentDefinition;
use crate::agents::kinds::{self, Kind};

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
/// in the issues (a file, say). An agent with a structural error is still checked against the
/// others: [`Catalog::load`](crate::agents::Catalog::load) reads it as far as it goes.
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
    for (path, message) in kinds::wrong_kinds(object, &kinds::AGENT, "") {
        report.error(codes::INVALID_VALUE, path, message);
    }
    for key in object.keys().filter(|k| !AGENT_KEYS.contains(&k.as_str())) {
        report.error(
            codes::UNKNOWN_PROPERTY,
            key.clone(),
            format!("an agent has no property `{key}`"),
        );
    }
    if let Some(Value::Array(entries)) = object.get("parentHooks") {
        for (i, entry) in entries.iter().enumerate() {
            check_entry(
                entry,
                &format!("parentHooks[{i}]"),
                Entry::PARENT_HOOK,
                &mut report,
            );
        }
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
    // The checks above leave the decoder nothing to find; should it find something still, say so.
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
    for (path, message) in kinds::wrong_kinds(object, &kinds::SIDE, side) {
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
        [one] => Some(*one),
        _ => None,
    };
    match (backing, object.get("subagents")) {
        (Some("human"), Some(_)) => report.error(
            codes::SUBAGENTS_ON_HUMAN_SIDE,
            format!("{side}.subagents"),
            "a human side cannot own subagents: nothing on it can call them",
        ),
        // Its entries are checked whatever backs the side: a wrong backing hides none of them.
        (_, Some(Value::Array(entries))) => {
            for (i, entry) in entries.iter().enumerate() {
                let path = format!("{side}.subagents[{i}]");
                check_entry(entry, &path, Entry::RELATIONSHIP, report);
            }
        }
        // Not a list: named by its kind above.
        _ => {}
    }
    let Some(backing) = backing else {
        return;
    };
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
    if value.is_object() {
        check_entry(value, path, Entry::BINDING, report);
    } else {
        report.error(
            codes::BINDING_NOT_OBJECT_FORM,
            path,
            "a session binding must be an object: `{ name, messageProperty?, attachmentsProperty? }`",
        );
    }
}

/// An object inside a definition: what it is called in messages, the kinds of the properties it
/// may have, and those it must.
struct Entry {
    what: &'static str,
    kinds: &'static [(&'static str, Kind)],
    required: &'static [(&'static str, &'static str)],
}

impl Entry {
    const RELATIONSHIP: Self = Self {
        what: "a relationship",
        kinds: &kinds::RELATIONSHIP,
        required: &[("agent", "the child `agent`'s name")],
    };
    const PARENT_HOOK: Self = Self {
        what: "a parent hook requirement",
        kinds: &kinds::PARENT_HOOK,
        required: &[("hook", "the `hook`'s id"), ("reason", "a `reason`")],
    };
    const BINDING: Self = Self {
        what: "a session binding",
        kinds: &kinds::BINDING,
        required: &[("name", "the tool's `name`")],
    };
}

/// Every problem of one entry at `path`: not an object, a wrong value, a property it does not
/// have, a property it needs.
fn check_entry(value: &Value, path: &str, entry: Entry, report: &mut Report<'_>) {
    let Some(object): Option<&Map<String, Value>> = value.as_object() else {
        report.error(
            codes::INVALID_VALUE,
            path,
            format!("{} must be an object", entry.what),
        );
        return;
    };
    for (at, message) in kinds::wrong_kinds(object, entry.kinds, path) {
        report.error(codes::INVALID_VALUE, at, message);
    }
    for key in object.keys() {
        if !entry.kinds.iter().any(|(k, _)| k == key) {
            report.error(
                codes::UNKNOWN_PROPERTY,
                format!("{path}.{key}"),
                format!("{} has no property `{key}`", entry.what),
            );
        }
    }
    for (key, what) in entry.required {
        if !object.contains_key(*key) {
            report.error(
                codes::MISSING_PROPERTY,
                format!("{path}.{key}"),
                format!("{} needs {what}", entry.what),
            );
        }
    }
}

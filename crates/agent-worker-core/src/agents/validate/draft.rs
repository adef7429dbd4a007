//! Definitions read as far as they go, for the checks across definitions: a file with a
//! structural error is still checked for what it refers to (its prompt, handler, children and
//! hooks), and a prompt file with a problem is still known by its name. What cannot be read is
//! left out, never guessed: the structural pass has named it already. An entry left out of a
//! list leaves the entries after it where they stood in the file, so their paths stay true.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::agents::definition::{
    AgentDefinition, HandlerSide, HumanSide, ParentHookRequirement, PromptDefinition, PromptSide,
    SessionToolBinding, SideConfig, SubagentRelationship, define_agent,
};
use crate::agents::kinds::Kind;

/// An agent as the checks across definitions see it.
#[derive(Debug, Clone)]
pub(crate) struct AgentDraft {
    /// What names it in issues: the agent's name, or its file.
    pub(crate) source: String,
    /// What could be read of it; a side that could not be holds a stand-in (see `sides_read`).
    pub(crate) definition: AgentDefinition,
    /// Whether side A and side B could be read.
    sides_read: [bool; 2],
    /// Where each entry kept stood in the file, when an entry before it was left out.
    at: Positions,
}

/// The file's index of each entry kept, list by list; an empty list: where they stand.
#[derive(Debug, Clone, Default)]
struct Positions {
    hooks: Vec<usize>,
    parent_hooks: Vec<usize>,
    subagents: [Vec<usize>; 2],
}

/// The file's index of entry `i` of a list whose entries kept stood at `positions`.
fn position(positions: &[usize], i: usize) -> usize {
    positions.get(i).copied().unwrap_or(i)
}

impl AgentDraft {
    /// A definition built whole (in Rust, or decoded without a problem), named by its name.
    pub(crate) fn whole(definition: AgentDefinition) -> Self {
        Self {
            source: definition.name.clone(),
            definition,
            sides_read: [true; 2],
            at: Positions::default(),
        }
    }

    /// The same, named by `source` in issues.
    pub(crate) fn named_by(mut self, source: &str) -> Self {
        source.clone_into(&mut self.source);
        self
    }

    /// Side A (`0`) or B (`1`), when it could be read.
    pub(crate) fn side(&self, index: usize) -> Option<&SideConfig> {
        let side = match index {
            0 => &self.definition.side_a,
            _ => &self.definition.side_b,
        };
        self.sides_read
            .get(index)
            .copied()
            .unwrap_or(false)
            .then_some(side)
    }

    /// Whether both sides could be read.
    pub(crate) fn sides_known(&self) -> bool {
        self.sides_read == [true; 2]
    }

    /// The file's index of the `i`th hook kept.
    pub(crate) fn hook_at(&self, i: usize) -> usize {
        position(&self.at.hooks, i)
    }

    /// The file's index of the `i`th parent hook requirement kept.
    pub(crate) fn parent_hook_at(&self, i: usize) -> usize {
        position(&self.at.parent_hooks, i)
    }

    /// The file's index of the `i`th relationship kept on side `index`.
    pub(crate) fn subagent_at(&self, index: usize, i: usize) -> usize {
        self.at.subagents.get(index).map_or(i, |p| position(p, i))
    }
}

/// A prompt as the checks across definitions see it.
#[derive(Debug, Clone)]
pub(crate) struct PromptDraft {
    /// What names it in issues: the prompt's name, or its file.
    pub(crate) source: String,
    /// What could be read of it.
    pub(crate) definition: PromptDefinition,
    /// Where each tool kept stood in the file.
    tools_at: Vec<usize>,
}

impl PromptDraft {
    /// A prompt built whole, named by its name.
    pub(crate) fn whole(definition: PromptDefinition) -> Self {
        Self {
            source: definition.name.clone(),
            definition,
            tools_at: Vec::new(),
        }
    }

    /// The file's index of the `i`th tool kept.
    pub(crate) fn tool_at(&self, i: usize) -> usize {
        position(&self.tools_at, i)
    }
}

/// What can be read of the agent `document` of file `source`; one without a usable `name` goes
/// by `fallback_name` (its file's stem). `None` when it is not an object.
pub(crate) fn agent(document: &Value, fallback_name: &str, source: &str) -> Option<AgentDraft> {
    let object = document.as_object()?;
    let name = text(object, "name").unwrap_or_else(|| fallback_name.to_owned());
    let mut definition = define_agent(name, SideConfig::human(), SideConfig::human());
    definition.max_session_turns = value(object, "maxSessionTurns", Kind::Count);
    definition.title = text(object, "title");
    definition.description = text(object, "description");
    definition.icon = text(object, "icon");
    definition.expose_as_tool = value(object, "exposeAsTool", Kind::Flag).unwrap_or(false);
    definition.tool_description = text(object, "toolDescription");
    definition.env = value(object, "env", Kind::TextMap).unwrap_or_default();
    definition.package_name = text(object, "packageName");
    definition.version = text(object, "version");
    definition.author = text(object, "author");
    definition.license = text(object, "license");
    let mut at = Positions::default();
    (definition.hooks, at.hooks) = entries(object.get("hooks"), |v| v.as_str().map(str::to_owned));
    (definition.parent_hooks, at.parent_hooks) = entries(object.get("parentHooks"), parent_hook);
    let mut sides_read = [false; 2];
    for (index, key) in ["sideA", "sideB"].into_iter().enumerate() {
        let Some((config, positions)) = object.get(key).and_then(side) else {
            continue;
        };
        match index {
            0 => definition.side_a = config,
            _ => definition.side_b = config,
        }
        sides_read[index] = true;
        at.subagents[index] = positions;
    }
    Some(AgentDraft {
        source: source.to_owned(),
        definition,
        sides_read,
        at,
    })
}

/// What can be read of the prompt `document` of file `source`; one without a usable `name` goes
/// by `fallback_name` (its file's stem). `None` when it is not an object.
pub(crate) fn prompt(document: &Value, fallback_name: &str, source: &str) -> Option<PromptDraft> {
    let object = document.as_object()?;
    let name = text(object, "name").unwrap_or_else(|| fallback_name.to_owned());
    let mut definition = PromptDefinition::new(name, text(object, "system").unwrap_or_default());
    definition.model = text(object, "model");
    let tools_at;
    (definition.tools, tools_at) = entries(object.get("tools"), |v| v.as_str().map(str::to_owned));
    definition.tool_choice = object
        .get("toolChoice")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    definition.max_tokens = value(object, "maxTokens", Kind::Count);
    definition.temperature = value(object, "temperature", Kind::Number);
    Some(PromptDraft {
        source: source.to_owned(),
        definition,
        tools_at,
    })
}

/// A side, when it has exactly one backing that names something, with where its relationships
/// stood.
fn side(entry: &Value) -> Option<(SideConfig, Vec<usize>)> {
    let object = entry.as_object()?;
    let backings: Vec<&str> = ["human", "prompt", "handler"]
        .into_iter()
        .filter(|b| object.contains_key(*b))
        .collect();
    let [backing] = backings.as_slice() else {
        return None;
    };
    let label = text(object, "label");
    if *backing == "human" {
        let human = object.get("human").and_then(Value::as_bool)?;
        return human.then_some((SideConfig::Human(HumanSide { human: (), label }), Vec::new()));
    }
    // An empty name is a structural error, not a reference to look up.
    let name = text(object, backing).filter(|n| !n.trim().is_empty())?;
    let (subagents, positions) = entries(object.get("subagents"), relationship);
    let config = if *backing == "handler" {
        SideConfig::Handler(HandlerSide {
            handler: name,
            label,
            subagents,
        })
    } else {
        let mut side = PromptSide::new(name);
        side.label = label;
        side.subagents = subagents;
        side.stop_on_response = value(object, "stopOnResponse", Kind::Flag).unwrap_or(true);
        side.stop_tool = text(object, "stopTool");
        side.stop_tool_response_property = text(object, "stopToolResponseProperty");
        side.max_steps = value(object, "maxSteps", Kind::Count);
        side.session_stop = object.get("sessionStop").and_then(binding);
        side.session_fail = object.get("sessionFail").and_then(binding);
        side.session_status = object.get("sessionStatus").and_then(binding);
        SideConfig::Prompt(side)
    };
    Some((config, positions))
}

/// A relationship that names its child.
fn relationship(entry: &Value) -> Option<SubagentRelationship> {
    let object = entry.as_object()?;
    Some(SubagentRelationship {
        as_name: text(object, "as"),
        max_instances: value(object, "maxInstances", Kind::Count),
        optional: value(object, "optional", Kind::Flag).unwrap_or(false),
        enabled: value(object, "enabled", Kind::Flag),
        hidden: value(object, "hidden", Kind::Flag).unwrap_or(false),
        ..SubagentRelationship::new(text(object, "agent")?)
    })
}

/// A parent hook requirement that names its hook.
fn parent_hook(entry: &Value) -> Option<ParentHookRequirement> {
    let object = entry.as_object()?;
    Some(ParentHookRequirement {
        hook: text(object, "hook")?,
        reason: text(object, "reason").unwrap_or_default(),
        stage: object
            .get("stage")
            .and_then(|v| serde_json::from_value(v.clone()).ok()),
    })
}

/// A session binding that names its tool.
fn binding(entry: &Value) -> Option<SessionToolBinding> {
    let object = entry.as_object()?;
    Some(SessionToolBinding {
        message_property: text(object, "messageProperty"),
        attachments_property: text(object, "attachmentsProperty"),
        ..SessionToolBinding::new(text(object, "name")?)
    })
}

/// The entries of a list that `read` can read, and where each stood.
fn entries<T>(list: Option<&Value>, read: impl Fn(&Value) -> Option<T>) -> (Vec<T>, Vec<usize>) {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, entry)| read(entry).map(|read| (read, i)))
        .unzip()
}

fn text(object: &Map<String, Value>, key: &str) -> Option<String> {
    object.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Property `key` when it is of `kind` and decodes.
fn value<T: DeserializeOwned>(object: &Map<String, Value>, key: &str, kind: Kind) -> Option<T> {
    object
        .get(key)
        .filter(|v| kind.holds(v))
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_cannot_be_read_is_left_out_and_the_rest_keeps_its_place() {
        let document = json!({
            "name": 7,
            "maxSessionTurns": 0,
            "hooks": [1, "audit"],
            "parentHooks": [{ "reason": "no id" }, { "hook": "sync", "stage": "later" }],
            "sideA": { "prompt": "p", "handler": "h" },
            "sideB": {
                "prompt": "q",
                "maxSteps": "many",
                "subagents": ["bare", { "agent": "child", "as": "kid", "maxInstances": -1 }],
            },
        });
        let draft = agent(&document, "stem", "agents/stem.yaml").unwrap();
        assert_eq!(draft.definition.name, "stem");
        assert_eq!(draft.definition.max_session_turns, None);
        assert_eq!(draft.definition.hooks, ["audit"]);
        assert_eq!(draft.hook_at(0), 1);
        assert_eq!(draft.definition.parent_hooks[0].hook, "sync");
        assert_eq!(draft.definition.parent_hooks[0].stage, None);
        assert_eq!(draft.parent_hook_at(0), 1);
        assert!(draft.side(0).is_none(), "two backings: not read");
        let Some(SideConfig::Prompt(side)) = draft.side(1) else {
            panic!("{draft:?}")
        };
        assert_eq!((side.prompt.as_str(), side.max_steps), ("q", None));
        assert_eq!(side.subagents[0].tool_name(), "kid");
        assert_eq!(side.subagents[0].max_instances, None);
        assert_eq!(draft.subagent_at(1, 0), 1);
        assert!(!draft.sides_known());
        let prompt = prompt(
            &json!({ "tools": ["a", 1, "b"], "temprature": 1 }),
            "p",
            "prompts/p.yaml",
        )
        .unwrap();
        assert_eq!(prompt.definition.name, "p");
        assert_eq!(prompt.definition.tools, ["a", "b"]);
        assert_eq!(prompt.tool_at(1), 2);
    }
}

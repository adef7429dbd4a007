//! Standard Agents definitions: an agent has exactly two sides, each backed by a human, a prompt
//! or a handler. Field names are camelCase on the wire, as the specification writes them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A side's configuration: exactly one backing.
// Definitions are few and built once; matching on an unboxed prompt side is worth the bytes.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SideConfig {
    /// A person takes this side's turns: the session parks until their message arrives.
    Human(HumanSide),
    /// A model takes this side's turns, driven by a prompt.
    Prompt(PromptSide),
    /// Deterministic code takes this side's turns: one handler invocation a turn.
    Handler(HandlerSide),
}

impl SideConfig {
    /// A human side.
    pub fn human() -> Self {
        Self::Human(HumanSide::default())
    }

    /// A prompt side with the defaults.
    pub fn prompt(prompt: impl Into<String>) -> Self {
        Self::Prompt(PromptSide::new(prompt))
    }

    /// A handler side.
    pub fn handler(handler: impl Into<String>) -> Self {
        Self::Handler(HandlerSide {
            handler: handler.into(),
            label: None,
            subagents: Vec::new(),
        })
    }

    /// Whether a person backs this side.
    pub fn is_human(&self) -> bool {
        matches!(self, Self::Human(_))
    }

    /// Its label, if it has one.
    pub fn label(&self) -> Option<&str> {
        match self {
            Self::Human(s) => s.label.as_deref(),
            Self::Prompt(s) => s.label.as_deref(),
            Self::Handler(s) => s.label.as_deref(),
        }
    }

    /// The child relationships this side owns.
    pub fn subagents(&self) -> &[SubagentRelationship] {
        match self {
            Self::Human(_) => &[],
            Self::Prompt(s) => &s.subagents,
            Self::Handler(s) => &s.subagents,
        }
    }
}

/// `{ human: true }`: no other property but a label.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanSide {
    /// Always true: the discriminator.
    #[serde(with = "always_true")]
    pub human: (),
    /// A UI or log label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

mod always_true {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(super) fn serialize<S: Serializer>(_: &(), s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(true)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
        if bool::deserialize(d)? {
            Ok(())
        } else {
            Err(D::Error::custom("`human` must be true"))
        }
    }
}

/// A side a model takes, through a prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptSide {
    /// The prompt's name.
    pub prompt: String,
    /// A UI or log label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The children this side may start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<SubagentRelationship>,
    /// A text answer without tool calls ends the side's turn (default true).
    #[serde(default = "default_true")]
    pub stop_on_response: bool,
    /// A call of this tool ends the side's turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_tool: Option<String>,
    /// The stop tool's argument that becomes the turn's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_tool_response_property: Option<String>,
    /// The most model steps in one of this side's turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// A call of this tool ends the session successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_stop: Option<SessionToolBinding>,
    /// A call of this tool ends the session with a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_fail: Option<SessionToolBinding>,
    /// A call of this tool publishes the session's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_status: Option<SessionToolBinding>,
}

fn default_true() -> bool {
    true
}

impl PromptSide {
    /// A side driven by `prompt`, with the defaults.
    pub fn new(prompt: impl Into<String>) -> Self {
        Self {
            prompt: prompt.into(),
            label: None,
            subagents: Vec::new(),
            stop_on_response: true,
            stop_tool: None,
            stop_tool_response_property: None,
            max_steps: None,
            session_stop: None,
            session_fail: None,
            session_status: None,
        }
    }
}

/// A side that deterministic code takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HandlerSide {
    /// The handler's name.
    pub handler: String,
    /// A UI or log label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The children this side may start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<SubagentRelationship>,
}

/// A tool bound to a session lifecycle action (object form only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionToolBinding {
    /// The tool.
    pub name: String,
    /// The argument that becomes the lifecycle message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_property: Option<String>,
    /// The argument that holds attachment paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments_property: Option<String>,
}

impl SessionToolBinding {
    /// A binding of tool `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            message_property: None,
            attachments_property: None,
        }
    }

    /// The same binding, its message taken from argument `property`.
    pub fn message(mut self, property: impl Into<String>) -> Self {
        self.message_property = Some(property.into());
        self
    }
}

/// A child relationship a side owns: its model (or handler) may start sessions of `agent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubagentRelationship {
    /// The child agent's name.
    pub agent: String,
    /// The tool name the relationship goes by (the agent's name when not given).
    #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
    pub as_name: Option<String>,
    /// The most children of it alive at once in one session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u32>,
    /// Whether the relationship can be switched off; it is on unless `enabled` is false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// Whether an optional relationship is switched on (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Hidden from the model (no tool); still composed, so its parent hooks still apply.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
}

impl SubagentRelationship {
    /// A relationship with `agent`.
    pub fn new(agent: impl Into<String>) -> Self {
        Self {
            agent: agent.into(),
            as_name: None,
            max_instances: None,
            optional: false,
            enabled: None,
            hidden: false,
        }
    }

    /// The tool name it goes by.
    pub fn tool_name(&self) -> &str {
        self.as_name.as_deref().unwrap_or(&self.agent)
    }

    /// Whether it is composed: always, unless it is optional and switched off.
    pub fn is_enabled(&self) -> bool {
        !self.optional || self.enabled.unwrap_or(true)
    }
}

/// When a required parent hook runs, relative to the parent's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookStage {
    /// Before the parent's hooks.
    BeforeParent,
    /// After the parent's hooks.
    AfterParent,
}

/// A hook a composed child requires on its parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParentHookRequirement {
    /// The hook's id, in the child's namespace.
    pub hook: String,
    /// Why the child needs it (disclosed before composing).
    pub reason: String,
    /// When it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<HookStage>,
}

/// A Standard Agents agent: two sides and what governs their conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentDefinition {
    /// Its unique name.
    pub name: String,
    /// Side A: its messages are `assistant`.
    pub side_a: SideConfig,
    /// Side B: its messages are `user`.
    pub side_b: SideConfig,
    /// The most side turns in a session (a handler turn counts like a prompt turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_session_turns: Option<u32>,
    /// A human-readable label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A display icon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    /// Whether it can be called as a tool.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expose_as_tool: bool,
    /// Its description when composed as a tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_description: Option<String>,
    /// Default variable values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Fallback hook ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<String>,
    /// Hooks a direct parent must run when it composes this agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parent_hooks: Vec<ParentHookRequirement>,
    /// Packaging: the package's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package_name: Option<String>,
    /// Packaging: its version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Packaging: its author.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Packaging: its license.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
}

/// An agent named `name` with sides `side_a` and `side_b`, every optional property at its
/// default; set the rest on the returned value. Check it with [`validate`](super::validate).
///
/// ```
/// use agent_worker_core::agents::{SideConfig, define_agent};
///
/// let assistant = define_agent("assistant", SideConfig::prompt("assistant"), SideConfig::human());
/// assert!(assistant.side_b.is_human());
/// ```
pub fn define_agent(name: impl Into<String>, side_a: SideConfig, side_b: SideConfig) -> AgentDefinition {
    AgentDefinition {
        name: name.into(),
        side_a,
        side_b,
        max_session_turns: None,
        title: None,
        description: None,
        icon: None,
        expose_as_tool: false,
        tool_description: None,
        env: BTreeMap::new(),
        hooks: Vec::new(),
        parent_hooks: Vec::new(),
        package_name: None,
        version: None,
        author: None,
        license: None,
    }
}

/// How a prompt side's model must use tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must call some tool.
    Any,
    /// The model must call this tool.
    Tool(String),
}

/// A prompt: the model, instructions and tools a prompt side runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptDefinition {
    /// Its name, as sides refer to it.
    pub name: String,
    /// The Bedrock model id or inference profile (the runtime's default when not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The system text.
    #[serde(default)]
    pub system: String,
    /// Tools by name, from the runtime's registry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// How the model must use tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Output tokens per response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
}

impl PromptDefinition {
    /// A prompt named `name` with system text `system`.
    pub fn new(name: impl Into<String>, system: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            model: None,
            system: system.into(),
            tools: Vec::new(),
            tool_choice: None,
            max_tokens: None,
            temperature: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sides_decode_by_their_backing_with_the_defaults() {
        let side: SideConfig = serde_json::from_value(json!({ "prompt": "p" })).unwrap();
        let SideConfig::Prompt(prompt) = &side else {
            panic!("{side:?}")
        };
        assert!(prompt.stop_on_response, "stopOnResponse defaults to true");
        assert_eq!(prompt.max_steps, None);
        let side: SideConfig = serde_json::from_value(json!({ "human": true, "label": "You" })).unwrap();
        assert_eq!(side.label(), Some("You"));
        let side: SideConfig = serde_json::from_value(json!({ "handler": "h" })).unwrap();
        assert!(matches!(side, SideConfig::Handler(_)));
        assert!(serde_json::from_value::<SideConfig>(json!({ "human": false })).is_err());
        assert!(serde_json::from_value::<SideConfig>(json!({ "human": true, "maxSteps": 3 })).is_err());
    }

    #[test]
    fn definitions_round_trip_in_camel_case() {
        let mut worker = PromptSide::new("asset_worker");
        worker.session_fail = Some(SessionToolBinding::new("fail_asset").message("reason"));
        worker.subagents.push(SubagentRelationship {
            as_name: Some("gate".into()),
            ..SubagentRelationship::new("approval_gate")
        });
        let mut agent = define_agent("a", SideConfig::Prompt(worker), SideConfig::human());
        agent.max_session_turns = Some(40);
        let wire = serde_json::to_value(&agent).unwrap();
        assert_eq!(wire["sideA"]["sessionFail"]["messageProperty"], "reason");
        assert_eq!(wire["sideA"]["subagents"][0]["as"], "gate");
        assert_eq!(wire["sideB"], json!({ "human": true }));
        assert_eq!(wire["maxSessionTurns"], 40);
        let back: AgentDefinition = serde_json::from_value(wire).unwrap();
        assert_eq!(back, agent);
    }
}

//! The engine a prompt side runs on: its model, its tools (the bound tools, handoffs and
//! subagents the runner provides), and the policy that ends its turn on a bound call.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{GO_ON, RuntimeInner};
use crate::agents::definition::{AgentDefinition, PromptSide, SessionToolBinding, ToolChoice};
use crate::agents::subagents::subagent_tool;
use crate::agents::thread::Side;
use crate::agents::validate::binding_tools;
use crate::engine::tools::{Tool, ToolSpec, tool_fn};
use crate::engine::{Engine, StepContext, TurnPolicy};

pub(super) fn build_engine(inner: &RuntimeInner, which: Side, side: &PromptSide) -> Result<Engine, String> {
    let prompt = inner
        .catalog
        .get_prompt(&side.prompt)
        .ok_or_else(|| format!("no prompt `{}` is defined", side.prompt))?;
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut handoffs = Vec::new();
    for name in &prompt.tools {
        if let Some(target) = inner.catalog.get_agent(name) {
            // An exposed agent in a prompt's tools is a handoff of this same thread.
            tools.push(handoff_tool(target));
            handoffs.push(name.clone());
            continue;
        }
        tools.push(
            inner
                .tools
                .get(name)
                .cloned()
                .ok_or_else(|| format!("no tool `{name}` is registered"))?,
        );
    }
    for binding in [&side.session_stop, &side.session_fail, &side.session_status]
        .into_iter()
        .flatten()
    {
        if !prompt.tools.contains(&binding.name) {
            tools.push(binding_tool(binding));
        }
    }
    if let Some(stop_tool) = &side.stop_tool
        && !prompt.tools.contains(stop_tool)
    {
        let mut binding = SessionToolBinding::new(stop_tool.clone());
        binding.message_property = side.stop_tool_response_property.clone();
        tools.push(binding_tool(&binding));
    }
    let mut composed = false;
    for relationship in side.subagents.iter().filter(|r| r.is_enabled() && !r.hidden) {
        let child = inner
            .catalog
            .get_agent(&relationship.agent)
            .ok_or_else(|| format!("no agent `{}` is defined", relationship.agent))?;
        let description = child
            .tool_description
            .clone()
            .or_else(|| child.description.clone())
            .unwrap_or_else(|| format!("Start a session of agent {} and get its result.", child.name));
        tools.push(subagent_tool(
            inner.me.clone(),
            which,
            relationship.clone(),
            description,
        ));
        composed = true;
    }
    let mut config = inner.engine_config.clone();
    if composed {
        // A child runs inside the call that starts it: give it the turn's time, not a tool's.
        config.tool_timeout = config.tool_timeout.max(config.turn_deadline);
    }
    if let Some(steps) = side.max_steps {
        config.max_rounds = steps;
    }
    if let Some(max_tokens) = prompt.max_tokens {
        config.max_tokens = max_tokens;
    }
    if let Some(temperature) = prompt.temperature {
        config.temperature = temperature;
    }
    let model_id = prompt
        .model
        .clone()
        .unwrap_or_else(|| inner.default_model.clone());
    let policy = SidePolicy {
        ending: binding_tools(side)
            .filter(|n| Some(*n) != side.session_status.as_ref().map(|b| b.name.as_str()))
            .map(str::to_owned)
            .chain(handoffs)
            .collect(),
        go_on: !side.stop_on_response,
        forced: match &prompt.tool_choice {
            Some(ToolChoice::Tool(name)) => Some(name.clone()),
            _ => None,
        },
    };
    // The deployment's equipment first; the side narrows it with its own prompt, tools and
    // policy.
    let mut builder = (inner.engine_base)()
        .model((inner.models)(&model_id))
        .shared_store(inner.sessions.clone())
        .tools(tools)
        .config(config)
        .narrowing_turn_policy(policy);
    let system = match (prompt.system.trim(), &inner.prompt_additions) {
        ("", None) => None,
        ("", Some(additions)) => Some(additions.clone()),
        (_, None) => Some(prompt.system.clone()),
        (_, Some(additions)) => Some(format!("{}\n\n{additions}", prompt.system)),
    };
    if let Some(system) = system {
        builder = builder.system_prompt(system);
    }
    builder
        .build()
        .map_err(|e| format!("prompt `{}`: {e}", prompt.name))
}

/// The tool that hands the thread to `target`: the side's turn ends, and `target` goes on.
pub(super) fn handoff_tool(target: &AgentDefinition) -> Arc<dyn Tool> {
    let description = target
        .tool_description
        .clone()
        .or_else(|| target.description.clone())
        .unwrap_or_else(|| format!("Hand this conversation to {}.", target.name));
    let spec = ToolSpec::new(
        target.name.clone(),
        description,
        json!({
            "type": "object",
            "properties": { "message": { "type": "string", "description": "What to tell the person as you hand over." } },
        }),
    );
    let name = target.name.clone();
    Arc::new(tool_fn(spec, move |_input, _ctx| {
        let name = name.clone();
        async move { Ok(json!({ "handedOffTo": name })) }
    }))
}

/// A tool a binding names that no prompt registers: it takes the bound properties and says ok.
pub(super) fn binding_tool(binding: &SessionToolBinding) -> Arc<dyn Tool> {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    if let Some(message) = &binding.message_property {
        properties.insert(message.clone(), json!({ "type": "string" }));
        required.push(Value::String(message.clone()));
    }
    if let Some(attachments) = &binding.attachments_property {
        properties.insert(
            attachments.clone(),
            json!({ "type": "array", "items": { "type": "string" } }),
        );
    }
    let schema = json!({ "type": "object", "properties": properties, "required": required });
    let spec = ToolSpec::new(
        binding.name.clone(),
        format!("Call {} to record this.", binding.name),
        schema,
    );
    Arc::new(tool_fn(spec, |_input, _ctx| async { Ok(json!({ "ok": true })) }))
}

/// A prompt side's stop rules, for its engine.
#[derive(Debug)]
pub(super) struct SidePolicy {
    ending: BTreeSet<String>,
    go_on: bool,
    forced: Option<String>,
}

impl TurnPolicy for SidePolicy {
    fn force_tool(&self, step: &StepContext<'_>) -> Option<String> {
        self.forced.clone().filter(|_| step.round == 0)
    }

    fn ends_turn(&self, tool: &str) -> bool {
        self.ending.contains(tool)
    }

    fn continue_after_text(&self, _step: &StepContext<'_>) -> Option<String> {
        if !self.go_on {
            return None;
        }
        let tools: Vec<&str> = self.ending.iter().map(String::as_str).collect();
        Some(if tools.is_empty() {
            format!("{GO_ON} a tool.")
        } else {
            format!("{GO_ON} {}.", tools.join(" or "))
        })
    }
}

/// The binding's message from a call's arguments: the named property, or the whole input.
pub(super) fn bound_message(binding: &SessionToolBinding, args: &Value) -> String {
    match binding.message_property.as_deref().map(|p| &args[p]) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => args.to_string(),
        Some(other) => other.to_string(),
    }
}

/// The binding, and the input of its call among `calls`.
pub(super) fn bound_call<'s, 'd>(
    binding: &'s Option<SessionToolBinding>,
    calls: &[(&'d str, &'d Value)],
) -> Option<(&'s SessionToolBinding, &'d Value)> {
    let binding = binding.as_ref()?;
    calls
        .iter()
        .find(|(name, _)| *name == binding.name)
        .map(|(_, input)| (binding, *input))
}

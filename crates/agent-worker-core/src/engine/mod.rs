//! The turn core: [`Engine`] runs turns on a [`Model`] with [`tools`], keeping session state in
//! a [`SessionStore`].
//!
//! - [`Engine`] / [`EngineBuilder`]: the agent; `invoke` runs one turn.
//! - [`EngineConfig`]: tuning, every default a named constant in [`config`].
//! - [`model`]: the model seam and its Bedrock implementation.
//! - [`tools`]: the tool trait, validation and the example tools.
//! - [`TurnPolicy`]: per-step decisions (a forced tool); [`ToolPolicy`]: per-call decisions.
//! - Approvals: a call that needs the person's word waits in an [`ApprovalStore`], bound to a
//!   token ([`ApprovalSigner`]) that opens exactly that call once.
//! - Stops: a turn asks its store for a stop, and a [`StopSource`] beside it when the engine has
//!   one (the realtime server), before it starts and while it runs.
//!
//! A turn: the prompt is checked; the turn is claimed (a redelivered turn runs once); the
//! history is loaded and repaired; then rounds run until the model ends its turn: text deltas
//! stream as `text`, reasoning as `thinking`, each tool call as `tool_started`/`tool_ended`,
//! results go back to the model. Transient model failures are retried with backoff, each retry
//! announced. What the turn produced is stored with its outcome, then the terminal is emitted.
//! Dropping the stream aborts the model request and every running tool.

mod approvals;
mod builder;
pub use builder::EngineBuilder;
pub mod attachments;
pub mod compaction;
pub mod config;
mod control;
mod error;
mod events;
mod framing;
mod image_format;
mod live_tools;
mod logger;
pub mod model;
mod policy;
mod prompt;
mod quiet;
pub mod result;
mod retry;
pub mod spending;
mod stop;
mod stop_reason;
mod think_tags;
pub mod tools;
mod turn;
mod turn_stream;
pub mod ui;

pub(crate) use approvals::preview as approval_preview;
pub use approvals::{
    APPROVAL_REQUIRED, AdmitClasses, ApprovalDecision, ApprovalSigner, ToolDecision, ToolPolicy,
    ToolPolicyContext, WeakKey,
};
use attachments::FILES_ARE_DATA;
pub use attachments::{FileArea, LocalFileArea};
pub use config::{ConfigError, EngineConfig};
pub use control::{Entries, MAX_COMMAND_BYTES, StoreControl};
pub use error::EngineError;
pub use events::EngineEvent;
pub use image_format::ImageFormat;
pub use logger::{LogLine, TurnLogger};
pub use model::Model;
pub use policy::{Layered, StepContext, StepTool, TurnContext, TurnPlan, TurnPolicy};
pub use prompt::{IMAGE_TYPES, InvalidPrompt, MAX_IMAGE_BYTES, user_message};
pub use retry::jittered_backoff;
pub use stop_reason::TurnStopReason;
pub use tools::{Tool, ToolClass, ToolSource, ToolSpec, Toolset};
pub use turn::is_throttled_retry;
pub(crate) use turn_stream::{Emitter, turn_stream};

use std::fmt;
use std::sync::Arc;

use model::{CachePlan, ModelRequest, ToolChoice, ToolDescription};

use crate::protocol::{Agent, EventStream, Prompt, Scope};
use crate::session::{ApprovalStore, Message, SessionId, SessionStore, StopSource, TurnId};

/// The agent engine: an [`Agent`] whose turns run on a model with tools, with their state in a
/// [`SessionStore`]. Cheap to clone; clones share everything.
///
/// ```no_run
/// use std::sync::Arc;
/// use agent_worker_core::engine::{tools::examples, Engine, Model};
/// use agent_worker_core::protocol::{Agent, AgentEvent, AgentExt, Prompt, Scope};
/// use agent_worker_core::session::MemoryStore;
/// use futures_util::StreamExt;
///
/// # async fn demo(model: impl Model + 'static) -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::builder()
///     .model(model) // agent_worker_aws::BedrockModel, for one
///     .store(MemoryStore::new())
///     .system_prompt("You are a concise assistant.")
///     .tool(examples::by_name("current_time").unwrap())
///     .build()?;
///
/// // Streaming: print text as it arrives.
/// let mut events = engine.invoke(Scope::new("s1".parse().unwrap()), Prompt::text("What time is it?"));
/// while let Some(event) = events.next().await {
///     if let AgentEvent::Text { delta } = event {
///         print!("{delta}");
///     }
/// }
///
/// // Buffered: the text and data of a whole turn.
/// let answer = engine.collect(Scope::new("s1".parse().unwrap()), Prompt::text("And in Tokyo?")).await?;
/// println!("{}", answer.text);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
    live: Option<Arc<live_tools::LiveTools>>,
}

#[derive(Clone)]
struct EngineInner {
    model: Arc<dyn Model>,
    store: Arc<dyn SessionStore>,
    tools: Toolset,
    config: EngineConfig,
    system_prompt: Option<String>,
    policy: Option<Arc<dyn TurnPolicy>>,
    tool_policy: Option<Arc<dyn ToolPolicy>>,
    approvals: Option<(Arc<dyn ApprovalStore>, ApprovalSigner)>,
    file_area: Option<Arc<dyn FileArea>>,
    /// Where content too large for a stored item is kept whole.
    keeper: Option<attachments::ContentKeeper>,
    /// The price table each step's cost is estimated from (the spending's, when it has one).
    prices: Option<spending::Prices>,
    /// Where the tab's answers to UI actions are read; without it, no UI tool is offered.
    ui_answers: Option<Arc<dyn ui::ActionAnswers>>,
    /// Where a turn's stop is asked for besides the store.
    stops: Option<Arc<dyn StopSource>>,
    /// This turn's UI tools, by name: where each call goes on the page.
    ui_targets: Arc<std::collections::HashMap<String, ui::oui::UiTarget>>,
    /// The schema a turn's typed result must match: the engine's own, or the turn's.
    result: Option<Arc<result::ResultSchema>>,
    /// PDFs go to the model as document blocks, where it takes them.
    pdf_as_document: bool,
    /// Where the turn's log lines are copied, beside `tracing`.
    logging: Option<logger::Logging>,
    /// The prices and budgets model calls are reserved against.
    spending: Option<spending::Spending>,
    /// The blocked accounts and persons (the kill switch).
    blocklist: Option<Arc<dyn crate::session::Blocklist>>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("model", &self.inner.model)
            .field("store", &self.inner.store)
            .field("tools", &self.inner.tools)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Starts building an engine.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The engine's tuning.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// The model's id.
    pub fn model_id(&self) -> &str {
        self.inner.model.id()
    }
}

impl Agent for Engine {
    fn invoke(&self, scope: Scope, prompt: Prompt) -> EventStream {
        let inner = match &self.live {
            Some(live) => live.engine(),
            None => self.inner.clone(),
        };
        turn_stream::turn_stream(move |out| turn::run(inner, scope, prompt, out))
    }
}

impl EngineInner {
    /// The engine for a turn shaped by its policy's [`TurnPlan`] for `turn`: its system prompt
    /// replaced, its tools narrowed to those the plan names; this one when the plan changes
    /// nothing (or there is no policy).
    fn for_plan(self: &Arc<Self>, turn: &TurnContext<'_>) -> Arc<Self> {
        let Some(plan) = self.policy.as_ref().map(|p| p.plan(turn)) else {
            return self.clone();
        };
        if plan.is_unchanged() {
            return self.clone();
        }
        let mut inner = (**self).clone();
        if let Some(prompt) = plan.system_prompt {
            // Files are data whatever the plan's prompt says.
            inner.system_prompt = Some(match &self.file_area {
                Some(_) => format!("{prompt}\n\n{FILES_ARE_DATA}"),
                None => prompt,
            });
        }
        if let Some(allowed) = &plan.tools {
            let kept: Vec<Arc<dyn Tool>> = self
                .tools
                .tools()
                .filter(|tool| allowed.iter().any(|p| tools::name_matches(p, &tool.spec().name)))
                .cloned()
                .collect();
            // A subset of a valid set is valid.
            if let Ok(narrowed) = Toolset::new(kept) {
                inner.tools = narrowed;
            }
        }
        Arc::new(inner)
    }

    /// The engine for a turn with the UI context `ui`: its UI tools added (those the tool
    /// policy admits) and its knowledge after the system prompt; this one when it brings
    /// neither. A UI tool named as one the engine has is refused, naming the field.
    fn for_ui(self: &Arc<Self>, ui: &ui::UiContext) -> Result<Arc<Self>, prompt::InvalidPrompt> {
        let knowledge = ui.knowledge.as_ref().filter(|k| !k.is_empty());
        let actions = ui
            .oui
            .as_ref()
            .is_some_and(|o| o.surfaces.iter().any(|s| !s.actions.is_empty()));
        if knowledge.is_none() && !actions {
            return Ok(self.clone());
        }
        let mut inner = (**self).clone();
        if let Some(knowledge) = knowledge {
            let rendered = knowledge.render();
            inner.system_prompt = Some(match &self.system_prompt {
                Some(prompt) => format!("{prompt}\n\n{rendered}"),
                None => rendered,
            });
        }
        match (&ui.oui, &self.ui_answers) {
            (Some(snapshot), Some(answers)) if actions => {
                let mut targets = std::collections::HashMap::new();
                let mut tools: Vec<Arc<dyn Tool>> = self.tools.tools().cloned().collect();
                let (poll, wait) = (self.config.ui_answer_poll, self.config.ui_action_timeout);
                for (target, tool) in snapshot.tools(answers, poll, wait) {
                    let name = tool.spec().name.clone();
                    if self.tools.spec(&name).is_some() {
                        return Err(prompt::InvalidPrompt {
                            field: "context.oui".into(),
                            reason: format!("names the tool {name}, which the worker already has"),
                        });
                    }
                    if admitted(self.tool_policy.as_ref(), tool.as_ref()) {
                        targets.insert(name, target);
                        tools.push(tool);
                    }
                }
                inner.tools = Toolset::new(tools).map_err(|e| prompt::InvalidPrompt {
                    field: "context.oui".into(),
                    reason: e.to_string(),
                })?;
                inner.ui_targets = Arc::new(targets);
            }
            (Some(_), None) if actions => {
                tracing::warn!(
                    "the tab offered UI actions, and this worker has nowhere to read their answers: none is offered"
                );
            }
            _ => {}
        }
        Ok(Arc::new(inner))
    }

    /// The engine for a turn that asks for a typed result matching `schema` (the scope's
    /// `resultSchema`); this one when the turn names none. A schema that does not compile, or a
    /// result asked of an engine with a tool of the result tool's name, is refused by name.
    fn for_result(
        self: &Arc<Self>,
        schema: Option<&serde_json::Value>,
    ) -> Result<Arc<Self>, prompt::InvalidPrompt> {
        let refused = |reason: String| prompt::InvalidPrompt {
            field: crate::protocol::RESULT_SCHEMA_KEY.into(),
            reason,
        };
        let engine = match schema {
            Some(schema) => {
                let compiled = result::ResultSchema::new(schema.clone()).map_err(|e| refused(e.0))?;
                let mut inner = (**self).clone();
                inner.result = Some(Arc::new(compiled));
                Arc::new(inner)
            }
            None => self.clone(),
        };
        if engine.result.is_some() && engine.tools.spec(result::RESULT_TOOL).is_some() {
            return Err(refused(format!(
                "the worker has a tool named {}, the name the result is given with",
                result::RESULT_TOOL
            )));
        }
        Ok(engine)
    }

    /// The usage event of one model call: its tokens, and what they cost at the model's price.
    fn usage_event(&self, usage: &model::TokenUsage) -> crate::protocol::AgentEvent {
        let price = self
            .spending
            .as_ref()
            .map(|s| &s.prices)
            .or(self.prices.as_ref())
            .and_then(|prices| prices.of(self.model.id()));
        crate::protocol::AgentEvent::Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            cost_usd: price.map(|p| p.cost(usage) as f64 / 1_000_000.0),
        }
    }

    /// `outcome` of call `call_id` as the conversation keeps it: its content, when too large
    /// for a stored item, in the file area (see [`attachments::ContentKeeper`]).
    async fn kept(
        &self,
        session: &SessionId,
        call_id: &str,
        outcome: tools::ToolOutcome,
    ) -> tools::ToolOutcome {
        match &self.keeper {
            Some(keeper) => keeper.keep_result(session.as_str(), call_id, outcome).await,
            None => outcome,
        }
    }

    /// The `ui_action_requested` event for call `call_id` of `name`, when it is a UI action of
    /// this turn.
    fn ui_request(
        &self,
        turn_id: &TurnId,
        call_id: &str,
        name: &str,
        args: &serde_json::Value,
        approval: Option<serde_json::Value>,
    ) -> Option<crate::protocol::AgentEvent> {
        let target = self.ui_targets.get(name)?;
        Some(
            EngineEvent::UiActionRequested {
                call_id: call_id.to_owned(),
                turn_id: turn_id.clone(),
                surface: target.surface.clone(),
                action: target.action.clone(),
                args: args.clone(),
                approval,
            }
            .into(),
        )
    }

    /// The event that tells the tab its request for call `call_id` was withdrawn, when `name`
    /// is one of the turn's UI actions.
    fn ui_withdrawn(
        &self,
        turn_id: &TurnId,
        call_id: &str,
        name: &str,
    ) -> Option<crate::protocol::AgentEvent> {
        self.ui_targets.get(name)?;
        Some(
            EngineEvent::UiActionWithdrawn {
                call_id: call_id.to_owned(),
                turn_id: turn_id.clone(),
                reason: "timeout".into(),
            }
            .into(),
        )
    }

    /// What to do with a call of `name` with `args`.
    fn verdict(
        &self,
        session: &SessionId,
        user_id: Option<&str>,
        name: &str,
        args: &serde_json::Value,
    ) -> approvals::Verdict {
        let Some(spec) = self.tools.spec(name) else {
            return approvals::Verdict::Run;
        };
        let decision = self.tool_policy.as_ref().map_or(ToolDecision::Allow, |policy| {
            policy.decide(&ToolPolicyContext {
                session,
                user_id,
                tool: spec,
                args,
            })
        });
        approvals::verdict(spec, decision)
    }

    /// The tokens every request carries besides the conversation: the system prompt and the
    /// tools, estimated.
    fn fixed_tokens(&self) -> u64 {
        let system = self.system_prompt.as_ref().map_or(0, String::len);
        let tools: usize = self
            .tools
            .specs()
            .map(|s| s.name.len() + s.description.len() + compaction::json_chars(&s.input_schema))
            .sum();
        ((system + tools) as u64).div_ceil(4)
    }

    /// The request for one step.
    fn request(
        &self,
        messages: Vec<Message>,
        history_messages: usize,
        forced: Option<String>,
        active: Option<Vec<String>>,
        plan_less: bool,
        force_result: bool,
    ) -> ModelRequest {
        let mut system: Vec<String> = self.system_prompt.iter().cloned().collect();
        let cache = CachePlan {
            system_blocks: system.len(),
            history_messages: history_messages.min(messages.len()),
        };
        let mut tools: Vec<ToolDescription> = self
            .tools
            .specs()
            .map(|spec| ToolDescription {
                name: spec.name.clone(),
                description: spec.description.clone(),
                input_schema: spec.input_schema.clone(),
            })
            .collect();
        // The step's tools, as the turn's policy narrows them (its prepareStep).
        if let Some(active) = &active {
            tools.retain(|t| active.iter().any(|p| tools::name_matches(p, &t.name)));
        }
        if let Some(schema) = &self.result {
            tools.push(schema.tool());
            system.push(result::RESULT_INSTRUCTION.to_owned());
        }
        let forced = match (&self.result, force_result) {
            (Some(_), true) => Some(result::RESULT_TOOL.to_owned()),
            _ => forced,
        };
        let mut tool_choice = ToolChoice::Auto;
        match forced {
            Some(name) if tools.iter().any(|t| t.name == name) => {
                if self.config.forced_tool_choice {
                    tool_choice = ToolChoice::Tool(name);
                } else {
                    tools.retain(|t| t.name == name);
                    system.push(format!("Call the tool `{name}` now."));
                }
            }
            Some(name) => {
                tracing::warn!(tool = %name, "the turn policy forced a tool the engine does not have")
            }
            None => {}
        }
        if plan_less {
            system.push(turn::PLAN_LESS.to_owned());
        }
        ModelRequest {
            system,
            messages,
            tools,
            tool_choice,
            max_tokens: self.config.max_tokens,
            temperature: self.config.temperature,
            cache,
        }
    }
}

/// Whether the tool policy admits `tool`'s class (without one, only the product's own tools).
fn admitted(tool_policy: Option<&Arc<dyn ToolPolicy>>, tool: &dyn Tool) -> bool {
    let class = tool.spec().class;
    let admitted = match tool_policy {
        Some(policy) => policy.admits(class),
        None => class.offered_by_default(),
    };
    if !admitted {
        tracing::debug!(tool = %tool.spec().name, ?class, "not offered: the tool policy does not admit its class");
    }
    admitted
}

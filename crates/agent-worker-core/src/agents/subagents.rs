//! Subagents: a side's relationship starts child sessions of another agent.
//!
//! - For a prompt side's model, each enabled, visible relationship is a tool named by its `as`,
//!   described by the child's `toolDescription`, taking `{"message"}`. A call starts a new child
//!   session (`<parent>/<as>/<n>`, at most `maxInstances` alive at once) and runs it until it
//!   settles. The child's stop payload is the tool's result; its failure is an error result. A
//!   child that parks on a person answers `awaiting_human`, and the parent parks
//!   (`awaiting_child`) after its turn, until the child settles; then the child's result, with
//!   its attachments, comes to the parent side as a message and the parent goes on.
//! - A handler reaches its side's relationships (hidden ones too) through
//!   [`ThreadState::message_subagent`](super::ThreadState::message_subagent), which speaks as the
//!   child's human side, reusing the newest child that is still alive.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use serde_json::{Value, json};

use super::definition::SubagentRelationship;
use super::thread::{ChildLink, ParentLink, SessionEnd, SessionStatus, Side};
use crate::engine::tools::{Tool, ToolError, ToolSpec, tool_fn};
use crate::protocol::{AgentEvent, Prompt, Scope, text_of};
use crate::session::{SessionId, TurnId};

/// What a side's children need of the runtime that runs them: the parent turn's scratch pad, and
/// a way to run a turn of another agent's session. The session runner implements it; this module
/// and the handlers see only the trait, so neither depends on the runner (no import cycle).
pub(crate) trait ChildRuntime: Send + Sync {
    /// The scratch pad of `session`'s side turn in flight, if one is.
    fn scratch(&self, session: &SessionId) -> Option<Arc<Mutex<SideScratch>>>;

    /// Runs one turn of a session of agent `agent` to its end, and gives its events.
    fn run_child(
        self: Arc<Self>,
        agent: String,
        scope: Scope,
        prompt: Prompt,
    ) -> Pin<Box<dyn Future<Output = Vec<AgentEvent>> + Send>>;
}

/// The scope extension that carries a child's [`ParentLink`].
pub(crate) const PARENT_KEY: &str = "agentParent";

/// What a side turn in flight did with its relationships, kept beside the running session.
#[derive(Debug, Default)]
pub(crate) struct SideScratch {
    pub(crate) children: Vec<ChildLink>,
    /// Children started by the model that wait for a person.
    pub(crate) parked: Vec<SessionId>,
}

/// The scratch of each session with a side turn in flight.
pub(crate) type Scratchpads = Mutex<HashMap<SessionId, Arc<Mutex<SideScratch>>>>;

/// How a child's run settled, for the side that started it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildReply {
    /// The child session.
    pub session: SessionId,
    /// Where it stands: ended (`Completed`, `Failed`) or parked.
    pub status: SessionStatus,
    /// What its sides said in this run.
    pub said: String,
    /// Its result or failure message, once it ended.
    pub message: Option<String>,
    /// Its result's attachments.
    pub attachments: Option<Value>,
}

impl ChildReply {
    /// Whether the child session has ended.
    pub fn ended(&self) -> bool {
        self.status.is_final()
    }
}

/// Starts (or, with `reuse`, continues) a child of `relationship` and runs it until it settles.
pub(crate) async fn message_child(
    inner: &Arc<dyn ChildRuntime>,
    parent_session: &SessionId,
    side: Side,
    relationship: &SubagentRelationship,
    text: &str,
    turn_id: &TurnId,
    reuse: bool,
) -> Result<ChildReply, String> {
    let scratch = inner
        .scratch(parent_session)
        .ok_or_else(|| format!("session {parent_session} has no side turn running"))?;
    let name = relationship.tool_name().to_owned();
    let child_session = {
        let mut pad = scratch.lock().unwrap_or_else(PoisonError::into_inner);
        let alive: Vec<&ChildLink> = pad
            .children
            .iter()
            .filter(|c| c.relationship == name && !c.ended)
            .collect();
        match alive.last() {
            Some(newest) if reuse => newest.session.clone(),
            _ => {
                if let Some(max) = relationship.max_instances
                    && alive.len() >= max as usize
                {
                    return Err(format!(
                        "`{name}` may have at most {max} child session(s) alive at once; {} are",
                        alive.len()
                    ));
                }
                let n = pad.children.iter().filter(|c| c.relationship == name).count() + 1;
                let session = SessionId::new(format!("{parent_session}/{name}/{n}"))
                    .map_err(|e| format!("`{name}` cannot name a child session: its id {e}"))?;
                pad.children.push(ChildLink {
                    relationship: name.clone(),
                    session: session.clone(),
                    ended: false,
                });
                session
            }
        }
    };
    let link = ParentLink {
        session: parent_session.clone(),
        side,
        relationship: name.clone(),
    };
    let scope = Scope::new(child_session.clone())
        .with_turn_id(turn_id.clone())
        .with(PARENT_KEY, serde_json::to_value(&link).unwrap_or(Value::Null));
    let events = inner
        .clone()
        .run_child(relationship.agent.clone(), scope, Prompt::text(text))
        .await;
    let said = text_of(&events);
    let reply = match events.last() {
        Some(AgentEvent::Completed { data: Some(data) }) => ChildReply {
            session: child_session.clone(),
            status: serde_json::from_value(data["sessionStatus"].clone()).unwrap_or(SessionStatus::Completed),
            said,
            message: data["end"]["message"].as_str().map(str::to_owned),
            attachments: Some(data["end"]["attachments"].clone()).filter(|a| !a.is_null()),
        },
        Some(AgentEvent::Failed { details, code, .. }) if code.as_deref() == Some(super::SESSION_FAILED) => {
            ChildReply {
                session: child_session.clone(),
                status: SessionStatus::Failed,
                said,
                message: Some(details.clone()),
                attachments: None,
            }
        }
        Some(AgentEvent::Failed { details, .. }) => {
            return Err(format!("child {child_session} could not run: {details}"));
        }
        _ => return Err(format!("child {child_session} ended without a result")),
    };
    let mut pad = scratch.lock().unwrap_or_else(PoisonError::into_inner);
    if reply.ended() {
        if let Some(link) = pad.children.iter_mut().find(|c| c.session == child_session) {
            link.ended = true;
        }
    } else if !reuse && reply.status == SessionStatus::AwaitingHuman {
        pad.parked.push(child_session);
    }
    Ok(reply)
}

/// What the parent side is told of a child of `relationship` that settled after the parent
/// parked on it: how it settled and its result, with the result's attachments, as the tool
/// result of a child that settles at once gives them.
pub(crate) fn settled_message(relationship: &str, status: SessionStatus, end: Option<&SessionEnd>) -> String {
    let message = end.and_then(|e| e.message.as_deref()).unwrap_or_default();
    let mut text = format!("[{relationship}] {}: {message}", status.as_str());
    if let Some(attachments) = end.and_then(|e| e.attachments.as_ref()) {
        text.push_str(&format!("\nattachments: {attachments}"));
    }
    text
}

/// The tool a prompt side's model calls to start a child of `relationship`.
pub(crate) fn subagent_tool(
    inner: Weak<dyn ChildRuntime>,
    side: Side,
    relationship: SubagentRelationship,
    description: String,
) -> Arc<dyn Tool> {
    let spec = ToolSpec::new(
        relationship.tool_name(),
        description,
        json!({
            "type": "object",
            "properties": { "message": { "type": "string", "description": "What to ask of it." } },
            "required": ["message"],
        }),
    );
    let relationship = Arc::new(relationship);
    Arc::new(tool_fn(spec, move |input, ctx| {
        let inner = inner.clone();
        let relationship = relationship.clone();
        async move {
            let inner = inner
                .upgrade()
                .ok_or_else(|| ToolError::new("the agent runtime has shut down"))?;
            let message = input["message"]
                .as_str()
                .ok_or_else(|| ToolError::new("`message` is required"))?;
            let parent = SessionId::new(
                ctx.session
                    .strip_suffix(&format!("#{}", side.as_str()))
                    .unwrap_or(&ctx.session),
            )
            .map_err(|e| ToolError::new(format!("the parent session's id {e}")))?;
            let turn_id = TurnId::new(format!("{}:{}", ctx.turn_id, ctx.call_id))
                .map_err(|e| ToolError::new(format!("the child's turn id {e}")))?;
            let reply = message_child(&inner, &parent, side, &relationship, message, &turn_id, false)
                .await
                .map_err(ToolError::new)?;
            match reply.status {
                SessionStatus::Failed => Err(ToolError::new(format!(
                    "{} failed: {}",
                    relationship.tool_name(),
                    reply.message.unwrap_or_default()
                ))),
                SessionStatus::Completed => Ok(json!({
                    "status": "completed",
                    "message": reply.message,
                    "attachments": reply.attachments,
                })),
                waiting => Ok(json!({
                    "status": waiting.as_str(),
                    "session": reply.session,
                    "said": reply.said,
                    "note": "It waits for a person. Its result will come to you as a message when it settles.",
                })),
            }
        }
    }))
}

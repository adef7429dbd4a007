//! A2A's task, as the A2A door shows it and the worker pushes it. An A2A task is a turn: its id
//! names the conversation and the turn together (so any instance answers for any task, from the
//! table alone), its state is how the turn stands, its artifact the turn's text (and its typed
//! result), all read from the turn's logged events.

use serde_json::{Value, json};

use agent_worker_contract::AgentEvent;
use agent_worker_core::session::{ContentBlock, Role, SessionId, StoredMessage, TurnId};

/// A task's id: the conversation (base64url) and the turn, joined by a dot.
pub fn task_id(session: &SessionId, turn: &TurnId) -> String {
    crate::joined_id::join(session, turn)
}

/// The conversation and the turn a task id names, if it names any.
pub fn parse_task_id(id: &str) -> Option<(SessionId, TurnId)> {
    let (session, turn) = crate::joined_id::split(id)?;
    Some((SessionId::new(session).ok()?, TurnId::new(turn).ok()?))
}

/// A2A's task states, as the protocol's JSON names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Sent, not yet taken by a worker.
    Submitted,
    /// The turn has begun.
    Working,
    /// The turn completed.
    Completed,
    /// The turn failed.
    Failed,
    /// The turn was stopped (by the person, or a newer turn).
    Canceled,
    /// The turn waits for the person's approval.
    InputRequired,
}

impl TaskState {
    /// The state's name in A2A's JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Submitted => "TASK_STATE_SUBMITTED",
            Self::Working => "TASK_STATE_WORKING",
            Self::Completed => "TASK_STATE_COMPLETED",
            Self::Failed => "TASK_STATE_FAILED",
            Self::Canceled => "TASK_STATE_CANCELED",
            Self::InputRequired => "TASK_STATE_INPUT_REQUIRED",
        }
    }

    /// The state A2A's JSON names `name`, if it names one of these.
    pub fn named(name: &str) -> Option<Self> {
        [
            Self::Submitted,
            Self::Working,
            Self::Completed,
            Self::Failed,
            Self::Canceled,
            Self::InputRequired,
        ]
        .into_iter()
        .find(|state| state.name() == name)
    }

    /// Whether the task has ended for good.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Canceled)
    }

    /// The state a turn's terminal event ends its task in.
    pub fn of_terminal(terminal: &AgentEvent) -> Self {
        match terminal {
            AgentEvent::Failed { .. } => Self::Failed,
            AgentEvent::Completed { data } => {
                match data
                    .as_ref()
                    .and_then(|d| d.get("stopReason"))
                    .and_then(Value::as_str)
                {
                    Some("user_stop" | "superseded") => Self::Canceled,
                    Some("approval_required") => Self::InputRequired,
                    _ => Self::Completed,
                }
            }
            _ => Self::Working,
        }
    }
}

/// What a turn's events say of its task so far.
pub use crate::heard::Heard as Progress;

impl Progress {
    /// A task just submitted: nothing logged yet, and submitted now.
    pub fn submitted_now() -> Self {
        Self {
            submitted_at_ms: Some(agent_worker_core::clock::now_ms()),
            ..Self::default()
        }
    }

    /// The task's state, as the turn's events say it.
    pub fn state(&self) -> TaskState {
        match &self.terminal {
            Some(terminal) => TaskState::of_terminal(terminal),
            None if self.started => TaskState::Working,
            None => TaskState::Submitted,
        }
    }

    /// When the task came to its state (epoch milliseconds), from the logged event that set it:
    /// the terminal (or the wait that found it not started) for a final or waiting state, the
    /// first event for `WORKING`, the submission for `SUBMITTED`; `None` where that is not known
    /// (an event logged before the log kept the time, a task read before it logged anything).
    pub fn state_at_ms(&self) -> Option<u64> {
        if self.terminal.is_some() || self.not_started {
            self.ended_at_ms
        } else if self.started {
            self.started_at_ms
        } else {
            self.submitted_at_ms
        }
    }
}

/// The task's status: its state, a message from the agent where the state needs one (why it
/// failed; what approval it waits for, and how to give it), and when it came to that state (the
/// time of the logged event that set it, never the time of the read; left out when unknown).
pub fn status(state: TaskState, progress: &Progress, ids: &Ids) -> Value {
    let mut status = json!({ "state": state.name() });
    if let Some(at) = progress.state_at_ms() {
        status["timestamp"] = json!(rfc3339(at));
    }
    if let Some(AgentEvent::Failed { details, .. }) = &progress.terminal {
        status["message"] = agent_message(details, ids);
    }
    if state == TaskState::InputRequired
        && let Some(asked) = progress.approvals.last()
    {
        let what = crate::heard::approval_title(asked);
        let words = format!(
            "This task waits for the person's approval: {what}. Answer it with a message on this task (its taskId) that says \"approve\" or \"decline\"."
        );
        let mut message = agent_message(&words, ids);
        // What is asked, for a program: never the approval's token, which stays with the agent.
        if let Some(parts) = message["parts"].as_array_mut() {
            parts.push(json!({ "data": { "approval": crate::heard::approval_shown(asked) }, "mediaType": "application/json" }));
        }
        status["message"] = message;
    }
    status
}

/// The ids a task's objects carry.
#[derive(Debug, Clone)]
pub struct Ids {
    /// The task's id.
    pub task: String,
    /// Its context: the conversation.
    pub context: SessionId,
}

/// The person's message `message_id` of `parts`, as a task's history holds it.
pub fn person_message(message_id: &str, parts: Vec<Value>, ids: &Ids) -> Value {
    json!({
        "messageId": message_id,
        "contextId": ids.context,
        "taskId": ids.task,
        "role": "ROLE_USER",
        "parts": parts,
    })
}

/// A message of the agent's, of `text`.
pub fn agent_message(text: &str, ids: &Ids) -> Value {
    json!({
        "messageId": format!("{}-agent", ids.task),
        "contextId": ids.context,
        "taskId": ids.task,
        "role": "ROLE_AGENT",
        "parts": [{ "text": text }],
    })
}

/// The task as A2A shows it: status, the answer as an artifact (the typed result as a second
/// one), and `history` (the person's message, when known).
pub fn task(progress: &Progress, ids: &Ids, history: Vec<Value>) -> Value {
    let state = progress.state();
    let mut artifacts = Vec::new();
    if !progress.text.is_empty() {
        artifacts.push(json!({
            "artifactId": answer_artifact_id(ids),
            "name": "answer",
            "parts": [{ "text": progress.text }],
        }));
    }
    if let Some(AgentEvent::Completed { data: Some(data) }) = &progress.terminal
        && let Some(result) = data.get("result").filter(|r| !r.is_null())
    {
        artifacts.push(json!({
            "artifactId": format!("{}-result", ids.task),
            "name": "result",
            "parts": [{ "data": result, "mediaType": "application/json" }],
        }));
    }
    let mut task = json!({
        "id": ids.task,
        "contextId": ids.context,
        "status": status(state, progress, ids),
    });
    if !artifacts.is_empty() {
        task["artifacts"] = json!(artifacts);
    }
    if !history.is_empty() {
        task["history"] = json!(history);
    }
    task
}

/// The task's history: the messages of its turns (`turns`, in order) with words in them, the
/// person's and the agent's, the last `limit` of them (all when not said; none for 0).
pub fn history(entries: &[StoredMessage], turns: &[TurnId], ids: &Ids, limit: Option<usize>) -> Vec<Value> {
    let mut messages: Vec<Value> = entries
        .iter()
        .filter(|entry| {
            entry
                .turn_id
                .as_deref()
                .is_some_and(|turn| turns.iter().any(|t| t.as_str() == turn))
        })
        .filter_map(|entry| {
            let text = entry.message.text();
            // A file the message carries (one attached, or content kept for it: a long pasted
            // text, a picture) as a data part naming it; its bytes are the conversation's files.
            let mut parts: Vec<Value> = entry
                .message
                .content
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::Attachment { reference } => Some(json!({
                        "data": { "file": reference.summary() },
                        "mediaType": "application/json",
                    })),
                    _ => None,
                })
                .collect();
            if !text.trim().is_empty() {
                parts.insert(0, json!({ "text": text }));
            }
            if parts.is_empty() {
                return None;
            }
            let role = match entry.message.role {
                Role::User => "ROLE_USER",
                Role::Assistant => "ROLE_AGENT",
            };
            Some(json!({
                "messageId": format!("{}-{}", ids.task, entry.seq),
                "contextId": ids.context,
                "taskId": ids.task,
                "role": role,
                "parts": parts,
            }))
        })
        .collect();
    if let Some(limit) = limit {
        messages.drain(..messages.len().saturating_sub(limit));
    }
    messages
}

/// The id of the artifact that carries a task's answer.
pub fn answer_artifact_id(ids: &Ids) -> String {
    format!("{}-answer", ids.task)
}

/// `at_ms` (epoch milliseconds) as RFC 3339 in UTC (A2A's timestamps).
pub fn rfc3339(at_ms: u64) -> String {
    let at = i64::try_from(at_ms).unwrap_or(i64::MAX);
    chrono::DateTime::from_timestamp_millis(at)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_id_names_its_conversation_and_turn_and_nothing_else_parses() {
        let session = SessionId::new("conv/with.dots").unwrap();
        let turn = TurnId::new("t-1").unwrap();
        let id = task_id(&session, &turn);
        assert_eq!(parse_task_id(&id), Some((session, turn)));
        for bad in ["", "nodot", "!!.t", ".t", "Y29udg.", "AA.t"] {
            assert_eq!(parse_task_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn states_follow_the_terminal() {
        let completed = |reason: &str| AgentEvent::completed_with(json!({ "stopReason": reason }));
        assert_eq!(
            TaskState::of_terminal(&AgentEvent::completed()),
            TaskState::Completed
        );
        assert_eq!(
            TaskState::of_terminal(&completed("user_stop")),
            TaskState::Canceled
        );
        assert_eq!(
            TaskState::of_terminal(&completed("approval_required")),
            TaskState::InputRequired
        );
        assert_eq!(
            TaskState::of_terminal(&AgentEvent::failed("x", true, None)),
            TaskState::Failed
        );
    }
}

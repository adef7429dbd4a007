//! What a turn's logged events say of it so far ([`Heard`]): its text, its terminal, the
//! approvals it asked, and when each was logged. The doors that follow a turn (A2A, MCP,
//! AgentCore) and the worker's A2A pushes read a turn through it.

use serde_json::Value;

use agent_worker_aws::dynamo::LoggedEvent;
use agent_worker_contract::AgentEvent;

/// What a followed turn has said so far: its text, its terminal, the approvals it asked, whether
/// it logged anything, and whether it never started; and when each of those was logged.
#[derive(Debug, Default)]
pub struct Heard {
    /// The turn's text.
    pub text: String,
    /// Its terminal, once read.
    pub terminal: Option<AgentEvent>,
    /// Whether it logged anything.
    pub started: bool,
    /// It logged nothing within the wait.
    pub not_started: bool,
    /// The approvals it asked of the person (their `approval_required` events).
    pub approvals: Vec<serde_json::Value>,
    /// When its first event was logged (epoch milliseconds): when it began.
    pub started_at_ms: Option<u64>,
    /// When its terminal was logged, or when it was found not to have started.
    pub ended_at_ms: Option<u64>,
    /// When it was submitted, where the reader submitted it itself.
    pub submitted_at_ms: Option<u64>,
}

impl Heard {
    /// Takes one more of the turn's logged events.
    pub fn take(&mut self, logged: &LoggedEvent) {
        let event = &logged.event;
        if !self.started {
            self.started_at_ms = logged.logged_at_ms;
        }
        self.started = true;
        match event {
            AgentEvent::Text { delta } => self.text.push_str(delta),
            AgentEvent::Other(raw)
                if raw.get("type").and_then(serde_json::Value::as_str) == Some("approval_required") =>
            {
                self.approvals.push(raw.clone());
            }
            event if event.is_terminal() => {
                self.terminal = Some(event.clone());
                self.ended_at_ms = logged.logged_at_ms;
            }
            _ => {}
        }
    }

    /// Takes that the turn logged nothing within the wait: decided now.
    pub fn take_not_started(&mut self) {
        self.not_started = true;
        self.ended_at_ms = Some(agent_worker_core::clock::now_ms());
    }

    /// What `events`, read from the log, say.
    pub fn of(events: &[LoggedEvent]) -> Self {
        let mut heard = Self::default();
        for logged in events {
            heard.take(logged);
        }
        heard
    }
}

/// What the person is shown of an approval asked: its preview's title, else the tool's name.
pub fn approval_title(asked: &Value) -> &str {
    asked
        .pointer("/preview/title")
        .and_then(Value::as_str)
        .or_else(|| asked.get("tool").and_then(Value::as_str))
        .unwrap_or("a call")
}

/// An approval asked, as a client is shown it: never its token, which stays with the agent.
pub fn approval_shown(asked: &Value) -> Value {
    let field = |name: &str| asked.get(name).cloned().unwrap_or(Value::Null);
    serde_json::json!({
        "approvalId": field("approvalId"),
        "tool": field("tool"),
        "preview": field("preview"),
        "expiresAt": field("expiresAt"),
    })
}

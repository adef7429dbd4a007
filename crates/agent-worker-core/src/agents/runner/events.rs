//! [`SessionEvent`]: the runner's `session_status` events, typed until they are emitted. Each is
//! `{"type": "session_status", "status": …}` with the fields of its kind.

use serde_json::{Map, Value, json};

use crate::agents::thread::{SessionEnd, SessionStatus, Side};
use crate::protocol::AgentEvent;
use crate::session::SessionId;

/// Where a session stands, as the runner tells it while it carries the session.
#[derive(Debug, Clone)]
pub(super) enum SessionEvent<'a> {
    /// A side's turn starts (`running`, with `side`, `label`, `sideTurn`).
    SideStarted {
        side: Side,
        label: Option<&'a str>,
        side_turn: u32,
    },
    /// A side set its status line (`running`, with `side`, `statusText`).
    SideStatus { side: Side, status_text: &'a str },
    /// Another agent takes the thread (`handoff`, with `from`, `to`).
    Handoff { from: &'a str, to: &'a str },
    /// A parked parent resumes because `child` settled (`resuming`).
    Resuming {
        session: &'a SessionId,
        child: &'a SessionId,
    },
    /// The resumed parent settled (its status, with `session`, `end`).
    ParentSettled {
        status: SessionStatus,
        session: &'a SessionId,
        end: Option<&'a SessionEnd>,
    },
    /// The resumed parent could not run (`interrupted`, with `details`, `code`).
    Interrupted {
        session: &'a SessionId,
        details: &'a str,
        code: &'a str,
    },
    /// Where this invocation leaves the session (its status, with `awaiting`, `statusText`,
    /// `end`).
    Settled {
        status: SessionStatus,
        awaiting: Option<Side>,
        status_text: Option<&'a str>,
        end: Option<&'a SessionEnd>,
    },
}

impl SessionEvent<'_> {
    /// The event on the wire: the contract's open variant.
    pub(super) fn event(&self) -> AgentEvent {
        let (status, fields) = match self {
            Self::SideStarted {
                side,
                label,
                side_turn,
            } => (
                "running",
                json!({ "side": side.as_str(), "label": label, "sideTurn": side_turn }),
            ),
            Self::SideStatus { side, status_text } => (
                "running",
                json!({ "side": side.as_str(), "statusText": status_text }),
            ),
            Self::Handoff { from, to } => ("handoff", json!({ "from": from, "to": to })),
            Self::Resuming { session, child } => ("resuming", json!({ "session": session, "child": child })),
            Self::ParentSettled { status, session, end } => {
                (status.as_str(), json!({ "session": session, "end": end }))
            }
            Self::Interrupted {
                session,
                details,
                code,
            } => (
                "interrupted",
                json!({ "session": session, "details": details, "code": code }),
            ),
            Self::Settled {
                status,
                awaiting,
                status_text,
                end,
            } => (
                status.as_str(),
                json!({ "awaiting": awaiting.map(Side::as_str), "statusText": status_text, "end": end }),
            ),
        };
        let mut event = Map::new();
        event.insert("type".into(), "session_status".into());
        event.insert("status".into(), status.into());
        if let Value::Object(fields) = fields {
            event.extend(fields);
        }
        AgentEvent::Other(Value::Object(event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_keeps_its_wire_shape() {
        let started = SessionEvent::SideStarted {
            side: Side::A,
            label: Some("Agent"),
            side_turn: 3,
        };
        assert_eq!(
            started.event(),
            AgentEvent::Other(
                json!({"type": "session_status", "status": "running", "side": "sideA",
                "label": "Agent", "sideTurn": 3})
            )
        );
        let settled = SessionEvent::Settled {
            status: SessionStatus::AwaitingHuman,
            awaiting: Some(Side::B),
            status_text: None,
            end: None,
        };
        assert_eq!(
            settled.event(),
            AgentEvent::Other(json!({"type": "session_status", "status": "awaiting_human",
                "awaiting": "sideB", "statusText": null, "end": null}))
        );
    }
}

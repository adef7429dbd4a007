//! [`EngineEvent`]: the events this engine adds to the contract's (`approval_required`,
//! `compacting`, `compacted`). Typed inside; they become the contract's open
//! [`AgentEvent::Other`] variant only as they are emitted.

use serde::Serialize;
use serde_json::Value;

use crate::protocol::AgentEvent;

/// An event of this engine's own, beside the contract's.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EngineEvent {
    /// A call waits for the person's approval; the turn ends after it.
    #[serde(rename_all = "camelCase")]
    ApprovalRequired {
        /// The stored approval.
        approval_id: String,
        /// The model's call it holds.
        call_id: String,
        /// The tool.
        tool: String,
        /// The token that opens exactly this call, once.
        token: String,
        /// When the token expires, in epoch milliseconds.
        expires_at: u64,
        /// What the person is shown: title, consequence, fields.
        preview: Value,
    },
    /// The older turns are being summarized.
    #[serde(rename_all = "camelCase")]
    Compacting {
        /// How many messages are summarized.
        messages: usize,
        /// The request's estimated tokens before.
        estimated_tokens: u64,
    },
    /// The older turns were summarized.
    #[serde(rename_all = "camelCase")]
    Compacted {
        /// How many messages the summary stands for.
        summarized: usize,
        /// How many messages are kept word for word.
        kept: usize,
        /// The request's estimated tokens before.
        estimated_tokens_before: u64,
        /// And after.
        estimated_tokens_after: u64,
    },
    /// A UI action for the person's tab to run; the call waits for the tab's answer.
    #[serde(rename_all = "camelCase")]
    UiActionRequested {
        /// The model's call: the tab answers it by this id.
        call_id: String,
        /// The turn that asks: a tab refuses a request of a turn that is no longer current.
        turn_id: crate::session::TurnId,
        /// The surface.
        surface: String,
        /// The action.
        action: String,
        /// Its arguments.
        args: Value,
        /// For a call the person approved: `{approvalId, argsHash}`, for the tab's own check.
        #[serde(skip_serializing_if = "Option::is_none")]
        approval: Option<Value>,
    },
    /// A UI action's request the tab did not answer within the UI action timeout: the call has
    /// ended (as not run, or as sent with its outcome unknown), and a late answer does nothing.
    #[serde(rename_all = "camelCase")]
    UiActionWithdrawn {
        /// The model's call.
        call_id: String,
        /// The turn that asked.
        turn_id: crate::session::TurnId,
        /// Why: `timeout`.
        reason: String,
    },
    /// A command sent to the running turn reached the model: steering at a round boundary, or a
    /// follow-up once the turn was otherwise done.
    #[serde(rename_all = "camelCase")]
    CommandDelivered {
        /// `steer` or `follow_up`.
        kind: String,
        /// Its place among the turn's commands, from 0.
        position: usize,
        /// The person's words.
        text: String,
    },
}

impl From<EngineEvent> for AgentEvent {
    fn from(event: EngineEvent) -> Self {
        match serde_json::to_value(&event) {
            Ok(value) => AgentEvent::Other(value),
            // A derived serializer of strings and numbers does not fail; were it to, the event
            // is said as a plain line rather than lost.
            Err(e) => AgentEvent::text(format!("(an event could not be encoded: {e})")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_event_has_the_wire_shape_clients_read() {
        let compacting: AgentEvent = EngineEvent::Compacting {
            messages: 12,
            estimated_tokens: 9000,
        }
        .into();
        assert_eq!(
            compacting,
            AgentEvent::Other(json!({"type": "compacting", "messages": 12, "estimatedTokens": 9000}))
        );
        let asked: AgentEvent = EngineEvent::ApprovalRequired {
            approval_id: "ap-1".into(),
            call_id: "c-1".into(),
            tool: "pay".into(),
            token: "t".into(),
            expires_at: 5,
            preview: json!({"title": "Pay"}),
        }
        .into();
        assert_eq!(
            asked,
            AgentEvent::Other(
                json!({"type": "approval_required", "approvalId": "ap-1", "callId": "c-1",
                "tool": "pay", "token": "t", "expiresAt": 5, "preview": {"title": "Pay"}})
            )
        );
    }
}

//! Stored messages in the form a chat UI shows: text, tool calls by name and status, the stopped
//! marker, attachment references, and the cards of approvals still waiting.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use crate::engine::ToolSpec;
use crate::engine::approval_preview as preview;
use crate::protocol::AttachmentRef;
use crate::session::conversations::{ConversationSummary, StoredConversation, StoredMessage};
use crate::session::{ContentBlock, PendingApproval, Role, StopCause};

/// One conversation as a chat UI shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConversationView {
    /// What the list shows of it.
    pub conversation: ConversationSummary,
    /// The page's messages, oldest first. A message that holds only tool results is not one:
    /// its results are the statuses of the calls before it.
    pub messages: Vec<DisplayMessage>,
    /// The `before` that reads the older page; absent when this page starts at the beginning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub older: Option<u64>,
    /// The cards of approvals waiting for the person's decision (never their tokens).
    pub approvals: Vec<ApprovalCard>,
}

/// One message as a chat UI shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DisplayMessage {
    /// Its position in the conversation.
    pub seq: u64,
    /// The turn that stored it, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<crate::session::TurnId>,
    /// Who said it.
    pub role: Role,
    /// Its text (the model's reasoning is never shown).
    pub text: String,
    /// The tool calls it made.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallView>,
    /// The files attached to it, by reference.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<AttachmentRef>,
    /// How many pictures it carried inline.
    #[serde(skip_serializing_if = "is_zero")]
    pub images: usize,
    /// Set where the turn was stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<StoppedMarker>,
    /// How the person gave it (typed or spoken, the language), where the tab said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<crate::session::MessageInput>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Where and why a turn was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StoppedMarker {
    /// Why.
    pub reason: StopCause,
    /// When, in milliseconds since the Unix epoch.
    pub at: u64,
}

/// A tool call as a chat UI shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ToolCallView {
    /// The call's id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// How it went.
    pub status: ToolCallStatus,
    /// Its arguments, only where the tool's declaration allows logging them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

/// How a tool call went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    /// It ran and answered.
    Ok,
    /// It failed, or was refused.
    Error,
    /// Its result is not on this page.
    Unknown,
}

/// A waiting approval's card: what the person decides on, without the token that redeems it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ApprovalCard {
    /// The approval's id.
    pub approval_id: String,
    /// The turn that asked.
    pub turn_id: crate::session::TurnId,
    /// The tool.
    pub tool: String,
    /// The preview, as the `approval_required` event showed it.
    pub preview: Value,
    /// When it was asked, in milliseconds since the Unix epoch.
    pub created_at: u64,
    /// When it stops being redeemable.
    pub expires_at: u64,
}

/// `stored` as a chat UI shows it; `specs` are the tools' declarations by name.
pub(super) fn view(stored: StoredConversation, specs: &HashMap<String, ToolSpec>) -> ConversationView {
    let results = results_by_call(&stored.messages);
    let messages = stored
        .messages
        .iter()
        .filter_map(|m| display(m, &results, specs))
        .collect();
    let approvals = stored.waiting.iter().map(|a| card(a, specs)).collect();
    ConversationView {
        conversation: stored.summary,
        messages,
        older: stored.older,
        approvals,
    }
}

/// Whether each call on the page failed, by call id.
fn results_by_call(messages: &[StoredMessage]) -> HashMap<&str, bool> {
    messages
        .iter()
        .flat_map(|m| &m.message.content)
        .filter_map(|block| match block {
            ContentBlock::ToolResult {
                tool_use_id,
                is_error,
                ..
            } => Some((tool_use_id.as_str(), *is_error)),
            _ => None,
        })
        .collect()
}

fn display(
    stored: &StoredMessage,
    results: &HashMap<&str, bool>,
    specs: &HashMap<String, ToolSpec>,
) -> Option<DisplayMessage> {
    let message = &stored.message;
    let mut shown = DisplayMessage {
        seq: stored.seq,
        turn_id: stored.turn_id.clone(),
        role: message.role,
        text: message.text(),
        tool_calls: Vec::new(),
        attachments: Vec::new(),
        images: 0,
        stopped: message.stopped.map(|s| StoppedMarker {
            reason: s.reason,
            at: s.at,
        }),
        input: message.input.clone(),
    };
    for block in &message.content {
        match block {
            ContentBlock::ToolUse { id, name, input } => shown.tool_calls.push(ToolCallView {
                id: id.clone(),
                name: name.clone(),
                status: match results.get(id.as_str()) {
                    Some(false) => ToolCallStatus::Ok,
                    Some(true) => ToolCallStatus::Error,
                    None => ToolCallStatus::Unknown,
                },
                arguments: specs
                    .get(name)
                    .filter(|spec| !spec.args_sensitive)
                    .map(|_| input.clone()),
            }),
            ContentBlock::Attachment { reference } => shown.attachments.push(reference.clone()),
            ContentBlock::Image { .. } => shown.images += 1,
            ContentBlock::Document { .. }
            | ContentBlock::Text { .. }
            | ContentBlock::Reasoning { .. }
            | ContentBlock::RedactedReasoning { .. }
            | ContentBlock::ToolResult { .. } => {}
        }
    }
    let empty = shown.text.trim().is_empty()
        && shown.tool_calls.is_empty()
        && shown.attachments.is_empty()
        && shown.images == 0
        && shown.stopped.is_none();
    (!empty).then_some(shown)
}

fn card(approval: &PendingApproval, specs: &HashMap<String, ToolSpec>) -> ApprovalCard {
    let preview = match (&approval.preview, specs.get(&approval.tool)) {
        // What the live card showed, kept when it was asked.
        (Some(shown), _) => shown.clone(),
        (None, Some(spec)) => preview(spec, &approval.args, &[]),
        // A tool no longer declared: its name alone, never arguments nothing vouches for.
        (None, None) => serde_json::json!({ "title": approval.tool, "fields": [] }),
    };
    ApprovalCard {
        approval_id: approval.id.clone(),
        turn_id: approval.turn_id.clone(),
        tool: approval.tool.clone(),
        preview,
        created_at: approval.created_at,
        expires_at: approval.expires_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{Message, Stop};
    use serde_json::json;

    fn stored(seq: u64, message: Message) -> StoredMessage {
        StoredMessage {
            seq,
            turn_id: Some(crate::session::test_ids::tid("t1")),
            message,
        }
    }

    #[test]
    fn calls_show_their_status_and_only_loggable_arguments() {
        let specs = HashMap::from([
            (
                "lookup".to_owned(),
                ToolSpec::new("lookup", "Looks up", json!({"type": "object"})).args_sensitive(false),
            ),
            (
                "pay".to_owned(),
                ToolSpec::new("pay", "Pays", json!({"type": "object"})),
            ),
        ]);
        let mut answer = Message::assistant_text("Stopped here");
        answer.stopped = Some(Stop {
            reason: StopCause::UserStop,
            at: 7,
        });
        let mut asked = Message::user_text("pay it");
        asked.input = Some(crate::session::MessageInput {
            mode: crate::session::InputMode::Voice,
            language: Some("fr-FR".into()),
        });
        let messages = vec![
            stored(0, asked),
            stored(
                1,
                Message::new(
                    Role::Assistant,
                    vec![
                        ContentBlock::Reasoning {
                            text: "secret thoughts".into(),
                            signature: None,
                        },
                        ContentBlock::ToolUse {
                            id: "c1".into(),
                            name: "lookup".into(),
                            input: json!({"q": "x"}),
                        },
                        ContentBlock::ToolUse {
                            id: "c2".into(),
                            name: "pay".into(),
                            input: json!({"card": "4111"}),
                        },
                    ],
                ),
            ),
            stored(
                2,
                Message::new(
                    Role::User,
                    vec![
                        ContentBlock::ToolResult {
                            tool_use_id: "c1".into(),
                            content: json!({"ok": 1}),
                            is_error: false,
                        },
                        ContentBlock::error_result("c2", "declined"),
                    ],
                ),
            ),
            stored(3, answer),
        ];
        let conversation = StoredConversation {
            summary: ConversationSummary {
                id: "s".into(),
                title: "pay it".into(),
                last_active_at: 1,
                turns: 1,
                preview: "Stopped here".into(),
                running: false,
            },
            messages,
            older: None,
            waiting: Vec::new(),
        };
        let view = view(conversation, &specs);
        assert_eq!(view.messages.len(), 3, "the results-only message is not shown");
        let calls = &view.messages[1].tool_calls;
        assert_eq!(calls[0].status, ToolCallStatus::Ok);
        assert_eq!(calls[0].arguments, Some(json!({"q": "x"})));
        assert_eq!(calls[1].status, ToolCallStatus::Error);
        assert_eq!(calls[1].arguments, None, "a sensitive tool's arguments stay out");
        assert!(!serde_json::to_string(&view).unwrap().contains("secret thoughts"));
        // How the person gave a message shows with it: spoken, in French.
        let first = serde_json::to_value(&view.messages[0]).unwrap();
        assert_eq!(first["input"], json!({"mode": "voice", "language": "fr-FR"}));
        assert!(
            serde_json::to_value(&view.messages[1])
                .unwrap()
                .get("input")
                .is_none()
        );
        assert_eq!(
            view.messages[2].stopped,
            Some(StoppedMarker {
                reason: StopCause::UserStop,
                at: 7
            })
        );
    }
}

//! The stored form of a conversation: [`Message`]s made of [`ContentBlock`]s.
//!
//! This is the engine-neutral history a session keeps. The engine maps it to its model's wire
//! types; stores keep it as JSON.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::turn::Stop;
use crate::protocol::AttachmentRef;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The person, and tool results sent back on their side.
    User,
    /// The model.
    Assistant,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// What it holds, in order.
    pub content: Vec<ContentBlock>,
    /// Set on the last assistant message of a turn that was stopped: the next turn's model is
    /// told that the turn was stopped there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<Stop>,
    /// How the person gave it (typed or spoken, and in which language), where the tab said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<MessageInput>,
}

/// How the person gave a message (seed 004's `AgentStoredMessage.input`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MessageInput {
    /// Typed or spoken.
    pub mode: InputMode,
    /// The language a recogniser heard, a BCP 47 tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
}

/// How a message was entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum InputMode {
    /// Typed.
    Typed,
    /// Spoken, and recognised.
    Voice,
}

impl Message {
    /// A message of `role` with `content`.
    pub fn new(role: Role, content: Vec<ContentBlock>) -> Self {
        Self {
            role,
            content,
            stopped: None,
            input: None,
        }
    }

    /// A user message of text alone.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self::new(Role::User, vec![ContentBlock::text(text)])
    }

    /// An assistant message of text alone.
    pub fn assistant_text(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, vec![ContentBlock::text(text)])
    }

    /// The ids of the tool calls this message makes, in order.
    pub fn tool_use_ids(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
            _ => None,
        })
    }

    /// The message's text blocks, concatenated.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// One block of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A picture, inline.
    Image {
        /// Its media type, such as `image/png`.
        mime_type: String,
        /// Its bytes, base64-encoded.
        data: String,
    },
    /// A document the provider reads itself (a PDF, with its pages' pictures), inline. Given
    /// with a turn's message when it is sent, never stored.
    Document {
        /// Its media type: `application/pdf`.
        mime_type: String,
        /// Its name, as the person gave it.
        name: String,
        /// Its bytes, base64-encoded.
        data: String,
    },
    /// The model's reasoning. Kept in history and sent back with its signature, as Bedrock
    /// requires for a turn that continues after a tool call; never shown as the answer.
    Reasoning {
        /// The reasoning text.
        text: String,
        /// The provider's signature over the text, when it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Reasoning the provider encrypted, base64-encoded; sent back as it came.
    RedactedReasoning {
        /// The opaque bytes, base64-encoded.
        data: String,
    },
    /// A tool call the model made.
    ToolUse {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments (a JSON object).
        input: Value,
    },
    /// The result of a tool call, sent back to the model in a user message.
    ToolResult {
        /// The id of the call it answers.
        tool_use_id: String,
        /// The result.
        content: Value,
        /// Whether it is an error.
        is_error: bool,
    },
    /// A file the person attached, by reference: never its bytes or text. The model gets the
    /// file itself in the turn it came with, and this reference line afterwards.
    Attachment {
        /// The reference.
        reference: AttachmentRef,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// An error result for `tool_use_id` carrying `message`.
    pub fn error_result(tool_use_id: impl Into<String>, message: impl Into<String>) -> Self {
        Self::ToolResult {
            tool_use_id: tool_use_id.into(),
            content: serde_json::json!({ "error": message.into() }),
            is_error: true,
        }
    }

    /// Whether the block carries nothing a model could read.
    pub fn is_empty(&self) -> bool {
        match self {
            Self::Text { text } => text.trim().is_empty(),
            Self::Image { data, .. } | Self::Document { data, .. } | Self::RedactedReasoning { data } => {
                data.is_empty()
            }
            Self::Reasoning { text, signature } => text.is_empty() && signature.is_none(),
            Self::ToolUse { id, name, .. } => id.is_empty() || name.is_empty(),
            Self::ToolResult { tool_use_id, .. } => tool_use_id.is_empty(),
            Self::Attachment { reference } => reference.id.is_empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_have_a_stable_json_form() {
        let msg = Message::new(
            Role::Assistant,
            vec![
                ContentBlock::Reasoning {
                    text: "r".into(),
                    signature: Some("sig".into()),
                },
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "current_time".into(),
                    input: json!({}),
                },
            ],
        );
        let json = serde_json::to_value(&msg).unwrap();
        assert_eq!(
            json,
            json!({"role":"assistant","content":[
                {"type":"reasoning","text":"r","signature":"sig"},
                {"type":"toolUse","id":"t1","name":"current_time","input":{}}
            ]})
        );
        assert_eq!(serde_json::from_value::<Message>(json).unwrap(), msg);
        let result = serde_json::to_value(ContentBlock::error_result("t1", "x")).unwrap();
        assert_eq!(
            result,
            json!({"type":"toolResult","toolUseId":"t1","content":{"error":"x"},"isError":true})
        );
    }
}

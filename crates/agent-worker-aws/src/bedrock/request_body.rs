//! The ConverseStream request body, written here in one stable order.
//!
//! The prompt cache keys on the exact bytes of a request's prefix, so the same tools and history
//! must be the same bytes on every step and every worker. The SDK writes a JSON document (a
//! tool's input schema, a call's input, a JSON tool result) from a `HashMap`, in a new order each
//! time; so the body is written here instead, straight from the engine's request: every object's
//! keys in sorted order (the SDK's own members are sorted too, so the bytes are what the SDK's
//! body with sorted keys would be), a picture's or document's base64 passed through as kept
//! (never decoded and encoded again), and the SDK sends it as the body of an operation whose
//! only input is the model id ([`BedrockModel`](super::BedrockModel)).

use std::borrow::Cow;

use serde::Serialize;
use serde::ser::{SerializeMap as _, Serializer};
use serde_json::Value;

use agent_worker_core::engine::ImageFormat;
use agent_worker_core::engine::model::{ModelRequest, ToolChoice};
use agent_worker_core::session::{ContentBlock, Message, Role};

/// Why a request could not be written.
#[derive(Debug, thiserror::Error)]
pub(super) enum BodyError {
    /// A picture of a type Converse does not take.
    #[error("unsupported image type {0}")]
    ImageType(String),
    /// A picture's or document's data is not base64.
    #[error("the {0}'s data is not base64")]
    NotBase64(&'static str),
    /// The JSON writer failed (it does not, for these types).
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// The request's body: its JSON, keys sorted at every depth.
pub(super) fn write(request: &ModelRequest, caching: bool) -> Result<Vec<u8>, BodyError> {
    let plan = request.cache;
    let mut messages = request
        .messages
        .iter()
        .map(WireMessage::of)
        .collect::<Result<Vec<_>, _>>()?;
    if caching
        && plan.history_messages > 0
        && let Some(last) = messages.get_mut(plan.history_messages - 1)
    {
        last.content.push(Block::CachePoint(CachePoint::DEFAULT));
    }
    // The stable system blocks end with the first checkpoint; without any, the tools do.
    let total = request.system.len();
    let stable = plan.system_blocks.min(total);
    let mut system = Vec::with_capacity(total + 1);
    let mut system_cached = false;
    for (i, text) in request.system.iter().enumerate() {
        if i == stable && caching && !system.is_empty() {
            system.push(SystemBlock::CachePoint(CachePoint::DEFAULT));
            system_cached = true;
        }
        if !text.trim().is_empty() {
            system.push(SystemBlock::Text(text));
        }
    }
    if !system_cached && caching && !system.is_empty() && stable == total {
        system.push(SystemBlock::CachePoint(CachePoint::DEFAULT));
        system_cached = true;
    }
    let tool_config = (!request.tools.is_empty()).then(|| {
        let mut tools: Vec<Tool<'_>> = request
            .tools
            .iter()
            .map(|tool| Tool::ToolSpec {
                description: &tool.description,
                input_schema: InputSchema {
                    json: Sorted(&tool.input_schema),
                },
                name: &tool.name,
            })
            .collect();
        if caching && !system_cached {
            tools.push(Tool::CachePoint(CachePoint::DEFAULT));
        }
        ToolConfig {
            tool_choice: match &request.tool_choice {
                ToolChoice::Auto => Choice::Auto {},
                ToolChoice::Tool(name) => Choice::Tool { name },
            },
            tools,
        }
    });
    let body = Body {
        inference_config: InferenceConfig {
            max_tokens: i32::try_from(request.max_tokens).unwrap_or(i32::MAX),
            temperature: f64::from(request.temperature),
        },
        messages,
        system,
        tool_config,
    };
    Ok(serde_json::to_vec(&body)?)
}

/// The body's members, in sorted order (serde writes a struct's fields in declaration order).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    inference_config: InferenceConfig,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<SystemBlock<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InferenceConfig {
    max_tokens: i32,
    temperature: f64,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    content: Vec<Block<'a>>,
    role: &'static str,
}

impl<'a> WireMessage<'a> {
    fn of(message: &'a Message) -> Result<Self, BodyError> {
        Ok(Self {
            content: message.content.iter().map(Block::of).collect::<Result<_, _>>()?,
            role: match message.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            },
        })
    }
}

/// `{"type": "default"}`.
#[derive(Serialize, Clone, Copy)]
struct CachePoint {
    #[serde(rename = "type")]
    kind: &'static str,
}

impl CachePoint {
    const DEFAULT: Self = Self { kind: "default" };
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum SystemBlock<'a> {
    Text(&'a str),
    CachePoint(CachePoint),
}

/// A message's content block, as Converse names it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Block<'a> {
    Text(Cow<'a, str>),
    Image {
        format: &'static str,
        source: Bytes<'a>,
    },
    Document {
        format: &'static str,
        name: String,
        source: Bytes<'a>,
    },
    ReasoningContent(Reasoning<'a>),
    #[serde(rename_all = "camelCase")]
    ToolUse {
        input: Sorted<'a>,
        name: &'a str,
        tool_use_id: &'a str,
    },
    #[serde(rename_all = "camelCase")]
    ToolResult {
        content: [ResultBlock<'a>; 1],
        status: &'static str,
        tool_use_id: &'a str,
    },
    CachePoint(CachePoint),
}

impl<'a> Block<'a> {
    fn of(block: &'a ContentBlock) -> Result<Self, BodyError> {
        Ok(match block {
            ContentBlock::Text { text } => Self::Text(Cow::Borrowed(text)),
            ContentBlock::Attachment { reference } => Self::Text(Cow::Owned(reference.reference_line())),
            ContentBlock::Image { mime_type, data } => Self::Image {
                format: match ImageFormat::from_mime_type(mime_type) {
                    Some(ImageFormat::Png) => "png",
                    Some(ImageFormat::Jpeg) => "jpeg",
                    Some(ImageFormat::Gif) => "gif",
                    Some(ImageFormat::Webp) => "webp",
                    None => return Err(BodyError::ImageType(mime_type.clone())),
                },
                source: Bytes::of(data, "picture")?,
            },
            ContentBlock::Document { name, data, .. } => Self::Document {
                format: "pdf",
                name: document_name(name),
                source: Bytes::of(data, "document")?,
            },
            ContentBlock::Reasoning { text, signature } => Self::ReasoningContent(Reasoning::ReasoningText {
                signature: signature.as_deref(),
                text,
            }),
            ContentBlock::RedactedReasoning { data } => {
                Self::ReasoningContent(Reasoning::RedactedContent(base64(data, "redacted reasoning")?))
            }
            ContentBlock::ToolUse { id, name, input } => Self::ToolUse {
                input: Sorted(input),
                name,
                tool_use_id: id,
            },
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => Self::ToolResult {
                content: [match content {
                    Value::String(text) => ResultBlock::Text(text),
                    Value::Object(_) => ResultBlock::Json(Json::Document(Sorted(content))),
                    other => ResultBlock::Json(Json::Result {
                        result: Sorted(other),
                    }),
                }],
                status: if *is_error { "error" } else { "success" },
                tool_use_id,
            },
        })
    }
}

/// `{"bytes": "<base64>"}`.
#[derive(Serialize)]
struct Bytes<'a> {
    bytes: &'a str,
}

impl<'a> Bytes<'a> {
    fn of(data: &'a str, what: &'static str) -> Result<Self, BodyError> {
        Ok(Self {
            bytes: base64(data, what)?,
        })
    }
}

/// `data`, when it reads as standard padded base64 (checked without decoding it).
fn base64<'a>(data: &'a str, what: &'static str) -> Result<&'a str, BodyError> {
    let bytes = data.as_bytes();
    let padding = bytes.iter().rev().take_while(|b| **b == b'=').count();
    let body = &bytes[..bytes.len() - padding];
    let alphabet = |b: &u8| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/';
    if !bytes.len().is_multiple_of(4) || padding > 2 || !body.iter().all(alphabet) {
        return Err(BodyError::NotBase64(what));
    }
    Ok(data)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Reasoning<'a> {
    ReasoningText {
        #[serde(skip_serializing_if = "Option::is_none")]
        signature: Option<&'a str>,
        text: &'a str,
    },
    RedactedContent(&'a str),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum ResultBlock<'a> {
    Text(&'a str),
    Json(Json<'a>),
}

/// A JSON tool result: an object as it is, anything else as `{"result": ...}`.
#[derive(Serialize)]
#[serde(untagged)]
enum Json<'a> {
    Document(Sorted<'a>),
    Result { result: Sorted<'a> },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig<'a> {
    tool_choice: Choice<'a>,
    tools: Vec<Tool<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Tool<'a> {
    #[serde(rename_all = "camelCase")]
    ToolSpec {
        description: &'a str,
        input_schema: InputSchema<'a>,
        name: &'a str,
    },
    CachePoint(CachePoint),
}

#[derive(Serialize)]
struct InputSchema<'a> {
    json: Sorted<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Choice<'a> {
    Auto {},
    Tool { name: &'a str },
}

/// A JSON value written with every object's keys in sorted order, at every depth; arrays keep
/// their order.
struct Sorted<'a>(&'a Value);

impl Serialize for Sorted<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                let mut out = serializer.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    out.serialize_entry(key, &Sorted(value))?;
                }
                out.end()
            }
            Value::Array(items) => serializer.collect_seq(items.iter().map(Sorted)),
            other => other.serialize(serializer),
        }
    }
}

/// A document's name as Converse takes one: letters, digits, single spaces, hyphens,
/// parentheses and square brackets; the rest become spaces; never empty.
fn document_name(name: &str) -> String {
    let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
    let kept: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-()[]".contains(c) {
                c
            } else {
                ' '
            }
        })
        .collect();
    let words: Vec<&str> = kept.split_whitespace().collect();
    if words.is_empty() {
        "document".to_owned()
    } else {
        words.join(" ").chars().take(200).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_worker_core::engine::model::{CachePlan, ToolDescription};
    use serde_json::json;

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            system: vec!["Be brief.".into()],
            messages,
            tools: vec![ToolDescription {
                name: "add".into(),
                description: "Adds.".into(),
                input_schema: json!({"type": "object", "properties": {"b": {"type": "number"}, "a": {"type": "number"}}}),
            }],
            tool_choice: ToolChoice::Auto,
            max_tokens: 100,
            temperature: 0.5,
            cache: CachePlan {
                system_blocks: 1,
                history_messages: 1,
            },
        }
    }

    #[test]
    fn keys_are_sorted_at_every_depth_and_arrays_keep_their_order() {
        let value: Value = serde_json::from_str(r#"{"b":{"z":1,"a":[{"y":2,"x":1},3]},"a":"s"}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&Sorted(&value)).unwrap(),
            r#"{"a":"s","b":{"a":[{"x":1,"y":2},3],"z":1}}"#
        );
    }

    #[test]
    fn the_body_is_converse_streams_with_every_key_sorted() {
        let messages = vec![
            Message::user_text("Add 1 and 2."),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "add".into(),
                    input: json!({"numbers": [1, 2], "exact": true}),
                }],
            ),
            Message::new(
                Role::User,
                vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "c1".into(),
                        content: json!(3),
                        is_error: false,
                    },
                    ContentBlock::Image {
                        mime_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into(),
                    },
                ],
            ),
        ];
        let body = String::from_utf8(write(&request(messages), true).unwrap()).unwrap();
        assert_eq!(
            body,
            concat!(
                r#"{"inferenceConfig":{"maxTokens":100,"temperature":0.5},"messages":["#,
                r#"{"content":[{"text":"Add 1 and 2."},{"cachePoint":{"type":"default"}}],"role":"user"},"#,
                r#"{"content":[{"toolUse":{"input":{"exact":true,"numbers":[1,2]},"name":"add","toolUseId":"c1"}}],"role":"assistant"},"#,
                r#"{"content":[{"toolResult":{"content":[{"json":{"result":3}}],"status":"success","toolUseId":"c1"}},"#,
                r#"{"image":{"format":"png","source":{"bytes":"iVBORw0KGgo="}}}],"role":"user"}],"#,
                r#""system":[{"text":"Be brief."},{"cachePoint":{"type":"default"}}],"#,
                r#""toolConfig":{"toolChoice":{"auto":{}},"tools":[{"toolSpec":{"description":"Adds.","#,
                r#""inputSchema":{"json":{"properties":{"a":{"type":"number"},"b":{"type":"number"}},"type":"object"}},"#,
                r#""name":"add"}}]}}"#
            )
        );
        // Every object of it has its keys in order.
        fn sorted(value: &Value) -> bool {
            match value {
                Value::Object(map) => {
                    map.keys().zip(map.keys().skip(1)).all(|(a, b)| a < b) && map.values().all(sorted)
                }
                Value::Array(items) => items.iter().all(sorted),
                _ => true,
            }
        }
        assert!(sorted(&serde_json::from_str(&body).unwrap()));
    }

    #[test]
    fn every_other_block_kind_is_written_as_converse_takes_it() {
        let mut asked = request(vec![
            Message::new(
                Role::User,
                vec![ContentBlock::Document {
                    mime_type: "application/pdf".into(),
                    name: "Q3 report.final.pdf".into(),
                    data: "JVBERi0=".into(),
                }],
            ),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::Reasoning {
                        text: "Look it up.".into(),
                        signature: Some("sig".into()),
                    },
                    ContentBlock::RedactedReasoning { data: "AAAA".into() },
                    ContentBlock::ToolUse {
                        id: "c2".into(),
                        name: "add".into(),
                        input: json!({}),
                    },
                    ContentBlock::ToolUse {
                        id: "c3".into(),
                        name: "add".into(),
                        input: json!({}),
                    },
                ],
            ),
            Message::new(
                Role::User,
                vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "c2".into(),
                        content: json!({"z": 1, "a": 2}),
                        is_error: true,
                    },
                    ContentBlock::ToolResult {
                        tool_use_id: "c3".into(),
                        content: json!("three"),
                        is_error: false,
                    },
                ],
            ),
        ]);
        // No system prompt: the tools end the stable prefix.
        asked.system.clear();
        asked.tool_choice = ToolChoice::Tool("add".into());
        asked.cache = CachePlan::default();
        let body: Value = serde_json::from_slice(&write(&asked, true).unwrap()).unwrap();
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"document": {"format": "pdf", "name": "Q3 report final", "source": {"bytes": "JVBERi0="}}}]},
                {"role": "assistant", "content": [
                    {"reasoningContent": {"reasoningText": {"signature": "sig", "text": "Look it up."}}},
                    {"reasoningContent": {"redactedContent": "AAAA"}},
                    {"toolUse": {"input": {}, "name": "add", "toolUseId": "c2"}},
                    {"toolUse": {"input": {}, "name": "add", "toolUseId": "c3"}}
                ]},
                {"role": "user", "content": [
                    {"toolResult": {"content": [{"json": {"a": 2, "z": 1}}], "status": "error", "toolUseId": "c2"}},
                    {"toolResult": {"content": [{"text": "three"}], "status": "success", "toolUseId": "c3"}}
                ]}
            ])
        );
        assert!(body.get("system").is_none(), "{body}");
        assert_eq!(body["toolConfig"]["toolChoice"], json!({"tool": {"name": "add"}}));
        assert_eq!(
            body["toolConfig"]["tools"][1],
            json!({"cachePoint": {"type": "default"}})
        );
    }

    #[test]
    fn without_caching_no_checkpoint_is_written_and_a_bad_picture_is_named() {
        let body =
            String::from_utf8(write(&request(vec![Message::user_text("Hi")]), false).unwrap()).unwrap();
        assert!(!body.contains("cachePoint"), "{body}");
        let picture = |mime_type: &str, data: &str| {
            request(vec![Message::new(
                Role::User,
                vec![ContentBlock::Image {
                    mime_type: mime_type.into(),
                    data: data.into(),
                }],
            )])
        };
        assert_eq!(
            write(&picture("image/bmp", "AAAA"), true)
                .unwrap_err()
                .to_string(),
            "unsupported image type image/bmp"
        );
        assert_eq!(
            write(&picture("image/png", "not base64!"), true)
                .unwrap_err()
                .to_string(),
            "the picture's data is not base64"
        );
    }
}

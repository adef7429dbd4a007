//! [`AgentEvent`]: what one turn streams to its caller.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// One event of a turn's stream.
///
/// The wire form is a JSON object tagged by `"type"`, with camelCase fields exactly as the Agent
/// Handler specification writes them:
///
/// | variant | JSON |
/// | --- | --- |
/// | [`Text`](Self::Text) | `{"type":"text","delta":".."}` |
/// | [`Thinking`](Self::Thinking) | `{"type":"thinking","delta":".."}` |
/// | [`ToolStarted`](Self::ToolStarted) | `{"type":"tool_started","id":"..","name":"..","args":{..}}` |
/// | [`ToolEnded`](Self::ToolEnded) | `{"type":"tool_ended","id":"..","isError":false,"content":..}` |
/// | [`Retrying`](Self::Retrying) | `{"type":"retrying","attempt":1,"maxAttempts":3,"delayMs":200,"reason":".."}` |
/// | [`Usage`](Self::Usage) | `{"type":"usage","inputTokens":10,"outputTokens":5}`, plus `cacheReadInputTokens`/`cacheWriteInputTokens` when not 0 (extension) |
/// | [`Completed`](Self::Completed) | `{"type":"completed"}` or `{"type":"completed","data":..}` |
/// | [`Failed`](Self::Failed) | `{"type":"failed","details":"..","retryable":true,"code":".."}` |
///
/// `completed` and `failed` are the only terminal events, and that set is frozen (MUST 4). Any
/// other `type` deserialises into [`Other`](Self::Other), which keeps the raw JSON so a relay
/// can forward it unchanged (MUST 5). The enum is `#[non_exhaustive]`: a `match` outside this
/// crate needs a `_` arm, which is where a terminal consumer ignores what it does not know.
///
/// ```
/// use agent_worker_contract::AgentEvent;
///
/// let event: AgentEvent = serde_json::from_str(r#"{"type":"text","delta":"Hi"}"#).unwrap();
/// assert_eq!(event, AgentEvent::text("Hi"));
///
/// // An event type this crate does not know survives a round trip unchanged.
/// let raw = r#"{"type":"progress","percent":40,"stage":{"name":"index"}}"#;
/// let event: AgentEvent = serde_json::from_str(raw).unwrap();
/// assert!(matches!(event, AgentEvent::Other(_)));
/// assert_eq!(serde_json::to_string(&event).unwrap(), raw);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AgentEvent {
    /// A piece of the answer. All textual output arrives as text deltas.
    Text {
        /// The text to append.
        delta: String,
    },
    /// A piece of the model's reasoning: process, never part of the answer.
    Thinking {
        /// The reasoning text to append.
        delta: String,
    },
    /// A tool call whose arguments are complete is about to run.
    ToolStarted {
        /// The call's id, unique within the turn.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments the model gave.
        args: Value,
    },
    /// A tool call ended; its result goes back to the model.
    ToolEnded {
        /// The id of the matching [`ToolStarted`](Self::ToolStarted).
        id: String,
        /// Whether the result is an error the model reads.
        is_error: bool,
        /// The result.
        content: Value,
    },
    /// Advisory: a transient failure is retried after `delay_ms`. The next event closes it.
    Retrying {
        /// 1 for the first retry.
        attempt: u32,
        /// How many retries may be made in all.
        max_attempts: u32,
        /// How long the engine waits before the retry.
        delay_ms: u64,
        /// Human-facing prose.
        reason: String,
    },
    /// Extension event: tokens one model step consumed. Non-terminal; terminal consumers
    /// ignore it, budget middleware counts it.
    Usage {
        /// Input tokens of the step, besides those read from or written to the prompt cache.
        input_tokens: u64,
        /// Output tokens of the step, reasoning included.
        output_tokens: u64,
        /// Input tokens read from the prompt cache (`cacheReadInputTokens`, left out when 0).
        cache_read_tokens: u64,
        /// Input tokens written to the prompt cache (`cacheWriteInputTokens`, left out when 0).
        cache_write_tokens: u64,
        /// What the step cost, in US dollars, estimated from the deployment's price table
        /// (`costUsd`, left out where the model has no price).
        cost_usd: Option<f64>,
    },
    /// Terminal: the turn succeeded.
    Completed {
        /// Structured data, present only when the engine produced some.
        data: Option<Value>,
    },
    /// Terminal: the turn failed.
    Failed {
        /// What went wrong, readable by a person.
        details: String,
        /// Whether sending the same turn again with the same session is worth it.
        retryable: bool,
        /// A machine-readable subdivision; see [`codes`](super::codes).
        code: Option<String>,
    },
    /// An event of a type this crate does not know, kept as its raw JSON object.
    Other(Value),
}

impl AgentEvent {
    /// A [`Text`](Self::Text) event.
    pub fn text(delta: impl Into<String>) -> Self {
        Self::Text { delta: delta.into() }
    }

    /// A [`Thinking`](Self::Thinking) event.
    pub fn thinking(delta: impl Into<String>) -> Self {
        Self::Thinking { delta: delta.into() }
    }

    /// A usage event without prompt-cache tokens.
    pub fn usage(input_tokens: u64, output_tokens: u64) -> Self {
        Self::Usage {
            input_tokens,
            output_tokens,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            cost_usd: None,
        }
    }

    /// A [`Completed`](Self::Completed) event without data.
    pub fn completed() -> Self {
        Self::Completed { data: None }
    }

    /// A [`Completed`](Self::Completed) event carrying `data`.
    pub fn completed_with(data: Value) -> Self {
        Self::Completed { data: Some(data) }
    }

    /// A [`Failed`](Self::Failed) event.
    pub fn failed(details: impl Into<String>, retryable: bool, code: Option<&str>) -> Self {
        Self::Failed {
            details: details.into(),
            retryable,
            code: code.map(str::to_owned),
        }
    }

    /// Whether this event ends the stream (`completed` or `failed`).
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Completed { .. } | Self::Failed { .. })
    }

    /// The event's `"type"` as it appears on the wire.
    pub fn type_name(&self) -> &str {
        match self {
            Self::Text { .. } => "text",
            Self::Thinking { .. } => "thinking",
            Self::ToolStarted { .. } => "tool_started",
            Self::ToolEnded { .. } => "tool_ended",
            Self::Retrying { .. } => "retrying",
            Self::Usage { .. } => "usage",
            Self::Completed { .. } => "completed",
            Self::Failed { .. } => "failed",
            Self::Other(raw) => raw.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The wire form of the known events, borrowed for serialising (and, with the `schema` feature,
/// described: its schema is the known half of [`AgentEvent`]'s as written).
#[derive(Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case", rename_all_fields = "camelCase")]
enum WireRef<'a> {
    Text {
        delta: &'a str,
    },
    Thinking {
        delta: &'a str,
    },
    ToolStarted {
        id: &'a str,
        name: &'a str,
        args: &'a Value,
    },
    ToolEnded {
        id: &'a str,
        is_error: bool,
        content: &'a Value,
    },
    Retrying {
        attempt: u32,
        max_attempts: u32,
        delay_ms: u64,
        reason: &'a str,
    },
    Usage {
        input_tokens: u64,
        output_tokens: u64,
        #[serde(skip_serializing_if = "is_zero")]
        cache_read_input_tokens: u64,
        #[serde(skip_serializing_if = "is_zero")]
        cache_write_input_tokens: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    Completed {
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<&'a Value>,
    },
    Failed {
        details: &'a str,
        retryable: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<&'a str>,
    },
}

/// The wire form of the known events, owned for deserialising (and, with the `schema` feature,
/// described: its schema is the known half of [`AgentEvent`]'s as read).
#[derive(Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case", rename_all_fields = "camelCase")]
enum WireOwned {
    Text {
        delta: String,
    },
    Thinking {
        delta: String,
    },
    ToolStarted {
        id: String,
        name: String,
        #[serde(default, deserialize_with = "present")]
        #[cfg_attr(feature = "schema", schemars(with = "Value"))]
        args: Value,
    },
    ToolEnded {
        id: String,
        is_error: bool,
        #[serde(default, deserialize_with = "present")]
        #[cfg_attr(feature = "schema", schemars(with = "Value"))]
        content: Value,
    },
    Retrying {
        attempt: u32,
        max_attempts: u32,
        delay_ms: u64,
        reason: String,
    },
    Usage {
        input_tokens: u64,
        output_tokens: u64,
        #[serde(default)]
        cache_read_input_tokens: u64,
        #[serde(default)]
        cache_write_input_tokens: u64,
        #[serde(default)]
        cost_usd: Option<f64>,
    },
    Completed {
        // `"data": null` is kept as `Some(Null)` so that it serialises back as it came.
        #[serde(default, deserialize_with = "some_value")]
        #[cfg_attr(feature = "schema", schemars(with = "Option<Value>"))]
        data: Option<Value>,
    },
    Failed {
        details: String,
        retryable: bool,
        #[serde(default)]
        code: Option<String>,
    },
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    Value::deserialize(d)
}

fn some_value<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

const KNOWN_TYPES: [&str; 8] = [
    "text",
    "thinking",
    "tool_started",
    "tool_ended",
    "retrying",
    "usage",
    "completed",
    "failed",
];

impl Serialize for AgentEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let wire = match self {
            Self::Text { delta } => WireRef::Text { delta },
            Self::Thinking { delta } => WireRef::Thinking { delta },
            Self::ToolStarted { id, name, args } => WireRef::ToolStarted { id, name, args },
            Self::ToolEnded {
                id,
                is_error,
                content,
            } => WireRef::ToolEnded {
                id,
                is_error: *is_error,
                content,
            },
            Self::Retrying {
                attempt,
                max_attempts,
                delay_ms,
                reason,
            } => WireRef::Retrying {
                attempt: *attempt,
                max_attempts: *max_attempts,
                delay_ms: *delay_ms,
                reason,
            },
            Self::Usage {
                input_tokens,
                output_tokens,
                cache_read_tokens,
                cache_write_tokens,
                cost_usd,
            } => WireRef::Usage {
                input_tokens: *input_tokens,
                output_tokens: *output_tokens,
                cache_read_input_tokens: *cache_read_tokens,
                cache_write_input_tokens: *cache_write_tokens,
                cost_usd: *cost_usd,
            },
            Self::Completed { data } => WireRef::Completed { data: data.as_ref() },
            Self::Failed {
                details,
                retryable,
                code,
            } => WireRef::Failed {
                details,
                retryable: *retryable,
                code: code.as_deref(),
            },
            Self::Other(raw) => return raw.serialize(serializer),
        };
        wire.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AgentEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(deserializer)?;
        let Some(kind) = raw.get("type").and_then(Value::as_str) else {
            return Err(D::Error::custom(
                "an event must be an object with a string \"type\"",
            ));
        };
        if !KNOWN_TYPES.contains(&kind) {
            return Ok(Self::Other(raw));
        }
        let wire = WireOwned::deserialize(raw).map_err(D::Error::custom)?;
        Ok(match wire {
            WireOwned::Text { delta } => Self::Text { delta },
            WireOwned::Thinking { delta } => Self::Thinking { delta },
            WireOwned::ToolStarted { id, name, args } => Self::ToolStarted { id, name, args },
            WireOwned::ToolEnded {
                id,
                is_error,
                content,
            } => Self::ToolEnded {
                id,
                is_error,
                content,
            },
            WireOwned::Retrying {
                attempt,
                max_attempts,
                delay_ms,
                reason,
            } => Self::Retrying {
                attempt,
                max_attempts,
                delay_ms,
                reason,
            },
            WireOwned::Usage {
                input_tokens,
                output_tokens,
                cache_read_input_tokens,
                cache_write_input_tokens,
                cost_usd,
            } => Self::Usage {
                input_tokens,
                output_tokens,
                cache_read_tokens: cache_read_input_tokens,
                cache_write_tokens: cache_write_input_tokens,
                cost_usd,
            },
            WireOwned::Completed { data } => Self::Completed { data },
            WireOwned::Failed {
                details,
                retryable,
                code,
            } => Self::Failed {
                details,
                retryable,
                code,
            },
        })
    }
}

/// The schema of an event on the wire: one of the known events, or an object of another `type`
/// (which a relay forwards unchanged).
#[cfg(feature = "schema")]
impl schemars::JsonSchema for AgentEvent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AgentEvent".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // As written (an answer) or as read (a body): the two differ in what they leave out.
        let known = if generator.contract().is_serialize() {
            <WireRef<'_> as schemars::JsonSchema>::json_schema(generator)
        } else {
            <WireOwned as schemars::JsonSchema>::json_schema(generator)
        };
        schemars::json_schema!({
            "description": "One event of a turn's stream: a JSON object tagged by `type`. `completed` and `failed` are the only terminal events; an event of a type not listed here is forwarded as it came.",
            "anyOf": [
                known,
                {
                    "type": "object",
                    "properties": { "type": { "type": "string", "not": { "enum": KNOWN_TYPES } } },
                    "required": ["type"],
                },
            ],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wire(event: &AgentEvent) -> String {
        serde_json::to_string(event).unwrap()
    }

    #[test]
    fn known_events_serialise_exactly_as_the_spec() {
        let cases = [
            (AgentEvent::text("a"), r#"{"type":"text","delta":"a"}"#),
            (AgentEvent::thinking("b"), r#"{"type":"thinking","delta":"b"}"#),
            (
                AgentEvent::ToolStarted {
                    id: "t1".into(),
                    name: "current_time".into(),
                    args: json!({}),
                },
                r#"{"type":"tool_started","id":"t1","name":"current_time","args":{}}"#,
            ),
            (
                AgentEvent::ToolEnded {
                    id: "t1".into(),
                    is_error: true,
                    content: json!("boom"),
                },
                r#"{"type":"tool_ended","id":"t1","isError":true,"content":"boom"}"#,
            ),
            (
                AgentEvent::Retrying {
                    attempt: 1,
                    max_attempts: 3,
                    delay_ms: 250,
                    reason: "throttled".into(),
                },
                r#"{"type":"retrying","attempt":1,"maxAttempts":3,"delayMs":250,"reason":"throttled"}"#,
            ),
            (
                AgentEvent::usage(7, 2),
                r#"{"type":"usage","inputTokens":7,"outputTokens":2}"#,
            ),
            (AgentEvent::completed(), r#"{"type":"completed"}"#),
            (
                AgentEvent::completed_with(json!({"stopReason":"max_rounds"})),
                r#"{"type":"completed","data":{"stopReason":"max_rounds"}}"#,
            ),
            (
                AgentEvent::failed("nope", false, None),
                r#"{"type":"failed","details":"nope","retryable":false}"#,
            ),
            (
                AgentEvent::failed("late", false, Some("deadline")),
                r#"{"type":"failed","details":"late","retryable":false,"code":"deadline"}"#,
            ),
        ];
        for (event, expected) in cases {
            assert_eq!(wire(&event), expected);
            let back: AgentEvent = serde_json::from_str(expected).unwrap();
            assert_eq!(back, event, "{expected}");
        }
    }

    #[test]
    fn unknown_events_round_trip_unchanged() {
        let raw = r#"{"type":"agent:approval_required","preview":{"title":"Pay","amount":12.5},"z":[1,null,true],"a":"first key stays last"}"#;
        let event: AgentEvent = serde_json::from_str(raw).unwrap();
        assert!(matches!(event, AgentEvent::Other(_)));
        assert!(!event.is_terminal());
        assert_eq!(event.type_name(), "agent:approval_required");
        assert_eq!(wire(&event), raw);
    }

    #[test]
    fn completed_with_null_data_keeps_the_key() {
        let raw = r#"{"type":"completed","data":null}"#;
        let event: AgentEvent = serde_json::from_str(raw).unwrap();
        assert_eq!(wire(&event), raw);
    }

    #[test]
    fn malformed_known_events_and_untyped_objects_are_errors() {
        let err = serde_json::from_str::<AgentEvent>(r#"{"type":"failed","details":"x"}"#).unwrap_err();
        assert!(err.to_string().contains("retryable"), "{err}");
        assert!(serde_json::from_str::<AgentEvent>(r#"{"delta":"x"}"#).is_err());
        assert!(serde_json::from_str::<AgentEvent>(r#""text""#).is_err());
    }
}

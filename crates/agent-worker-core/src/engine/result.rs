//! Typed results: a turn that asks for an answer matching a JSON Schema (seed 000 §7, the
//! result on `completed.data.result`).
//!
//! The model gives the result by calling one more tool, [`RESULT_TOOL`], whose input is the
//! schema; this works the same on every provider. The engine checks the input against the
//! schema: a result that matches ends the turn; one that does not is answered with what is
//! wrong, and the model is asked once more, with the tool forced. A model that ends its answer
//! without a result is asked once, the same way. A second miss fails the turn with
//! [`RESULT_INVALID`](crate::protocol::codes::RESULT_INVALID).
//!
//! The stored history keeps no call of the result tool: each becomes the model's words (the
//! result as JSON text) and its answer the person's side's words, so a later turn that offers
//! no such tool reads a plain conversation (Bedrock refuses tool blocks without a tool
//! configuration).

use serde_json::{Value, json};

use super::model::ToolDescription;
use super::tools::{ToolOutcome, schema_problems};
use crate::session::{ContentBlock, Message};

/// The tool the model gives its result with.
pub const RESULT_TOOL: &str = "final_result";

/// Told to the model in the system prompt of a turn that asks for a result.
pub(crate) const RESULT_INSTRUCTION: &str = "This turn asks for a typed result. When you have it, give it by calling \
the tool `final_result`, once, with the result as its input: that call ends the turn. Use the other tools first \
if you need them.";

/// Told to the model when it ended its answer without giving the result.
pub(crate) const RESULT_NUDGE: &str = "Give the result now, by calling the tool `final_result` with it.";

/// A result schema, compiled: what the result tool takes, and how its input is checked.
#[derive(Debug)]
pub struct ResultSchema {
    schema: Value,
    /// Whether the schema is not an object's, so the tool's input wraps it as `{"result": …}`
    /// (tool inputs are objects on every provider).
    wrapped: bool,
    validator: jsonschema::Validator,
}

/// A result schema that cannot be used; the text says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resultSchema: {0}")]
pub struct BadResultSchema(pub String);

impl ResultSchema {
    /// Compiles `schema`, a JSON Schema of the result.
    pub fn new(schema: Value) -> Result<Self, BadResultSchema> {
        if !schema.is_object() {
            return Err(BadResultSchema(format!(
                "must be a JSON Schema object, not {schema}"
            )));
        }
        let wrapped = schema.get("type").and_then(Value::as_str) != Some("object");
        let input = if wrapped {
            json!({
                "type": "object",
                "properties": { "result": schema },
                "required": ["result"],
                "additionalProperties": false,
            })
        } else {
            schema.clone()
        };
        let validator = jsonschema::validator_for(&input).map_err(|e| BadResultSchema(e.to_string()))?;
        Ok(Self {
            schema: input,
            wrapped,
            validator,
        })
    }

    /// The result tool, as the model sees it.
    pub(crate) fn tool(&self) -> ToolDescription {
        ToolDescription {
            name: RESULT_TOOL.to_owned(),
            description:
                "Gives this turn's result, which must match the input schema. Call it once, when you \
                          have the result; the turn ends with it."
                    .to_owned(),
            input_schema: self.schema.clone(),
        }
    }

    /// The result in a call's input, or what is wrong with it.
    fn check(&self, input: &Value) -> Result<Value, String> {
        let problems = schema_problems(&self.validator, input);
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        Ok(if self.wrapped {
            input.get("result").cloned().unwrap_or(Value::Null)
        } else {
            input.clone()
        })
    }
}

/// Where a turn that asks for a result stands.
#[derive(Debug, Default)]
pub(crate) struct ResultState {
    /// The result, once a call gave one that matches.
    pub(crate) value: Option<Value>,
    /// Times the model was asked once more (a result that did not match, or none given).
    asked_again: u8,
    /// What was wrong the last time.
    last_problem: Option<String>,
    /// Whether the next step must call the result tool.
    pub(crate) force: bool,
    /// Whether a call of the current step gave a result that does not match.
    missed_in_step: bool,
}

impl ResultState {
    /// Takes a call of the result tool: its outcome, as the model reads it.
    pub(crate) fn take_call(&mut self, schema: &ResultSchema, args: Result<Value, String>) -> ToolOutcome {
        if self.value.is_some() {
            return ToolOutcome::error("not taken: this turn already has its result");
        }
        match args.and_then(|args| schema.check(&args)) {
            Ok(value) => {
                self.value = Some(value);
                ToolOutcome::ok(json!({ "status": "accepted" }))
            }
            Err(problem) => {
                let told = format!(
                    "the result does not match the schema: {problem}. Call {RESULT_TOOL} again with a result that matches."
                );
                self.last_problem = Some(problem);
                self.missed_in_step = true;
                ToolOutcome::error(told)
            }
        }
    }

    /// After a step without a matching result: whether the model may be asked once more (and
    /// the next step forced to give it), or the turn fails, with why.
    pub(crate) fn ask_again(&mut self, gave_none: bool) -> Result<(), String> {
        if gave_none {
            self.last_problem = Some("the model ended its answer without giving a result".to_owned());
        }
        if self.asked_again >= 1 {
            return Err(format!(
                "the model gave no result that matches the schema, after being asked once more: {}",
                self.last_problem.as_deref().unwrap_or("no result")
            ));
        }
        self.asked_again += 1;
        self.force = true;
        Ok(())
    }

    /// Whether a call of the step that just ended gave a result that does not match; the next
    /// step starts afresh.
    pub(crate) fn take_miss(&mut self) -> bool {
        std::mem::take(&mut self.missed_in_step) && self.value.is_none()
    }
}

/// The turn's messages with every call of the result tool made words: the call the model's
/// result as JSON text, its answer what the tool said, so that the stored history holds no
/// call of a tool later turns may not offer.
pub(crate) fn settle_calls(messages: &mut [Message]) {
    let ids: Vec<String> = messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, .. } if name == RESULT_TOOL => Some(id.clone()),
            _ => None,
        })
        .collect();
    if ids.is_empty() {
        return;
    }
    for message in messages.iter_mut() {
        for block in &mut message.content {
            let words = match block {
                ContentBlock::ToolUse { id, input, .. } if ids.contains(id) => {
                    format!("Result: {input}")
                }
                ContentBlock::ToolResult {
                    tool_use_id, content, ..
                } if ids.contains(tool_use_id) => match content {
                    Value::String(text) => format!("({RESULT_TOOL}: {text})"),
                    other => format!("({RESULT_TOOL}: {other})"),
                },
                _ => continue,
            };
            *block = ContentBlock::text(words);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Role;

    fn person() -> Value {
        json!({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]})
    }

    #[test]
    fn a_result_that_matches_is_taken_and_one_that_does_not_is_answered_with_what_is_wrong() {
        let schema = ResultSchema::new(person()).unwrap();
        let mut state = ResultState::default();
        let missed = state.take_call(&schema, Ok(json!({"name": "Ada"})));
        assert!(missed.is_error);
        assert!(missed.content.to_string().contains("age"), "{}", missed.content);
        assert!(state.take_miss());
        assert!(!state.take_miss(), "a miss is the step's own");
        assert_eq!(state.ask_again(false), Ok(()));
        assert!(state.force);
        let taken = state.take_call(&schema, Ok(json!({"name": "Ada", "age": 36})));
        assert!(!taken.is_error);
        assert_eq!(state.value, Some(json!({"name": "Ada", "age": 36})));
        assert!(!state.take_miss());
    }

    #[test]
    fn the_model_is_asked_once_more_and_no_more() {
        let mut state = ResultState::default();
        assert_eq!(state.ask_again(true), Ok(()));
        let err = state.ask_again(true).unwrap_err();
        assert!(err.contains("without giving a result"), "{err}");
    }

    #[test]
    fn a_schema_of_something_else_than_an_object_is_wrapped_and_unwrapped() {
        let schema = ResultSchema::new(json!({"type": "array", "items": {"type": "integer"}})).unwrap();
        assert_eq!(schema.tool().input_schema["required"], json!(["result"]));
        let mut state = ResultState::default();
        assert!(!state.take_call(&schema, Ok(json!({"result": [1, 2]}))).is_error);
        assert_eq!(state.value, Some(json!([1, 2])));
    }

    #[test]
    fn a_schema_that_is_not_one_is_refused_by_name() {
        let err = ResultSchema::new(json!("string")).unwrap_err();
        assert!(err.to_string().starts_with("resultSchema: "), "{err}");
        assert!(ResultSchema::new(json!({"type": 12})).is_err());
    }

    #[test]
    fn stored_history_keeps_no_call_of_the_result_tool() {
        let mut messages = vec![
            Message::user_text("who?"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse {
                    id: "r1".into(),
                    name: RESULT_TOOL.into(),
                    input: json!({"name": "Ada", "age": 36}),
                }],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::ToolResult {
                    tool_use_id: "r1".into(),
                    content: json!({"status": "accepted"}),
                    is_error: false,
                }],
            ),
        ];
        settle_calls(&mut messages);
        let text = format!("{messages:?}");
        assert!(
            !text.contains("ToolUse") && !text.contains("ToolResult"),
            "{text}"
        );
        assert!(text.contains("Ada") && text.contains("accepted"), "{text}");
    }
}

//! [`Toolset`]: the tools a turn may call, each with its compiled input schema; it validates
//! and runs calls, and a call never crashes a turn.

use std::collections::HashMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use serde_json::{Value, json};

use super::{TIMED_OUT, Tool, ToolContext, ToolOutcome, ToolSpec};

/// A tool set that cannot be built; the message names the tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolsetError {
    /// Two tools share a name.
    #[error("two tools are named {0}")]
    Duplicate(String),
    /// A name Bedrock would refuse.
    #[error("tool name {0:?} must be 1 to 64 of A-Z a-z 0-9 _ -")]
    BadName(String),
    /// The input schema is not a valid JSON Schema of an object.
    #[error("tool {name}: invalid input schema: {reason}")]
    BadSchema {
        /// The tool.
        name: String,
        /// Why.
        reason: String,
    },
}

struct Registered {
    tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
}

/// The tools a turn may call, each with its compiled input schema.
#[derive(Clone, Default)]
pub struct Toolset {
    tools: Arc<Vec<Registered>>,
    by_name: Arc<HashMap<String, usize>>,
}

impl fmt::Debug for Toolset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.tools.iter().map(|r| &r.tool.spec().name))
            .finish()
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Toolset {
    /// Builds a tool set, checking names and compiling schemas.
    pub fn new(tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Result<Self, ToolsetError> {
        let mut registered = Vec::new();
        let mut by_name = HashMap::new();
        for tool in tools {
            let spec = tool.spec();
            if !valid_name(&spec.name) {
                return Err(ToolsetError::BadName(spec.name.clone()));
            }
            if spec.input_schema.get("type").and_then(Value::as_str) != Some("object") {
                return Err(ToolsetError::BadSchema {
                    name: spec.name.clone(),
                    reason: "the schema's type must be \"object\"".into(),
                });
            }
            let validator =
                jsonschema::validator_for(&spec.input_schema).map_err(|e| ToolsetError::BadSchema {
                    name: spec.name.clone(),
                    reason: e.to_string(),
                })?;
            if by_name.insert(spec.name.clone(), registered.len()).is_some() {
                return Err(ToolsetError::Duplicate(spec.name.clone()));
            }
            registered.push(Registered { tool, validator });
        }
        Ok(Self {
            tools: Arc::new(registered),
            by_name: Arc::new(by_name),
        })
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The tools, in the order they were given.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.iter().map(|r| &r.tool)
    }

    /// The declarations, in the order the tools were given.
    pub fn specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.iter().map(|r| r.tool.spec())
    }

    /// The declaration of `name`.
    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.by_name.get(name).map(|&i| self.tools[i].tool.spec())
    }

    /// Runs one call of `name` with the model's raw argument text, within `timeout`.
    ///
    /// Every failure becomes an error outcome the model reads: unknown tool, arguments that are
    /// not a JSON object or break the schema, the tool's own error, a panic, a timeout.
    pub async fn run(&self, name: &str, input: &Value, ctx: ToolContext, timeout: Duration) -> ToolOutcome {
        let Some(registered) = self.by_name.get(name).map(|&i| &self.tools[i]) else {
            let known: Vec<&str> = self.specs().map(|s| s.name.as_str()).collect();
            return ToolOutcome::error(format!(
                "there is no tool named {name:?}; the tools are: {}",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        };
        let problems = schema_problems(&registered.validator, input);
        if !problems.is_empty() {
            return ToolOutcome::error(format!(
                "the arguments do not match {name}'s input schema: {}",
                problems.join("; ")
            ));
        }
        let call = AssertUnwindSafe(registered.tool.reply(input.clone(), ctx)).catch_unwind();
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(Ok(reply))) => ToolOutcome {
                is_error: false,
                content: reply.content,
                shown: reply.shown,
            },
            Ok(Ok(Err(error))) => ToolOutcome::from(error),
            Ok(Err(panic)) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(tool = name, panic = %why, "a tool panicked");
                ToolOutcome::error(format!("the tool {name} crashed: {why}"))
            }
            Err(_) => ToolOutcome::error(format!(
                "the tool {name} {TIMED_OUT} {} ms and was stopped",
                timeout.as_millis()
            )),
        }
    }
}

/// What is wrong with `input` by `validator`'s schema: at most five problems, each with where it
/// is. Empty when it matches.
pub(crate) fn schema_problems(validator: &jsonschema::Validator, input: &Value) -> Vec<String> {
    validator
        .iter_errors(input)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect()
}

/// Parses the model's argument text: empty means no arguments; anything but a JSON object is
/// an error the model reads.
pub(crate) fn parse_arguments(raw: &str) -> Result<Value, String> {
    if raw.trim().is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(other) => Err(format!("the arguments must be a JSON object, not {other}")),
        Err(e) => Err(format!("the arguments are not valid JSON ({e}): {raw}")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ToolError, tool_fn};
    use super::*;

    fn ctx() -> ToolContext {
        ToolContext {
            session: crate::session::test_ids::sid("s"),
            turn_id: crate::session::test_ids::tid("t"),
            call_id: "c".into(),
            user_id: None,
            account_id: None,
            user_token: None,
        }
    }

    fn schema() -> Value {
        json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false})
    }

    fn set() -> Toolset {
        let double = tool_fn(
            ToolSpec::new("double", "Doubles n.", schema()),
            |input, _| async move { Ok(json!(input["n"].as_i64().unwrap_or_default() * 2)) },
        );
        let fail = tool_fn(
            ToolSpec::new("fail", "Fails.", json!({"type":"object"})),
            |_, _| async { Err(ToolError::new("no such order")) },
        );
        let crash = tool_fn(
            ToolSpec::new("crash", "Panics.", json!({"type":"object"})),
            |_, _| async {
                if true {
                    panic!("index out of bounds");
                }
                Ok(Value::Null)
            },
        );
        let slow = tool_fn(
            ToolSpec::new("slow", "Never ends.", json!({"type":"object"})),
            |_, _| async {
                std::future::pending::<()>().await;
                Ok(Value::Null)
            },
        );
        Toolset::new([double, fail, crash, slow].map(|t| Arc::new(t) as Arc<dyn Tool>)).unwrap()
    }

    #[tokio::test]
    async fn a_valid_call_returns_its_result() {
        let out = set()
            .run("double", &json!({"n": 21}), ctx(), Duration::from_secs(1))
            .await;
        assert_eq!(out, ToolOutcome::ok(json!(42)));
    }

    #[tokio::test]
    async fn schema_violations_unknown_tools_errors_and_panics_become_error_results() {
        let tools = set();
        let bad = tools
            .run(
                "double",
                &json!({"n": "x", "extra": 1}),
                ctx(),
                Duration::from_secs(1),
            )
            .await;
        assert!(bad.is_error);
        let text = bad.content["error"].as_str().unwrap();
        assert!(text.contains("/n") && text.contains("extra"), "{text}");

        let unknown = tools
            .run("triple", &json!({}), ctx(), Duration::from_secs(1))
            .await;
        assert!(
            unknown.content["error"]
                .as_str()
                .unwrap()
                .contains("double, fail, crash, slow")
        );

        let failed = tools.run("fail", &json!({}), ctx(), Duration::from_secs(1)).await;
        assert_eq!(failed, ToolOutcome::error("no such order"));

        let crashed = tools
            .run("crash", &json!({}), ctx(), Duration::from_secs(1))
            .await;
        assert!(crashed.is_error);
        assert!(
            crashed.content["error"]
                .as_str()
                .unwrap()
                .contains("index out of bounds")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_timeout_is_stopped() {
        let out = set()
            .run("slow", &json!({}), ctx(), Duration::from_secs(30))
            .await;
        assert_eq!(
            out,
            ToolOutcome::error("the tool slow did not finish within 30000 ms and was stopped")
        );
    }

    #[test]
    fn arguments_must_be_a_json_object() {
        assert_eq!(parse_arguments(""), Ok(json!({})));
        assert_eq!(parse_arguments("{\"a\":1}"), Ok(json!({"a":1})));
        assert!(parse_arguments("[1]").unwrap_err().contains("JSON object"));
        assert!(parse_arguments("{\"a\":").unwrap_err().contains("not valid JSON"));
    }

    #[test]
    fn bad_tool_sets_are_refused_naming_the_tool() {
        let t = |name: &str, schema: Value| {
            Arc::new(tool_fn(ToolSpec::new(name, "", schema), |_, _| async {
                Ok(Value::Null)
            })) as Arc<dyn Tool>
        };
        let obj = json!({"type":"object"});
        assert_eq!(
            Toolset::new([t("a", obj.clone()), t("a", obj.clone())]).unwrap_err(),
            ToolsetError::Duplicate("a".into())
        );
        assert_eq!(
            Toolset::new([t("a b", obj.clone())]).unwrap_err(),
            ToolsetError::BadName("a b".into())
        );
        assert!(matches!(
            Toolset::new([t("s", json!({"type":"string"}))]).unwrap_err(),
            ToolsetError::BadSchema { .. }
        ));
        assert!(matches!(
            Toolset::new([t("s", json!({"type":"object","properties":{"n":{"type":12}}}))]).unwrap_err(),
            ToolsetError::BadSchema { .. }
        ));
    }
}

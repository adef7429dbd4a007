//! A small set of built-in example tools, enabled by name from the command line or the
//! `TOOLS` setting.

use std::sync::Arc;
use std::time::SystemTime;

use aws_smithy_types::DateTime;
use aws_smithy_types::date_time::Format;
use serde_json::json;

use super::{Tool, ToolError, ToolSpec, tool_fn};

/// The names of the example tools.
pub const NAMES: [&str; 3] = ["current_time", "add", "word_count"];

/// The example tool `name`, if there is one.
///
/// - `current_time`: the UTC time as JSON, `{"utc": "2026-11-30T05:34:59Z", "unixSeconds": ..}`.
/// - `add`: the sum of a list of numbers.
/// - `word_count`: the number of words in a text.
pub fn by_name(name: &str) -> Option<Arc<dyn Tool>> {
    let tool: Arc<dyn Tool> = match name {
        "current_time" => Arc::new(tool_fn(
            ToolSpec::new(
                "current_time",
                "Returns the current date and time in UTC.",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
            ),
            |_, _| async {
                let stamp = DateTime::from_secs(DateTime::from(SystemTime::now()).secs());
                let utc = stamp
                    .fmt(Format::DateTime)
                    .map_err(|e| ToolError::new(format!("cannot format the time: {e}")))?;
                Ok(json!({ "utc": utc, "unixSeconds": stamp.secs() }))
            },
        )),
        "add" => Arc::new(tool_fn(
            ToolSpec::new(
                "add",
                "Adds numbers and returns their sum.",
                json!({
                    "type": "object",
                    "properties": {"numbers": {"type": "array", "items": {"type": "number"}, "minItems": 1}},
                    "required": ["numbers"],
                    "additionalProperties": false
                }),
            ),
            |input, _| async move {
                let sum: f64 = input["numbers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_f64())
                    .sum();
                Ok(json!({ "sum": sum }))
            },
        )),
        "word_count" => Arc::new(tool_fn(
            ToolSpec::new(
                "word_count",
                "Counts the words in a text.",
                json!({
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                    "additionalProperties": false
                }),
            ),
            |input, _| async move {
                let words = input["text"]
                    .as_str()
                    .unwrap_or_default()
                    .split_whitespace()
                    .count();
                Ok(json!({ "words": words }))
            },
        )),
        _ => return None,
    };
    Some(tool)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tools::{ToolContext, Toolset};
    use std::time::Duration;

    #[tokio::test]
    async fn every_example_tool_runs() {
        let tools = Toolset::new(NAMES.iter().map(|n| by_name(n).unwrap())).unwrap();
        let ctx = ToolContext {
            session: crate::session::test_ids::sid("s"),
            turn_id: crate::session::test_ids::tid("t"),
            call_id: "c".into(),
            user_id: None,
            account_id: None,
            user_token: None,
        };
        let second = Duration::from_secs(1);
        let time = tools.run("current_time", &json!({}), ctx.clone(), second).await;
        let utc = time.content["utc"].as_str().unwrap();
        assert!(utc.ends_with('Z') && utc.len() == 20, "{utc}");
        let sum = tools
            .run("add", &json!({"numbers": [1, 2.5]}), ctx.clone(), second)
            .await;
        assert_eq!(sum.content, json!({"sum": 3.5}));
        let words = tools
            .run("word_count", &json!({"text": "a b  c"}), ctx, second)
            .await;
        assert_eq!(words.content, json!({"words": 3}));
        assert!(by_name("rm_rf").is_none());
    }
}

//! Conversions between `serde_json::Value` and Smithy's `Document`.

use aws_smithy_types::{Document, Number};
use serde_json::Value;

/// A JSON value as a Smithy document.
pub(super) fn to_document(value: &Value) -> Document {
    match value {
        Value::Null => Document::Null,
        Value::Bool(b) => Document::Bool(*b),
        Value::Number(n) => Document::Number(if let Some(u) = n.as_u64() {
            Number::PosInt(u)
        } else if let Some(i) = n.as_i64() {
            Number::NegInt(i)
        } else {
            Number::Float(n.as_f64().unwrap_or_default())
        }),
        Value::String(s) => Document::String(s.clone()),
        Value::Array(items) => Document::Array(items.iter().map(to_document).collect()),
        Value::Object(map) => {
            Document::Object(map.iter().map(|(k, v)| (k.clone(), to_document(v))).collect())
        }
    }
}

/// A Smithy document as a JSON value. A float that JSON cannot hold (NaN, infinity) becomes null.
#[cfg(test)]
pub(super) fn to_json(document: &Document) -> Value {
    match document {
        Document::Null => Value::Null,
        Document::Bool(b) => Value::Bool(*b),
        Document::Number(Number::PosInt(u)) => Value::from(*u),
        Document::Number(Number::NegInt(i)) => Value::from(*i),
        Document::Number(Number::Float(f)) => {
            serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
        }
        Document::String(s) => Value::String(s.clone()),
        Document::Array(items) => Value::Array(items.iter().map(to_json).collect()),
        Document::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_survives_a_trip_through_a_document() {
        let value = json!({"a": [1, -2, 3.5, null, true, "x"], "b": {"c": {}}});
        assert_eq!(to_json(&to_document(&value)), value);
    }
}

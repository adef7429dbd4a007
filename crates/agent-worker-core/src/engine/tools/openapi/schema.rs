//! OpenAPI 3.0 schemas made into the JSON Schema a tool's input is checked against: `$ref`s
//! inlined (local ones only, never a cycle), `nullable` read as a union with `null`, and
//! `readOnly` properties left out, since a caller never sends them.

use serde_json::{Map, Value};

/// Why a schema cannot be used.
pub(super) type SchemaError = String;

/// The schema `schema`, made self-contained against `document`.
pub(super) fn resolve(schema: &Value, document: &Value) -> Result<Value, SchemaError> {
    resolve_in(schema, document, &mut Vec::new())
}

fn resolve_in(schema: &Value, document: &Value, seen: &mut Vec<String>) -> Result<Value, SchemaError> {
    match schema {
        Value::Object(object) => {
            if let Some(reference) = object.get("$ref") {
                let reference = reference
                    .as_str()
                    .ok_or_else(|| "a `$ref` that is not a string".to_owned())?;
                let pointer = reference.strip_prefix('#').ok_or_else(|| {
                    format!("external `$ref` {reference:?} (only local references are inlined)")
                })?;
                if seen.iter().any(|s| s == reference) {
                    return Err(format!("self-referencing `$ref` {reference:?}"));
                }
                let target = document
                    .pointer(pointer)
                    .ok_or_else(|| format!("`$ref` {reference:?} points at nothing"))?;
                seen.push(reference.to_owned());
                let resolved = resolve_in(target, document, seen);
                seen.pop();
                return resolved;
            }
            let mut out = Map::new();
            for (key, value) in object {
                let value = match key.as_str() {
                    "properties" => Value::Object(properties(value, document, seen)?),
                    "items" | "additionalProperties" | "not" => resolve_in(value, document, seen)?,
                    "allOf" | "anyOf" | "oneOf" => Value::Array(
                        value
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|v| resolve_in(v, document, seen))
                            .collect::<Result<_, _>>()?,
                    ),
                    // OpenAPI keywords JSON Schema does not know.
                    "nullable" | "readOnly" | "writeOnly" | "example" | "xml" | "externalDocs"
                    | "discriminator" | "deprecated" => continue,
                    _ => value.clone(),
                };
                out.insert(key.clone(), value);
            }
            if let Some(required) = out.get_mut("required").and_then(Value::as_array_mut) {
                let readable = read_only(object);
                required.retain(|name| name.as_str().is_none_or(|n| !readable.iter().any(|r| r == n)));
            }
            if object.get("nullable") == Some(&Value::Bool(true)) {
                return Ok(nullable(out));
            }
            Ok(Value::Object(out))
        }
        other => Ok(other.clone()),
    }
}

/// The properties of an object schema, `readOnly` ones left out.
fn properties(
    value: &Value,
    document: &Value,
    seen: &mut Vec<String>,
) -> Result<Map<String, Value>, SchemaError> {
    let mut out = Map::new();
    for (name, property) in value.as_object().into_iter().flatten() {
        if is_read_only(property, document) {
            continue;
        }
        out.insert(name.clone(), resolve_in(property, document, seen)?);
    }
    Ok(out)
}

fn is_read_only(property: &Value, document: &Value) -> bool {
    if property.get("readOnly") == Some(&Value::Bool(true)) {
        return true;
    }
    property
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|p| document.pointer(p))
        .is_some_and(|target| target.get("readOnly") == Some(&Value::Bool(true)))
}

fn read_only(object: &Map<String, Value>) -> Vec<String> {
    object
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, p)| p.get("readOnly") == Some(&Value::Bool(true)))
        .map(|(name, _)| name.clone())
        .collect()
}

/// `schema` or null.
fn nullable(mut schema: Map<String, Value>) -> Value {
    match schema.get("type").cloned() {
        Some(Value::String(kind)) => {
            schema.insert(
                "type".into(),
                Value::Array(vec![Value::String(kind), Value::String("null".into())]),
            );
            if let Some(Value::Array(options)) = schema.get_mut("enum") {
                options.push(Value::Null);
            }
            Value::Object(schema)
        }
        _ => serde_json::json!({ "anyOf": [Value::Object(schema), { "type": "null" }] }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refs_are_inlined_nullable_is_a_union_and_read_only_is_left_out() {
        let document = json!({ "components": { "schemas": {
            "Money": { "type": "object", "properties": { "amount": { "type": "integer" } }, "required": ["amount"] },
            "Refund": {
                "type": "object",
                "properties": {
                    "id": { "type": "string", "readOnly": true },
                    "total": { "$ref": "#/components/schemas/Money" },
                    "note": { "type": "string", "nullable": true }
                },
                "required": ["id", "total"]
            }
        } } });
        let resolved = resolve(&json!({ "$ref": "#/components/schemas/Refund" }), &document).unwrap();
        assert_eq!(
            resolved,
            json!({
                "type": "object",
                "properties": {
                    "total": { "type": "object", "properties": { "amount": { "type": "integer" } }, "required": ["amount"] },
                    "note": { "type": ["string", "null"] }
                },
                "required": ["total"]
            })
        );
    }

    #[test]
    fn cycles_and_external_refs_are_refused() {
        let document = json!({ "components": { "schemas": {
            "Node": { "type": "object", "properties": { "next": { "$ref": "#/components/schemas/Node" } } }
        } } });
        let error = resolve(&json!({ "$ref": "#/components/schemas/Node" }), &document).unwrap_err();
        assert!(error.contains("self-referencing"), "{error}");
        let error = resolve(&json!({ "$ref": "other.yaml#/Thing" }), &document).unwrap_err();
        assert!(error.contains("external"), "{error}");
    }
}

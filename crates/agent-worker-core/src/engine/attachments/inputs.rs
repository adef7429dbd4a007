//! Tool inputs that take a file: a property declared with `format: "oui-attachment"` takes a
//! file id. Before the call runs, each such id must be a file of the turn's conversation that
//! has passed its check, of a type the input accepts (`contentMediaType`, or an `x-accept`
//! list; `image/*` matches every picture type). The approval preview then shows the file by
//! name and size.

use serde_json::Value;

use super::FileArea;
use crate::protocol::AttachmentRef;

/// The format that marks a file input.
pub const FILE_INPUT_FORMAT: &str = "oui-attachment";

/// A file a call's input names.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FileInput {
    /// Where in the arguments, as a JSON pointer (`/report`, `/files/0`).
    pub(crate) pointer: String,
    /// The file.
    pub(crate) reference: AttachmentRef,
}

struct Asked<'a> {
    pointer: String,
    id: &'a str,
    accepted: Vec<String>,
}

/// Checks every file input of a call; the error says which input and why, for the model.
pub(crate) async fn check(
    area: Option<&dyn FileArea>,
    owner: &str,
    schema: &Value,
    args: &Value,
) -> Result<Vec<FileInput>, String> {
    let mut asked = Vec::new();
    collect(schema, args, String::new(), &mut asked);
    if asked.is_empty() {
        return Ok(Vec::new());
    }
    let Some(area) = area else {
        return Err(format!(
            "{} takes a file, and this worker has no file area; nothing ran",
            asked[0].pointer
        ));
    };
    let ids: Vec<String> = asked.iter().map(|a| a.id.to_owned()).collect();
    let described = area.describe(&ids, owner).await;
    let mut files = Vec::with_capacity(asked.len());
    for (asked, found) in asked.into_iter().zip(described) {
        let reference = found.map_err(|why| {
            format!(
                "{}: file {:?} is not a usable file of this conversation ({why}); nothing ran",
                asked.pointer, asked.id
            )
        })?;
        if !asked.accepted.is_empty() && !asked.accepted.iter().any(|t| accepts(t, &reference.media_type)) {
            return Err(format!(
                "{}: file {:?} is {}, and this input takes {}; nothing ran",
                asked.pointer,
                asked.id,
                reference.media_type,
                asked.accepted.join(", ")
            ));
        }
        files.push(FileInput {
            pointer: asked.pointer,
            reference,
        });
    }
    Ok(files)
}

fn accepts(pattern: &str, media_type: &str) -> bool {
    match pattern.strip_suffix("/*") {
        Some(family) => media_type.split('/').next() == Some(family),
        None => pattern.eq_ignore_ascii_case(media_type),
    }
}

fn accepted_types(schema: &Value) -> Vec<String> {
    if let Some(list) = schema.get("x-accept").and_then(Value::as_array) {
        return list.iter().filter_map(Value::as_str).map(str::to_owned).collect();
    }
    schema
        .get("contentMediaType")
        .and_then(Value::as_str)
        .map(|t| t.split(',').map(|t| t.trim().to_owned()).collect())
        .unwrap_or_default()
}

/// The ids `args` gives where `schema` declares a file input.
fn collect<'a>(schema: &Value, args: &'a Value, pointer: String, out: &mut Vec<Asked<'a>>) {
    if schema.get("format").and_then(Value::as_str) == Some(FILE_INPUT_FORMAT) {
        if let Some(id) = args.as_str() {
            out.push(Asked {
                pointer,
                id,
                accepted: accepted_types(schema),
            });
        }
        return;
    }
    match args {
        Value::Object(fields) => {
            let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            for (name, value) in fields {
                if let Some(property) = properties.get(name) {
                    collect(property, value, format!("{pointer}/{name}"), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    collect(item_schema, item, format!("{pointer}/{i}"), out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn file_inputs_are_found_at_any_depth_with_what_they_accept() {
        let schema = json!({"type": "object", "properties": {
            "report": {"type": "string", "format": "oui-attachment", "contentMediaType": "application/pdf"},
            "photos": {"type": "array", "items": {"type": "string", "format": "oui-attachment", "x-accept": ["image/*"]}},
            "note": {"type": "string"}
        }});
        let args = json!({"report": "f1", "photos": ["p1", "p2"], "note": "f9"});
        let mut asked = Vec::new();
        collect(&schema, &args, String::new(), &mut asked);
        let found: Vec<(&str, &str, Vec<String>)> = asked
            .iter()
            .map(|a| (a.pointer.as_str(), a.id, a.accepted.clone()))
            .collect();
        assert_eq!(
            found,
            [
                ("/report", "f1", vec!["application/pdf".to_owned()]),
                ("/photos/0", "p1", vec!["image/*".to_owned()]),
                ("/photos/1", "p2", vec!["image/*".to_owned()]),
            ]
        );
        assert!(accepts("image/*", "image/png") && !accepts("image/*", "application/pdf"));
        assert!(accepts("application/PDF", "application/pdf"));
    }
}

//! The kind of value each property of a definition takes, checked before a definition is decoded,
//! so that every wrong value of a file is named at once (a decoder stops at its first).

use serde_json::Value;

/// A kind of JSON value a property takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A string.
    Text,
    /// `true` or `false`.
    Flag,
    /// A whole number of at least 1.
    Count,
    /// Any number.
    Number,
    /// A list of strings.
    Texts,
    /// A list.
    List,
    /// An object of strings.
    TextMap,
}

impl Kind {
    fn holds(self, value: &Value) -> bool {
        match self {
            Self::Text => value.is_string(),
            Self::Flag => value.is_boolean(),
            Self::Count => value.as_u64().is_some_and(|n| n >= 1),
            Self::Number => value.is_number(),
            Self::Texts => value
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string)),
            Self::List => value.is_array(),
            Self::TextMap => value
                .as_object()
                .is_some_and(|map| map.values().all(Value::is_string)),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Text => "a string",
            Self::Flag => "true or false",
            Self::Count => "a whole number of at least 1",
            Self::Number => "a number",
            Self::Texts => "a list of strings",
            Self::List => "a list",
            Self::TextMap => "an object of strings",
        }
    }
}

/// The kinds of an agent definition's own properties.
pub(crate) const AGENT: [(&str, Kind); 14] = [
    ("name", Kind::Text),
    ("maxSessionTurns", Kind::Count),
    ("title", Kind::Text),
    ("description", Kind::Text),
    ("icon", Kind::Text),
    ("exposeAsTool", Kind::Flag),
    ("toolDescription", Kind::Text),
    ("env", Kind::TextMap),
    ("hooks", Kind::Texts),
    ("parentHooks", Kind::List),
    ("packageName", Kind::Text),
    ("version", Kind::Text),
    ("author", Kind::Text),
    ("license", Kind::Text),
];

/// The kinds of a side's properties.
pub(crate) const SIDE: [(&str, Kind); 9] = [
    ("prompt", Kind::Text),
    ("handler", Kind::Text),
    ("human", Kind::Flag),
    ("label", Kind::Text),
    ("subagents", Kind::List),
    ("stopOnResponse", Kind::Flag),
    ("stopTool", Kind::Text),
    ("stopToolResponseProperty", Kind::Text),
    ("maxSteps", Kind::Count),
];

/// The kinds of a prompt definition's properties; the ones it may have.
pub(crate) const PROMPT: [(&str, Kind); 6] = [
    ("name", Kind::Text),
    ("model", Kind::Text),
    ("system", Kind::Text),
    ("tools", Kind::Texts),
    ("maxTokens", Kind::Count),
    ("temperature", Kind::Number),
];

/// Every property of `object` whose value is not of its kind in `kinds`: its path (under
/// `prefix`) and what it should be.
pub(crate) fn wrong_kinds(
    object: &serde_json::Map<String, Value>,
    kinds: &[(&str, Kind)],
    prefix: &str,
) -> Vec<(String, String)> {
    kinds
        .iter()
        .filter_map(|(key, kind)| {
            let value = object.get(*key)?;
            (!kind.holds(value)).then(|| {
                let path = if prefix.is_empty() {
                    (*key).to_owned()
                } else {
                    format!("{prefix}.{key}")
                };
                (path, format!("`{key}` must be {}, not {value}", kind.name()))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_wrong_value_is_named_with_its_path() {
        let document = json!({"name": 7, "maxSessionTurns": 0, "env": {"A": 1}, "title": "ok"});
        let wrong = wrong_kinds(document.as_object().unwrap(), &AGENT, "");
        let paths: Vec<&str> = wrong.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["name", "maxSessionTurns", "env"]);
        let side = json!({"maxSteps": "3"});
        assert_eq!(
            wrong_kinds(side.as_object().unwrap(), &SIDE, "sideA")[0].0,
            "sideA.maxSteps"
        );
    }
}

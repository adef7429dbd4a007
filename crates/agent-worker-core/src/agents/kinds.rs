//! The kind of value each property of a definition takes, checked before a definition is decoded,
//! so that every wrong value of a file is named at once (a decoder stops at its first): an
//! agent's, a side's and a prompt's own properties, and those of each entry of `subagents` and
//! `parentHooks` and of a session binding.

use serde_json::Value;

/// A kind of JSON value a property takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A string.
    Text,
    /// `true` or `false`.
    Flag,
    /// A whole number from 1 to 4,294,967,295 (what a definition holds).
    Count,
    /// Any number.
    Number,
    /// A list of strings.
    Texts,
    /// A list.
    List,
    /// An object of strings.
    TextMap,
    /// One of these strings.
    OneOf(&'static [&'static str]),
}

impl Kind {
    /// Whether `value` is of this kind.
    pub(crate) fn holds(self, value: &Value) -> bool {
        match self {
            Self::Text => value.is_string(),
            Self::Flag => value.is_boolean(),
            Self::Count => value.as_u64().is_some_and(|n| n >= 1 && u32::try_from(n).is_ok()),
            Self::Number => value.is_number(),
            Self::Texts => value
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string)),
            Self::List => value.is_array(),
            Self::TextMap => value
                .as_object()
                .is_some_and(|map| map.values().all(Value::is_string)),
            Self::OneOf(words) => value.as_str().is_some_and(|text| words.contains(&text)),
        }
    }

    fn name(self) -> String {
        match self {
            Self::Text => "a string".into(),
            Self::Flag => "true or false".into(),
            Self::Count => format!("a whole number from 1 to {}", u32::MAX),
            Self::Number => "a number".into(),
            Self::Texts => "a list of strings".into(),
            Self::List => "a list".into(),
            Self::TextMap => "an object of strings".into(),
            Self::OneOf(words) => {
                let words: Vec<String> = words.iter().map(|w| format!("`{w}`")).collect();
                format!("one of {}", words.join(", "))
            }
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

/// The kinds of an entry of a side's `subagents`; the properties it may have.
pub(crate) const RELATIONSHIP: [(&str, Kind); 6] = [
    ("agent", Kind::Text),
    ("as", Kind::Text),
    ("maxInstances", Kind::Count),
    ("optional", Kind::Flag),
    ("enabled", Kind::Flag),
    ("hidden", Kind::Flag),
];

/// The kinds of an entry of an agent's `parentHooks`; the properties it may have.
pub(crate) const PARENT_HOOK: [(&str, Kind); 3] = [
    ("hook", Kind::Text),
    ("reason", Kind::Text),
    ("stage", Kind::OneOf(&["before_parent", "after_parent"])),
];

/// The kinds of a session binding's properties; the properties it may have.
pub(crate) const BINDING: [(&str, Kind); 3] = [
    ("name", Kind::Text),
    ("messageProperty", Kind::Text),
    ("attachmentsProperty", Kind::Text),
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
        // A count a definition cannot hold is named here, not by the decoder.
        assert!(!Kind::Count.holds(&json!(u64::from(u32::MAX) + 1)));
        let entry = json!({"hook": "h", "reason": "r", "stage": "later"});
        let wrong = wrong_kinds(entry.as_object().unwrap(), &PARENT_HOOK, "parentHooks[0]");
        assert_eq!(wrong[0].0, "parentHooks[0].stage");
        assert!(wrong[0].1.contains("`before_parent`"), "{}", wrong[0].1);
    }
}

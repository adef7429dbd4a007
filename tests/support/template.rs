//! template.yaml read, and the project's tools run on it, for tests/template*.rs.

use std::path::PathBuf;
use std::process::Command;

use serde_yaml::Value;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn template() -> Value {
    let text = std::fs::read_to_string(root().join("template.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

pub fn tool(name: &str) -> PathBuf {
    let path = root().join(".venv").join("bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: `make venv` installs it",
        path.display()
    );
    path
}

pub fn run(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

pub fn number(value: &Value) -> u64 {
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a number: {value:?}"))
}

/// The strings of an `Action` or `Resource`, with `!Sub` and `!GetAtt` read as their text.
pub fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Sequence(items) => items.iter().flat_map(strings).collect(),
        Value::Tagged(tagged) => match &tagged.value {
            Value::String(s) => vec![format!("{} {s}", tagged.tag)],
            other => strings(other),
        },
        _ => Vec::new(),
    }
}

/// Every IAM statement anywhere in the template (both branches of an `!If` included).
pub fn statements(value: &Value, found: &mut Vec<Value>) {
    match value {
        Value::Mapping(map) => {
            if map.contains_key("Effect") {
                found.push(value.clone());
            }
            for (_, child) in map {
                statements(child, found);
            }
        }
        Value::Sequence(items) => items.iter().for_each(|i| statements(i, found)),
        Value::Tagged(tagged) => statements(&tagged.value, found),
        _ => {}
    }
}

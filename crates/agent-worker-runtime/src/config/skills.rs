//! Agent Skills and project instructions from the configuration (seed 000 §10):
//!
//! ```yaml
//! skills: skills          # a folder beside the file: skills/<name>/SKILL.md
//! instructions: AGENTS.md # the project's instructions file, beside the file
//! ```
//!
//! A skill is `skills/<name>/SKILL.md`: YAML front matter (`name`, the folder's name; and
//! `description`, what it is for and when to use it), then its body, the instructions. The
//! system prompt lists each skill's name and description after the persona (the same bytes every
//! turn, so the prompt cache holds), and the model reads a skill's body when a task needs it
//! through one tool, [`LOAD_SKILL`]: a turn pays for the skills it uses. Every skill is read and
//! checked at start-up: a malformed one names its file and the field.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use agent_worker_core::engine::tools::{Effect, Tool, ToolError, ToolSpec, tool_fn};

/// The tool the model loads a skill's body with.
pub const LOAD_SKILL: &str = "load_skill";
/// The longest skill name, in characters (as Agent Skills has it).
const MAX_NAME_CHARS: usize = 64;
/// The longest description, in characters.
const MAX_DESCRIPTION_CHARS: usize = 1024;

/// One skill, read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Its name (its folder's).
    pub name: String,
    /// What it is for and when to use it.
    pub description: String,
    /// Its instructions.
    pub body: String,
}

/// A skill's front matter, as written.
#[derive(Debug, Deserialize)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
}

/// The skills of `folder`, by name, or every problem with them (each naming its file).
pub fn read_skills(folder: &Path) -> Result<Vec<Skill>, Vec<String>> {
    let entries = std::fs::read_dir(folder)
        .map_err(|e| vec![format!("skills: {} cannot be read: {e}", folder.display())])?;
    let mut dirs: Vec<_> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.path().is_dir())
        .map(|entry| entry.path())
        .collect();
    dirs.sort();
    let mut skills = Vec::new();
    let mut problems = Vec::new();
    for dir in dirs {
        let file = dir.join("SKILL.md");
        let folder_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match std::fs::read_to_string(&file) {
            Ok(text) => match parse(&text, &folder_name) {
                Ok(skill) => skills.push(skill),
                Err(why) => problems.push(format!("skills: {}: {why}", file.display())),
            },
            Err(e) => problems.push(format!("skills: {} cannot be read: {e}", file.display())),
        }
    }
    if problems.is_empty() {
        Ok(skills)
    } else {
        Err(problems)
    }
}

/// A `SKILL.md` in folder `folder`: its front matter checked, its body kept.
fn parse(text: &str, folder: &str) -> Result<Skill, String> {
    let rest = text
        .strip_prefix("---")
        .ok_or("it does not start with front matter (`---`, name, description, `---`)")?;
    let (matter, body) = rest
        .split_once("\n---")
        .ok_or("its front matter is not closed by a line `---`")?;
    let matter: FrontMatter =
        serde_yaml::from_str(matter).map_err(|e| format!("its front matter is not YAML: {e}"))?;
    let name = matter.name.ok_or("name: missing")?;
    if name != folder {
        return Err(format!("name: {name:?} is not its folder's name {folder:?}"));
    }
    if name.is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(format!(
            "name: {name:?} must be 1 to {MAX_NAME_CHARS} lowercase letters, digits and hyphens"
        ));
    }
    let description = matter
        .description
        .map(|d| d.trim().to_owned())
        .unwrap_or_default();
    if description.is_empty() {
        return Err("description: missing or empty".into());
    }
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "description: longer than {MAX_DESCRIPTION_CHARS} characters"
        ));
    }
    let body = body.trim_start_matches(['-', '\r']).trim().to_owned();
    if body.is_empty() {
        return Err("it has no instructions after its front matter".into());
    }
    Ok(Skill {
        name,
        description,
        body,
    })
}

/// What the system prompt says of `skills` (after the persona): each one's name and
/// description, and how to load one.
pub(super) fn listing(skills: &[Skill]) -> String {
    let mut text = format!(
        "Skills: instructions for particular tasks. When a task needs one, call `{LOAD_SKILL}` with its name before you start, and follow what it says.\n"
    );
    for skill in skills {
        text.push_str(&format!("- {}: {}\n", skill.name, skill.description));
    }
    text.trim_end().to_owned()
}

/// The [`LOAD_SKILL`] tool: a skill's body by its name.
pub(super) fn load_skill_tool(skills: &[Skill]) -> Arc<dyn Tool> {
    let bodies: Arc<BTreeMap<String, String>> =
        Arc::new(skills.iter().map(|s| (s.name.clone(), s.body.clone())).collect());
    let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
    let spec = ToolSpec::new(
        LOAD_SKILL,
        "Loads the instructions of one of the skills the system prompt lists, by its name.",
        json!({
            "type": "object",
            "properties": { "name": { "type": "string", "enum": names } },
            "required": ["name"],
            "additionalProperties": false,
        }),
    )
    .effect(Effect::View)
    .title("Load a skill");
    Arc::new(tool_fn(spec, move |input: Value, _| {
        let bodies = bodies.clone();
        async move {
            let name = input["name"].as_str().unwrap_or_default();
            match bodies.get(name) {
                Some(body) => Ok(json!({ "skill": name, "instructions": body })),
                None => Err(ToolError::new(format!("there is no skill {name:?}"))),
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skill_is_its_front_matter_and_its_body_and_a_bad_one_names_the_field() {
        let skill = parse(
            "---\nname: refunds\ndescription: How to refund an order.\n---\n\n1. Check the order.\n",
            "refunds",
        )
        .unwrap();
        assert_eq!(skill.description, "How to refund an order.");
        assert_eq!(skill.body, "1. Check the order.");
        for (text, field) in [
            ("no front matter", "front matter"),
            ("---\nname: refunds\n", "not closed"),
            ("---\ndescription: x\n---\nbody", "name: missing"),
            ("---\nname: other\ndescription: x\n---\nbody", "folder's name"),
            ("---\nname: refunds\n---\nbody", "description: missing"),
            ("---\nname: refunds\ndescription: x\n---\n", "no instructions"),
        ] {
            let why = parse(text, "refunds").unwrap_err();
            assert!(why.contains(field), "{text:?}: {why}");
        }
        assert!(
            parse("---\nname: Re funds\ndescription: x\n---\nb", "Re funds")
                .unwrap_err()
                .starts_with("name:")
        );
    }
}

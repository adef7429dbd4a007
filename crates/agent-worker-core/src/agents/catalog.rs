//! [`Catalog`]: the agents and prompts a runtime serves, loaded from a folder or built in Rust.
//!
//! A folder holds `agents/` and `prompts/`, one definition a file, each JSON (`.json`) or YAML
//! (`.yaml`, `.yml`). A prompt without a `name` takes its file's stem.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::definition::{AgentDefinition, PromptDefinition};
use super::validate::draft::{self, AgentDraft, PromptDraft};
use super::validate::{Issue, Known, Severity, check_document, codes, validate, validate_drafts};

/// A folder that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The folder has neither `agents/` nor `prompts/`.
    #[error("{0} has no agents/ or prompts/ folder")]
    Empty(PathBuf),
    /// A file or folder could not be read.
    #[error("{path} cannot be read")]
    Read {
        /// What could not be read.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Agents and prompts by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    agents: BTreeMap<String, AgentDefinition>,
    prompts: BTreeMap<String, PromptDefinition>,
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same catalog with `agent` (replacing one of the same name).
    pub fn agent(mut self, agent: AgentDefinition) -> Self {
        self.agents.insert(agent.name.clone(), agent);
        self
    }

    /// The same catalog with `prompt` (replacing one of the same name).
    pub fn prompt(mut self, prompt: PromptDefinition) -> Self {
        self.prompts.insert(prompt.name.clone(), prompt);
        self
    }

    /// The agent named `name`.
    pub fn get_agent(&self, name: &str) -> Option<&AgentDefinition> {
        self.agents.get(name)
    }

    /// The prompt named `name`.
    pub fn get_prompt(&self, name: &str) -> Option<&PromptDefinition> {
        self.prompts.get(name)
    }

    /// Every agent, by name.
    pub fn agents(&self) -> impl Iterator<Item = &AgentDefinition> {
        self.agents.values()
    }

    /// Every prompt, by name.
    pub fn prompts(&self) -> impl Iterator<Item = &PromptDefinition> {
        self.prompts.values()
    }

    /// Every issue with the catalog's definitions, given what the runtime has registered.
    pub fn validate(&self, known: &Known) -> Vec<Issue> {
        let agents: Vec<AgentDefinition> = self.agents.values().cloned().collect();
        let prompts: Vec<PromptDefinition> = self.prompts.values().cloned().collect();
        validate(&agents, &prompts, known)
    }

    /// Loads `folder` and checks every definition in it, in one pass. The catalog holds the
    /// definitions that decoded; the issues cover every problem of every file, each named by the
    /// file (`agents/x.yaml`) and its path inside. A file with a structural problem is still
    /// checked for what it refers to, as far as it can be read, and a prompt file with a problem
    /// is still known by its name to the agents that use it.
    pub fn load(folder: &Path, known: &Known) -> Result<(Self, Vec<Issue>), CatalogError> {
        let agents_dir = folder.join("agents");
        let prompts_dir = folder.join("prompts");
        if !agents_dir.is_dir() && !prompts_dir.is_dir() {
            return Err(CatalogError::Empty(folder.to_owned()));
        }
        let mut issues = Vec::new();
        let mut agents = Vec::new();
        let mut prompts = Vec::new();
        let mut agent_drafts: Vec<AgentDraft> = Vec::new();
        let mut prompt_drafts: Vec<PromptDraft> = Vec::new();
        for (path, source) in definition_files(&prompts_dir, folder)? {
            let Some(mut document) = read_document(&path, &source, &mut issues)? else {
                continue;
            };
            if let (Some(object), Some(stem)) = (document.as_object_mut(), path.file_stem()) {
                object
                    .entry("name")
                    .or_insert_with(|| Value::String(stem.to_string_lossy().into_owned()));
            }
            prompt_drafts.extend(draft::prompt(&document, &stem(&path), &source));
            // Every wrong value and unknown property at once; the decoder says only its first.
            let found = prompt_issues(&document, &source);
            if !found.is_empty() {
                issues.extend(found);
                continue;
            }
            match serde_path_to_error::deserialize::<_, PromptDefinition>(&document) {
                Ok(prompt) => prompts.push(prompt),
                Err(e) => issues.push(decode_issue(&source, e)),
            }
        }
        for (path, source) in definition_files(&agents_dir, folder)? {
            let Some(document) = read_document(&path, &source, &mut issues)? else {
                continue;
            };
            let (agent, found) = check_document(&document, &source);
            issues.extend(found);
            // What decoded whole is checked whole; what did not, as far as it can be read.
            match agent {
                Some(agent) => {
                    agent_drafts.push(AgentDraft::whole(agent.clone()).named_by(&source));
                    agents.push(agent);
                }
                None => agent_drafts.extend(draft::agent(&document, &stem(&path), &source)),
            }
        }
        issues.extend(validate_drafts(&agent_drafts, &prompt_drafts, known));
        let catalog = Self {
            agents: agents.into_iter().map(|a| (a.name.clone(), a)).collect(),
            prompts: prompts.into_iter().map(|p| (p.name.clone(), p)).collect(),
        };
        Ok((catalog, issues))
    }
}

/// What is wrong with a prompt as written, every property at once: values of the wrong kind and
/// properties a prompt does not have.
fn prompt_issues(document: &Value, source: &str) -> Vec<Issue> {
    let Some(object) = document.as_object() else {
        return Vec::new();
    };
    let issue = |code: &str, path: String, message: String| Issue {
        code: code.to_owned(),
        severity: Severity::Error,
        message,
        path,
        source: source.to_owned(),
    };
    let mut issues: Vec<Issue> = super::kinds::wrong_kinds(object, &super::kinds::PROMPT, "")
        .into_iter()
        .map(|(path, message)| issue(codes::INVALID_VALUE, path, message))
        .collect();
    let known = |key: &str| key == "toolChoice" || super::kinds::PROMPT.iter().any(|(k, _)| *k == key);
    for key in object.keys().filter(|k| !known(k)) {
        issues.push(issue(
            codes::UNKNOWN_PROPERTY,
            key.clone(),
            format!("a prompt has no property `{key}`"),
        ));
    }
    issues
}

/// A file's stem: the name of a definition that gives none.
fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The definition files of `dir`, sorted, each with its path relative to `root`.
fn definition_files(dir: &Path, root: &Path) -> Result<Vec<(PathBuf, String)>, CatalogError> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let read = |source| CatalogError::Read {
        path: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read)? {
        let path = entry.map_err(read)?.path();
        let extension = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
        if path.is_file() && matches!(extension, "json" | "yaml" | "yml") {
            let source = path.strip_prefix(root).unwrap_or(&path).display().to_string();
            files.push((path, source));
        }
    }
    files.sort();
    Ok(files)
}

/// The file's JSON document, or an issue saying why it is not one.
fn read_document(path: &Path, source: &str, issues: &mut Vec<Issue>) -> Result<Option<Value>, CatalogError> {
    let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Read {
        path: path.to_owned(),
        source,
    })?;
    let parsed = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str::<Value>(&text).map_err(|e| e.to_string())
    } else {
        serde_yaml::from_str::<Value>(&text).map_err(|e| e.to_string())
    };
    match parsed {
        Ok(document) => Ok(Some(document)),
        Err(message) => {
            issues.push(Issue {
                code: codes::INVALID_VALUE.to_owned(),
                severity: Severity::Error,
                message: format!("not a definition: {message}"),
                path: String::new(),
                source: source.to_owned(),
            });
            Ok(None)
        }
    }
}

fn decode_issue(source: &str, e: serde_path_to_error::Error<serde_json::Error>) -> Issue {
    let path = e.path().to_string();
    let message = e.into_inner().to_string();
    let code = if message.starts_with("unknown field") {
        codes::UNKNOWN_PROPERTY
    } else if message.starts_with("missing field") {
        codes::MISSING_PROPERTY
    } else {
        codes::INVALID_VALUE
    };
    Issue {
        code: code.to_owned(),
        severity: Severity::Error,
        message,
        path: if path == "." { String::new() } else { path },
        source: source.to_owned(),
    }
}

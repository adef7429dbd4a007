//! The system prompt a configuration gives: a persona (with the worker's own rules after it), a
//! `systemPrompt`, or a `systemPromptFile`, exactly one; and the prompt a deployment runs with.

use std::path::Path;

use super::{ConfigFile, Configured};

/// The rules a persona is given after it: they name no product.
pub const PERSONA_RULES: &str = "Use the tools when they help, and say what you did with them. Never invent a tool's \
result. When a call waits for the person's approval, say so and stop there.";

/// A deployment whose assistant nothing gives a prompt: neither its configuration file nor the
/// system prompt set beside it (seed 004: persona or systemPrompt, exactly one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no system prompt: set SYSTEM_PROMPT, or give the configuration (AGENT_WORKER_CONFIG) a persona, systemPrompt or systemPromptFile; exactly one"
)]
pub struct NoSystemPrompt;

impl Configured {
    /// The system prompt a deployment runs with: `given` (the environment's, which wins), else
    /// the configuration's own, then its additions (instructions, skills).
    pub fn system_prompt_over(&self, given: Option<&String>) -> Option<String> {
        let prompt = given.or(self.system_prompt.as_ref());
        match (prompt, &self.prompt_additions) {
            (Some(prompt), Some(more)) => Some(format!("{prompt}\n\n{more}")),
            (Some(prompt), None) => Some(prompt.clone()),
            (None, more) => more.clone(),
        }
    }

    /// [`Self::system_prompt_over`] for a deployment, which must have a prompt (seed 004:
    /// persona or systemPrompt, exactly one): refused when a configuration file is in use, or
    /// the prompt is `required` (a deployment's bare engine), and neither `given` nor the file
    /// (its own, or a `turnPolicy` rule for every turn) gives one.
    pub fn deployed_prompt(
        &self,
        given: Option<&String>,
        required: bool,
    ) -> Result<Option<String>, NoSystemPrompt> {
        let turns_give_it = self
            .turns
            .as_ref()
            .is_some_and(|turns| turns.prompts_every_turn());
        let nothing_gives_it = given.is_none() && self.system_prompt.is_none() && !turns_give_it;
        if (self.from_file || required) && nothing_gives_it {
            return Err(NoSystemPrompt);
        }
        Ok(self.system_prompt_over(given))
    }
}

/// A persona's whole prompt: the persona, then the worker's own rules.
pub(super) fn persona_prompt(persona: &str) -> String {
    format!("{}\n\n{PERSONA_RULES}", persona.trim())
}

/// Exactly one of `persona`, `systemPrompt` and `systemPromptFile`, or none.
pub(super) fn system_prompt(file: &ConfigFile, base: &Path, problems: &mut Vec<String>) -> Option<String> {
    let given = [
        file.persona.is_some(),
        file.system_prompt.is_some(),
        file.system_prompt_file.is_some(),
    ]
    .iter()
    .filter(|g| **g)
    .count();
    if given > 1 {
        problems.push("persona, systemPrompt, systemPromptFile: give exactly one".into());
        return None;
    }
    if let Some(persona) = &file.persona {
        return Some(persona_prompt(persona));
    }
    if let Some(path) = &file.system_prompt_file {
        return match std::fs::read_to_string(base.join(path)) {
            Ok(text) if !text.trim().is_empty() => Some(text),
            Ok(_) => {
                problems.push(format!("systemPromptFile: {} is empty", path.display()));
                None
            }
            Err(e) => {
                problems.push(format!(
                    "systemPromptFile: {} cannot be read: {e}",
                    path.display()
                ));
                None
            }
        };
    }
    file.system_prompt.clone()
}

//! `uiKnowledge`: what the product knows of the page the person is on, rendered after the system
//! prompt: each entry under "Platform Knowledge", then each recipe under "Active Workflows".
//!
//! ```json
//! { "entries": [ { "title": "Tickets", "content": "A ticket is…" } ],
//!   "recipes": [ { "title": "Refund a ticket", "steps": ["Open the ticket", "…"] } ] }
//! ```
//!
//! Other keys of the tab's knowledge are ignored.

use serde::Deserialize;
use serde_json::Value;

use crate::engine::prompt::InvalidPrompt;

/// The page's knowledge.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct UiKnowledge {
    /// What the page's things are.
    #[serde(default)]
    pub entries: Vec<KnowledgeEntry>,
    /// How to do things on it.
    #[serde(default)]
    pub recipes: Vec<Recipe>,
}

/// One entry of knowledge.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KnowledgeEntry {
    /// What it is about.
    pub title: String,
    /// What it says.
    pub content: String,
}

/// One workflow, step by step.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Recipe {
    /// What it does.
    pub title: String,
    /// Its steps, in order.
    pub steps: Vec<String>,
}

impl UiKnowledge {
    /// Reads the tab's `uiKnowledge`, naming the field at fault.
    pub fn read(value: &Value) -> Result<Self, InvalidPrompt> {
        if !value.is_object() {
            return Err(InvalidPrompt {
                field: "context.uiKnowledge".into(),
                reason: "is not knowledge: it must be an object".into(),
            });
        }
        serde_json::from_value(value.clone()).map_err(|e| InvalidPrompt {
            field: "context.uiKnowledge".into(),
            reason: format!("is not knowledge: {e}"),
        })
    }

    /// Whether it says nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.recipes.is_empty()
    }

    /// The text that follows the system prompt.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.entries.is_empty() {
            out.push_str("## Platform Knowledge\n");
            for entry in &self.entries {
                out.push_str(&format!(
                    "\n### {}\n{}\n",
                    entry.title.trim(),
                    entry.content.trim()
                ));
            }
        }
        if !self.recipes.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str("## Active Workflows\n");
            for recipe in &self.recipes {
                out.push_str(&format!("\n### {}\n", recipe.title.trim()));
                for (i, step) in recipe.steps.iter().enumerate() {
                    out.push_str(&format!("{}. {}\n", i + 1, step.trim()));
                }
            }
        }
        out
    }
}

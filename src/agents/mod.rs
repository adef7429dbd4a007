//! Standard Agents: two-sided agent definitions, their definition-time validation, and the
//! runner that carries a session between the two sides.
//!
//! - [`definition`]: [`AgentDefinition`], [`SideConfig`] (human, prompt or handler),
//!   [`SessionToolBinding`], [`SubagentRelationship`], [`ParentHookRequirement`],
//!   [`PromptDefinition`], and [`define_agent`].
//! - [`validate`]: every problem in one pass as `{code, severity, message, path}`.
//! - [`Catalog`]: the agents and prompts a runtime serves, from a folder (`agents/`, `prompts/`,
//!   JSON or YAML) or built in Rust.
//!
//! Uses `engine` and `session`, never `hosts`.

mod catalog;
pub mod definition;
pub mod validate;

pub use catalog::{Catalog, CatalogError};
pub use definition::{
    AgentDefinition, HandlerSide, HookStage, HumanSide, ParentHookRequirement, PromptDefinition, PromptSide,
    SessionToolBinding, SideConfig, SubagentRelationship, ToolChoice, define_agent,
};
pub use validate::{Issue, Known, Severity, has_errors};

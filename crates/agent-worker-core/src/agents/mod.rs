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
//! - [`AgentRuntime`]: the runner. Serves each agent as an [`Agent`](crate::protocol::Agent):
//!   `invoke` delivers a message into a session and runs side turns until it parks on the human
//!   side, ends, or fails; [`ThreadStore`] keeps the session between turns (memory or DynamoDB).
//! - [`Handler`]: code that takes a side's turns, through [`ThreadState`]; [`relay_pipe`] is
//!   built in.
//! - Subagents: a relationship is a tool for its side's model and a port for its side's
//!   handler; a child that waits for a person parks its parent until it settles.
//! - [`Hook`]: code that gives a side context before its turns (`hooks`, `parentHooks`).
//!
//! Uses `engine` and `session`, never `hosts`.

mod catalog;
pub mod definition;
mod handler;
mod hooks;
mod kinds;
mod relay;
mod runner;
mod subagents;
pub mod thread;
pub mod validate;

pub use catalog::{Catalog, CatalogError};
pub use definition::{
    AgentDefinition, HandlerSide, HookStage, HumanSide, ParentHookRequirement, PromptDefinition, PromptSide,
    SessionToolBinding, SideConfig, SubagentRelationship, ToolChoice, define_agent,
};
pub use handler::{Handler, HandlerError, HandlerFn, Role, ThreadState, handler_fn};
pub use hooks::{Hook, HookContext, HookError, HookFn, hook_fn, hook_key};
pub use relay::{RELAY_PIPE, RelayPipe, relay_pipe};
pub use runner::{
    AgentRuntime, AgentRuntimeBuilder, DEFAULT_SESSION_LEASE, DefinedAgent, EngineBase, ModelSource,
    RuntimeError, SESSION_ENDED, SESSION_FAILED,
};
pub use subagents::ChildReply;
pub use thread::{
    ChildLink, MemoryThreadStore, ParentLink, QueuedMessage, SessionEnd, SessionStatus, Side, ThreadMessage,
    ThreadRecord, ThreadStore, ThreadStoreError,
};
pub use validate::{Issue, Known, Severity, has_errors};

//! The Agent Handler contract: [`Agent::invoke`]`(scope, prompt)` returns a stream of
//! [`AgentEvent`]s.
//!
//! This module is the contract alone. It depends on no other module of this crate and on no
//! AWS crate, so that it can be lifted into a crate of its own: `std`, `futures`, `serde`,
//! `tower-layer`, `tracing` and tokio's timer (for the deadline middleware and the checker).
//!
//! - [`Agent`], [`AgentExt`], [`agent_fn`]: the trait, its conveniences, an agent from a closure.
//! - [`AgentEvent`], [`Scope`], [`Prompt`], [`AttachmentRef`]: what goes in and what comes out.
//! - [`collect`]: buffered consumption, with [`AgentFailure`] for a `failed` terminal.
//! - [`middleware`]: tracing, deadline and token budget wrappers, each itself an `Agent`.
//! - [`conformance`]: checks any `Agent` against the specification's MUSTs.
//! - [`codes`]: the failure codes this crate's agents use.

mod agent;
mod attachment;
pub mod codes;
mod collect;
pub mod conformance;
mod event;
pub mod middleware;
mod redact;
mod scope;

pub use agent::{Agent, AgentExt, AgentFn, EventStream, agent_fn};
pub use attachment::{AttachmentKind, AttachmentRef, AttachmentStatus, kind_of};
pub use collect::{AgentFailure, CollectError, Collected, collect};
pub use event::AgentEvent;
pub use redact::redact;
pub use scope::{
    ACCOUNT_ID_KEY, AGENT_KEY, APPROVAL_KEY, DEADLINE_KEY, ImageRef, Prompt, SUPERSEDES_KEY, Scope,
    TURN_ID_KEY, USER_ID_KEY,
};

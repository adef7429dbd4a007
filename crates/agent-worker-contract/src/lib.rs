//! The Agent Handler contract: [`Agent::invoke`]`(scope, prompt)` returns a stream of
//! [`AgentEvent`]s.
//!
//! This crate is the contract alone, the innermost layer of agent-worker (as `tower-service`
//! is to tower): it depends on no other crate of the workspace and on no AWS crate, only `std`,
//! `futures`, `serde`, `tower-layer`, `tracing`, tokio's timer and `uuid` (a fresh turn id) (for the deadline middleware
//! and the checker). `agent_worker_contract` re-exports it whole.
//!
//! - [`Agent`], [`AgentExt`], [`agent_fn`]: the trait, its conveniences, an agent from a closure.
//! - [`AgentEvent`], [`Scope`], [`Prompt`], [`AttachmentRef`]: what goes in and what comes out.
//! - [`collect`]: buffered consumption, with [`AgentFailure`] for a `failed` terminal.
//! - [`middleware`]: tracing, deadline and token budget wrappers, each itself an `Agent`.
//! - [`conformance`]: checks any `Agent` against the specification's MUSTs.
//! - [`codes`]: the failure codes this crate's agents use.
//! - [`SessionId`], [`TurnId`]: the ids a store keys on, checked where they enter.
//! - [`Owner`], [`ApprovalDecision`]: who a turn is for, and their decision on a call that
//!   waited for them.
//! - [`chain`], [`ErrorChain`]: an error and its causes, each said once, for a log or the last
//!   words of a command.

#![forbid(unsafe_code)]

mod agent;
mod attachment;
mod chain;
pub mod codes;
mod collect;
pub mod conformance;
pub mod control;
mod event;
mod ids;
pub mod middleware;
mod person;
mod redact;
mod scope;

pub use agent::{Agent, AgentExt, AgentFn, EventStream, agent_fn};
pub use attachment::{AttachmentKind, AttachmentRef, AttachmentStatus, kind_of};
pub use chain::{ErrorChain, chain};
pub use collect::{AgentFailure, CollectError, Collected, collect, text_of};
pub use control::{
    Accepted, CommandAnswer, CommandKept, CommandRefused, Refused, SessionCommand, SessionControl,
    SessionState,
};
pub use event::AgentEvent;
pub use ids::{IdError, SessionId, TurnId, fresh_random_bits, id_problem, is_spoofing};
pub use person::{ApprovalDecision, Owner};
pub use redact::redact;
pub use scope::{
    ACCOUNT_ID_KEY, AGENT_KEY, APPROVAL_KEY, BRANCH_HINTS_KEY, CONTEXT_KEY, CONTINUABLE_KEY, DEADLINE_KEY,
    ImageRef, PARENT_SESSION_KEY, Prompt, RESULT_SCHEMA_KEY, SUPERSEDES_KEY, Scope, TURN_ID_KEY, TurnOptions,
    USER_ID_KEY, UserToken,
};

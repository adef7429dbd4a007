//! agent-worker's turn core: what runs a turn, whatever hosts it and wherever its state lives.
//!
//! - [`engine`]: the turn engine on a [`Model`](engine::Model): the tool loop, retries,
//!   deadlines, approvals, stops, attachments, compaction. The model on Bedrock is the adapters'
//!   (`agent-worker-aws`).
//! - [`session`]: what a turn needs from outside the process ([`SessionStore`](session::SessionStore),
//!   history invariants, turn claims), with the in-memory store.
//! - [`agents`]: Standard Agents: definitions, validation, the two-sided session runner.
//! - [`sinks`]: where a running turn's events go (the trait, stdout, the HTTP emit endpoint).
//! - [`realtime`]: the realtime server of seed 004 (the tab's answers, stops, approvals).
//! - [`clock`]: the one clock.
//! - [`Failure`]: an outside failure kept as the source of the crate's errors.
//!
//! It uses the contract (re-exported as [`protocol`]) and no AWS SDK crate: the adapters
//! (`agent-worker-aws`) implement its traits on AWS, and the compiler holds the line.
#![forbid(unsafe_code)]

pub use agent_worker_contract as protocol;

pub mod agents;
pub mod clock;
pub mod conversations;
pub mod engine;
mod failure;
pub mod realtime;
pub mod session;
pub mod sinks;

pub use failure::Failure;

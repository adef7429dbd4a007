//! A Rust agent runtime for AWS serverless.
//!
//! One turn of a conversation runs through one engine-neutral contract,
//! [`Agent::invoke`](protocol::Agent::invoke)`(scope, prompt)`, which returns a stream of
//! [`AgentEvent`](protocol::AgentEvent)s. The [`Engine`](engine::Engine) implements it on Amazon
//! Bedrock: streaming, the tool loop, retries, deadlines and cancellation, with session state
//! behind a [`SessionStore`](session::SessionStore).
//!
//! The modules, and what each may use:
//!
//! - [`protocol`]: the contract alone (`Agent`, events, `collect`, middleware, conformance):
//!   the crate `agent-worker-contract`, re-exported. It uses no other crate of the workspace and
//!   no AWS crate, and the compiler holds it to that.
//! - [`session`]: the state a turn needs (messages, history invariants, turn claims, stores).
//!   Uses `protocol` only.
//! - [`engine`]: the turn core. Uses `protocol` and `session`; only `engine::model` touches the
//!   Bedrock SDK.
//! - [`agents`]: Standard Agents definitions, validation and the two-sided runner. Uses
//!   `protocol`, `engine` and `session` (its DynamoDB thread store shares the session table).
//! - [`sinks`]: where a running turn's events go (stdout, a DynamoDB event log). Uses
//!   `protocol` and `session`'s table layout.
//! - [`hosts`]: thin adapters: the turn payload, the SQS Lambda handler, the SQS poller, the
//!   container host, the Agent Protocol v1 server and client. Use any `Agent`; hold no turn logic.
//!
//! The test kit (the wire-level Bedrock stand-in, moto's launcher, the fault proxy, the Runtime
//! API stand-in) is the crate `agent-worker-testkit`: a dev-dependency, never part of the function.
//!
//! The README's examples run as doc tests.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod agents;
pub mod engine;
pub mod hosts;
pub use agent_worker_contract as protocol;
pub mod session;
pub mod sinks;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

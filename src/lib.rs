//! A Rust agent runtime for AWS serverless.
//!
//! One turn of a conversation runs through one engine-neutral contract,
//! [`Agent::invoke`](protocol::Agent::invoke)`(scope, prompt)`, which returns a stream of
//! [`AgentEvent`](protocol::AgentEvent)s. The [`Engine`](engine::Engine) implements it on Amazon
//! Bedrock: streaming, the tool loop, retries, deadlines and cancellation, with session state
//! behind a [`SessionStore`](session::SessionStore).
//!
//! Hello world: an engine on Bedrock with sessions in memory, one turn, its answer.
//!
//! ```no_run
//! use agent_worker::{AgentExt as _, BedrockModel, Engine, MemoryStore, Prompt, Scope};
//!
//! # async fn hello(bedrock: aws_sdk_bedrockruntime::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder()
//!     .model(BedrockModel::new(bedrock, "us.anthropic.claude-sonnet-4-6"))
//!     .store(MemoryStore::new()) // or a DynamoStore, to keep sessions in the table
//!     .build()?;
//! let answer = engine.collect(Scope::new("conversation-1".parse().unwrap()), Prompt::text("Hello!")).await?;
//! println!("{}", answer.text);
//! # Ok(()) }
//! ```
//!
//! The crates are the layers, and arrows point inward only (`ARCHITECTURE.md` has the map):
//!
//! - [`protocol`]: the contract alone (`Agent`, events, `collect`, middleware, conformance): the
//!   crate `agent-worker-contract`. No AWS crate, no other crate of ours.
//! - [`engine`], [`session`], [`agents`], [`sinks`], [`realtime`], [`clock`]: the turn core, the
//!   crate `agent-worker-core`. No DynamoDB, S3 or SQS crate.
//! - [`aws`]: the adapters, the crate `agent-worker-aws`: the one DynamoDB table module and the
//!   S3 file area. Its stores are also re-exported beside the core's traits here
//!   ([`session::DynamoStore`], [`sinks::DynamoEventLog`], [`agents::DynamoThreadStore`]).
//! - [`hosts`] (this crate): thin adapters to transports: the turn payload, the SQS Lambda
//!   handler, the SQS poller, the container host, the Agent Protocol v1 server and client,
//!   configuration. They use any `Agent` and hold no turn logic.
//!
//! The test kit (the wire-level Bedrock stand-in, moto's launcher, the fault proxy, the Runtime
//! API stand-in) is the crate `agent-worker-testkit`: a dev-dependency, never part of the function.
//!
//! The examples of the README and of `docs/` run as doc tests.
#![forbid(unsafe_code)]

pub use agent_worker_aws as aws;
pub use agent_worker_aws::BedrockModel;
pub use agent_worker_aws::DynamoStore;
pub use agent_worker_contract as protocol;
pub use agent_worker_contract::{Agent, AgentEvent, AgentExt, Prompt, Scope};
pub use agent_worker_core::Failure;
pub use agent_worker_core::clock;
pub use agent_worker_core::conversations;
pub use agent_worker_core::engine::Engine;
pub use agent_worker_core::realtime;
pub use agent_worker_core::session::{MemoryStore, SessionStore};
/// Model providers beside Bedrock: the Anthropic Messages API.
pub use agent_worker_models as models;

/// The turn engine ([`agent_worker_core::engine`]), with the model on Bedrock beside its seam.
pub mod engine {
    pub use agent_worker_aws::{BedrockModel, supports_prompt_caching};
    pub use agent_worker_core::engine::*;
}
pub mod hosts;

/// Standard Agents ([`agent_worker_core::agents`]), with the thread store on the session table.
pub mod agents {
    pub use agent_worker_aws::DynamoThreadStore;
    pub use agent_worker_core::agents::*;
}

/// Session state ([`agent_worker_core::session`]), with the DynamoDB store and the table's
/// module (`dynamo`).
pub mod session {
    pub use agent_worker_aws::dynamo;
    pub use agent_worker_aws::dynamo::{DynamoConfig, DynamoStore};
    pub use agent_worker_core::session::*;
}

/// Where a running turn's events go ([`agent_worker_core::sinks`]), with the DynamoDB event log.
pub mod sinks {
    pub use agent_worker_aws::dynamo::{
        DynamoEventLog, LoggedEvent, TEXT_COALESCE_BYTES, TEXT_COALESCE_WINDOW,
    };
    pub use agent_worker_core::sinks::*;
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// Every page of `docs/`, its examples run as doc tests as the README's are.
#[cfg(doctest)]
pub mod docs {
    #[doc = include_str!("../docs/agent-protocol.md")]
    pub struct AgentProtocol;
    #[doc = include_str!("../docs/agentcore.md")]
    pub struct AgentCore;
    #[doc = include_str!("../docs/configuration.md")]
    pub struct Configuration;
    #[doc = include_str!("../docs/container.md")]
    pub struct Container;
    #[doc = include_str!("../docs/conversations.md")]
    pub struct Conversations;
    #[doc = include_str!("../docs/deploy.md")]
    pub struct Deploy;
    #[doc = include_str!("../docs/files.md")]
    pub struct Files;
    #[doc = include_str!("../docs/operating.md")]
    pub struct Operating;
    #[doc = include_str!("../docs/protocols.md")]
    pub struct Protocols;
    #[doc = include_str!("../docs/providers.md")]
    pub struct Providers;
    #[doc = include_str!("../docs/rust.md")]
    pub struct Rust;
    #[doc = include_str!("../docs/standard-agents.md")]
    pub struct StandardAgents;
    #[doc = include_str!("../docs/table.md")]
    pub struct Table;
    #[doc = include_str!("../docs/testing.md")]
    pub struct Testing;
    #[doc = include_str!("../docs/the-tab.md")]
    pub struct TheTab;
    #[doc = include_str!("../docs/tools.md")]
    pub struct Tools;
    #[doc = include_str!("../docs/web-page.md")]
    pub struct WebPage;
}

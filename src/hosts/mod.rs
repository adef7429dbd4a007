//! Thin adapters that run turns for a transport: they decode, call an [`Agent`](crate::protocol::Agent),
//! encode, and map errors to the transport. No turn logic lives here.
//!
//! - [`AgentTurnPayload`]: one turn as a queue or a request carries it.
//! - [`runner`]: the runner every host uses ([`TurnHandler`](runner::TurnHandler)): one turn
//!   on the agent, its events to the sinks, how it ended.
//! - [`lambda`]: the SQS-triggered Lambda handler (feature `lambda`).
//! - [`worker`]: one way to build a worker from its settings, for every host (feature
//!   `lambda`).
//! - [`sqs_poller`]: the same handler fed by polling a queue (feature `lambda`).
//! - [`settings`]: a worker's configuration from named values; [`secrets`]: those kept in
//!   Secrets Manager (feature `lambda`); [`config`]: the configuration file of a product's own
//!   tools, policy and persona; [`jobs`]: the events that settle jobs, reported by the product.
//! - [`turn_queue`]: a turn sent to the turns queue, as one message whoever sends it.
//! - [`metrics`]: each turn's metrics in CloudWatch's embedded metric format.
//! - [`traces`]: each turn's spans in OpenTelemetry's GenAI conventions, over OTLP (feature
//!   `otlp`).
//! - [`redrive`]: redriven records back in their queue after a short, growing delay.
//! - [`container`]: turns over HTTP, with live event streams (feature `container`).
//! - [`agent_protocol`]: Agent Protocol v1 server and client (feature `agent-protocol`; the
//!   `agent-worker-agent-protocol` crate).
//! - [`jwt`]: people by their own tokens, a JWT verified against its issuer's key set (feature
//!   `container`).
//! - [`http_serve`]: the accept loop both servers use, with timeouts, a connection cap, and each
//!   request head read before hyper reads it (refused in the server's own shape); and
//!   [`api_key`], the shared secrets callers present (the `agent-worker-http` crate).
//! - [`S3FileArea`]: the files people attach, in S3 (feature `s3`).

pub mod a2a_agents;
mod aws_error;
pub mod blueprint;
pub mod config;
pub mod headers;
pub mod jobs;
pub mod metrics;
mod payload;
pub mod redrive;
pub mod runner;
#[cfg(feature = "lambda")]
pub mod secrets;
pub mod settings;
pub mod turn_queue;

pub use aws_error::AwsError;
pub use blueprint::{Blueprint, BlueprintError};
pub use payload::{AgentTurnPayload, PayloadCommand, PayloadError};
pub use settings::{SettingsError, WorkerSettings};
pub use turn_queue::TurnQueue;

#[cfg(feature = "agent-protocol")]
pub use agent_worker_agent_protocol as agent_protocol;
#[cfg(feature = "api")]
pub mod api;
#[cfg(feature = "s3")]
pub use agent_worker_aws::S3FileArea;
#[cfg(any(feature = "container", feature = "agent-protocol"))]
pub use agent_worker_http::api_key;
#[cfg(feature = "container")]
pub mod container;
#[cfg(any(feature = "container", feature = "agent-protocol"))]
pub use agent_worker_http::serve as http_serve;
#[cfg(feature = "container")]
pub mod jwt;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod mcp;
#[cfg(feature = "lambda")]
pub mod sqs_poller;
#[cfg(feature = "otlp")]
pub mod traces;
#[cfg(feature = "lambda")]
pub mod worker;

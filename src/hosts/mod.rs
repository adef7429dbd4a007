//! Thin adapters that run turns for a transport: they decode, call an [`Agent`](crate::protocol::Agent),
//! encode, and map errors to the transport. No turn logic lives here.
//!
//! - [`AgentTurnPayload`]: one turn as a queue or a request carries it.
//! - [`lambda`]: the SQS-triggered Lambda handler (feature `lambda`).
//! - [`sqs_poller`]: the same handler fed by polling a queue (feature `lambda`).
//! - [`settings`]: a worker's configuration from named values.
//! - [`container`]: turns over HTTP, with live event streams (feature `container`).
//! - [`agent_protocol`]: Agent Protocol v1 server and client (feature `agent-protocol`).
//! - [`S3FileArea`]: the files people attach, in S3 (feature `s3`).

mod payload;
pub mod settings;

pub use payload::{AgentTurnPayload, PayloadError};
pub use settings::{SettingsError, WorkerSettings};

#[cfg(feature = "agent-protocol")]
pub mod agent_protocol;
#[cfg(feature = "s3")]
mod s3_files;
#[cfg(feature = "s3")]
pub use s3_files::S3FileArea;
#[cfg(feature = "container")]
pub mod container;
#[cfg(feature = "lambda")]
pub mod lambda;
#[cfg(feature = "lambda")]
pub mod sqs_poller;

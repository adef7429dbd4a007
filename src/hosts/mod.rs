//! The hosts, each its own crate, re-exported where they have always been: thin adapters that
//! run turns for a transport (decode, call an [`Agent`](crate::protocol::Agent), encode, map
//! errors to the transport). No turn logic lives here.
//!
//! - What every host shares (the `agent-worker-runtime` crate, re-exported here):
//!   [`AgentTurnPayload`], the [`runner`], the [`worker`] built from its [`settings`], the
//!   configuration file ([`config`]), [`metrics`], [`traces`], [`redrive`].
//! - [`container`]: the product's HTTP API, with live event streams, A2A, AG-UI, AgentCore and
//!   the console; [`jwt`]: people by their own tokens (the `agent-worker-container` crate).
//! - [`lambda`]: the SQS-triggered Lambda handler; [`sqs_poller`]: the same handler fed by
//!   polling a queue; [`api`]: the HTTP API as a Lambda function (the `agent-worker-lambda`
//!   crate).
//! - [`agent_protocol`]: Agent Protocol v1 server and client (the `agent-worker-agent-protocol`
//!   crate).
//! - [`http_serve`]: the accept loop both servers use, with timeouts, a connection cap, and each
//!   request head read before hyper reads it; and [`api_key`], the shared secrets callers
//!   present (the `agent-worker-http` crate).
//! - [`S3FileArea`]: the files people attach, in S3 (feature `s3`).

pub use agent_worker_runtime::*;

pub use agent_worker_agent_protocol as agent_protocol;
#[cfg(feature = "s3")]
pub use agent_worker_aws::S3FileArea;
pub use agent_worker_container as container;
pub use agent_worker_container::jwt;
pub use agent_worker_http::api_key;
pub use agent_worker_http::serve as http_serve;
pub use agent_worker_lambda as lambda;
pub use agent_worker_lambda::{api, sqs_poller};

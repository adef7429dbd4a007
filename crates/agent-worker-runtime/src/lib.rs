//! What every agent-worker host shares, with no server and no Lambda runtime in it: the hosts
//! (`agent-worker-container`, `agent-worker-lambda`) depend on it, never the other way.
//!
//! - [`AgentTurnPayload`]: one turn as a queue or a request carries it.
//! - [`batch`]: the SQS batch handler: a batch of turns in, the records to redrive out.
//! - [`runner`]: the runner every host uses ([`TurnHandler`](runner::TurnHandler)): one turn
//!   on the agent, its events to the sinks, how it ended.
//! - [`worker`]: one way to build a worker from its settings, for every host; [`aws_loader`]:
//!   the AWS SDK's configuration from a binary's environment (its credentials and region read
//!   directly when it holds them), its clients trusting Amazon Trust Services' roots alone
//!   unless `AWS_TLS_ROOTS=system` ([`aws_tls`]).
//! - [`settings`]: a worker's configuration from named values; [`secrets`]: those kept in
//!   Secrets Manager; [`config`]: the configuration file of a product's own tools, policy and
//!   persona; [`blueprint`]: the agent those describe; [`jobs`]: the events that settle jobs,
//!   reported by the product.
//! - [`turn_queue`]: a turn sent to the turns queue, as one message whoever sends it.
//! - [`metrics`]: each turn's metrics in CloudWatch's embedded metric format.
//! - [`traces`]: each turn's spans in OpenTelemetry's GenAI conventions, over OTLP.
//! - [`redrive`]: redriven records back in their queue after a short, growing delay.
//! - [`mcp`]: tools from MCP servers (feature `mcp`); [`a2a_agents`]: other agents over A2A,
//!   as tools.
//! - [`a2a_task`]: an A2A task as the A2A door shows it and the worker pushes it, read from the
//!   turn's events ([`heard`]); [`joined_id`]: ids that name two of ours at once.
//! - [`a2a_push`]: A2A push notifications: the webhooks a task's caller sets, checked, and the
//!   sink that pushes a task's updates from the worker that runs its turn.

#![forbid(unsafe_code)]

pub mod a2a_agents;
pub mod a2a_push;
pub mod a2a_task;
mod aws_error;
pub mod aws_loader;
pub mod aws_tls;
pub mod batch;
pub mod blueprint;
pub mod card_signature;
pub mod config;
pub mod continuation;
pub mod headers;
pub mod heard;
pub mod jobs;
pub mod joined_id;
pub mod mcp;
pub mod metrics;
mod payload;
pub mod redrive;
pub mod runner;
pub mod secrets;
pub mod settings;
pub mod traces;
pub mod turn_chain;
pub mod turn_queue;
pub mod worker;

pub use aws_error::AwsError;
pub use blueprint::{Blueprint, BlueprintError};
pub use payload::{AgentTurnPayload, PayloadCommand, PayloadError};
pub use settings::{SettingsError, WorkerSettings};
pub use turn_queue::TurnQueue;

//! agent-worker's AWS adapters: the model on Bedrock ([`BedrockModel`]), the DynamoDB table
//! (sessions, turns, approvals, event logs, Standard Agents threads) behind one module that owns
//! every key and item codec, and the S3 file area of attached files.
//!
//! The middle layer: it implements the core's traits (`Model`, `SessionStore`, `ApprovalStore`,
//! `ThreadStore`, `Sink`, `FileArea`) on AWS and holds no turn logic.
#![forbid(unsafe_code)]

pub mod bedrock;
pub mod dynamo;
#[cfg(feature = "s3")]
mod s3_files;

pub use bedrock::{BedrockModel, supports_prompt_caching};
pub use dynamo::{DynamoConfig, DynamoEventLog, DynamoStore, DynamoThreadStore};
#[cfg(feature = "s3")]
pub use s3_files::S3FileArea;

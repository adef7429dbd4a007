//! The [`Model`](agent_worker_core::engine::Model) on Amazon Bedrock's ConverseStream API, with
//! prompt caching and byte-stable request bodies.

mod model;
mod request_body;

pub use model::{BedrockModel, supports_prompt_caching};

//! The [`Model`](agent_worker_core::engine::Model) on Amazon Bedrock's ConverseStream API, with
//! prompt caching and byte-stable request bodies.

mod document;
mod model;
mod stable_json;

pub use model::{BedrockModel, supports_prompt_caching};

//! Model adapters beyond Bedrock, each a [`Model`](agent_worker_core::engine::model::Model) of
//! the engine, speaking the provider's documented streaming API over HTTPS:
//!
//! - [`AnthropicModel`]: the Anthropic Messages API (`POST {base}/v1/messages`, server-sent
//!   events).
//! - [`OpenAiModel`]: OpenAI-compatible Chat Completions (`POST {base}/chat/completions`,
//!   server-sent events): OpenAI, and the servers and gateways that speak its API.
//!
//! Each maps the engine's provider-neutral request and events onto the provider's, classifies its
//! failures (429 and overloads are transient, with the provider's `retry-after`), and puts prompt
//! cache breakpoints where Bedrock's cache points go.

mod anthropic;
mod http;
mod openai;

pub use anthropic::{ANTHROPIC_VERSION, AnthropicModel, DEFAULT_ANTHROPIC_BASE_URL};
pub use http::{ApiKey, EmptyApiKey};
pub use openai::{DEFAULT_OPENAI_BASE_URL, OpenAiModel};

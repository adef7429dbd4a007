//! One stand-in per model provider behind one face, for what runs the same turn on each: the
//! provider matrix of the tests (the fixture turn on both hosts × three providers) and the
//! benchmark's per-provider figures. Each speaks its provider's wire format, so the real client
//! code runs: Bedrock's event stream, the Anthropic API's and OpenAI's server-sent events.

use std::sync::Arc;

use agent_worker_aws::BedrockModel;
use agent_worker_core::engine::Model;
use agent_worker_models::{AnthropicModel, ApiKey, OpenAiModel};
use serde_json::Value;

use crate::{BedrockStandIn, ProviderStandIn, Reply, SseReply, StreamScript};

/// The API key the stand-ins are called with (they take any; the tests check it is sent).
pub const STAND_IN_API_KEY: &str = "sk-stand-in-0123456789abcdef";

/// A model provider the worker runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Amazon Bedrock, ConverseStream.
    Bedrock,
    /// The Anthropic Messages API.
    Anthropic,
    /// OpenAI-compatible Chat Completions.
    OpenAi,
}

impl Provider {
    /// Every provider, in the order figures are reported.
    pub const ALL: [Self; 3] = [Self::Bedrock, Self::Anthropic, Self::OpenAi];

    /// Its name, as `MODEL_PROVIDER` and `--provider` take it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bedrock => "bedrock",
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
        }
    }

    /// A model id of the provider's own form.
    pub fn model_id(self) -> &'static str {
        match self {
            Self::Bedrock => "us.anthropic.claude-sonnet-4-6-v1:0",
            Self::Anthropic => "claude-sonnet-4-6",
            Self::OpenAi => "gpt-4.1-mini",
        }
    }

    /// The environment variable holding its API key, where it takes one.
    pub fn key_variable(self) -> Option<&'static str> {
        match self {
            Self::Bedrock => None,
            Self::Anthropic => Some("ANTHROPIC_API_KEY"),
            Self::OpenAi => Some("OPENAI_API_KEY"),
        }
    }

    /// The tool a request body forces the model to call, read from the provider's own field.
    pub fn forced_tool(self, body: &Value) -> Option<String> {
        let name = match self {
            Self::Bedrock => &body["toolConfig"]["toolChoice"]["tool"]["name"],
            Self::Anthropic => &body["tool_choice"]["name"],
            Self::OpenAi => &body["tool_choice"]["function"]["name"],
        };
        name.as_str().map(str::to_owned)
    }

    /// The names of the tools a request body offers.
    pub fn offered_tools(self, body: &Value) -> Vec<String> {
        let (list, name): (&Value, &[&str]) = match self {
            Self::Bedrock => (&body["toolConfig"]["tools"], &["toolSpec", "name"]),
            Self::Anthropic => (&body["tools"], &["name"]),
            Self::OpenAi => (&body["tools"], &["function", "name"]),
        };
        list.as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| name.iter().fold(tool, |v, key| &v[*key]).as_str())
            .map(str::to_owned)
            .collect()
    }
}

/// The stand-in of one provider.
#[derive(Debug)]
pub enum StandIn {
    /// Bedrock's.
    Bedrock(BedrockStandIn),
    /// The Anthropic API's or an OpenAI-compatible server's.
    Api(Provider, ProviderStandIn),
}

impl StandIn {
    /// Starts the stand-in of `provider` on a free port of 127.0.0.1.
    pub async fn start(provider: Provider) -> std::io::Result<Self> {
        Ok(match provider {
            Provider::Bedrock => Self::Bedrock(BedrockStandIn::start().await?),
            api => Self::Api(api, ProviderStandIn::start().await?),
        })
    }

    /// Whose stand-in it is.
    pub fn provider(&self) -> Provider {
        match self {
            Self::Bedrock(_) => Provider::Bedrock,
            Self::Api(provider, _) => *provider,
        }
    }

    /// Adds an answer of `text` to the script.
    pub fn push_text(&self, text: &str) {
        match self {
            Self::Bedrock(bedrock) => bedrock.push(Reply::text(text)),
            Self::Api(Provider::OpenAi, api) => api.push(SseReply::openai_text(text)),
            Self::Api(_, api) => api.push(SseReply::text(text)),
        }
    }

    /// Adds a call of tool `name` with `input` (JSON text) to the script.
    pub fn push_tool_call(&self, id: &str, name: &str, input: &str) {
        match self {
            Self::Bedrock(bedrock) => bedrock.push(Reply::tool_call(id, name, input)),
            Self::Api(Provider::OpenAi, api) => api.push(SseReply::openai_tool_call(id, name, input)),
            Self::Api(_, api) => api.push(SseReply::tool_call(id, name, input)),
        }
    }

    /// Adds calls made at once, each `(id, name, input)`, to the script.
    pub fn push_tool_calls(&self, calls: &[(&str, &str, &str)]) {
        match self {
            Self::Bedrock(bedrock) => {
                let script = calls.iter().fold(StreamScript::new(), |s, (id, name, input)| {
                    s.tool_use(id, name, input, 2)
                });
                bedrock.push(script.stop("tool_use").usage(20, 10).into_reply());
            }
            Self::Api(Provider::OpenAi, api) => api.push(SseReply::openai_tool_calls(calls)),
            Self::Api(_, api) => api.push(SseReply::tool_calls(calls)),
        }
    }

    /// Adds an answer with `reasoning` first, then `text`. Bedrock and the Anthropic API close
    /// the reasoning with `signature`; OpenAI-compatible servers send none.
    pub fn push_reasoned(&self, reasoning: &str, signature: &str, text: &str) {
        match self {
            Self::Bedrock(bedrock) => bedrock.push(
                StreamScript::new()
                    .reasoning(reasoning, signature)
                    .text(text, 3)
                    .stop("end_turn")
                    .usage(12, 30)
                    .into_reply(),
            ),
            Self::Api(Provider::OpenAi, api) => {
                api.push(SseReply::openai_reasoning_then_text(reasoning, text))
            }
            Self::Api(_, api) => api.push(SseReply::thinking_then_text(reasoning, signature, text)),
        }
    }

    /// Adds an answer of `text` that the output token cap cuts.
    pub fn push_cut_at_limit(&self, text: &str) {
        match self {
            Self::Bedrock(bedrock) => bedrock.push(
                StreamScript::new()
                    .text(text, 3)
                    .stop("max_tokens")
                    .usage(12, 4096)
                    .into_reply(),
            ),
            Self::Api(Provider::OpenAi, api) => api.push(SseReply::openai_cut_at_limit(text)),
            Self::Api(_, api) => api.push(SseReply::cut_at_limit(text)),
        }
    }

    /// Adds an answer that starts with `text` and then breaks with the provider's own error
    /// mid-stream.
    pub fn push_broken_after(&self, text: &str) {
        match self {
            Self::Bedrock(bedrock) => bedrock.push(
                StreamScript::new()
                    .open_text(text)
                    .exception("modelStreamErrorException", "The model stream failed.")
                    .into_reply(),
            ),
            Self::Api(Provider::OpenAi, api) => api.push(SseReply::openai_error_after_text(text)),
            Self::Api(_, api) => api.push(SseReply::error_after_text(text)),
        }
    }

    /// The model on this stand-in, with the real client of its provider.
    pub fn model(&self) -> Arc<dyn Model> {
        let provider = self.provider();
        let key = || ApiKey::new(STAND_IN_API_KEY).unwrap_or_else(|e| panic!("the stand-in's key: {e}"));
        match self {
            Self::Bedrock(bedrock) => Arc::new(BedrockModel::new(bedrock.client(), provider.model_id())),
            Self::Api(Provider::OpenAi, _) => {
                Arc::new(OpenAiModel::new(key(), provider.model_id()).base_url(self.endpoint_url()))
            }
            Self::Api(..) => {
                Arc::new(AnthropicModel::new(key(), provider.model_id()).base_url(self.endpoint_url()))
            }
        }
    }

    /// Its base URL as `--endpoint-url` takes it for its provider.
    pub fn endpoint_url(&self) -> String {
        match self {
            Self::Bedrock(bedrock) => bedrock.endpoint_url(),
            Self::Api(Provider::OpenAi, api) => api.openai_url(),
            Self::Api(_, api) => api.url().to_owned(),
        }
    }

    /// The worker settings that point a host at it: the provider, its model id, and for the
    /// HTTP APIs the key and base URL (Bedrock's client comes from [`bedrock_client`](Self::bedrock_client)).
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        let provider = self.provider();
        let mut values = vec![
            ("MODEL_PROVIDER", provider.name().to_owned()),
            ("MODEL_ID", provider.model_id().to_owned()),
        ];
        match provider {
            Provider::Bedrock => {}
            Provider::Anthropic => values.extend([
                ("ANTHROPIC_API_KEY", STAND_IN_API_KEY.to_owned()),
                ("ANTHROPIC_BASE_URL", self.endpoint_url()),
            ]),
            Provider::OpenAi => values.extend([
                ("OPENAI_API_KEY", STAND_IN_API_KEY.to_owned()),
                ("OPENAI_BASE_URL", self.endpoint_url()),
            ]),
        }
        values
    }

    /// A Bedrock client: this stand-in's, or one that reaches nothing (the client a binary
    /// makes, unused on the other providers).
    pub fn bedrock_client(&self) -> aws_sdk_bedrockruntime::Client {
        match self {
            Self::Bedrock(bedrock) => bedrock.client(),
            Self::Api(..) => crate::client_for("http://127.0.0.1:9"),
        }
    }

    /// The bodies of the model requests received so far.
    pub fn request_bodies(&self) -> Vec<Value> {
        match self {
            Self::Bedrock(bedrock) => bedrock.requests().into_iter().map(|r| r.body).collect(),
            Self::Api(_, api) => api.requests().into_iter().map(|r| r.body).collect(),
        }
    }
}

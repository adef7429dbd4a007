//! Traces of turns in OpenTelemetry's GenAI conventions, exported over OTLP/HTTP (JSON) to a
//! collector: the ADOT Lambda layer's, a sidecar's, or any OTLP endpoint.
//!
//! Each turn is one trace, or a part of the one its SQS record carries (`AWSTraceHeader`):
//!
//! | span | kind | parent | attributes |
//! | --- | --- | --- | --- |
//! | `invoke_agent {agent}` | internal | the record's `Parent` | `gen_ai.operation.name`, `gen_ai.agent.name`, `gen_ai.conversation.id`, `gen_ai.provider.name`, `gen_ai.request.model`, the turn's `gen_ai.usage.*`, `agent_worker.turn_id`, `messaging.message.id`; `error.type` (the failure's code) |
//! | `chat {model}` | client | the turn | `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.usage.input_tokens` (the cache's included), `gen_ai.usage.output_tokens`, `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens`; a `retry` event per retry |
//! | `execute_tool {tool}` | internal | the turn | `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, `agent_worker.tool.result` (`ok`, `error`, `timeout`, `approval`); `error.type` |
//!
//! **Content.** No span holds the person's words, the answer or a tool's arguments unless the
//! deployer turns content capture on ([`TraceConfig::capture_content`]). Even then only the
//! tools declared with `args_sensitive: false` ([`Tracer::show_tools`]) have their arguments
//! and results in a span, and a person's token never is in one.
//!
//! **Sampling.** A record whose trace header says `Sampled=0` is not traced; one without a
//! header starts a trace of its own. The spans of a turn are sent when it ends, in one request
//! that waits at most [`EXPORT_TIMEOUT`]; a collector that fails loses the trace, not the turn.

mod otlp;
mod span;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use span::TurnTrace;

use super::payload::AgentTurnPayload;
use agent_worker_contract::AgentEvent;

/// The longest a turn's export may take before its trace is given up.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// The path of traces under an OTLP/HTTP base endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`).
pub const TRACES_PATH: &str = "/v1/traces";

/// A trace configuration that cannot be used, or an export that failed.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A value of the configuration is wrong; it says which.
    #[error("traces: {0}")]
    Config(String),
    /// The collector could not be reached, or did not answer in time.
    #[error("traces: the collector at {endpoint} could not be reached")]
    Unreachable {
        /// Where the spans went.
        endpoint: String,
        /// What the HTTP client said.
        source: reqwest::Error,
    },
    /// The collector answered with an error.
    #[error("traces: the collector at {endpoint} answered {status}")]
    Refused {
        /// Where the spans went.
        endpoint: String,
        /// Its status.
        status: u16,
    },
}

/// Where traces go and what they may hold.
#[derive(Clone, PartialEq, Eq)]
pub struct TraceConfig {
    endpoint: String,
    service: String,
    headers: Vec<(String, String)>,
    capture_content: bool,
    provider: Option<String>,
    model: Option<String>,
}

impl fmt::Debug for TraceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Headers carry collectors' keys: their names only.
        let headers: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("TraceConfig")
            .field("endpoint", &self.endpoint)
            .field("service", &self.service)
            .field("headers", &headers)
            .field("capture_content", &self.capture_content)
            .field("provider", &self.provider)
            .field("model", &self.model)
            .finish()
    }
}

impl TraceConfig {
    /// Spans sent to `endpoint`, the full URL of an OTLP/HTTP traces endpoint (such as
    /// `http://localhost:4318/v1/traces`), as the resource `service.name` `service`.
    pub fn new(endpoint: impl Into<String>, service: impl Into<String>) -> Result<Self, TraceError> {
        let (endpoint, service) = (endpoint.into(), service.into());
        match reqwest::Url::parse(&endpoint) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            _ => {
                return Err(TraceError::Config(format!(
                    "the endpoint {endpoint:?} is not an http(s) URL"
                )));
            }
        }
        if service.trim().is_empty() {
            return Err(TraceError::Config("the service name is empty".into()));
        }
        Ok(Self {
            endpoint,
            service,
            headers: Vec::new(),
            capture_content: false,
            provider: None,
            model: None,
        })
    }

    /// The traces endpoint under an OTLP/HTTP base endpoint (`http://localhost:4318`).
    pub fn under_base(base: &str, service: impl Into<String>) -> Result<Self, TraceError> {
        Self::new(format!("{}{TRACES_PATH}", base.trim_end_matches('/')), service)
    }

    /// Sends header `name: value` with every export (a collector's key).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Result<Self, TraceError> {
        let (name, value) = (name.into(), value.into());
        let valid = reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok()
            && reqwest::header::HeaderValue::from_str(&value).is_ok();
        if !valid {
            return Err(TraceError::Config(format!(
                "the header {name:?} is not a valid HTTP header"
            )));
        }
        self.headers.push((name, value));
        Ok(self)
    }

    /// Puts the person's words, the answer, and the arguments and results of the tools shown
    /// ([`Tracer::show_tools`]) in the spans. Off by default.
    #[must_use]
    pub fn capture_content(mut self, on: bool) -> Self {
        self.capture_content = on;
        self
    }

    /// The model the turns call: `provider` (`aws.bedrock`, `anthropic`, `openai`) and its id.
    #[must_use]
    pub fn model(mut self, provider: impl Into<String>, model: impl Into<String>) -> Self {
        self.provider = Some(provider.into());
        self.model = Some(model.into());
        self
    }

    /// The traces endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

/// A trace's place, as an SQS record's `AWSTraceHeader` (X-Ray's format) gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace id, 32 lowercase hex digits (X-Ray's `1-{8}-{24}` without its dashes).
    pub trace_id: String,
    /// The span the turn continues, 16 lowercase hex digits, when the header names one.
    pub span_id: Option<String>,
    /// Whether the sender sampled the trace (`Sampled=0`: no).
    pub sampled: bool,
}

impl TraceParent {
    /// Reads `Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`;
    /// `None` when it holds no usable root.
    pub fn from_aws_header(header: &str) -> Option<Self> {
        let mut parent = Self {
            trace_id: String::new(),
            span_id: None,
            sampled: true,
        };
        for field in header.split(';') {
            let Some((key, value)) = field.trim().split_once('=') else {
                continue;
            };
            match key {
                "Root" => {
                    let mut parts = value.split('-');
                    let (Some("1"), Some(time), Some(random), None) =
                        (parts.next(), parts.next(), parts.next(), parts.next())
                    else {
                        return None;
                    };
                    let id = format!("{time}{random}").to_ascii_lowercase();
                    if time.len() != 8 || !is_hex_id(&id, 32) {
                        return None;
                    }
                    parent.trace_id = id;
                }
                "Parent" => {
                    let id = value.to_ascii_lowercase();
                    parent.span_id = is_hex_id(&id, 16).then_some(id);
                }
                "Sampled" => parent.sampled = value != "0",
                _ => {}
            }
        }
        (!parent.trace_id.is_empty()).then_some(parent)
    }
}

/// Whether `id` is `len` hex digits, not all zero (OpenTelemetry's invalid id).
fn is_hex_id(id: &str, len: usize) -> bool {
    id.len() == len && id.bytes().all(|b| b.is_ascii_hexdigit()) && id.bytes().any(|b| b != b'0')
}

/// Starts each turn's trace and sends it to the collector when the turn ends.
#[derive(Debug, Clone)]
pub struct Tracer {
    config: Arc<TraceConfig>,
    shown_tools: Arc<HashSet<String>>,
    client: reqwest::Client,
}

impl Tracer {
    /// A tracer sending as `config` says.
    pub fn new(config: TraceConfig) -> Self {
        Self {
            config: Arc::new(config),
            shown_tools: Arc::default(),
            client: reqwest::Client::new(),
        }
    }

    /// The tools whose arguments and results a span may hold when content capture is on: the
    /// names of those declared with `args_sensitive: false`.
    #[must_use]
    pub fn show_tools(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.shown_tools = Arc::new(names.into_iter().collect());
        self
    }

    /// Starts the trace of `turn`, continuing `header` (the record's `AWSTraceHeader`) when it
    /// has one; `None` when the header says the trace is not sampled.
    pub fn start(
        &self,
        turn: &AgentTurnPayload,
        header: Option<&str>,
        message_id: Option<&str>,
    ) -> Option<TurnTrace> {
        let parent = header.and_then(TraceParent::from_aws_header);
        if parent.as_ref().is_some_and(|p| !p.sampled) {
            return None;
        }
        Some(TurnTrace::start(
            self.config.clone(),
            self.shown_tools.clone(),
            turn,
            parent,
            message_id,
        ))
    }

    /// Sends the spans of a turn that ended with `terminal` (`None`: without one).
    pub async fn export(&self, trace: TurnTrace, terminal: Option<&AgentEvent>) -> Result<(), TraceError> {
        let spans = trace.finish(terminal);
        if spans.is_empty() {
            return Ok(());
        }
        let body = otlp::request(&self.config.service, &spans);
        let endpoint = &self.config.endpoint;
        let mut request = self
            .client
            .post(endpoint)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .timeout(EXPORT_TIMEOUT)
            .body(body.to_string());
        for (name, value) in &self.config.headers {
            request = request.header(name, value);
        }
        let answer = request.send().await.map_err(|source| TraceError::Unreachable {
            endpoint: endpoint.clone(),
            source,
        })?;
        if !answer.status().is_success() {
            return Err(TraceError::Refused {
                endpoint: endpoint.clone(),
                status: answer.status().as_u16(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aws_trace_header_gives_the_trace_and_the_parent() {
        let parent = TraceParent::from_aws_header(
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995C3F42CD8AD8;Sampled=1;Lineage=a:1",
        )
        .unwrap();
        assert_eq!(parent.trace_id, "5759e988bd862e3fe1be46a994272793");
        assert_eq!(parent.span_id.as_deref(), Some("53995c3f42cd8ad8"));
        assert!(parent.sampled);
        let unsampled = TraceParent::from_aws_header("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=0");
        assert_eq!(unsampled.map(|p| (p.span_id, p.sampled)), Some((None, false)));
        for bad in [
            "",
            "Parent=53995c3f42cd8ad8",
            "Root=2-5759e988-bd862e3fe1be46a994272793",
            "Root=1-5759e988-bd862e3fe1be46a99427279",
            "Root=1-00000000-000000000000000000000000",
            "Root=1-5759e98g-bd862e3fe1be46a994272793",
        ] {
            assert_eq!(TraceParent::from_aws_header(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_config_that_cannot_be_used_says_why() {
        assert!(TraceConfig::new("localhost:4318", "s").is_err());
        assert!(TraceConfig::new("ftp://collector/v1/traces", "s").is_err());
        assert!(TraceConfig::new("http://127.0.0.1:4318/v1/traces", " ").is_err());
        let base = TraceConfig::under_base("http://127.0.0.1:4318/", "desk").unwrap();
        assert_eq!(base.endpoint(), "http://127.0.0.1:4318/v1/traces");
        assert!(base.clone().header("bad name", "v").is_err());
        let keyed = base.header("x-honeycomb-team", "secret-key").unwrap();
        assert!(!format!("{keyed:?}").contains("secret-key"));
    }
}

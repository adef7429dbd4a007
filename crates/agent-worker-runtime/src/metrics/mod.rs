//! Per-turn metrics in CloudWatch's embedded metric format (EMF): JSON lines in the function's
//! log that CloudWatch turns into metrics, with no API call and no wait.
//!
//! A host measures each turn from its events ([`TurnMeter`]) and, when the turn ends, writes
//! one line for the turn and one per tool and result it called:
//!
//! | metric | unit | dimensions |
//! | --- | --- | --- |
//! | `Turns` | Count | the base set; with `outcome`; with `outcome` and `code` when a code says why |
//! | `TurnDuration`, `TimeToFirstToken`, `QueueDelay` | Milliseconds | the base set |
//! | `ModelCalls`, `ModelRetries`, `ModelThrottles` | Count | the base set |
//! | `InputTokens`, `OutputTokens`, `CacheReadTokens`, `CacheWriteTokens` | Count | the base set |
//! | `ToolCalls`, `ApprovalsRequested`, `ApprovalsRedeemed`, `Compactions` | Count | the base set |
//! | `TurnCostUsd` | None | the base set; with `account`: the turn's tokens at the model's price, when it has one ([`MetricsConfig::priced`]) |
//! | `DynamoDBRequests` | Count | the base set: the table's requests the turn sent, its event log's included (when its client is [`counted`]) |
//! | `ToolCalls`, `ToolDuration` (Milliseconds) | Count | the base set with `tool`; with `tool` and `result` |
//!
//! The base set is `service` and the dimensions the deployer adds ([`MetricsConfig::dimension`],
//! such as `model` and `agent`). `outcome` is one of `completed`, `stopped` (by the person, a
//! newer message or the deadline), `failed` (the client was told), `refused` (a turn that did
//! not run: a duplicate, another person's conversation, ...), `redriven` (back to the
//! queue) and `continued` (longer than its invocation: it goes on in the next). A tool's `result` is `ok`, `error`, `timeout` or `approval` (it waits for the
//! person). `QueueDelay` is written when the record says when it was sent (SQS's
//! `SentTimestamp`). A record that ran no turn (one refused, not started, not a turn) has
//! only its `Turns` line. Each line carries the turn's id and the SQS message's as properties,
//! for a query from a metric to its log lines.

mod emf;
mod requests;
mod turn;

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

pub(crate) use requests::counting;
pub use requests::{CountRequests, counted};
pub(crate) use turn::{APPROVAL, tool_result};
pub use turn::{TurnMeter, TurnOutcome};

/// Dimension names the metrics use themselves; a deployer's dimension may not take them.
const RESERVED: [&str; 6] = ["service", "outcome", "code", "tool", "result", "account"];

/// CloudWatch keeps at most 30 dimensions on a metric; the lines add up to three to the base.
const MAX_BASE_DIMENSIONS: usize = 27;

/// The service name when none is given (`POWERTOOLS_SERVICE_NAME`).
pub const DEFAULT_SERVICE: &str = "agent-worker";

/// A metrics configuration that cannot be used; it says which value and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metrics: {0}")]
pub struct MetricsError(String);

/// The namespace, the service and the deployer's dimensions of every line.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsConfig {
    namespace: String,
    service: String,
    dimensions: Vec<(String, String)>,
    /// The model's price: each turn's cost is written with it.
    price: Option<agent_worker_core::engine::spending::Price>,
}

impl MetricsConfig {
    /// Metrics in CloudWatch namespace `namespace`, with dimension `service`.
    pub fn new(namespace: impl Into<String>, service: impl Into<String>) -> Result<Self, MetricsError> {
        let (namespace, service) = (namespace.into(), service.into());
        if namespace.trim().is_empty() || namespace.starts_with("AWS/") {
            return Err(MetricsError(format!(
                "the namespace {namespace:?} is empty or AWS's own (AWS/...)"
            )));
        }
        if service.trim().is_empty() {
            return Err(MetricsError("the service name is empty".into()));
        }
        Ok(Self {
            namespace,
            service,
            dimensions: Vec::new(),
            price: None,
        })
    }

    /// Writes each turn's cost (`TurnCostUsd`, its tokens at `price`), when there is a price.
    #[must_use]
    pub fn priced(mut self, price: Option<agent_worker_core::engine::spending::Price>) -> Self {
        self.price = price;
        self
    }

    /// Adds dimension `name` with `value` to every line (a model id, an agent's name).
    pub fn dimension(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Self, MetricsError> {
        let (name, value) = (name.into(), value.into());
        if name.trim().is_empty() || value.trim().is_empty() {
            return Err(MetricsError(format!(
                "the dimension {name:?}={value:?} needs a name and a value"
            )));
        }
        if RESERVED.contains(&name.as_str()) || self.dimensions.iter().any(|(n, _)| *n == name) {
            return Err(MetricsError(format!(
                "the dimension {name:?} is given twice or is one the metrics set themselves ({})",
                RESERVED.join(", ")
            )));
        }
        if self.dimensions.len() + 1 >= MAX_BASE_DIMENSIONS {
            return Err(MetricsError(format!(
                "at most {} dimensions of your own",
                MAX_BASE_DIMENSIONS - 1
            )));
        }
        self.dimensions.push((name, value));
        Ok(self)
    }
}

/// Where the lines go: the process's standard output (the function's log) by default.
pub trait MetricsOut: Send + Sync + fmt::Debug {
    /// Writes one EMF line.
    fn line(&self, line: &str);
}

/// Standard output, a line at a time (CloudWatch Logs on Lambda).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stdout;

impl MetricsOut for Stdout {
    fn line(&self, line: &str) {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        // A log that cannot be written loses the line; the turn is not the place to fail.
        let _ = writeln!(out, "{line}");
    }
}

/// Writes each turn's metrics, as [`MetricsConfig`] says, to a [`MetricsOut`].
#[derive(Debug, Clone)]
pub struct Metrics {
    config: Arc<MetricsConfig>,
    out: Arc<dyn MetricsOut>,
}

impl Metrics {
    /// Metrics written to `out`.
    pub fn new(config: MetricsConfig, out: Arc<dyn MetricsOut>) -> Self {
        Self {
            config: Arc::new(config),
            out,
        }
    }

    /// Metrics written to standard output.
    pub fn stdout(config: MetricsConfig) -> Self {
        Self::new(config, Arc::new(Stdout))
    }

    /// Starts measuring turn `turn_id` (when the message is one) of message `message_id` (when
    /// a queue delivered it), sent at `sent` (when the queue says).
    pub fn start(
        &self,
        sent: Option<SystemTime>,
        turn_id: Option<&str>,
        message_id: Option<&str>,
    ) -> TurnMeter {
        TurnMeter::start(sent, turn_id, message_id)
    }

    /// Writes the lines of a turn measured by `meter`, which ended as `outcome` (`code`: why,
    /// when something says: the failure's code, `not_started`, `malformed_body`).
    pub fn finish(&self, meter: TurnMeter, outcome: TurnOutcome, code: Option<&str>) {
        for line in meter.lines(&self.config, outcome, code) {
            self.out.line(&line.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_that_cannot_be_used_says_why() {
        assert!(MetricsConfig::new("", "s").is_err());
        assert!(MetricsConfig::new("AWS/Lambda", "s").is_err());
        assert!(MetricsConfig::new("Agents", " ").is_err());
        let config = MetricsConfig::new("Agents", "desk").unwrap();
        assert!(config.clone().dimension("outcome", "x").is_err());
        assert!(config.clone().dimension("model", "").is_err());
        let twice = config.dimension("model", "m").unwrap().dimension("model", "n");
        assert!(
            twice
                .unwrap_err()
                .to_string()
                .contains("\"model\" is given twice")
        );
    }
}

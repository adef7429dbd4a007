//! [`TurnMeter`]: one turn's figures, read from its events as they pass; and [`TurnOutcome`],
//! how it ended, for the `outcome` dimension.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::MetricsConfig;
use super::emf::{EmfLine, Unit};
use agent_worker_contract::{AgentEvent, codes};
use agent_worker_core::engine::tools::is_timeout_result;
use agent_worker_core::engine::{TurnStopReason, is_throttled_retry};

/// How a turn ended, as the metrics' `outcome` dimension says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnOutcome {
    /// It completed on its own.
    Completed,
    /// It was stopped: by the person, a newer message, or its deadline. What it did is stored.
    Stopped,
    /// It failed and the client was told; the queue lets the message go.
    Failed,
    /// It did not run: a duplicate delivery, a turn running elsewhere, another person's
    /// conversation, one replaced before it started.
    Refused,
    /// Its message goes back to the queue (and, in the end, to the dead-letter queue).
    Redriven,
    /// It goes on in the host's next run (it was longer than the invocation): its message's
    /// continuation was sent to the queue.
    Continued,
}

impl TurnOutcome {
    /// Its dimension value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
            Self::Refused => "refused",
            Self::Redriven => "redriven",
            Self::Continued => "continued",
        }
    }

    /// The outcome of a turn that ended with `terminal` (`None`: without one) and whose message
    /// the host `redriven` or not: the one classification of how a turn ended, for the metrics,
    /// the container's log line and its end hook alike. A turn that ended without a terminal and
    /// was not given back failed.
    pub fn of(terminal: Option<&AgentEvent>, redriven: bool) -> Self {
        match terminal {
            Some(AgentEvent::Failed { code: Some(code), .. }) if codes::never_ran(code) => Self::Refused,
            Some(AgentEvent::Failed { code: Some(code), .. }) if code == codes::TURN_CONTINUES => {
                Self::Continued
            }
            _ if redriven => Self::Redriven,
            Some(AgentEvent::Completed { data }) => match TurnStopReason::of(data.as_ref()) {
                Some(reason) if reason.is_stop() => Self::Stopped,
                _ => Self::Completed,
            },
            // Failed, or ended without a terminal and not given back.
            _ => Self::Failed,
        }
    }
}

/// A call that waits for the person's approval, as the `result` dimension says it.
pub(crate) const APPROVAL: &str = "approval";

/// What an ended tool call came to, for the `result` dimension (and a span's
/// `agent_worker.tool.result`): `ok`, `error`, or `timeout`.
pub(crate) fn tool_result(is_error: bool, content: &Value) -> &'static str {
    match (is_error, is_timeout_result(content)) {
        (false, _) => "ok",
        (true, true) => "timeout",
        (true, false) => "error",
    }
}

/// One turn's figures, gathered from its events ([`observe`](Self::observe)).
#[derive(Debug)]
pub struct TurnMeter {
    turn_id: Option<String>,
    message_id: Option<String>,
    started: Instant,
    /// Whether any event came: a turn that said nothing did not run, and has no figures.
    ran: bool,
    queue_delay: Option<Duration>,
    first_token: Option<Duration>,
    model_calls: u64,
    retries: u64,
    throttles: u64,
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
    approvals_requested: u64,
    approvals_redeemed: u64,
    compactions: u64,
    /// The table's requests the turn sent, when they were counted.
    dynamodb_requests: Option<u64>,
    /// The account the turn is of, when it says.
    account: Option<String>,
    /// Calls started and not ended: their tool and when they started, by call id.
    open_calls: HashMap<String, (String, Instant)>,
    /// Each tool's ended calls by result: their durations in milliseconds.
    calls: BTreeMap<(String, &'static str), Vec<f64>>,
}

impl TurnMeter {
    /// A turn starting now, whose message was sent at `sent` (when the queue says).
    pub(super) fn start(sent: Option<SystemTime>, turn_id: Option<&str>, message_id: Option<&str>) -> Self {
        Self {
            turn_id: turn_id.map(str::to_owned),
            message_id: message_id.map(str::to_owned),
            started: Instant::now(),
            ran: false,
            queue_delay: sent.map(|sent| SystemTime::now().duration_since(sent).unwrap_or_default()),
            first_token: None,
            model_calls: 0,
            retries: 0,
            throttles: 0,
            input_tokens: 0,
            output_tokens: 0,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            approvals_requested: 0,
            approvals_redeemed: 0,
            compactions: 0,
            dynamodb_requests: None,
            account: None,
            open_calls: HashMap::new(),
            calls: BTreeMap::new(),
        }
    }

    /// Notes that the turn carries the person's decision on a call that waited for approval.
    pub fn approval_redeemed(&mut self) {
        self.approvals_redeemed += 1;
    }

    /// Notes the account the turn is of: its cost is written by account too.
    pub fn account(&mut self, account: &str) {
        self.account = (!account.is_empty()).then(|| account.to_owned());
    }

    /// Notes the DynamoDB requests the turn sent; none means its client was not counted (or
    /// it has no table), and the line leaves the figure out.
    pub fn dynamodb_requests(&mut self, requests: u64) {
        self.dynamodb_requests = (requests > 0).then_some(requests);
    }

    /// Takes in one of the turn's events.
    pub fn observe(&mut self, event: &AgentEvent) {
        let now = Instant::now();
        self.ran = true;
        match event {
            AgentEvent::Text { .. } | AgentEvent::Thinking { .. } | AgentEvent::ToolStarted { .. } => {
                self.first_token.get_or_insert(now - self.started);
            }
            _ => {}
        }
        match event {
            AgentEvent::ToolStarted { id, name, .. } => {
                self.open_calls.insert(id.clone(), (name.clone(), now));
            }
            AgentEvent::ToolEnded {
                id,
                is_error,
                content,
                ..
            } => {
                let result = tool_result(*is_error, content);
                if let Some((tool, started)) = self.open_calls.remove(id) {
                    self.ended(tool, result, now - started);
                }
            }
            AgentEvent::Retrying { reason, .. } => {
                self.retries += 1;
                self.throttles += u64::from(is_throttled_retry(reason));
            }
            AgentEvent::Usage {
                input_tokens,
                output_tokens,
                cache_read_tokens,
                cache_write_tokens,
                ..
            } => {
                self.model_calls += 1;
                self.input_tokens += input_tokens;
                self.output_tokens += output_tokens;
                self.cache_read_tokens += cache_read_tokens;
                self.cache_write_tokens += cache_write_tokens;
            }
            AgentEvent::Other(value) => match value.get("type").and_then(Value::as_str) {
                Some("approval_required") => {
                    self.approvals_requested += 1;
                    let call = value.get("callId").and_then(Value::as_str).unwrap_or_default();
                    let tool = value.get("tool").and_then(Value::as_str).unwrap_or_default();
                    let (tool, started) = self
                        .open_calls
                        .remove(call)
                        .unwrap_or_else(|| (tool.to_owned(), now));
                    self.ended(tool, APPROVAL, now - started);
                }
                Some("compacted") => self.compactions += 1,
                _ => {}
            },
            _ => {}
        }
    }

    fn ended(&mut self, tool: String, result: &'static str, took: Duration) {
        self.calls
            .entry((tool, result))
            .or_default()
            .push(took.as_secs_f64() * 1000.0);
    }

    /// The lines of the turn, which ended as `outcome` (`code`: why, when something says):
    /// one for the turn, its figures included when it ran, and one per tool and result.
    pub(super) fn lines(
        self,
        config: &MetricsConfig,
        outcome: TurnOutcome,
        code: Option<&str>,
    ) -> Vec<Value> {
        let now = SystemTime::now();
        let millis = |d: Duration| Value::from(d.as_secs_f64() * 1000.0);
        let count = |n: u64| Value::from(n);
        let ids = |line: &mut EmfLine<'_>| {
            if let Some(id) = &self.turn_id {
                line.property("turnId", id.as_str());
            }
            if let Some(id) = &self.message_id {
                line.property("messageId", id.as_str());
            }
        };
        let mut turn = EmfLine::new(config);
        ids(&mut turn);
        turn.property("outcome", outcome.as_str());
        let by_outcome: &[&[&str]] = match code {
            Some(code) => {
                turn.property("code", code);
                &[&[], &["outcome"], &["outcome", "code"]]
            }
            None => &[&[], &["outcome"]],
        };
        turn.metrics(by_outcome, &[("Turns", Unit::Count, count(1))]);
        if !self.ran || outcome == TurnOutcome::Refused {
            return vec![turn.finish(now)];
        }
        let tool_calls: usize = self.calls.values().map(Vec::len).sum();
        let mut figures = vec![
            ("TurnDuration", Unit::Milliseconds, millis(self.started.elapsed())),
            ("ModelCalls", Unit::Count, count(self.model_calls)),
            ("ModelRetries", Unit::Count, count(self.retries)),
            ("ModelThrottles", Unit::Count, count(self.throttles)),
            ("InputTokens", Unit::Count, count(self.input_tokens)),
            ("OutputTokens", Unit::Count, count(self.output_tokens)),
            ("CacheReadTokens", Unit::Count, count(self.cache_read_tokens)),
            ("CacheWriteTokens", Unit::Count, count(self.cache_write_tokens)),
            ("ToolCalls", Unit::Count, count(tool_calls as u64)),
            ("ApprovalsRequested", Unit::Count, count(self.approvals_requested)),
            ("ApprovalsRedeemed", Unit::Count, count(self.approvals_redeemed)),
            ("Compactions", Unit::Count, count(self.compactions)),
        ];
        if let Some(first) = self.first_token {
            figures.push(("TimeToFirstToken", Unit::Milliseconds, millis(first)));
        }
        if let Some(delay) = self.queue_delay {
            figures.push(("QueueDelay", Unit::Milliseconds, millis(delay)));
        }
        if let Some(requests) = self.dynamodb_requests {
            figures.push(("DynamoDBRequests", Unit::Count, count(requests)));
        }
        turn.metrics(&[&[]], &figures);
        let mut lines = vec![turn.finish(now)];
        if let Some(price) = &config.price {
            let usage = agent_worker_core::engine::model::TokenUsage {
                input_tokens: self.input_tokens,
                output_tokens: self.output_tokens,
                cache_read_tokens: self.cache_read_tokens,
                cache_write_tokens: self.cache_write_tokens,
            };
            let usd = Value::from(price.cost(&usage) as f64 / 1_000_000.0);
            let mut line = EmfLine::new(config);
            ids(&mut line);
            let sets: &[&[&str]] = match &self.account {
                Some(account) => {
                    line.property("account", account.as_str());
                    &[&[], &["account"]]
                }
                None => &[&[]],
            };
            line.metrics(sets, &[("TurnCostUsd", Unit::None, usd)]);
            lines.push(line.finish(now));
        }
        for ((tool, result), took) in &self.calls {
            let mut line = EmfLine::new(config);
            ids(&mut line);
            line.property("tool", tool.as_str());
            line.property("result", *result);
            line.metrics(
                &[&["tool"], &["tool", "result"]],
                &[
                    ("ToolCalls", Unit::Count, count(took.len() as u64)),
                    ("ToolDuration", Unit::Milliseconds, took.clone().into()),
                ],
            );
            lines.push(line.finish(now));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_ending_has_its_outcome() {
        let failed = |code: &str| AgentEvent::failed("why", false, Some(code));
        let of = TurnOutcome::of;
        assert_eq!(of(Some(&AgentEvent::completed()), false), TurnOutcome::Completed);
        let stopped = AgentEvent::completed_with(json!({"stopReason": "user_stop"}));
        assert_eq!(of(Some(&stopped), false), TurnOutcome::Stopped);
        let asked = AgentEvent::completed_with(json!({"stopReason": "approval_required"}));
        assert_eq!(of(Some(&asked), false), TurnOutcome::Completed);
        assert_eq!(
            of(Some(&failed(codes::MODEL_UNAVAILABLE)), false),
            TurnOutcome::Failed
        );
        assert_eq!(
            of(Some(&failed(codes::STORE_FAILED)), true),
            TurnOutcome::Redriven
        );
        assert_eq!(
            of(Some(&failed(codes::DUPLICATE_TURN)), false),
            TurnOutcome::Refused
        );
        assert_eq!(
            of(Some(&failed(codes::TURN_CONTINUES)), false),
            TurnOutcome::Continued
        );
        assert_eq!(
            of(Some(&failed(codes::TURN_IN_PROGRESS)), true),
            TurnOutcome::Refused
        );
        assert_eq!(of(None, true), TurnOutcome::Redriven);
        assert_eq!(
            of(None, false),
            TurnOutcome::Failed,
            "a container's turn with no terminal"
        );
    }
}

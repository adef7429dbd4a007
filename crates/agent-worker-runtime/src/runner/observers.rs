//! What watches a turn besides its sinks: its metrics ([`TurnMeter`]) and its trace
//! ([`TurnTrace`](crate::traces::TurnTrace)), started from what the
//! queue says of the record ([`Delivery`], empty for a turn no queue delivered) and finished when the turn ends.

use std::time::SystemTime;

use super::{TurnHandler, TurnRun};
use crate::metrics::{TurnMeter, TurnOutcome, counting};
use crate::payload::AgentTurnPayload;
use agent_worker_contract::AgentEvent;

/// What the queue says of a record, for the turn's metrics and trace.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Delivery<'a> {
    /// SQS's message id.
    pub(crate) message_id: Option<&'a str>,
    /// When it was sent (`SentTimestamp`).
    pub(crate) sent: Option<SystemTime>,
    /// The trace it continues (`AWSTraceHeader`), read by the tracer.
    pub(crate) trace_header: Option<&'a str>,
}

/// The observers of one turn.
#[derive(Debug, Default)]
pub(super) struct Observers {
    meter: Option<TurnMeter>,
    trace: Option<crate::traces::TurnTrace>,
}

impl Observers {
    /// Shows `event` to each.
    pub(super) fn observe(&mut self, event: &AgentEvent) {
        if let Some(meter) = &mut self.meter {
            meter.observe(event);
        }
        if let Some(trace) = &mut self.trace {
            trace.observe(event);
        }
    }
}

impl TurnHandler {
    /// Writes the metrics of a record that ran no turn: it goes back to the queue, `why`.
    pub(crate) fn unrun(&self, turn_id: Option<&str>, delivery: Delivery<'_>, why: &str) {
        if let Some(metrics) = &self.metrics {
            let meter = metrics.start(delivery.sent, turn_id, delivery.message_id);
            metrics.finish(meter, TurnOutcome::Redriven, Some(why));
        }
    }

    /// [`run_turn_to_end`](Self::run_turn_to_end), measured and traced when the handler has
    /// metrics or a tracer.
    pub(crate) async fn run_watched(
        &self,
        turn: &AgentTurnPayload,
        deadline: Option<SystemTime>,
        delivery: Delivery<'_>,
    ) -> TurnRun {
        let mut observers = Observers {
            meter: self.metrics.as_ref().map(|metrics| {
                let mut meter = metrics.start(delivery.sent, Some(&turn.turn_id), delivery.message_id);
                meter.account(&turn.account_id);
                if turn.approval.is_some() {
                    meter.approval_redeemed();
                }
                meter
            }),
            trace: self
                .tracer
                .as_ref()
                .and_then(|tracer| tracer.start(turn, delivery.trace_header, delivery.message_id)),
        };
        let (run, requests) = counting(self.run_observed(turn, deadline, &mut observers)).await;
        if run.command {
            return run;
        }
        if let (Some(metrics), Some(mut meter)) = (&self.metrics, observers.meter) {
            meter.dynamodb_requests(requests);
            let outcome = TurnOutcome::of(run.terminal.as_ref(), run.disposition.is_redrive());
            let code = match &run.terminal {
                Some(AgentEvent::Failed { code, .. }) => code.as_deref(),
                Some(_) => None,
                None => Some("no_terminal"),
            };
            metrics.finish(meter, outcome, code);
        }
        if let (Some(tracer), Some(trace)) = (&self.tracer, observers.trace)
            && let Err(e) = tracer.export(trace, run.terminal.as_ref()).await
        {
            tracing::warn!(error = %agent_worker_contract::ErrorChain(&e), "the turn's trace was not sent");
        }
        run
    }
}

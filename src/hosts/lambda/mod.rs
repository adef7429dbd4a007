//! The SQS-triggered Lambda host: an [`SqsEvent`] batch in, an [`SqsBatchResponse`] out.
//!
//! Each record's body is decoded on its own, so one bad record never fails the batch. Records
//! of different sessions run concurrently; records of one session run in order. On a FIFO queue,
//! after the first failure in a message group, that record and the rest of its group are
//! reported as failures, so the group keeps its order on redelivery.
//!
//! How a turn's end maps to what the queue sees ([`disposition`]):
//!
//! | the turn | the record |
//! | --- | --- |
//! | `completed` (a stop or deadline included: it is stored) | acknowledged |
//! | `failed`, recoverable (`model_unavailable`, `model_stream_interrupted`), already told to the client | acknowledged |
//! | `failed`, refused by the model (`model_rejected`): retrying cannot help, the client was told | acknowledged |
//! | `duplicate_turn`: a redelivery of a turn that already ran | acknowledged, nothing ran |
//! | `superseded`: a turn the person's next message replaced before it started | acknowledged, nothing ran, no event sent |
//! | not started: too little of the invocation was left (see below) | in `batchItemFailures`, unclaimed and untouched: the next delivery runs it |
//! | a body that is not a turn, `invalid_prompt`, `store_failed`, a bug | in `batchItemFailures`: redrive, then the DLQ |
//! | `turn_in_progress`: another worker holds the turn's lease | in `batchItemFailures`, back after the queue's visibility timeout |
//!
//! **Time.** A record starts only with at least the store margin plus the least turn time left
//! before the invocation's deadline; otherwise it goes back to the queue before anything is
//! claimed, and on a FIFO queue so does the rest of its group. The least turn time is
//! [`DEFAULT_MIN_TURN_TIME`], or half the batch's whole window when that is shorter (a poller
//! on a queue whose visibility timeout is short: every delivery gets that same window). A
//! deadline that cannot be real (already past, or further away than any invocation lasts, as the
//! `cargo lambda` emulator's constant is) counts as no deadline: each turn's own
//! `turn_deadline` holds it, and the function says so once in its log.
//!
//! **Redrive.** With a [`Requeue`], every redriven record (but a `turn_in_progress` one) is hidden
//! for a short, growing time ([`RedriveBackoff`]) instead of the queue's visibility timeout, so a
//! failure holds its conversation up for seconds, not hours.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::StreamExt as _;
use futures_util::future::join_all;
use tracing::Instrument as _;

mod disposition;
mod observers;

pub use disposition::{Disposition, disposition};
use observers::{Delivery, Observers};

use super::metrics::Metrics;
use super::payload::AgentTurnPayload;
pub use super::redrive::{RedriveBackoff, Requeue};
use crate::engine::StoreControl;
use crate::protocol::control::refusals;
use crate::protocol::{Agent, AgentEvent, SessionCommand, codes};
use crate::session::Owner;
use crate::sinks::{Sinks, TurnRef};

pub use super::settings::{DEFAULT_MIN_TURN_TIME, DEFAULT_STORE_MARGIN};

/// The longest a Lambda invocation lasts (15 minutes), with a minute's room for clock skew. A
/// deadline further away than this is not an invocation's.
const LONGEST_INVOCATION: Duration = Duration::from_secs(16 * 60);

/// The runtime's `deadline`, if it can be real at `now`: a deadline already past, or further
/// away than any invocation lasts (the `cargo lambda` emulator sends the constant `600000`, a
/// moment of 1970), is `None`.
pub(crate) fn usable_deadline(deadline: SystemTime, now: SystemTime) -> Option<SystemTime> {
    let left = deadline.duration_since(now).ok()?;
    (!left.is_zero() && left <= LONGEST_INVOCATION).then_some(deadline)
}

/// A batch the handler cannot answer record by record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// A record that failed has no message id, so it cannot be reported alone: the whole batch
    /// is redriven instead (every turn is idempotent, so nothing runs twice).
    #[error("record {index} failed and has no messageId; the whole batch is returned to the queue")]
    MissingMessageId {
        /// The record's position in the batch.
        index: usize,
    },
}

/// Runs the turns of SQS records through an agent, sending their events to sinks.
#[derive(Clone)]
pub struct TurnHandler {
    agent: Arc<dyn Agent>,
    sinks: Sinks,
    store_margin: Duration,
    min_turn_time: Duration,
    requeue: Option<Arc<Requeue>>,
    control: Option<StoreControl>,
    metrics: Option<Metrics>,
    #[cfg(feature = "otlp")]
    tracer: Option<super::traces::Tracer>,
}

impl fmt::Debug for TurnHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnHandler")
            .field("sinks", &self.sinks)
            .field("store_margin", &self.store_margin)
            .field("min_turn_time", &self.min_turn_time)
            .field("requeue", &self.requeue)
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}

enum Decoded {
    Turn(Box<AgentTurnPayload>),
    Malformed(String),
}

impl TurnHandler {
    /// A handler running turns on `agent`.
    pub fn new(agent: impl Agent + 'static, sinks: Sinks) -> Self {
        Self::from_shared(Arc::new(agent), sinks)
    }

    /// The handler for `agent` and `sinks` with `settings`' store margin, least turn time,
    /// metrics (written to standard output) and traces. A binary that reads a queue adds its
    /// [`Requeue`]; with traces, it names the tools a span may show
    /// ([`traced_tools`](Self::traced_tools)).
    pub fn from_settings(agent: Arc<dyn Agent>, sinks: Sinks, settings: &super::WorkerSettings) -> Self {
        let mut handler = Self::from_shared(agent, sinks)
            .store_margin(settings.store_margin)
            .min_turn_time(settings.min_turn_time);
        if let Some(config) = &settings.metrics {
            handler = handler.metrics(Metrics::stdout(config.clone()));
        }
        #[cfg(feature = "otlp")]
        if let Some(config) = &settings.traces {
            handler = handler.tracer(super::traces::Tracer::new(config.clone()));
        }
        handler
    }

    /// A handler running turns on an agent already shared.
    pub fn from_shared(agent: Arc<dyn Agent>, sinks: Sinks) -> Self {
        Self {
            agent,
            sinks,
            store_margin: DEFAULT_STORE_MARGIN,
            min_turn_time: DEFAULT_MIN_TURN_TIME,
            requeue: None,
            control: None,
            metrics: None,
            #[cfg(feature = "otlp")]
            tracer: None,
        }
    }

    /// Sends each turn's trace with `tracer` ([`traces`](super::traces)).
    #[cfg(feature = "otlp")]
    #[must_use]
    pub fn tracer(mut self, tracer: super::traces::Tracer) -> Self {
        self.tracer = Some(tracer);
        self
    }

    /// The tools whose arguments and results a trace may show, when its content capture is on:
    /// those of `tools` declared with `args_sensitive: false`.
    #[cfg(feature = "otlp")]
    #[must_use]
    pub fn traced_tools(mut self, tools: &[Arc<dyn crate::engine::tools::Tool>]) -> Self {
        let shown = tools
            .iter()
            .map(|tool| tool.spec())
            .filter(|spec| !spec.args_sensitive)
            .map(|spec| spec.name.clone());
        self.tracer = self.tracer.map(|tracer| tracer.show_tools(shown));
        self
    }

    /// Writes each turn's metrics ([`Metrics`]): every record of a batch, every turn run.
    #[must_use]
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Delivers the commands payloads carry (`command`) to their conversations' running turns
    /// through `control`. Without it, a `steer` or `follow_up` runs as a turn of its own, and an
    /// `abort` goes back to the queue (and on to its dead-letter queue).
    #[must_use]
    pub fn control(mut self, control: StoreControl) -> Self {
        self.control = Some(control);
        self
    }

    /// Changes the time kept back from an invocation's deadline.
    #[must_use]
    pub fn store_margin(mut self, margin: Duration) -> Self {
        self.store_margin = margin;
        self
    }

    /// Changes the least working time a record must have, beyond the store margin, to start.
    #[must_use]
    pub fn min_turn_time(mut self, least: Duration) -> Self {
        self.min_turn_time = least;
        self
    }

    /// Returns redriven records to their queue after a short backoff (see [`Requeue`]).
    #[must_use]
    pub fn requeue(mut self, requeue: Requeue) -> Self {
        self.requeue = Some(Arc::new(requeue));
        self
    }

    /// Handles a batch: every record is decoded and run on its own, and the failures are
    /// reported by message id. `deadline` is the invocation's.
    pub async fn handle_batch(
        &self,
        event: SqsEvent,
        deadline: Option<SystemTime>,
    ) -> Result<SqsBatchResponse, BatchError> {
        let records = event.records;
        let fifo = records.iter().any(|r| {
            r.attributes.contains_key("MessageGroupId")
                || r.event_source_arn
                    .as_deref()
                    .is_some_and(|arn| arn.ends_with(".fifo"))
        });
        let decoded: Vec<Decoded> = records.iter().map(decode).collect();
        let start = self.start_rule(deadline, SystemTime::now());

        // Group by message group (FIFO) or session, keeping arrival order within each group.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut by_key: HashMap<String, usize> = HashMap::new();
        for (index, (record, turn)) in records.iter().zip(&decoded).enumerate() {
            let key = match (record.attributes.get("MessageGroupId"), turn) {
                (Some(group), _) => format!("group#{group}"),
                (None, Decoded::Turn(turn)) => format!("session#{}", turn.conversation_id),
                (None, Decoded::Malformed(_)) => format!("record#{index}"),
            };
            let group = *by_key.entry(key).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[group].push(index);
        }

        let runs = groups.iter().map(|members| {
            let records = &records;
            let decoded = &decoded;
            async move {
                let mut outcomes = Vec::with_capacity(members.len());
                let mut group_failed = false;
                for &index in members {
                    let outcome = if fifo && group_failed {
                        Disposition::Redrive("an earlier message of its FIFO group failed".into())
                    } else {
                        self.run_record(&records[index], &decoded[index], &start).await
                    };
                    group_failed |= outcome.is_redrive();
                    outcomes.push((index, outcome));
                }
                outcomes
            }
        });
        let outcomes: Vec<(usize, Disposition)> = join_all(runs).await.into_iter().flatten().collect();
        if let Some(requeue) = &self.requeue {
            let soon: Vec<&SqsMessage> = outcomes
                .iter()
                .filter(|(_, outcome)| matches!(outcome, Disposition::Redrive(_)))
                .map(|(index, _)| &records[*index])
                .collect();
            if !soon.is_empty() {
                requeue.schedule(&soon).await;
            }
        }
        let mut response = SqsBatchResponse::default();
        for (index, outcome) in outcomes {
            if outcome.is_redrive() {
                let id = records[index]
                    .message_id
                    .clone()
                    .filter(|id| !id.is_empty())
                    .ok_or(BatchError::MissingMessageId { index })?;
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = id;
                response.batch_item_failures.push(failure);
            }
        }
        Ok(response)
    }

    async fn run_record(&self, record: &SqsMessage, decoded: &Decoded, start: &StartRule) -> Disposition {
        let message_id = record.message_id.as_deref().unwrap_or("<none>");
        let delivery = Delivery::of(record);
        match decoded {
            Decoded::Malformed(why) => {
                tracing::error!(message_id, error = %why, "the record's body is not a turn");
                self.unrun(None, delivery, "malformed_body");
                Disposition::Redrive(why.clone())
            }
            Decoded::Turn(turn) => {
                let span = tracing::info_span!("record", message_id, turn_id = %turn.turn_id, session = %turn.conversation_id);
                let outcome = match start.refuses(SystemTime::now()) {
                    Some(why) => {
                        self.unrun(Some(&turn.turn_id), delivery, "not_started");
                        Disposition::Redrive(why)
                    }
                    None => {
                        self.run_watched(turn, start.deadline, delivery)
                            .instrument(span.clone())
                            .await
                            .disposition
                    }
                };
                let _entered = span.enter();
                match &outcome {
                    Disposition::Acknowledge(why) => tracing::info!(outcome = %why, "record done"),
                    Disposition::Redrive(why) | Disposition::Defer(why) => {
                        tracing::warn!(reason = %why, "record returned to the queue")
                    }
                }
                outcome
            }
        }
    }

    /// When the records of a batch whose deadline is `deadline` may start, the batch starting
    /// `now`: with the store margin plus the least turn time left, the latter no more than half
    /// the batch's window.
    fn start_rule(&self, deadline: Option<SystemTime>, now: SystemTime) -> StartRule {
        let window = deadline.map_or(Duration::ZERO, |d| d.duration_since(now).unwrap_or_default());
        StartRule {
            deadline,
            needed: self.store_margin + self.min_turn_time.min(window / 2),
        }
    }

    /// Runs one turn, streaming its events to the sinks, and says what the queue should do.
    pub async fn run_turn(&self, turn: &AgentTurnPayload, deadline: Option<SystemTime>) -> Disposition {
        self.run_turn_to_end(turn, deadline).await.disposition
    }

    /// Runs one turn, streaming its events to the sinks; returns its terminal and what a queue
    /// should do with it.
    pub async fn run_turn_to_end(&self, turn: &AgentTurnPayload, deadline: Option<SystemTime>) -> TurnRun {
        self.run_watched(turn, deadline, Delivery::default()).await
    }

    /// Runs one turn, each event shown to `observers` as well as to the sinks.
    async fn run_observed(
        &self,
        turn: &AgentTurnPayload,
        deadline: Option<SystemTime>,
        observers: &mut Observers,
    ) -> TurnRun {
        if let Some(command) = turn.session_command()
            && let Some(handled) = self.deliver(turn, command).await
        {
            return handled;
        }
        let mut scope = turn.scope();
        if let Some(deadline) = deadline {
            scope = scope.with_deadline(deadline.checked_sub(self.store_margin).unwrap_or(deadline));
        }
        let mut events = self.agent.invoke(scope, turn.prompt());
        let Some(first) = events.next().await else {
            return TurnRun::ended(None);
        };
        observers.observe(&first);
        // A redelivery that did not run says so at once: it gets no sink, so it cannot disturb
        // what the run it repeats wrote.
        if let AgentEvent::Failed { code: Some(code), .. } = &first
            && codes::never_ran(code)
        {
            return TurnRun::ended(Some(first));
        }
        let mut sinks = self.sinks.open(&TurnRef {
            socket_room: turn.socket_room.clone(),
            ..TurnRef::new(&turn.conversation_id, &turn.turn_id)
        });
        let mut terminal = None;
        let mut next = Some(first);
        while let Some(event) = next {
            sinks.event(&event).await;
            if event.is_terminal() {
                terminal = Some(event);
                break;
            }
            // A sink that gathers events for fewer writes is flushed when its time comes, even
            // while the turn says nothing (a long tool call).
            next = loop {
                let Some(due) = sinks.flush_due() else {
                    break events.next().await;
                };
                match tokio::time::timeout_at(due.into(), events.next()).await {
                    Ok(next) => break next,
                    Err(_) => sinks.flush().await,
                }
            };
            if let Some(event) = &next {
                observers.observe(event);
            }
        }
        sinks.close().await;
        TurnRun::ended(terminal)
    }
}

/// When a batch's records may start.
#[derive(Debug, Clone, Copy)]
struct StartRule {
    /// The batch's deadline, if it has one.
    deadline: Option<SystemTime>,
    /// The time a record needs left before `deadline` to start.
    needed: Duration,
}

impl StartRule {
    /// Why a record may not start at `now`, if it may not.
    fn refuses(&self, now: SystemTime) -> Option<String> {
        let left = self.deadline?.duration_since(now).unwrap_or_default();
        (left < self.needed).then(|| {
            format!(
                "not started: {} ms of the invocation were left and a turn needs {} ms; nothing was claimed",
                left.as_millis(),
                self.needed.as_millis()
            )
        })
    }
}

/// How one turn ended, for a host.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRun {
    /// Its terminal event; `None` if it ended without one (a bug).
    pub terminal: Option<AgentEvent>,
    /// What a queue should do with its message.
    pub disposition: Disposition,
    /// Whether the message was a command for a running turn, which ran no turn of its own.
    pub command: bool,
}

impl TurnRun {
    fn ended(terminal: Option<AgentEvent>) -> Self {
        Self {
            disposition: disposition(terminal.as_ref()),
            terminal,
            command: false,
        }
    }

    /// A message that ran no turn of its own: a command, delivered or refused.
    fn command(disposition: Disposition) -> Self {
        Self {
            terminal: None,
            disposition,
            command: true,
        }
    }
}

impl TurnHandler {
    /// Delivers a payload's command to its conversation's running turn: what the queue does
    /// with the message, or `None` when it runs as a turn of its own (a steer or follow-up
    /// that found no running turn).
    async fn deliver(&self, turn: &AgentTurnPayload, command: SessionCommand) -> Option<TurnRun> {
        let abort = command == SessionCommand::Abort;
        let Some(control) = &self.control else {
            return abort
                .then(|| TurnRun::command(Disposition::Redrive("this worker takes no commands".into())));
        };
        let name = command.name();
        let asking = Owner::new(turn.user_id.as_str(), turn.account_id.as_str());
        match control.dispatch_as(&turn.conversation_id, &asking, command).await {
            Ok(accepted) => Some(TurnRun::command(Disposition::Acknowledge(format!(
                "{name} delivered to running turn {}",
                accepted.run_id
            )))),
            Err(refused) if refused.code == refusals::NO_ACTIVE_RUN && !abort => None,
            Err(refused) if refused.code == refusals::NO_ACTIVE_RUN => Some(TurnRun::command(
                Disposition::Acknowledge("no running turn to abort; nothing to do".into()),
            )),
            // Not the person's, an empty prompt, or a store that failed: the queue keeps it,
            // and its redrive policy takes what can never be delivered to the dead-letter queue.
            Err(refused) => Some(TurnRun::command(Disposition::Redrive(format!(
                "the {name} command was refused: {refused}"
            )))),
        }
    }
}

fn decode(record: &SqsMessage) -> Decoded {
    match record.body.as_deref() {
        None => Decoded::Malformed("the record has no body".into()),
        Some(body) => match AgentTurnPayload::decode(body) {
            Ok(turn) => Decoded::Turn(Box::new(turn)),
            Err(e) => Decoded::Malformed(format!("the body is not a turn: {e}")),
        },
    }
}

impl From<BatchError> for lambda_runtime::Diagnostic {
    fn from(error: BatchError) -> Self {
        Self {
            error_type: "BatchError".into(),
            error_message: error.to_string(),
        }
    }
}

/// Runs the Lambda function: every invocation's batch goes through `handler`.
/// An invocation's deadline that cannot be real is logged once per instance.
pub async fn run(handler: TurnHandler) -> Result<(), lambda_runtime::Error> {
    let handler = Arc::new(handler);
    let told = Arc::new(AtomicBool::new(false));
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<SqsEvent>| {
            let handler = handler.clone();
            let told = told.clone();
            async move {
                let given = event.context.deadline;
                let deadline = usable_deadline(event.context.deadline(), SystemTime::now());
                if deadline.is_none() && !told.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        deadline_ms = given,
                        "the runtime's deadline cannot be real (past, or further than an invocation lasts; \
                         `cargo lambda watch` sends a constant): each turn keeps to its own turn_deadline"
                    );
                }
                handler.handle_batch(event.payload, deadline).await
            }
        },
    ))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_that_cannot_be_real_is_none() {
        let now = SystemTime::now();
        let emulator = SystemTime::UNIX_EPOCH + Duration::from_millis(600_000);
        assert_eq!(usable_deadline(emulator, now), None);
        assert_eq!(usable_deadline(now, now), None);
        assert_eq!(usable_deadline(now - Duration::from_secs(1), now), None);
        assert_eq!(usable_deadline(now + Duration::from_secs(3600), now), None);
        let real = now + Duration::from_secs(900);
        assert_eq!(usable_deadline(real, now), Some(real));
    }

    #[test]
    fn a_record_starts_only_with_the_margin_and_the_least_turn_time_left() {
        let handler = TurnHandler::new(
            crate::protocol::agent_fn(|_, _| futures_util::stream::empty()),
            Sinks::new(),
        )
        .store_margin(Duration::from_secs(10))
        .min_turn_time(Duration::from_secs(30));
        let now = SystemTime::now();
        let in_secs = |s| Some(now + Duration::from_secs(s));
        assert_eq!(handler.start_rule(None, now).refuses(now), None);
        // An invocation of 15 minutes: each record needs 40 s left.
        let rule = handler.start_rule(in_secs(900), now);
        assert_eq!(rule.needed, Duration::from_secs(40));
        assert_eq!(rule.refuses(now), None);
        let later = now + Duration::from_secs(861);
        let refused = rule.refuses(later).expect("refused");
        assert!(
            refused.contains("39000 ms of the invocation were left and a turn needs 40000 ms"),
            "{refused}"
        );
        // A window of 30 s (a poller on SQS's default visibility timeout): 10 + 15 s.
        let short = handler.start_rule(in_secs(30), now);
        assert_eq!(short.needed, Duration::from_secs(25));
        assert_eq!(short.refuses(now), None);
        // A window that leaves less than the margin twice over runs nothing.
        assert!(handler.start_rule(in_secs(12), now).refuses(now).is_some());
        let past = Some(SystemTime::UNIX_EPOCH);
        assert!(handler.start_rule(past, now).refuses(now).is_some());
    }
}

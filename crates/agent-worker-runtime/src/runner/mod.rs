//! The runner every host uses: [`TurnHandler`] runs one turn on an [`Agent`], streams its
//! events to the sinks, delivers a payload's command to its conversation's running turn, and
//! says how the turn ended ([`TurnRun`]: its terminal, and what a queue should do with its
//! message, [`disposition`]). The container host feeds it HTTP requests
//! ([`run_turn_to_end`](TurnHandler::run_turn_to_end)); the Lambda host and the queue poller
//! feed it SQS batches (`TurnHandler::handle_batch`), whose
//! records start only with the store margin plus the least turn time left before the batch's
//! deadline (its start rule, `start.rs`).
//!
//! No Lambda type is in it, so the container host builds without the `lambda` feature
//! (`make lint` checks `--lib --no-default-features --features container`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt as _;

mod disposition;
mod observers;
mod start;

pub use disposition::{Disposition, disposition};
pub(crate) use observers::Delivery;
use observers::Observers;
pub(crate) use start::StartRule;

use super::metrics::Metrics;
use super::payload::AgentTurnPayload;
use agent_worker_contract::control::refusals;
use agent_worker_contract::{Agent, AgentEvent, SessionCommand, codes};
use agent_worker_core::engine::StoreControl;
use agent_worker_core::session::Owner;
use agent_worker_core::sinks::{Sinks, TurnRef};

pub use super::settings::{DEFAULT_MIN_TURN_TIME, DEFAULT_STORE_MARGIN};

/// Runs turns through an agent, sending their events to sinks.
#[derive(Clone)]
pub struct TurnHandler {
    agent: Arc<dyn Agent>,
    sinks: Sinks,
    store_margin: Duration,
    min_turn_time: Duration,
    pub(crate) requeue: Option<Arc<super::redrive::Requeue>>,
    control: Option<StoreControl>,
    metrics: Option<Metrics>,
    tracer: Option<super::traces::Tracer>,
}

impl fmt::Debug for TurnHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnHandler")
            .field("sinks", &self.sinks)
            .field("store_margin", &self.store_margin)
            .field("min_turn_time", &self.min_turn_time)
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}

impl TurnHandler {
    /// A handler running turns on `agent`.
    pub fn new(agent: impl Agent + 'static, sinks: Sinks) -> Self {
        Self::from_shared(Arc::new(agent), sinks)
    }

    /// The handler for `agent` and `sinks` with `settings`' store margin, least turn time,
    /// metrics (written to standard output) and traces. A binary that reads a queue adds its
    /// `Requeue`; with traces, it names the tools a span may show
    /// ([`traced_tools`](Self::traced_tools)).
    pub fn from_settings(agent: Arc<dyn Agent>, sinks: Sinks, settings: &super::WorkerSettings) -> Self {
        let mut handler = Self::from_shared(agent, sinks)
            .store_margin(settings.store_margin)
            .min_turn_time(settings.min_turn_time);
        if let Some(config) = &settings.metrics {
            handler = handler.metrics(Metrics::stdout(config.clone()));
        }
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
            tracer: None,
        }
    }

    /// Sends each turn's trace with `tracer` ([`traces`](super::traces)).
    #[must_use]
    pub fn tracer(mut self, tracer: super::traces::Tracer) -> Self {
        self.tracer = Some(tracer);
        self
    }

    /// The tools whose arguments and results a trace may show, when its content capture is on:
    /// those of `tools` declared with `args_sensitive: false`.
    #[must_use]
    pub fn traced_tools(mut self, tools: &[Arc<dyn agent_worker_core::engine::tools::Tool>]) -> Self {
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
}

impl TurnHandler {
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
        // A handler that can send a turn's continuation to its queue lets a turn go on past the
        // invocation's deadline.
        scope.options.continuable = self.requeue.is_some();
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
            ..TurnRef::new(turn.conversation_id.clone(), turn.turn_id.clone())
        });
        let mut terminal = None;
        let mut next = Some(first);
        while let Some(event) = next {
            // A turn that goes on in the next run has not ended: its readers are not told.
            if let AgentEvent::Failed { code: Some(code), .. } = &event
                && code == codes::TURN_CONTINUES
            {
                terminal = Some(event);
                break;
            }
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

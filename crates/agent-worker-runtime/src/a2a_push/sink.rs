//! The sink that pushes a task's updates from the worker that runs its turn.

use std::collections::HashMap;
use std::time::Duration;

use agent_worker_aws::dynamo::{DynamoEventLog, DynamoStore, LoggedEvent, StoredPushConfig};
use agent_worker_contract::AgentEvent;
use agent_worker_core::session::{SessionId, TurnId};
use agent_worker_core::sinks::{Sink, SinkError, TurnRef, TurnSink};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument as _;

use super::{DELIVERY_BUDGET, DROP_AFTER, PushConfig, PushDelivery};
use crate::a2a_task::{Ids, TaskState, status, task, task_id};
use crate::heard::Heard;
use crate::turn_chain::chain_place;

/// Pushes each task's updates to the webhooks set for it: `WORKING` when its turn begins, the
/// task when it ends (see the [module](super)).
#[derive(Debug, Clone)]
pub struct A2aPushSink {
    store: DynamoStore,
    delivery: PushDelivery,
    budget: Duration,
    reads_log: bool,
}

impl A2aPushSink {
    /// Pushes for the tasks of `store`'s table, through `delivery`; a turn's end waits for its
    /// pushes at most [`DELIVERY_BUDGET`].
    pub fn new(store: DynamoStore, delivery: PushDelivery) -> Self {
        Self {
            store,
            delivery,
            budget: DELIVERY_BUDGET,
            reads_log: false,
        }
    }

    /// Whether the task pushed at a turn's end is read from the turn's event log (on where the
    /// worker keeps one, in the same table, in a sink before this one): the whole turn, across
    /// every invocation it ran in. Without it, what this run of the turn said.
    #[must_use]
    pub fn reading_the_log(mut self, reads_log: bool) -> Self {
        self.reads_log = reads_log;
        self
    }

    /// The longest a turn's end waits for its pushes.
    #[must_use]
    pub fn budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }
}

impl Sink for A2aPushSink {
    fn open(&self, turn: &TurnRef) -> Box<dyn TurnSink> {
        // A turn that continues a task (`<first>~<n>`) pushes as the task its first turn names.
        let first = chain_place(turn.turn_id.as_str())
            .and_then(|(first, _)| TurnId::new(first).ok())
            .unwrap_or_else(|| turn.turn_id.clone());
        Box::new(TaskPushes {
            target: Target {
                store: self.store.clone(),
                delivery: self.delivery.clone(),
                ids: Ids {
                    task: task_id(&turn.session, &first),
                    context: turn.session.clone(),
                },
                session: turn.session.clone(),
                turn: turn.turn_id.clone(),
                first,
                reads_log: self.reads_log,
            },
            budget: self.budget,
            heard: Heard::default(),
            seq: 0,
            ended: false,
            queue: None,
            pushing: None,
        })
    }
}

/// What a turn has to push.
#[derive(Debug)]
enum Update {
    /// It began: its `WORKING` status update.
    Working(Value),
    /// It ended: what this run heard of it, should the log not say more.
    Ended(Box<Heard>),
}

/// Where one turn's pushes go: its task, and the configs set for it.
#[derive(Debug, Clone)]
struct Target {
    store: DynamoStore,
    delivery: PushDelivery,
    ids: Ids,
    session: SessionId,
    turn: TurnId,
    first: TurnId,
    reads_log: bool,
}

/// One turn's pushes: its updates, handed to a task of their own.
#[derive(Debug)]
struct TaskPushes {
    target: Target,
    budget: Duration,
    heard: Heard,
    seq: u64,
    ended: bool,
    queue: Option<mpsc::UnboundedSender<Update>>,
    pushing: Option<JoinHandle<()>>,
}

impl TaskPushes {
    /// Hands `update` to the pushing task (started with the first).
    fn send(&mut self, update: Update) {
        let queue = self.queue.get_or_insert_with(|| {
            let (queue, updates) = mpsc::unbounded_channel();
            let target = self.target.clone();
            let pushing = async move { target.push_each(updates).await }.instrument(tracing::Span::current());
            self.pushing = Some(tokio::spawn(pushing));
            queue
        });
        let _ = queue.send(update);
    }
}

#[async_trait]
impl TurnSink for TaskPushes {
    async fn event(&mut self, event: &AgentEvent) -> Result<(), SinkError> {
        let began = !self.heard.started;
        self.heard.take(&LoggedEvent {
            seq: self.seq,
            event: event.clone(),
            logged_at_ms: Some(agent_worker_core::clock::now_ms()),
        });
        self.seq += 1;
        if began {
            let ids = &self.target.ids;
            let working = json!({ "statusUpdate": {
                "taskId": ids.task,
                "contextId": ids.context,
                "status": status(TaskState::Working, &self.heard, ids),
            }});
            self.send(Update::Working(working));
        }
        self.ended |= event.is_terminal();
        Ok(())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        if self.ended {
            // Built at the close, once the sinks before this one have written the turn's end.
            let heard = std::mem::take(&mut self.heard);
            self.send(Update::Ended(Box::new(heard)));
        }
        drop(self.queue.take());
        let Some(mut pushing) = self.pushing.take() else {
            return Ok(());
        };
        if !self.ended {
            // The turn goes on in another run, which pushes again: nothing here is waited for.
            pushing.abort();
            return Ok(());
        }
        if tokio::time::timeout(self.budget, &mut pushing).await.is_err() {
            pushing.abort();
            tracing::warn!(task = %self.target.ids.task, budget = ?self.budget, "pushes to the task's webhooks were still going when the turn's wait for them ran out; left undone");
        }
        Ok(())
    }
}

impl Drop for TaskPushes {
    fn drop(&mut self) {
        if let Some(pushing) = self.pushing.take() {
            pushing.abort();
        }
    }
}

impl Target {
    /// Pushes each update to every config the task has when it comes: each config's updates in
    /// order, on its own (one webhook that hangs holds back no other), a newer one taking the
    /// place of one still waiting.
    async fn push_each(self, mut updates: mpsc::UnboundedReceiver<Update>) {
        let mut webhooks: HashMap<String, mpsc::UnboundedSender<(StoredPushConfig, Value)>> = HashMap::new();
        let mut pushing = JoinSet::new();
        while let Some(update) = updates.recv().await {
            let configs = match self.store.push_configs(&self.session, &self.first).await {
                Ok(configs) => configs,
                Err(e) => {
                    tracing::warn!(task = %self.ids.task, error = %agent_worker_contract::ErrorChain(&e), "the task's push configs cannot be read; this update is not pushed");
                    continue;
                }
            };
            if configs.is_empty() {
                continue;
            }
            let body = match update {
                Update::Working(body) => body,
                Update::Ended(heard) => {
                    json!({ "task": task(&self.ended(*heard).await, &self.ids, Vec::new()) })
                }
            };
            for stored in configs {
                let webhook = webhooks.entry(stored.id.clone()).or_insert_with(|| {
                    let (queue, pushes) = mpsc::unbounded_channel();
                    let target = self.clone();
                    pushing.spawn(
                        async move { target.push_in_order(pushes).await }
                            .instrument(tracing::Span::current()),
                    );
                    queue
                });
                let _ = webhook.send((stored, body.clone()));
            }
        }
        drop(webhooks);
        pushing.join_all().await;
    }

    /// What the ended turn said: its whole log where that is read and holds its end, else what
    /// this run heard.
    async fn ended(&self, heard: Heard) -> Heard {
        if !self.reads_log {
            return heard;
        }
        let log = DynamoEventLog::new(self.store.clone());
        match log.read(self.session.as_str(), self.turn.as_str(), None).await {
            Ok(events) if events.last().is_some_and(|e| e.event.is_terminal()) => Heard::of(&events),
            Ok(_) => heard,
            Err(e) => {
                tracing::warn!(task = %self.ids.task, error = %agent_worker_contract::ErrorChain(&e), "the turn's log cannot be read; the task pushed is what this run said");
                heard
            }
        }
    }

    /// One webhook's pushes, in order; one still waiting when a newer comes is not sent, and
    /// none once the webhook is dropped.
    async fn push_in_order(&self, mut pushes: mpsc::UnboundedReceiver<(StoredPushConfig, Value)>) {
        // Whether a push of this run failed: the count read with a later update may predate it.
        let mut failed_here = false;
        while let Some(mut next) = pushes.recv().await {
            while let Ok(newer) = pushes.try_recv() {
                next = newer;
            }
            let (stored, body) = next;
            match self.push_one(&stored, &body, failed_here).await {
                Pushed::Delivered => failed_here = false,
                Pushed::Failed => failed_here = true,
                Pushed::Dropped => break,
            }
        }
    }

    /// Pushes `update` to one config; counts its failure (dropping it after [`DROP_AFTER`] in a
    /// row) or, where it had failed (`failed_here`, or the count kept), its success.
    async fn push_one(&self, stored: &StoredPushConfig, update: &Value, failed_here: bool) -> Pushed {
        let config: PushConfig = match serde_json::from_str(&stored.config) {
            Ok(config) => config,
            Err(e) => {
                tracing::warn!(task = %self.ids.task, config = %stored.id, error = %e, "a push config does not decode; skipped");
                return Pushed::Failed;
            }
        };
        let (session, first, id) = (&self.session, &self.first, stored.id.as_str());
        let (pushed, kept) = match self.delivery.push(&config, update).await {
            Ok(()) if stored.failures == 0 && !failed_here => (Pushed::Delivered, Ok(())),
            Ok(()) => (
                Pushed::Delivered,
                self.store.push_delivered(session, first, id).await,
            ),
            Err(e) => {
                tracing::warn!(task = %self.ids.task, config = %id, error = %e, "a push did not reach its webhook");
                match self.store.push_failed(session, first, id, DROP_AFTER).await {
                    Ok(true) => {
                        tracing::warn!(task = %self.ids.task, config = %id, failures = DROP_AFTER, "a webhook that kept failing is dropped");
                        (Pushed::Dropped, Ok(()))
                    }
                    Ok(false) => (Pushed::Failed, Ok(())),
                    Err(e) => (Pushed::Failed, Err(e)),
                }
            }
        };
        if let Err(e) = kept {
            tracing::warn!(task = %self.ids.task, config = %id, error = %agent_worker_contract::ErrorChain(&e), "a push's outcome cannot be written down");
        }
        pushed
    }
}

/// How one push to a webhook went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pushed {
    /// It answered.
    Delivered,
    /// It did not.
    Failed,
    /// It kept failing, and was dropped: nothing more is sent to it.
    Dropped,
}

//! [`ContainerHostBuilder`]: a container host put together once, what it serves besides turns
//! each given before it is built, and nothing changed after.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::{ContainerConfig, ContainerHost, Inner, TurnEnd, Turns, agentcore, console, events};
use agent_worker_aws::dynamo::{DynamoEventLog, DynamoJobEvents};
use agent_worker_core::session::SessionStore;
use agent_worker_runtime::TurnQueue;
use agent_worker_runtime::jobs::JobReports;
use agent_worker_runtime::worker::{Served, Worker};

/// A container host being put together: from [`ContainerHost::builder`] (turns run here) or
/// [`ContainerHost::queued`] (turns sent to the queue), then what it serves besides turns, then
/// [`build`](Self::build). A route whose part is not given answers 404.
#[must_use]
pub struct ContainerHostBuilder {
    turns: Turns,
    store: Arc<dyn SessionStore>,
    log: Option<DynamoEventLog>,
    config: ContainerConfig,
    on_turn_end: Option<super::TurnEndHook>,
    conversations: Option<agent_worker_core::conversations::Conversations>,
    jobs: Option<agent_worker_runtime::jobs::JobReports>,
    answers: Option<Arc<dyn agent_worker_core::session::ActionAnswerStore>>,
    console: Option<console::Console>,
    uploads: Option<Arc<dyn agent_worker_core::engine::attachments::FileUploads>>,
}

impl std::fmt::Debug for ContainerHostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerHostBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ContainerHostBuilder {
    pub(super) fn serving(
        turns: Turns,
        store: Arc<dyn SessionStore>,
        log: Option<DynamoEventLog>,
        config: ContainerConfig,
    ) -> Self {
        Self {
            turns,
            store,
            log,
            config,
            on_turn_end: None,
            conversations: None,
            jobs: None,
            answers: None,
            console: None,
            uploads: None,
        }
    }

    /// Calls `hook` with each turn's end.
    pub fn on_turn_end(mut self, hook: impl Fn(TurnEnd) + Send + Sync + 'static) -> Self {
        self.on_turn_end = Some(Arc::new(hook));
        self
    }

    /// Serves `conversations` on `/conversations`.
    pub fn conversations(mut self, conversations: agent_worker_core::conversations::Conversations) -> Self {
        self.conversations = Some(conversations);
        self
    }

    /// Takes the product's reports of the events that settle jobs on `POST /jobs/events`.
    pub fn job_reports(mut self, jobs: agent_worker_runtime::jobs::JobReports) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// Takes the person's tab's answers to UI actions on `POST /turns/{id}/actions/{callId}`
    /// into `answers`.
    pub fn ui_answers(mut self, answers: Arc<dyn agent_worker_core::session::ActionAnswerStore>) -> Self {
        self.answers = Some(answers);
        self
    }

    /// Serves the console page at `/` for `console`'s person, opened with its token (see
    /// [`console`]).
    pub fn console(mut self, console: console::Console) -> Self {
        self.console = Some(console);
        self
    }

    /// Takes the files people attach on `POST /conversations/{id}/files` into `files`.
    pub fn uploads(mut self, files: Arc<dyn agent_worker_core::engine::attachments::FileUploads>) -> Self {
        self.uploads = Some(files);
        self
    }

    /// The host.
    pub fn build(self) -> ContainerHost {
        let followers = events::Followers::new(self.config.event_streams);
        ContainerHost {
            inner: Arc::new(Inner {
                turns: self.turns,
                store: self.store,
                log: self.log,
                followers,
                activity: agentcore::Activity::new(),
                mcp_calls: super::mcp::Calls::default(),
                config: self.config,
                running: Mutex::new(HashMap::new()),
                accepting: AtomicBool::new(true),
                idle: Notify::new(),
                on_turn_end: self.on_turn_end,
                conversations: self.conversations,
                jobs: self.jobs,
                answers: self.answers,
                console: self.console,
                uploads: self.uploads,
            }),
        }
    }
}

impl ContainerHost {
    /// The product's HTTP API on `worker`'s store, its builder: turns run here through its
    /// runner, or, given `queue`, sent there for the worker that reads it; stops, live events,
    /// conversations, UI answers, job reports and uploads on the same table and file area.
    /// `agent-worker serve` serves this host's router.
    pub fn for_worker(
        worker: Worker,
        config: ContainerConfig,
        queue: Option<TurnQueue>,
    ) -> ContainerHostBuilder {
        let turns = match queue {
            Some(queue) => Turns::Queue(queue),
            None => Turns::Run {
                handler: worker.handler,
                model: worker.settings.model_id,
            },
        };
        let served = Served {
            store: worker.store,
            conversations: worker.conversations,
            events: worker.events,
            uploads: worker.uploads,
            a2a_push: worker.settings.a2a_push,
        };
        Self::serving_worker(turns, served, config)
    }

    /// The product's HTTP API on what a worker that runs no turns serves
    /// ([`WorkerBuilder::served`](agent_worker_runtime::worker::WorkerBuilder::served)), with
    /// every turn sent to `queue`: the `api` function's host.
    pub fn queued_serving(served: Served, config: ContainerConfig, queue: TurnQueue) -> ContainerHostBuilder {
        Self::serving_worker(Turns::Queue(queue), served, config)
    }

    /// A host doing `turns` on `served`'s store, whose event log it streams from.
    fn serving_worker(turns: Turns, served: Served, mut config: ContainerConfig) -> ContainerHostBuilder {
        // Push configs are taken where the workers push: the worker's settings (`A2A_PUSH`, given
        // alike to a host that queues its turns and to the workers) say both.
        config.a2a_push = served.a2a_push;
        let store = Arc::new(served.store.clone());
        let log = Some(DynamoEventLog::new(served.store.clone()));
        ContainerHostBuilder::serving(turns, store, log, config).served(served)
    }
}

impl ContainerHostBuilder {
    /// This host serving, on `served`'s store, a person's conversations, the tab's UI answers,
    /// job reports (settled by its events) and, given a place for them, uploads.
    fn served(self, served: Served) -> Self {
        let Served {
            store,
            conversations,
            events,
            uploads,
            a2a_push: _,
        } = served;
        let host = self
            .conversations(conversations)
            .ui_answers(Arc::new(store.clone()))
            .job_reports(JobReports::new(events, DynamoJobEvents::new(store)));
        match uploads {
            Some(files) => host.uploads(files),
            None => host,
        }
    }
}

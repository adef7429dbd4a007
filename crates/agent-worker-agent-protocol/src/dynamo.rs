//! [`DynamoTaskStore`]: tasks, steps and artifact records in the session table, so that several
//! replicas (or Lambda instances) serve the same tasks.
//!
//! Items, beside the sessions' (see [`keys`](agent_worker_aws::dynamo::keys)), written and read
//! as [`Documents`] (the table module builds every item):
//! a task is `aptasks` / `task#<taskId>`; its steps are `aptask#<taskId>` / `step#<stepId>`; its
//! artifact records are `aptask#<taskId>` / `artifact#<ms>#<n>#<artifactId>`, each its wire JSON.
//! Task and step ids are UUIDv7, so sort keys
//! list them oldest first; totals are counted by the same queries, so they stay right as items
//! expire. Reads are strongly consistent. A page deep in a long list reads the items before it.

use agent_worker_core::Failure;
use async_trait::async_trait;
use futures_util::{StreamExt as _, TryStreamExt as _};

use super::store::{Page, TaskStore, TaskStoreError};
use super::types::{Artifact, PageRequest, Pagination, Step, Task};
use agent_worker_aws::dynamo::DynamoStore;
use agent_worker_aws::dynamo::keys::{
    AP_ARTIFACT_PREFIX, AP_STEP_PREFIX, AP_TASK_PREFIX, AP_TASKS_PK, ap_artifact_sk, ap_step_sk, ap_task_pk,
    ap_task_sk,
};
use agent_worker_aws::dynamo::{DocKey, Documents, DocumentsError, MAX_DOCUMENTS_PER_WRITE};
use agent_worker_core::clock::now_ms;

/// How many tasks of a page are read at once.
const TASK_READS_AT_ONCE: usize = 8;

/// The most artifact records one step may add (a write holds the step and its artifacts).
pub const MAX_STEP_ARTIFACTS: usize = MAX_DOCUMENTS_PER_WRITE - 1;

/// Agent Protocol tasks in a [`DynamoStore`]'s table. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DynamoTaskStore {
    documents: Documents,
}

impl DynamoTaskStore {
    /// Tasks in `store`'s table.
    pub fn new(store: DynamoStore) -> Self {
        Self {
            documents: Documents::new(store),
        }
    }

    async fn artifacts(&self, task_id: &str) -> Result<Vec<Artifact>, TaskStoreError> {
        let (artifacts, _) = self
            .documents
            .page(&ap_task_pk(task_id), AP_ARTIFACT_PREFIX, 0, usize::MAX)
            .await
            .map_err(unavailable)?;
        Ok(artifacts)
    }

    /// The task item and its artifact records, read together.
    async fn full_task(&self, mut task: Task) -> Result<Task, TaskStoreError> {
        task.artifacts = self.artifacts(&task.task_id).await?;
        Ok(task)
    }

    /// Writes `docs` under the task `task_id`, which must exist.
    async fn put_under_task(
        &self,
        task_id: &str,
        docs: Vec<(DocKey, serde_json::Value)>,
    ) -> Result<(), TaskStoreError> {
        let task = DocKey::new(AP_TASKS_PK, ap_task_sk(task_id));
        match self.documents.put_under(&task, &docs).await {
            Ok(()) => Ok(()),
            Err(DocumentsError::NoParent(_)) => Err(TaskStoreError::NoTask(task_id.to_owned())),
            Err(e) => Err(unavailable(e)),
        }
    }
}

fn unavailable(e: DocumentsError) -> TaskStoreError {
    TaskStoreError::Unavailable(Failure::caused_by("the table failed", e))
}

fn json(value: &impl serde::Serialize) -> Result<serde_json::Value, TaskStoreError> {
    serde_json::to_value(value)
        .map_err(|e| TaskStoreError::Unavailable(Failure::caused_by("an item does not encode", e)))
}

/// The documents of `artifacts`, added to task `task_id` now, oldest first.
fn artifact_docs(
    task_id: &str,
    artifacts: &[Artifact],
) -> Result<Vec<(DocKey, serde_json::Value)>, TaskStoreError> {
    let at = now_ms();
    artifacts
        .iter()
        .enumerate()
        .map(|(n, artifact)| {
            Ok((
                DocKey::new(ap_task_pk(task_id), ap_artifact_sk(at, n, &artifact.artifact_id)),
                json(artifact)?,
            ))
        })
        .collect()
}

fn pagination(request: PageRequest, total_items: u64) -> Pagination {
    Pagination {
        total_items,
        total_pages: total_items.div_ceil(u64::from(request.page_size.max(1))),
        current_page: request.current_page,
        page_size: request.page_size,
    }
}

fn window(request: PageRequest) -> (usize, usize) {
    let size = request.page_size.max(1) as usize;
    (
        (request.current_page.max(1) as usize - 1).saturating_mul(size),
        size,
    )
}

#[async_trait]
impl TaskStore for DynamoTaskStore {
    async fn create_task(&self, task: Task) -> Result<(), TaskStoreError> {
        let stored = Task {
            artifacts: Vec::new(),
            ..task
        };
        let key = DocKey::new(AP_TASKS_PK, ap_task_sk(&stored.task_id));
        self.documents.create(&key, &stored).await.map_err(unavailable)
    }

    async fn task(&self, task_id: &str) -> Result<Option<Task>, TaskStoreError> {
        let key = DocKey::new(AP_TASKS_PK, ap_task_sk(task_id));
        match self.documents.get::<Task>(&key).await.map_err(unavailable)? {
            Some(task) => Ok(Some(self.full_task(task).await?)),
            None => Ok(None),
        }
    }

    async fn tasks(&self, page: PageRequest) -> Result<Page<Task>, TaskStoreError> {
        let (skip, take) = window(page);
        let (tasks, total) = self
            .documents
            .page::<Task>(AP_TASKS_PK, AP_TASK_PREFIX, skip, take)
            .await
            .map_err(unavailable)?;
        // Each task's artifacts are one read; a few at a time, so a page is not a burst.
        let items = futures_util::stream::iter(tasks)
            .map(|t| self.full_task(t))
            .buffered(TASK_READS_AT_ONCE)
            .try_collect()
            .await?;
        Ok(Page {
            items,
            pagination: pagination(page, total),
        })
    }

    async fn add_step(&self, step: Step) -> Result<(), TaskStoreError> {
        if step.artifacts.len() > MAX_STEP_ARTIFACTS {
            return Err(TaskStoreError::TooManyArtifacts {
                limit: MAX_STEP_ARTIFACTS,
                given: step.artifacts.len(),
            });
        }
        let mut docs = vec![(
            DocKey::new(ap_task_pk(&step.task_id), ap_step_sk(&step.step_id)),
            json(&step)?,
        )];
        docs.extend(artifact_docs(&step.task_id, &step.artifacts)?);
        self.put_under_task(&step.task_id, docs).await
    }

    async fn step(&self, task_id: &str, step_id: &str) -> Result<Option<Step>, TaskStoreError> {
        let key = DocKey::new(ap_task_pk(task_id), ap_step_sk(step_id));
        self.documents.get(&key).await.map_err(unavailable)
    }

    async fn steps(&self, task_id: &str, page: PageRequest) -> Result<Option<Page<Step>>, TaskStoreError> {
        let key = DocKey::new(AP_TASKS_PK, ap_task_sk(task_id));
        if self
            .documents
            .get::<Task>(&key)
            .await
            .map_err(unavailable)?
            .is_none()
        {
            return Ok(None);
        }
        let (skip, take) = window(page);
        let (items, total) = self
            .documents
            .page(&ap_task_pk(task_id), AP_STEP_PREFIX, skip, take)
            .await
            .map_err(unavailable)?;
        Ok(Some(Page {
            items,
            pagination: pagination(page, total),
        }))
    }

    async fn add_artifact(&self, task_id: &str, artifact: Artifact) -> Result<(), TaskStoreError> {
        let docs = artifact_docs(task_id, std::slice::from_ref(&artifact))?;
        self.put_under_task(task_id, docs).await
    }
}

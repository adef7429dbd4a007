//! Where tasks, steps and artifact records are kept: [`TaskStore`], in memory by default
//! ([`MemoryTaskStore`], as the reference SDK keeps them).

use agent_worker_core::Failure;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use super::types::{Artifact, PageRequest, Pagination, Step, Task};

/// A page of a list, and where it sits.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The page's items.
    pub items: Vec<T>,
    /// Where it sits.
    pub pagination: Pagination,
}

impl<T: Clone> Page<T> {
    /// Page `request` of `items`.
    pub fn of(items: &[T], request: PageRequest) -> Self {
        let (items, pagination) = request.slice(items);
        Self { items, pagination }
    }
}

/// A task store that failed.
#[derive(Debug, thiserror::Error)]
pub enum TaskStoreError {
    /// There is no task with that id.
    #[error("no task {0}")]
    NoTask(String),
    /// A step tried to add more artifacts than one step may.
    #[error("a step may add at most {limit} artifacts, not {given}")]
    TooManyArtifacts {
        /// The most a step may add.
        limit: usize,
        /// How many it tried to add.
        given: usize,
    },
    /// The store could not be read or written.
    #[error("the task store failed")]
    Unavailable(#[source] Failure),
}

/// Keeps tasks, their steps and their artifact records.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Stores a new task.
    async fn create_task(&self, task: Task) -> Result<(), TaskStoreError>;
    /// The task, with every artifact it holds.
    async fn task(&self, task_id: &str) -> Result<Option<Task>, TaskStoreError>;
    /// A page of the tasks, oldest first.
    async fn tasks(&self, page: PageRequest) -> Result<Page<Task>, TaskStoreError>;
    /// Stores a step of an existing task and adds its artifacts to the task.
    async fn add_step(&self, step: Step) -> Result<(), TaskStoreError>;
    /// The step, if the task has it.
    async fn step(&self, task_id: &str, step_id: &str) -> Result<Option<Step>, TaskStoreError>;
    /// A page of the task's steps in the order they ran; `None` when there is no such task.
    async fn steps(&self, task_id: &str, page: PageRequest) -> Result<Option<Page<Step>>, TaskStoreError>;
    /// Adds an artifact record to an existing task.
    async fn add_artifact(&self, task_id: &str, artifact: Artifact) -> Result<(), TaskStoreError>;
}

#[derive(Debug, Default)]
struct Tasks {
    order: Vec<String>,
    by_id: HashMap<String, TaskEntry>,
}

#[derive(Debug)]
struct TaskEntry {
    task: Task,
    steps: Vec<Step>,
}

/// Tasks in this process's memory; they end with it. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct MemoryTaskStore {
    tasks: Arc<Mutex<Tasks>>,
}

impl MemoryTaskStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut Tasks) -> R) -> R {
        // A panic while holding the lock cannot leave a half-written task: every change below is
        // one push or insert.
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut tasks)
    }
}

#[async_trait]
impl TaskStore for MemoryTaskStore {
    async fn create_task(&self, task: Task) -> Result<(), TaskStoreError> {
        self.with(|tasks| {
            tasks.order.push(task.task_id.clone());
            tasks.by_id.insert(
                task.task_id.clone(),
                TaskEntry {
                    task,
                    steps: Vec::new(),
                },
            );
        });
        Ok(())
    }

    async fn task(&self, task_id: &str) -> Result<Option<Task>, TaskStoreError> {
        Ok(self.with(|tasks| tasks.by_id.get(task_id).map(|e| e.task.clone())))
    }

    async fn tasks(&self, page: PageRequest) -> Result<Page<Task>, TaskStoreError> {
        Ok(self.with(|tasks| {
            let (ids, pagination) = page.slice(&tasks.order);
            let items = ids
                .iter()
                .filter_map(|id| tasks.by_id.get(id).map(|e| e.task.clone()))
                .collect();
            Page { items, pagination }
        }))
    }

    async fn add_step(&self, step: Step) -> Result<(), TaskStoreError> {
        self.with(|tasks| {
            let entry = tasks
                .by_id
                .get_mut(&step.task_id)
                .ok_or_else(|| TaskStoreError::NoTask(step.task_id.clone()))?;
            entry.task.artifacts.extend(step.artifacts.iter().cloned());
            entry.steps.push(step);
            Ok(())
        })
    }

    async fn step(&self, task_id: &str, step_id: &str) -> Result<Option<Step>, TaskStoreError> {
        Ok(self.with(|tasks| {
            tasks
                .by_id
                .get(task_id)
                .and_then(|e| e.steps.iter().find(|s| s.step_id == step_id).cloned())
        }))
    }

    async fn steps(&self, task_id: &str, page: PageRequest) -> Result<Option<Page<Step>>, TaskStoreError> {
        Ok(self.with(|tasks| tasks.by_id.get(task_id).map(|e| Page::of(&e.steps, page))))
    }

    async fn add_artifact(&self, task_id: &str, artifact: Artifact) -> Result<(), TaskStoreError> {
        self.with(|tasks| {
            let entry = tasks
                .by_id
                .get_mut(task_id)
                .ok_or_else(|| TaskStoreError::NoTask(task_id.to_owned()))?;
            entry.task.artifacts.push(artifact);
            Ok(())
        })
    }
}

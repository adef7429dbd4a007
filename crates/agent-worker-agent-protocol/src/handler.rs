//! The handler contract: a task handler runs once for each new task and returns that task's step
//! handler, which runs once for each step.
//!
//! - A [`TaskFailed`] answers 500, and no task is stored.
//! - A [`StepFailed`] answers 500 (422 when it says the input was at fault), and no step is
//!   stored; the task stays readable.
//! - Every stored step has status `completed`; a step's artifacts are added to its task.
//! - An artifact in [`StepResult::artifacts`] is metadata: the agent writes the file itself, at
//!   `<workspace>/<task_id>/<relative_path>/<file_name>` ([`Workspace::artifact_path`]).
//!
//! Steps of one task run one at a time, in the order they arrive. A server that finds a stored
//! task without its step handler (it restarted, or another replica created the task) calls
//! [`TaskHandler::start`] again for it; a handler whose state must survive that keeps it in a
//! store, as [`AgentTaskHandler`](super::AgentTaskHandler) keeps a task's conversation.
//!
//! [`Workspace::artifact_path`]: super::Workspace::artifact_path

use std::fmt;
use std::future::Future;

use async_trait::async_trait;

use super::types::{Artifact, JsonObject, StepRequestBody, Task};

/// What a step produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepResult {
    /// The step's name.
    pub name: Option<String>,
    /// What it produced.
    pub output: Option<String>,
    /// Anything else it produced.
    pub additional_output: Option<JsonObject>,
    /// The artifacts it made (their files already written).
    pub artifacts: Vec<Artifact>,
    /// Whether it is the task's last step.
    pub is_last: bool,
}

impl StepResult {
    /// A result whose output is `output`.
    pub fn output(output: impl Into<String>) -> Self {
        Self {
            output: Some(output.into()),
            ..Self::default()
        }
    }

    /// The same result, named.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The same result, marked as the task's last step (or not).
    pub fn last(mut self, is_last: bool) -> Self {
        self.is_last = is_last;
        self
    }
}

/// A task handler could not take a task: 500, and no task is stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TaskFailed(pub String);

/// Whose fault a failed step was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepFault {
    /// The agent's or its model's: 500.
    Agent,
    /// The request's, such as a step without the input it needs: 422.
    Input,
}

/// A step handler could not run a step: no step is stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StepFailed {
    /// What went wrong.
    pub message: String,
    /// Whose fault it was.
    pub fault: StepFault,
}

impl StepFailed {
    /// The agent failed: 500.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            fault: StepFault::Agent,
        }
    }

    /// The step's input cannot be run: 422.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            fault: StepFault::Input,
        }
    }
}

/// Runs the steps of one task.
#[async_trait]
pub trait StepHandler: Send + 'static {
    /// Runs one step. `input` is `None` for a step sent without a body.
    async fn step(&mut self, input: Option<StepRequestBody>) -> Result<StepResult, StepFailed>;
}

/// Takes new tasks.
///
/// ```
/// use agent_worker_agent_protocol::{StepResult, step_fn, task_fn};
///
/// // Three steps a task; each says which it is.
/// let handler = task_fn(|task| async move {
///     let mut n = 0;
///     let task_id = task.task_id.clone();
///     Ok(step_fn(move |_input| {
///         n += 1;
///         let result = StepResult::output(format!("task {task_id}, step {n}")).last(n == 3);
///         async move { Ok(result) }
///     }))
/// });
/// # let _ = handler;
/// ```
#[async_trait]
pub trait TaskHandler: Send + Sync + 'static {
    /// Takes `task` and returns the handler of its steps.
    async fn start(&self, task: &Task) -> Result<Box<dyn StepHandler>, TaskFailed>;
}

/// A [`TaskHandler`] made from a function of the task; see [`task_fn`].
#[derive(Clone)]
pub struct TaskFn<F>(F);

/// A [`StepHandler`] made from a function of the input; see [`step_fn`].
#[derive(Clone)]
pub struct StepFn<F>(F);

impl<F> fmt::Debug for TaskFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TaskFn")
    }
}

impl<F> fmt::Debug for StepFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StepFn")
    }
}

/// A task handler from `f(task) -> async Result<step handler, TaskFailed>`.
pub fn task_fn<F, Fut, S>(f: F) -> TaskFn<F>
where
    F: Fn(Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<S, TaskFailed>> + Send,
    S: StepHandler,
{
    TaskFn(f)
}

/// A step handler from `f(input) -> async Result<StepResult, StepFailed>`; `f` may keep state.
pub fn step_fn<F, Fut>(f: F) -> StepFn<F>
where
    F: FnMut(Option<StepRequestBody>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<StepResult, StepFailed>> + Send,
{
    StepFn(f)
}

#[async_trait]
impl<F, Fut, S> TaskHandler for TaskFn<F>
where
    F: Fn(Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<S, TaskFailed>> + Send,
    S: StepHandler,
{
    async fn start(&self, task: &Task) -> Result<Box<dyn StepHandler>, TaskFailed> {
        let handler = (self.0)(task.clone()).await?;
        Ok(Box::new(handler))
    }
}

#[async_trait]
impl<F, Fut> StepHandler for StepFn<F>
where
    F: FnMut(Option<StepRequestBody>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<StepResult, StepFailed>> + Send,
{
    async fn step(&mut self, input: Option<StepRequestBody>) -> Result<StepResult, StepFailed> {
        (self.0)(input).await
    }
}

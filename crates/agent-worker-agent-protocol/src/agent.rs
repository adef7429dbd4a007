//! Any [`Agent`] served over Agent Protocol: a task is a session, a step is one turn.
//!
//! - The session is the task's id; each step is one `invoke` with a new turn id, so the agent's
//!   store keeps the conversation across steps (and across replicas, with a shared store).
//! - The step's prompt is its `input`. A step without one takes the task's `input` if no step
//!   has run yet; otherwise it answers 422.
//! - `output` is the turn's text; `additional_output` is the `data` of its `completed` event.
//! - A typed result: `additional_input.resultSchema` on the step, or on the task for each of its
//!   steps, is the turn's result schema; the result comes back as `additional_output.result`.
//! - `is_last` is true when that data says `"is_last": true`. An agent that knows when a task is
//!   done sets it: a Standard Agents session does when it ends (`sessionStop`, `sessionFail`,
//!   its turn cap). The Bedrock engine never does, so its tasks are conversations that go on as
//!   long as the caller sends steps.
//! - A turn that fails is a failed step (500, nothing stored), its code and details in the
//!   message.

use std::sync::Arc;

use async_trait::async_trait;

use super::handler::{StepFailed, StepHandler, StepResult, TaskFailed, TaskHandler};
use super::types::{StepRequestBody, Task};
use agent_worker_contract::{
    Agent, CollectError, Prompt, RESULT_SCHEMA_KEY, Scope, SessionId, TurnId, codes, collect,
};

/// The key of `completed.data` that marks a task's last step.
pub const IS_LAST_KEY: &str = "is_last";

/// A [`TaskHandler`] that runs each step as one turn of `agent`.
#[derive(Debug)]
pub struct AgentTaskHandler<A> {
    agent: Arc<A>,
}

impl<A> Clone for AgentTaskHandler<A> {
    fn clone(&self) -> Self {
        Self {
            agent: self.agent.clone(),
        }
    }
}

impl<A: Agent + 'static> AgentTaskHandler<A> {
    /// Serves `agent`.
    pub fn new(agent: A) -> Self {
        Self {
            agent: Arc::new(agent),
        }
    }
}

#[async_trait]
impl<A: Agent + 'static> TaskHandler for AgentTaskHandler<A> {
    async fn start(&self, task: &Task) -> Result<Box<dyn StepHandler>, TaskFailed> {
        Ok(Box::new(AgentSteps {
            agent: self.agent.clone(),
            session: SessionId::new(task.task_id.clone())
                .map_err(|e| TaskFailed(format!("the task's id cannot name a session: it {e}")))?,
            task_input: task.input.clone(),
            task_schema: result_schema(task.additional_input.as_ref()),
            steps_run: 0,
        }))
    }
}

struct AgentSteps<A> {
    agent: Arc<A>,
    session: SessionId,
    task_input: Option<String>,
    /// The task's `additional_input.resultSchema`, for each step that names none.
    task_schema: Option<serde_json::Value>,
    steps_run: u64,
}

/// The `resultSchema` of an `additional_input`.
fn result_schema(additional_input: Option<&super::types::JsonObject>) -> Option<serde_json::Value> {
    additional_input?.get(RESULT_SCHEMA_KEY).cloned()
}

#[async_trait]
impl<A: Agent + 'static> StepHandler for AgentSteps<A> {
    async fn step(&mut self, input: Option<StepRequestBody>) -> Result<StepResult, StepFailed> {
        let schema = result_schema(input.as_ref().and_then(|b| b.additional_input.as_ref()))
            .or_else(|| self.task_schema.clone());
        let text = match input.and_then(|b| b.input) {
            Some(text) => text,
            None if self.steps_run == 0 => self.task_input.clone().ok_or_else(|| {
                StepFailed::invalid_input("the step has no input, and neither has its task")
            })?,
            None => {
                return Err(StepFailed::invalid_input(
                    "the step has no input: after the first step, each step needs one",
                ));
            }
        };
        let mut scope = Scope::new(self.session.clone()).with_turn_id(TurnId::random());
        if let Some(schema) = schema {
            scope = scope.with(RESULT_SCHEMA_KEY, schema);
        }
        let collected = collect(self.agent.invoke(scope, Prompt::text(text)))
            .await
            .map_err(|e| match e {
                // The input cannot run (too large to keep, say): the caller's to fix, a 422.
                CollectError::Failed(failure) if failure.code.as_deref() == Some(codes::INVALID_PROMPT) => {
                    StepFailed::invalid_input(format!("{} ({})", failure.details, codes::INVALID_PROMPT))
                }
                CollectError::Failed(failure) => StepFailed::new(format!(
                    "{} ({})",
                    failure.details,
                    failure.code.as_deref().unwrap_or("no code")
                )),
                CollectError::NoTerminal => StepFailed::new("the agent's turn ended without a result"),
            })?;
        self.steps_run += 1;
        let data = collected.data.and_then(|d| match d {
            serde_json::Value::Object(map) => Some(map),
            _ => None,
        });
        let is_last = data
            .as_ref()
            .and_then(|d| d.get(IS_LAST_KEY))
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        Ok(StepResult {
            output: Some(collected.text),
            additional_output: data,
            is_last,
            ..StepResult::default()
        })
    }
}

//! Agent Protocol v1: a REST server for any task handler (and so for any [`Agent`](agent_worker_contract::Agent)),
//! a typed client, and the OpenAPI document, all from one list of operations.
//!
//! | operation | route |
//! | --- | --- |
//! | `createAgentTask` | `POST /ap/v1/agent/tasks` |
//! | `listAgentTasks` | `GET /ap/v1/agent/tasks?current_page=1&page_size=10` |
//! | `getAgentTask` | `GET /ap/v1/agent/tasks/{task_id}` |
//! | `listAgentTaskSteps` | `GET /ap/v1/agent/tasks/{task_id}/steps` |
//! | `executeAgentTaskStep` | `POST /ap/v1/agent/tasks/{task_id}/steps` |
//! | `getAgentTaskStep` | `GET /ap/v1/agent/tasks/{task_id}/steps/{step_id}` |
//! | `listAgentTaskArtifacts` | `GET /ap/v1/agent/tasks/{task_id}/artifacts` |
//! | `uploadAgentTaskArtifacts` | `POST /ap/v1/agent/tasks/{task_id}/artifacts` (multipart: `file`, `relative_path`) |
//! | `downloadAgentTaskArtifact` | `GET /ap/v1/agent/tasks/{task_id}/artifacts/{artifact_id}` |
//! | the OpenAPI document | `GET /openapi.json` |
//!
//! Errors: an unknown task, step or artifact answers 404 `{"message": …}`; a path, query or body
//! that does not decode answers 422 `{"message": …}` (an upload without a `file` part, or with a
//! `relative_path` that is absolute or has a `..` segment, among them); an upload over the limit
//! answers 413; a failing handler answers 500. A JSON body sent with a GET is ignored.
//!
//! - [`types`]: the wire types, each beside its schema.
//! - [`TaskHandler`] / [`StepHandler`]: the handler contract; [`task_fn`] and [`step_fn`].
//! - [`AgentTaskHandler`]: any `Agent` as a task handler (a task is a session, a step a turn).
//! - [`TaskStore`]: where tasks live; [`MemoryTaskStore`] by default, [`DynamoTaskStore`] to share
//!   them between replicas.
//! - [`AgentProtocolServer`] and [`serve`]; [`AgentProtocolClient`].
//! - [`openapi::document`]: the OpenAPI document, made from [`Operation`].

mod agent;
mod client;
mod dynamo;
mod extract;
mod handler;
pub mod openapi;
mod server;
mod step_handlers;
mod store;
pub mod types;
mod workspace;

pub use agent::{AgentTaskHandler, IS_LAST_KEY};
pub use client::{AgentProtocolClient, ClientError};
pub use dynamo::{DynamoTaskStore, MAX_STEP_ARTIFACTS};
pub use handler::{
    StepFailed, StepFault, StepFn, StepHandler, StepResult, TaskFailed, TaskFn, TaskHandler, step_fn, task_fn,
};
pub use openapi::Operation;
pub use server::{
    AgentProtocolServer, DEFAULT_JSON_LIMIT, DEFAULT_MAX_STEP_HANDLERS, DEFAULT_PORT, DEFAULT_UPLOAD_LIMIT,
    ServerConfig, serve,
};
pub use store::{MemoryTaskStore, Page, TaskStore, TaskStoreError};
pub use types::{
    Artifact, ArtifactUpload, MAX_PAGE_SIZE, PageRequest, Pagination, Step, StepRequestBody, StepStatus,
    Task, TaskArtifactsListResponse, TaskListResponse, TaskRequestBody, TaskStepsListResponse,
};
pub use workspace::{DEFAULT_WORKSPACE, PathRejected, Workspace};

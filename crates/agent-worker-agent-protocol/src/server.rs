//! The Agent Protocol v1 REST server: the nine operations of [`Operation`], `GET /openapi.json`,
//! and errors as the specification gives them (404 and 422 with `{"message": …}`).

use agent_worker_http::api_key::ApiKey;
use agent_worker_http::serve::{ConnectionLimits, serve_answering};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde_json::json;
use tokio::net::TcpListener;
use tracing::Instrument;

use super::handler::{StepFault, StepHandler, TaskHandler};
use super::openapi::{self, Operation};
use super::store::{MemoryTaskStore, TaskStore};
use super::types::{
    Artifact, Step, StepRequestBody, StepStatus, Task, TaskArtifactsListResponse, TaskListResponse,
    TaskRequestBody, TaskStepsListResponse,
};
use super::workspace::{DEFAULT_WORKSPACE, Workspace, relative_folder};

use super::extract::{ApiError, ApiPage, ApiPath, JsonBody, key_required, refused_head};
use super::step_handlers::{SharedStepHandler, StepHandlers};
use agent_worker_contract::ErrorChain;

/// The port when none is given, as in the reference SDK.
pub const DEFAULT_PORT: u16 = 8000;
/// The largest artifact upload by default (10 MiB).
pub const DEFAULT_UPLOAD_LIMIT: usize = 10 * 1024 * 1024;
/// The largest JSON body by default (1 MiB).
pub const DEFAULT_JSON_LIMIT: usize = 1024 * 1024;
/// How many tasks' step handlers a server keeps by default.
pub const DEFAULT_MAX_STEP_HANDLERS: usize = 10_000;

/// What an upload's body may hold beyond its file: the multipart envelope, the `relative_path`
/// field and the part headers.
const UPLOAD_ENVELOPE_BYTES: usize = 16 * 1024;

/// The server's settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where artifact files live.
    pub workspace: Workspace,
    /// The largest artifact upload, in bytes.
    pub upload_limit: usize,
    /// The largest JSON request body, in bytes.
    pub json_limit: usize,
    /// How many tasks' step handlers to keep. Past it, the longest-held idle ones are dropped;
    /// a dropped task's next step starts its handler again ([`TaskHandler::start`]).
    pub max_step_handlers: usize,
    /// The limits every connection is served within (timeouts, the most open at once).
    pub connections: ConnectionLimits,
    /// The key every operation's request carries (`x-api-key`, or `Authorization: Bearer`):
    /// without it, 401 and nothing done. `None` serves everyone who can reach the server: the
    /// protocol knows no people, so only on loopback (`agent-worker agent-protocol` refuses
    /// another address without `--api-key`). `GET /openapi.json` is always open.
    pub api_key: Option<ApiKey>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self::new(Workspace::new(DEFAULT_WORKSPACE))
    }
}

impl ServerConfig {
    /// Settings with artifact files in `workspace`.
    pub fn new(workspace: Workspace) -> Self {
        Self {
            workspace,
            upload_limit: DEFAULT_UPLOAD_LIMIT,
            json_limit: DEFAULT_JSON_LIMIT,
            max_step_handlers: DEFAULT_MAX_STEP_HANDLERS,
            connections: ConnectionLimits::default(),
            api_key: None,
        }
    }
}

struct Inner {
    handler: Arc<dyn TaskHandler>,
    store: Arc<dyn TaskStore>,
    config: ServerConfig,
    step_handlers: Mutex<StepHandlers>,
}

/// An Agent Protocol server around a [`TaskHandler`]. Cheap to clone.
///
/// ```no_run
/// use agent_worker_agent_protocol::{self as agent_protocol, AgentProtocolServer, AgentTaskHandler, ServerConfig};
/// use agent_worker_contract::{AgentEvent, agent_fn};
/// use futures_util::stream;
///
/// # async fn run() -> std::io::Result<()> {
/// // Any Agent, served over Agent Protocol: a task is a session, a step is one turn.
/// let agent = agent_fn(|_scope, prompt| {
///     let reply = format!("you said: {}", prompt.text);
///     stream::iter([AgentEvent::text(reply), AgentEvent::completed()])
/// });
/// let server = AgentProtocolServer::new(AgentTaskHandler::new(agent), ServerConfig::default());
/// let listener = tokio::net::TcpListener::bind(("127.0.0.1", agent_protocol::DEFAULT_PORT)).await?;
/// agent_protocol::serve(listener, server, std::future::pending()).await
/// # }
/// ```
#[derive(Clone)]
pub struct AgentProtocolServer {
    inner: Arc<Inner>,
}

impl fmt::Debug for AgentProtocolServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentProtocolServer")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl AgentProtocolServer {
    /// A server whose tasks are kept in memory.
    pub fn new(handler: impl TaskHandler, config: ServerConfig) -> Self {
        Self::with_store(handler, MemoryTaskStore::new(), config)
    }

    /// A server whose tasks are kept in `store`.
    pub fn with_store(handler: impl TaskHandler, store: impl TaskStore, config: ServerConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                handler: Arc::new(handler),
                store: Arc::new(store),
                config,
                step_handlers: Mutex::new(StepHandlers::default()),
            }),
        }
    }

    /// The routes: every [`Operation`], `GET /openapi.json`, and a JSON 404 for anything else.
    pub fn router(&self) -> Router {
        let mut router = Router::new();
        for operation in Operation::ALL {
            router = router.route(operation.path(), self.route(operation));
        }
        if let Some(key) = &self.inner.config.api_key {
            router = router.route_layer(axum::middleware::from_fn_with_state(
                Arc::new(key.clone()),
                key_required,
            ));
        }
        router
            .route("/openapi.json", get(openapi_json))
            .fallback(no_route)
            .method_not_allowed_fallback(no_method)
            .with_state(self.clone())
    }

    /// The handler of `operation`: the match is exhaustive, so no operation goes unrouted.
    fn route(&self, operation: Operation) -> MethodRouter<Self> {
        let json_limit = DefaultBodyLimit::max(self.inner.config.json_limit);
        match operation {
            Operation::CreateAgentTask => post(create_agent_task).layer(json_limit),
            Operation::ListAgentTasks => get(list_agent_tasks),
            Operation::GetAgentTask => get(get_agent_task),
            Operation::ListAgentTaskSteps => get(list_agent_task_steps),
            Operation::ExecuteAgentTaskStep => post(execute_agent_task_step).layer(json_limit),
            Operation::GetAgentTaskStep => get(get_agent_task_step),
            Operation::ListAgentTaskArtifacts => get(list_agent_task_artifacts),
            Operation::UploadAgentTaskArtifacts => {
                // The limit is the file's: the body may also carry the envelope and the path.
                post(upload_agent_task_artifacts).layer(DefaultBodyLimit::max(
                    self.inner
                        .config
                        .upload_limit
                        .saturating_add(UPLOAD_ENVELOPE_BYTES),
                ))
            }
            Operation::DownloadAgentTaskArtifact => get(download_agent_task_artifact),
        }
    }

    async fn task(&self, task_id: &str) -> Result<Task, ApiError> {
        self.inner
            .store
            .task(task_id)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("no task {task_id}")))
    }

    /// The task's step handler; started again if this process does not hold it.
    async fn step_handler(&self, task: &Task) -> Result<SharedStepHandler, ApiError> {
        if let Some(found) = self.step_handlers().by_task.get(&task.task_id) {
            return Ok(found.clone());
        }
        let started = self.start_task(task).await?;
        Ok(self.keep_step_handler(task, started))
    }

    async fn start_task(&self, task: &Task) -> Result<Box<dyn StepHandler>, ApiError> {
        self.inner
            .handler
            .start(task)
            .await
            .map_err(|e| ApiError::Internal(format!("the task handler failed: {e}")))
    }

    fn keep_step_handler(&self, task: &Task, started: Box<dyn StepHandler>) -> SharedStepHandler {
        let max = self.inner.config.max_step_handlers;
        self.step_handlers().keep(&task.task_id, started, max)
    }

    fn step_handlers(&self) -> std::sync::MutexGuard<'_, StepHandlers> {
        self.inner
            .step_handlers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Serves `server` on `listener` until `shutdown` resolves, then finishes the requests in hand.
pub async fn serve(
    listener: TcpListener,
    server: AgentProtocolServer,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = server.inner.config.connections;
    serve_answering(listener, server.router(), limits, refused_head, shutdown).await
}

async fn openapi_json() -> axum::Json<serde_json::Value> {
    axum::Json(openapi::document())
}

async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no operation at {method} {}", uri.path()))
}

async fn no_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let message = format!("{} does not take {method}", uri.path());
    (
        StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(json!({ "message": message })),
    )
        .into_response()
}

async fn create_agent_task(
    State(server): State<AgentProtocolServer>,
    JsonBody(body): JsonBody<TaskRequestBody>,
) -> Result<axum::Json<Task>, ApiError> {
    let body = body.unwrap_or_default();
    let task = Task {
        task_id: uuid::Uuid::now_v7().to_string(),
        input: body.input,
        additional_input: body.additional_input,
        artifacts: Vec::new(),
    };
    let started = server.start_task(&task).await?;
    server.inner.store.create_task(task.clone()).await?;
    server.keep_step_handler(&task, started);
    Ok(axum::Json(task))
}

async fn list_agent_tasks(
    State(server): State<AgentProtocolServer>,
    ApiPage(page): ApiPage,
) -> Result<axum::Json<TaskListResponse>, ApiError> {
    let page = server.inner.store.tasks(page).await?;
    Ok(axum::Json(TaskListResponse {
        tasks: page.items,
        pagination: page.pagination,
    }))
}

async fn get_agent_task(
    State(server): State<AgentProtocolServer>,
    ApiPath(task_id): ApiPath<String>,
) -> Result<axum::Json<Task>, ApiError> {
    server.task(&task_id).await.map(axum::Json)
}

async fn list_agent_task_steps(
    State(server): State<AgentProtocolServer>,
    ApiPath(task_id): ApiPath<String>,
    ApiPage(page): ApiPage,
) -> Result<axum::Json<TaskStepsListResponse>, ApiError> {
    let page = server
        .inner
        .store
        .steps(&task_id, page)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no task {task_id}")))?;
    Ok(axum::Json(TaskStepsListResponse {
        steps: page.items,
        pagination: page.pagination,
    }))
}

async fn execute_agent_task_step(
    State(server): State<AgentProtocolServer>,
    ApiPath(task_id): ApiPath<String>,
    JsonBody(body): JsonBody<StepRequestBody>,
) -> Result<axum::Json<Step>, ApiError> {
    let task = server.task(&task_id).await?;
    let step_id = uuid::Uuid::now_v7().to_string();
    let span = tracing::info_span!("agent_protocol_step", task_id = %task_id, step_id = %step_id);
    async move {
        let handler = server.step_handler(&task).await?;
        let (input, additional_input) = body
            .as_ref()
            .map(|b| (b.input.clone(), b.additional_input.clone()))
            .unwrap_or_default();
        let result = handler.lock().await.step(body).await.map_err(|e| match e.fault {
            StepFault::Input => ApiError::Unprocessable(e.message),
            StepFault::Agent => ApiError::Internal(format!("the step failed: {}", e.message)),
        })?;
        let step = Step {
            task_id,
            step_id,
            name: result.name,
            status: StepStatus::Completed,
            input,
            additional_input,
            output: result.output,
            additional_output: result.additional_output,
            artifacts: result.artifacts,
            is_last: result.is_last,
        };
        server.inner.store.add_step(step.clone()).await?;
        Ok(axum::Json(step))
    }
    .instrument(span)
    .await
}

async fn get_agent_task_step(
    State(server): State<AgentProtocolServer>,
    ApiPath((task_id, step_id)): ApiPath<(String, String)>,
) -> Result<axum::Json<Step>, ApiError> {
    let task = server.task(&task_id).await?;
    server
        .inner
        .store
        .step(&task.task_id, &step_id)
        .await?
        .map(axum::Json)
        .ok_or_else(|| ApiError::NotFound(format!("task {task_id} has no step {step_id}")))
}

async fn list_agent_task_artifacts(
    State(server): State<AgentProtocolServer>,
    ApiPath(task_id): ApiPath<String>,
    ApiPage(page): ApiPage,
) -> Result<axum::Json<TaskArtifactsListResponse>, ApiError> {
    let task = server.task(&task_id).await?;
    let (artifacts, pagination) = page.slice(&task.artifacts);
    Ok(axum::Json(TaskArtifactsListResponse {
        artifacts,
        pagination,
    }))
}

fn multipart_error(e: &axum::extract::multipart::MultipartError, limit: usize) -> ApiError {
    match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::TooLarge(format!(
            "the upload is larger than the server takes ({limit} bytes)"
        )),
        StatusCode::BAD_REQUEST => {
            ApiError::Unprocessable(format!("the multipart body is malformed: {}", e.body_text()))
        }
        _ => ApiError::Internal(format!("the upload could not be read: {}", e.body_text())),
    }
}

async fn upload_agent_task_artifacts(
    State(server): State<AgentProtocolServer>,
    ApiPath(task_id): ApiPath<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<axum::Json<Artifact>, ApiError> {
    let task = server.task(&task_id).await?;
    let mut multipart = multipart.map_err(|e| {
        ApiError::Unprocessable(format!(
            "the body must be multipart/form-data with a `file` part: {}",
            e.body_text()
        ))
    })?;
    let limit = server.inner.config.upload_limit;
    let mut file: Option<(String, Bytes)> = None;
    let mut relative_path: Option<String> = None;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| multipart_error(&e, limit))?
    {
        match field.name() {
            Some("file") => {
                let name = field
                    .file_name()
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::Unprocessable("the `file` part has no filename".into()))?;
                let bytes = field.bytes().await.map_err(|e| multipart_error(&e, limit))?;
                if bytes.len() > limit {
                    return Err(ApiError::TooLarge(format!(
                        "the file is {} bytes; the server takes at most {limit}",
                        bytes.len()
                    )));
                }
                file = Some((name, bytes));
            }
            Some("relative_path") => {
                // Its bytes, not `text()`: that would replace what is not UTF-8 without a word.
                let bytes = field.bytes().await.map_err(|e| multipart_error(&e, limit))?;
                let text = String::from_utf8(bytes.to_vec())
                    .map_err(|_| ApiError::Unprocessable("relative_path is not UTF-8".into()))?;
                relative_path = Some(text).filter(|t| !t.trim().is_empty());
            }
            _ => {}
        }
    }
    let (file_name, content) =
        file.ok_or_else(|| ApiError::Unprocessable("the upload has no `file` part".into()))?;
    if let Some(relative) = &relative_path {
        relative_folder(relative).map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    }
    let path = server
        .inner
        .config
        .workspace
        .artifact_path(&task.task_id, relative_path.as_deref(), &file_name)
        .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    write_file(&path, &content).await.map_err(|e| {
        use std::io::ErrorKind::{AlreadyExists, IsADirectory, NotADirectory};
        if e.kind() == AlreadyExists {
            return ApiError::Unprocessable(format!(
                "the task already has a file or folder named {file_name:?} there; upload it under another name or relative_path"
            ));
        }
        if matches!(e.kind(), NotADirectory | IsADirectory) {
            // The caller's paths collide: a folder where a file is, or the other way round.
            return ApiError::Unprocessable(
                "the artifact's path runs through a file, or names a folder, the task already has".into(),
            );
        }
        tracing::error!(path = %path.display(), error = %ErrorChain(&e), "agent protocol: cannot write an artifact");
        ApiError::Internal("the artifact could not be written to the workspace".into())
    })?;
    let artifact = Artifact {
        artifact_id: uuid::Uuid::now_v7().to_string(),
        agent_created: false,
        file_name,
        relative_path,
    };
    server
        .inner
        .store
        .add_artifact(&task.task_id, artifact.clone())
        .await?;
    Ok(axum::Json(artifact))
}

/// Writes beside the target, then links it into place, so a reader never sees half a file and
/// a file already there is never replaced (`AlreadyExists`): each artifact keeps its own bytes.
async fn write_file(path: &std::path::Path, content: &[u8]) -> std::io::Result<()> {
    if let Some(folder) = path.parent() {
        tokio::fs::create_dir_all(folder).await?;
    }
    let partial = path.with_extension(format!("upload-{}", uuid::Uuid::new_v4().simple()));
    tokio::fs::write(&partial, content).await?;
    let linked = tokio::fs::hard_link(&partial, path).await;
    let _ = tokio::fs::remove_file(&partial).await;
    linked
}

async fn download_agent_task_artifact(
    State(server): State<AgentProtocolServer>,
    ApiPath((task_id, artifact_id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let task = server.task(&task_id).await?;
    let artifact = task
        .artifacts
        .iter()
        .find(|a| a.artifact_id == artifact_id)
        .ok_or_else(|| ApiError::NotFound(format!("task {task_id} has no artifact {artifact_id}")))?;
    let path = server
        .inner
        .config
        .workspace
        .artifact_path(
            &task.task_id,
            artifact.relative_path.as_deref(),
            &artifact.file_name,
        )
        .map_err(|e| ApiError::NotFound(format!("artifact {artifact_id} has no file: {e}")))?;
    let file = match tokio::fs::File::open(&path).await {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ApiError::NotFound(format!(
                "artifact {artifact_id} has no file in the workspace"
            )));
        }
        Err(e) => {
            tracing::error!(path = %path.display(), error = %ErrorChain(&e), "agent protocol: cannot read an artifact");
            return Err(ApiError::Internal("the artifact could not be read".into()));
        }
    };
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                content_disposition(&artifact.file_name),
            ),
        ],
        axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(file)),
    )
        .into_response())
}

/// `attachment` with the file's name: quoted when it is plain ASCII, RFC 5987-encoded otherwise.
fn content_disposition(file_name: &str) -> String {
    let plain = file_name
        .chars()
        .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ');
    if plain {
        format!("attachment; filename=\"{file_name}\"")
    } else {
        let encoded: String = file_name
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        format!("attachment; filename*=UTF-8''{encoded}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_disposition_quotes_or_encodes() {
        assert_eq!(content_disposition("a b.txt"), "attachment; filename=\"a b.txt\"");
        assert_eq!(
            content_disposition("naïve\".txt"),
            "attachment; filename*=UTF-8''na%C3%AFve%22.txt"
        );
    }
}

//! The Agent Protocol server on 127.0.0.1 for tests/agent_protocol*.rs: a server with a handler, a
//! counting handler, a DynamoDB task store.

use std::path::PathBuf;
use std::sync::Arc;

use agent_worker::hosts::agent_protocol::{
    AgentProtocolClient, AgentProtocolServer, Artifact, ClientError, ServerConfig, StepRequestBody,
    StepResult, TaskHandler, Workspace, serve, step_fn, task_fn,
};
use agent_worker::hosts::agent_protocol::{DynamoTaskStore, MemoryTaskStore, TaskStore};
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::moto;
use reqwest::StatusCode;
use tokio::sync::oneshot;

pub struct Server {
    pub url: String,
    pub client: AgentProtocolClient,
    pub workspace: PathBuf,
    pub _stop: oneshot::Sender<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.workspace);
    }
}

pub fn new_workspace() -> PathBuf {
    std::env::temp_dir().join(format!("ap-ws-{}", uuid::Uuid::new_v4().simple()))
}

pub async fn start(handler: impl TaskHandler, configure: impl FnOnce(&mut ServerConfig)) -> Server {
    start_on(handler, MemoryTaskStore::new(), new_workspace(), configure).await
}

pub async fn start_on(
    handler: impl TaskHandler,
    store: impl TaskStore,
    workspace: PathBuf,
    configure: impl FnOnce(&mut ServerConfig),
) -> Server {
    let mut config = ServerConfig::new(Workspace::new(&workspace));
    configure(&mut config);
    let server = AgentProtocolServer::with_store(handler, store, config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, server, async move {
        let _ = stopped.await;
    }));
    Server {
        client: AgentProtocolClient::new(&url).unwrap(),
        url,
        workspace,
        _stop: stop,
    }
}

/// The seed's example: three steps a task, each named and saying which it is. Step 2 writes an
/// artifact file into the workspace and reports it.
pub fn counting(workspace_of: impl Fn() -> PathBuf + Send + Sync + 'static) -> impl TaskHandler {
    let workspace_of = Arc::new(workspace_of);
    task_fn(move |task| {
        let workspace = workspace_of();
        async move {
            let mut n = 0;
            Ok(step_fn(move |input: Option<StepRequestBody>| {
                n += 1;
                let task_id = task.task_id.clone();
                let workspace = workspace.clone();
                async move {
                    let said = input.and_then(|b| b.input).unwrap_or_else(|| "-".into());
                    let mut result = StepResult::output(format!("task {task_id}, step {n}: {said}"))
                        .with_name(format!("step {n}"))
                        .last(n == 3);
                    if n == 2 {
                        let folder = workspace.join(&task_id).join("out");
                        std::fs::create_dir_all(&folder).unwrap();
                        std::fs::write(folder.join("answer.txt"), "Washington").unwrap();
                        result
                            .artifacts
                            .push(Artifact::agent_created("answer.txt", Some("out".into())));
                    }
                    Ok(result)
                }
            }))
        }
    })
}

pub async fn counting_server() -> Server {
    counting_server_on(MemoryTaskStore::new()).await
}

pub async fn counting_server_on(store: impl TaskStore) -> Server {
    let workspace = new_workspace();
    let seen = workspace.clone();
    start_on(counting(move || seen.clone()), store, workspace, |_| {}).await
}

pub async fn dynamo_task_store() -> (DynamoStore, DynamoTaskStore) {
    let table = format!("ap-{}", uuid::Uuid::new_v4().simple());
    let sessions = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).unwrap());
    sessions.create_table().await.unwrap();
    (sessions.clone(), DynamoTaskStore::new(sessions))
}

pub fn not_found(result: Result<impl std::fmt::Debug, ClientError>) -> String {
    match result {
        Err(ClientError::NotFound { message }) => message,
        other => panic!("expected 404, got {other:?}"),
    }
}

pub fn server_error(result: Result<impl std::fmt::Debug, ClientError>) -> String {
    match result {
        Err(ClientError::Server { status, message }) if status == StatusCode::INTERNAL_SERVER_ERROR => {
            message
        }
        other => panic!("expected 500, got {other:?}"),
    }
}

pub fn unprocessable(result: Result<impl std::fmt::Debug, ClientError>) -> String {
    match result {
        Err(ClientError::Unprocessable { message }) => message,
        other => panic!("expected 422, got {other:?}"),
    }
}

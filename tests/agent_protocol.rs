//! The Agent Protocol v1 server over real HTTP on 127.0.0.1, driven by the typed client: every
//! operation, every error the specification names, the handler contract, the generated OpenAPI
//! document against the pinned specification, and the Bedrock engine served as an agent.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_worker::hosts::agent_protocol::{
    AgentProtocolClient, AgentProtocolServer, AgentTaskHandler, Artifact, ArtifactUpload, ClientError,
    Operation, PageRequest, ServerConfig, StepFailed, StepRequestBody, StepResult, StepStatus, TaskFailed,
    TaskHandler, TaskRequestBody, Workspace, openapi, serve, step_fn, task_fn,
};
use agent_worker::hosts::agent_protocol::{
    DynamoTaskStore, MAX_STEP_ARTIFACTS, MemoryTaskStore, Step, Task, TaskStore, TaskStoreError,
};
use agent_worker::protocol::{AgentEvent, agent_fn};
use agent_worker::session::{DynamoConfig, DynamoStore, MemoryStore};
use agent_worker_testkit::{BedrockStandIn, Reply, moto};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::oneshot;

struct Server {
    url: String,
    client: AgentProtocolClient,
    workspace: PathBuf,
    _stop: oneshot::Sender<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.workspace);
    }
}

fn new_workspace() -> PathBuf {
    std::env::temp_dir().join(format!("ap-ws-{}", uuid::Uuid::new_v4().simple()))
}

async fn start(handler: impl TaskHandler, configure: impl FnOnce(&mut ServerConfig)) -> Server {
    start_on(handler, MemoryTaskStore::new(), new_workspace(), configure).await
}

async fn start_on(
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
fn counting(workspace_of: impl Fn() -> PathBuf + Send + Sync + 'static) -> impl TaskHandler {
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

async fn counting_server() -> Server {
    counting_server_on(MemoryTaskStore::new()).await
}

async fn counting_server_on(store: impl TaskStore) -> Server {
    let workspace = new_workspace();
    let seen = workspace.clone();
    start_on(counting(move || seen.clone()), store, workspace, |_| {}).await
}

async fn dynamo_task_store() -> (DynamoStore, DynamoTaskStore) {
    let table = format!("ap-{}", uuid::Uuid::new_v4().simple());
    let sessions = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).unwrap());
    sessions.create_table().await.unwrap();
    (sessions.clone(), DynamoTaskStore::new(sessions))
}

#[tokio::test]
async fn every_operation_through_the_client() {
    every_operation(&counting_server().await).await;
}

#[tokio::test]
async fn every_operation_through_the_client_on_dynamodb() {
    let (_, store) = dynamo_task_store().await;
    every_operation(&counting_server_on(store).await).await;
}

async fn every_operation(server: &Server) {
    let client = &server.client;

    let mut body = TaskRequestBody::new("Write 'Washington' to output.txt");
    body.additional_input = Some(json!({ "test_run_id": "123" }).as_object().unwrap().clone());
    let task = client.create_agent_task(&body).await.unwrap();
    assert_eq!(task.input.as_deref(), Some("Write 'Washington' to output.txt"));
    assert_eq!(task.additional_input, body.additional_input);
    assert!(task.artifacts.is_empty());
    assert_eq!(client.get_agent_task(&task.task_id).await.unwrap(), task);

    let one = client
        .execute_agent_task_step(&task.task_id, Some(&StepRequestBody::new("go")))
        .await
        .unwrap();
    assert_eq!(
        one.output.as_deref(),
        Some(format!("task {}, step 1: go", task.task_id).as_str())
    );
    assert_eq!(
        (one.status, one.is_last, one.name.as_deref()),
        (StepStatus::Completed, false, Some("step 1"))
    );
    assert_eq!(one.input.as_deref(), Some("go"));
    let two = client.execute_agent_task_step(&task.task_id, None).await.unwrap();
    assert_eq!(two.input, None, "a step without a body has no input");
    assert_eq!(two.artifacts.len(), 1);
    let three = client
        .execute_agent_task_step(&task.task_id, Some(&StepRequestBody::default()))
        .await
        .unwrap();
    assert!(three.is_last);

    assert_eq!(
        client
            .get_agent_task_step(&task.task_id, &two.step_id)
            .await
            .unwrap(),
        two
    );
    let steps = client
        .list_agent_task_steps(&task.task_id, PageRequest::default())
        .await
        .unwrap();
    assert_eq!(steps.steps, vec![one.clone(), two.clone(), three.clone()]);
    assert_eq!(
        (
            steps.pagination.total_items,
            steps.pagination.total_pages,
            steps.pagination.current_page,
            steps.pagination.page_size
        ),
        (3, 1, 1, 10)
    );
    let second = client
        .list_agent_task_steps(&task.task_id, PageRequest::new(2, 2))
        .await
        .unwrap();
    assert_eq!(second.steps, vec![three]);
    assert_eq!(
        (second.pagination.total_pages, second.pagination.current_page),
        (2, 2)
    );

    // The step's artifact was added to its task, and its file can be downloaded.
    let made = &two.artifacts[0];
    assert!(made.agent_created);
    let task_now = client.get_agent_task(&task.task_id).await.unwrap();
    assert_eq!(task_now.artifacts, vec![made.clone()]);
    let bytes = client
        .download_agent_task_artifact(&task.task_id, &made.artifact_id)
        .await
        .unwrap();
    assert_eq!(&bytes[..], b"Washington");

    // Uploads: without and with a relative path; both land in the workspace.
    let plain = client
        .upload_agent_task_artifacts(&task.task_id, ArtifactUpload::new("notes.txt", "hello"))
        .await
        .unwrap();
    assert_eq!(
        (
            plain.agent_created,
            plain.file_name.as_str(),
            plain.relative_path.as_deref()
        ),
        (false, "notes.txt", None)
    );
    let nested = client
        .upload_agent_task_artifacts(
            &task.task_id,
            ArtifactUpload::new("main.py", "print(1)").with_relative_path("python/code/"),
        )
        .await
        .unwrap();
    // A folder where the task has a file is the caller's mistake (422), not the server's (500);
    // the fuzz harness found it.
    let through_a_file = client
        .upload_agent_task_artifacts(
            &task.task_id,
            ArtifactUpload::new("inner.txt", "x").with_relative_path("notes.txt/deeper"),
        )
        .await;
    assert!(
        matches!(&through_a_file, Err(ClientError::Unprocessable { message }) if message.contains("runs through a file")),
        "{through_a_file:?}"
    );
    assert_eq!(nested.relative_path.as_deref(), Some("python/code/"));
    let on_disk = server.workspace.join(&task.task_id).join("python/code/main.py");
    assert_eq!(std::fs::read_to_string(on_disk).unwrap(), "print(1)");
    assert_eq!(
        &client
            .download_agent_task_artifact(&task.task_id, &nested.artifact_id)
            .await
            .unwrap()[..],
        b"print(1)"
    );
    let artifacts = client
        .list_agent_task_artifacts(&task.task_id, PageRequest::new(1, 2))
        .await
        .unwrap();
    assert_eq!(artifacts.artifacts, vec![made.clone(), plain]);
    assert_eq!(
        (artifacts.pagination.total_items, artifacts.pagination.total_pages),
        (3, 2)
    );

    // Tasks list oldest first, paged.
    let later = client
        .create_agent_task(&TaskRequestBody::default())
        .await
        .unwrap();
    assert_eq!(later.input, None);
    let page = client.list_agent_tasks(PageRequest::new(2, 1)).await.unwrap();
    assert_eq!(
        page.tasks.iter().map(|t| t.task_id.as_str()).collect::<Vec<_>>(),
        [later.task_id.as_str()]
    );
    assert_eq!((page.pagination.total_items, page.pagination.page_size), (2, 1));
    let past_the_end = client.list_agent_tasks(PageRequest::new(7, 10)).await.unwrap();
    assert!(past_the_end.tasks.is_empty());
    assert_eq!(past_the_end.pagination.total_items, 2);
}

fn not_found(result: Result<impl std::fmt::Debug, ClientError>) -> String {
    match result {
        Err(ClientError::NotFound { message }) => message,
        other => panic!("expected 404, got {other:?}"),
    }
}

fn server_error(result: Result<impl std::fmt::Debug, ClientError>) -> String {
    match result {
        Err(ClientError::Server { status, message }) if status == StatusCode::INTERNAL_SERVER_ERROR => {
            message
        }
        other => panic!("expected 500, got {other:?}"),
    }
}

fn unprocessable(result: Result<impl std::fmt::Debug, ClientError>) -> String {
    match result {
        Err(ClientError::Unprocessable { message }) => message,
        other => panic!("expected 422, got {other:?}"),
    }
}

#[tokio::test]
async fn unknown_tasks_steps_and_artifacts_answer_404_with_a_message() {
    let server = counting_server().await;
    let client = &server.client;
    let page = PageRequest::default();
    assert!(not_found(client.get_agent_task("nope").await).contains("nope"));
    not_found(client.list_agent_task_steps("nope", page).await);
    not_found(client.execute_agent_task_step("nope", None).await);
    not_found(client.get_agent_task_step("nope", "s").await);
    not_found(client.list_agent_task_artifacts("nope", page).await);
    not_found(
        client
            .upload_agent_task_artifacts("nope", ArtifactUpload::new("f", "x"))
            .await,
    );
    not_found(client.download_agent_task_artifact("nope", "a").await);

    let task = client
        .create_agent_task(&TaskRequestBody::new("t"))
        .await
        .unwrap();
    assert!(not_found(client.get_agent_task_step(&task.task_id, "no-step").await).contains("no-step"));
    assert!(
        not_found(
            client
                .download_agent_task_artifact(&task.task_id, "no-artifact")
                .await
        )
        .contains("no-artifact")
    );

    // An id that is not a plain name is just an unknown id, and percent-encoding round-trips.
    not_found(client.get_agent_task("../../etc/passwd").await);

    let http = reqwest::Client::new();
    let response = http
        .get(format!("{}/ap/v1/nothing", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(response.json::<Value>().await.unwrap()["message"].is_string());
}

#[tokio::test]
async fn requests_that_do_not_decode_answer_422_with_a_message() {
    let server = counting_server().await;
    let http = reqwest::Client::new();
    let tasks = format!("{}/ap/v1/agent/tasks", server.url);
    let task = server
        .client
        .create_agent_task(&TaskRequestBody::new("t"))
        .await
        .unwrap();
    let steps = format!("{tasks}/{}/steps", task.task_id);

    let cases: Vec<(reqwest::RequestBuilder, &str)> = vec![
        (http.get(format!("{tasks}?page_size=0")), "page_size"),
        (http.get(format!("{tasks}?current_page=0")), "current_page"),
        (http.get(format!("{tasks}?current_page=abc")), "current_page"),
        (http.get(format!("{tasks}?page_size=-3")), "page_size"),
        (http.get(format!("{steps}?page_size=0")), "page_size"),
        // A page is read whole: past the cap, it is refused (it was 2,000 reads at once).
        (http.get(format!("{tasks}?page_size=3000")), "page_size"),
        (
            http.get(format!("{tasks}/{}/artifacts?current_page=x", task.task_id)),
            "current_page",
        ),
        (http.post(&tasks).body("{not json"), "body"),
        (http.post(&tasks).body(r#"{"input": 5}"#), "input"),
        (
            http.post(&tasks).body(r#"{"additional_input": "x"}"#),
            "additional_input",
        ),
        (http.post(&tasks).body("[]"), "body"),
        (http.post(&steps).body(r#"{"input": ["a"]}"#), "input"),
        (http.post(&steps).body(r#"{"input": "a"} trailing"#), "body"),
    ];
    for (request, names) in cases {
        let response = request.send().await.unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains(names), "{message:?} should name {names}");
    }
    // Nothing above stored a task or a step.
    assert_eq!(
        server
            .client
            .list_agent_tasks(PageRequest::default())
            .await
            .unwrap()
            .tasks
            .len(),
        1
    );
    assert!(
        server
            .client
            .list_agent_task_steps(&task.task_id, PageRequest::default())
            .await
            .unwrap()
            .steps
            .is_empty()
    );
}

#[tokio::test]
async fn uploads_are_checked_before_anything_is_written() {
    let server = start(counting(PathBuf::new), |config| config.upload_limit = 1024).await;
    let client = &server.client;
    let task = client
        .create_agent_task(&TaskRequestBody::new("t"))
        .await
        .unwrap();
    let url = format!("{}/ap/v1/agent/tasks/{}/artifacts", server.url, task.task_id);
    let http = reqwest::Client::new();

    let no_file = reqwest::multipart::Form::new().text("relative_path", "a");
    let response = http.post(&url).multipart(no_file).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        response.json::<Value>().await.unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("file")
    );

    // A relative_path that is not UTF-8 is refused, not quietly mended.
    let not_utf8 = reqwest::multipart::Form::new()
        .part(
            "file",
            reqwest::multipart::Part::bytes(b"x".to_vec()).file_name("x.txt"),
        )
        .part(
            "relative_path",
            reqwest::multipart::Part::bytes(vec![b'a', 0xff, 0xfe]),
        );
    let response = http.post(&url).multipart(not_utf8).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(response.text().await.unwrap().contains("not UTF-8"));

    let not_multipart = http.post(&url).body("hello").send().await.unwrap();
    assert_eq!(not_multipart.status(), StatusCode::UNPROCESSABLE_ENTITY);

    let long = "a/".repeat(2_500);
    for relative in [
        "/etc",
        "../outside",
        "a/../../outside",
        "..",
        "a\\..\\b",
        "new\nline",
        long.as_str(),
    ] {
        let message = unprocessable(
            client
                .upload_agent_task_artifacts(
                    &task.task_id,
                    ArtifactUpload::new("x.txt", "x").with_relative_path(relative),
                )
                .await,
        );
        assert!(message.contains("relative_path"), "{relative}: {message}");
    }
    for name in ["..", "a/b.txt", "tab\tname.txt"] {
        unprocessable(
            client
                .upload_agent_task_artifacts(&task.task_id, ArtifactUpload::new(name, "x"))
                .await,
        );
    }

    // A second upload to the same place (however the folder is spelled) keeps the first's bytes.
    let first = client
        .upload_agent_task_artifacts(
            &task.task_id,
            ArtifactUpload::new("same.txt", "first").with_relative_path("dup"),
        )
        .await
        .unwrap();
    for relative in ["dup", "dup/."] {
        let message = unprocessable(
            client
                .upload_agent_task_artifacts(
                    &task.task_id,
                    ArtifactUpload::new("same.txt", "second").with_relative_path(relative),
                )
                .await,
        );
        assert!(message.contains("already has"), "{relative}: {message}");
    }
    assert_eq!(
        &client
            .download_agent_task_artifact(&task.task_id, &first.artifact_id)
            .await
            .unwrap()[..],
        b"first"
    );

    // A file of exactly the limit is taken: the limit is the file's, not the envelope's.
    let exact = client
        .upload_agent_task_artifacts(&task.task_id, ArtifactUpload::new("exact.bin", vec![b'x'; 1024]))
        .await
        .unwrap();
    assert_eq!(exact.file_name, "exact.bin");
    let big = vec![b'x'; 4096];
    let response = http
        .post(&url)
        .multipart(
            reqwest::multipart::Form::new()
                .part("file", reqwest::multipart::Part::bytes(big).file_name("big.bin")),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let message = response.json::<Value>().await.unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("at most 1024"), "{message}");

    // None of the refused ones was recorded or written: only the two that were taken.
    let mut recorded: Vec<String> = client
        .get_agent_task(&task.task_id)
        .await
        .unwrap()
        .artifacts
        .into_iter()
        .map(|a| a.file_name)
        .collect();
    recorded.sort();
    assert_eq!(recorded, ["exact.bin", "same.txt"]);
    let mut written: Vec<String> = walk(&server.workspace)
        .iter()
        .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
        .collect();
    written.sort();
    assert_eq!(written, ["exact.bin", "same.txt"], "files written");
    assert!(!server.workspace.parent().unwrap().join("outside").exists());
}

fn walk(folder: &std::path::Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|e| {
            let path = e.path();
            if path.is_dir() { walk(&path) } else { vec![path] }
        })
        .collect()
}

#[tokio::test]
async fn a_json_body_sent_with_a_get_is_accepted() {
    let server = counting_server().await;
    let task = server
        .client
        .create_agent_task(&TaskRequestBody::new("t"))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    for url in [
        format!("{}/ap/v1/agent/tasks", server.url),
        format!("{}/ap/v1/agent/tasks?page_size=1&current_page=1", server.url),
        format!("{}/ap/v1/agent/tasks/{}", server.url, task.task_id),
    ] {
        let response = http
            .get(&url)
            .header("content-type", "application/json")
            .body(r#"{"input": "Write the word 'Washington' to a .txt file"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{url}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .contains("application/json")
        );
    }
}

#[tokio::test]
async fn handler_failures_store_nothing() {
    let tasks_started = Arc::new(AtomicUsize::new(0));
    let started = tasks_started.clone();
    let handler = task_fn(move |task| {
        let n = started.fetch_add(1, Ordering::SeqCst);
        async move {
            if task.input.as_deref() == Some("refuse") {
                return Err(TaskFailed("this agent does not take that task".into()));
            }
            let _ = n;
            Ok(step_fn(|input: Option<StepRequestBody>| async move {
                match input.and_then(|b| b.input).as_deref() {
                    Some("fail") => Err(StepFailed::new("the model is down")),
                    Some("bad") => Err(StepFailed::invalid_input("bad is not a step")),
                    _ => Ok(StepResult::output("ok")),
                }
            }))
        }
    });
    let server = start(handler, |_| {}).await;
    let client = &server.client;

    let message = server_error(client.create_agent_task(&TaskRequestBody::new("refuse")).await);
    assert!(message.contains("does not take"), "{message}");
    assert!(
        client
            .list_agent_tasks(PageRequest::default())
            .await
            .unwrap()
            .tasks
            .is_empty()
    );

    let task = client
        .create_agent_task(&TaskRequestBody::new("fine"))
        .await
        .unwrap();
    let message = server_error(
        client
            .execute_agent_task_step(&task.task_id, Some(&StepRequestBody::new("fail")))
            .await,
    );
    assert!(message.contains("the model is down"), "{message}");
    assert!(
        unprocessable(
            client
                .execute_agent_task_step(&task.task_id, Some(&StepRequestBody::new("bad")))
                .await
        )
        .contains("bad is not a step")
    );
    assert_eq!(
        client.get_agent_task(&task.task_id).await.unwrap(),
        task,
        "the task stays readable"
    );
    let steps = client
        .list_agent_task_steps(&task.task_id, PageRequest::default())
        .await
        .unwrap();
    assert!(steps.steps.is_empty(), "failed steps are not stored");
    let ok = client.execute_agent_task_step(&task.task_id, None).await.unwrap();
    assert_eq!(ok.output.as_deref(), Some("ok"));
    // The task handler ran once per task, failed one included, and not again for the steps.
    assert_eq!(tasks_started.load(Ordering::SeqCst), 2);
}

fn spec() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/spec/agent-protocol/openapi.yml"
    ))
    .unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn routes(doc: &Value) -> BTreeSet<(String, String, String)> {
    let mut routes = BTreeSet::new();
    for (path, methods) in doc["paths"].as_object().unwrap() {
        for (method, operation) in methods.as_object().unwrap() {
            routes.insert((
                path.clone(),
                method.clone(),
                operation["operationId"].as_str().unwrap().to_owned(),
            ));
        }
    }
    routes
}

#[test]
fn the_generated_document_declares_the_pinned_specifications_operations() {
    let pinned = spec();
    let generated = openapi::document();
    assert_eq!(routes(&generated), routes(&pinned));
    assert_eq!(routes(&generated).len(), 9);
    // Each schema has the same properties and required fields as the pinned one.
    let pinned_schemas = pinned["components"]["schemas"].as_object().unwrap();
    let generated_schemas = generated["components"]["schemas"].as_object().unwrap();
    assert_eq!(
        pinned_schemas.keys().collect::<BTreeSet<_>>(),
        generated_schemas.keys().collect::<BTreeSet<_>>()
    );
    for (name, schema) in pinned_schemas {
        let shape = |s: &Value| -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>) {
            let parts: Vec<&Value> = match s.get("allOf") {
                Some(all) => all.as_array().unwrap().iter().collect(),
                None => vec![s],
            };
            let mut props = BTreeSet::new();
            let mut required = BTreeSet::new();
            let mut refs = BTreeSet::new();
            for part in parts {
                if let Some(r) = part.get("$ref") {
                    refs.insert(r.as_str().unwrap().to_owned());
                }
                for key in part
                    .get("properties")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k)
                {
                    props.insert(key.clone());
                }
                for key in part
                    .get("required")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    required.insert(key.as_str().unwrap().to_owned());
                }
            }
            (props, required, refs)
        };
        assert_eq!(shape(&generated_schemas[name]), shape(schema), "schema {name}");
    }
    // Each parameter of each operation is declared as the pinned one is.
    for (path, method, id) in routes(&pinned) {
        let params = |doc: &Value| -> BTreeSet<(String, String, bool)> {
            doc["paths"][&path][&method]["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap().to_owned(),
                        p["in"].as_str().unwrap().to_owned(),
                        p["required"].as_bool().unwrap_or(false),
                    )
                })
                .collect()
        };
        assert_eq!(params(&generated), params(&pinned), "{id}");
    }
}

/// Every generated schema describes what the server actually sends.
#[tokio::test]
async fn the_generated_schemas_validate_the_servers_answers() {
    let server = counting_server().await;
    let client = &server.client;
    let mut body = TaskRequestBody::new("t");
    body.additional_input = Some(json!({ "k": 1 }).as_object().unwrap().clone());
    let task = client.create_agent_task(&body).await.unwrap();
    client.execute_agent_task_step(&task.task_id, None).await.unwrap();
    client
        .execute_agent_task_step(&task.task_id, Some(&StepRequestBody::new("x")))
        .await
        .unwrap();
    client
        .upload_agent_task_artifacts(
            &task.task_id,
            ArtifactUpload::new("a.txt", "a").with_relative_path("d"),
        )
        .await
        .unwrap();

    let http = reqwest::Client::new();
    let document: Value = http
        .get(format!("{}/openapi.json", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        document,
        openapi::document(),
        "GET /openapi.json serves the generated document"
    );
    let components = document["components"].clone();
    let base = format!("{}/ap/v1/agent/tasks", server.url);
    for (url, schema) in [
        (base.clone(), "TaskListResponse"),
        (format!("{base}/{}", task.task_id), "Task"),
        (format!("{base}/{}/steps", task.task_id), "TaskStepsListResponse"),
        (
            format!("{base}/{}/artifacts", task.task_id),
            "TaskArtifactsListResponse",
        ),
    ] {
        let answer: Value = http.get(&url).send().await.unwrap().json().await.unwrap();
        let root = json!({ "$ref": format!("#/components/schemas/{schema}"), "components": components });
        let validator = jsonschema::validator_for(&root).unwrap();
        let errors: Vec<String> = validator.iter_errors(&answer).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{url} against {schema}: {errors:?}\n{answer}");
    }
    // And a wrong answer fails, so the check above can fail.
    let root = json!({ "$ref": "#/components/schemas/Step", "components": components });
    assert!(!jsonschema::is_valid(
        &root,
        &json!({ "task_id": "t", "step_id": "s", "status": "done", "is_last": false, "artifacts": [] })
    ));
}

#[tokio::test]
async fn a_running_server_routes_every_operation_to_its_handler() {
    let server = counting_server().await;
    let client = &server.client;
    let task = client
        .create_agent_task(&TaskRequestBody::new("t"))
        .await
        .unwrap();
    let step = client.execute_agent_task_step(&task.task_id, None).await.unwrap();
    let artifact = client
        .upload_agent_task_artifacts(&task.task_id, ArtifactUpload::new("f.txt", "f"))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    for operation in Operation::ALL {
        let path = operation
            .path()
            .replace("{task_id}", &task.task_id)
            .replace("{step_id}", &step.step_id)
            .replace("{artifact_id}", &artifact.artifact_id);
        let url = format!("{}{path}", server.url);
        let request = match operation.method() {
            openapi::Method::Get => http.get(&url),
            openapi::Method::Post if operation == Operation::UploadAgentTaskArtifacts => {
                http.post(&url).multipart(reqwest::multipart::Form::new().part(
                    "file",
                    reqwest::multipart::Part::bytes(b"g".to_vec()).file_name("g.txt"),
                ))
            }
            openapi::Method::Post => http.post(&url).json(&json!({ "input": "i" })),
        };
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{} ({url})", operation.id());
    }
}

#[tokio::test]
async fn any_agent_is_served_and_is_last_comes_from_its_completed_data() {
    let agent = agent_fn(|scope, prompt| {
        let done = prompt.text == "finish";
        let data = json!({ "is_last": done, "session": scope.session });
        futures_util::stream::iter([
            AgentEvent::text(format!("heard {}", prompt.text)),
            AgentEvent::completed_with(data),
        ])
    });
    let server = start(AgentTaskHandler::new(agent), |_| {}).await;
    let client = &server.client;
    let task = client
        .create_agent_task(&TaskRequestBody::new("begin"))
        .await
        .unwrap();
    let first = client.execute_agent_task_step(&task.task_id, None).await.unwrap();
    assert_eq!(
        first.output.as_deref(),
        Some("heard begin"),
        "the first step takes the task's input"
    );
    assert!(!first.is_last);
    assert_eq!(
        first.additional_output.as_ref().unwrap()["session"],
        json!(task.task_id),
        "a task is a session"
    );
    let message = unprocessable(client.execute_agent_task_step(&task.task_id, None).await);
    assert!(message.contains("needs one"), "{message}");
    let last = client
        .execute_agent_task_step(&task.task_id, Some(&StepRequestBody::new("finish")))
        .await
        .unwrap();
    assert!(last.is_last);
}

#[tokio::test]
async fn a_step_too_large_to_keep_is_a_422_before_the_model_runs() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let (store, _) = dynamo_task_store().await;
    let engine = agent_worker::engine::Engine::builder()
        .model(agent_worker::engine::BedrockModel::new(
            bedrock.client(),
            support::MODEL_ID,
        ))
        .store(store)
        .config(support::config())
        .build()
        .unwrap();
    let server = start(AgentTaskHandler::new(engine), |_| {}).await;
    let client = &server.client;
    let task = client
        .create_agent_task(&TaskRequestBody::new("Hello"))
        .await
        .unwrap();
    // 600 KB of input: within the JSON limit, beyond what one stored message holds.
    let huge = "word ".repeat(120_000);
    let message = unprocessable(
        client
            .execute_agent_task_step(&task.task_id, Some(&StepRequestBody::new(huge)))
            .await,
    );
    assert!(
        message.contains("invalid_prompt") && message.contains("prompt.text"),
        "{message}"
    );
    assert!(bedrock.requests().is_empty(), "the model was not called");
}

#[tokio::test]
async fn the_bedrock_engine_over_agent_protocol_keeps_the_conversation() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let engine = support::engine(&bedrock, &store, support::config(), Vec::new());
    let server = start(AgentTaskHandler::new(engine), |_| {}).await;
    let client = &server.client;

    bedrock.push(Reply::text("Washington it is."));
    bedrock.push(Reply::text("Still Washington."));
    let task = client
        .create_agent_task(&TaskRequestBody::new("Name a US state."))
        .await
        .unwrap();
    let one = client.execute_agent_task_step(&task.task_id, None).await.unwrap();
    assert_eq!(one.output.as_deref(), Some("Washington it is."));
    assert!(!one.is_last, "the engine's tasks go on while steps come");
    let two = client
        .execute_agent_task_step(&task.task_id, Some(&StepRequestBody::new("Again?")))
        .await
        .unwrap();
    assert_eq!(two.output.as_deref(), Some("Still Washington."));

    let requests = bedrock.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap();
    let texts: Vec<&str> = messages
        .iter()
        .map(|m| m["content"][0]["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        texts,
        ["Name a US state.", "Washington it is.", "Again?"],
        "the second step sees the first"
    );

    // A model failure is a failed step: 500 with the engine's code, and no step stored.
    bedrock.push(Reply::http_error(400, "ValidationException", "bad request"));
    let message = server_error(
        client
            .execute_agent_task_step(&task.task_id, Some(&StepRequestBody::new("x")))
            .await,
    );
    assert!(message.contains("model_rejected"), "{message}");
    let steps = client
        .list_agent_task_steps(&task.task_id, PageRequest::default())
        .await
        .unwrap();
    assert_eq!(steps.steps.len(), 2);
}

#[tokio::test]
async fn replicas_on_one_dynamodb_table_serve_the_same_tasks() {
    let (sessions, tasks) = dynamo_task_store().await;
    let bedrock = BedrockStandIn::start().await.unwrap();
    let engine = || {
        agent_worker::engine::Engine::builder()
            .model(agent_worker::engine::BedrockModel::new(
                bedrock.client(),
                support::MODEL_ID,
            ))
            .store(sessions.clone())
            .config(support::config())
            .build()
            .unwrap()
    };
    // Two replicas with a shared workspace (a mounted volume, say) and one table.
    let workspace = new_workspace();
    let a = start_on(
        AgentTaskHandler::new(engine()),
        tasks.clone(),
        workspace.clone(),
        |_| {},
    )
    .await;
    let b = start_on(AgentTaskHandler::new(engine()), tasks.clone(), workspace, |_| {}).await;

    bedrock.push(Reply::text("First answer."));
    bedrock.push(Reply::text("Second answer."));
    let task = a
        .client
        .create_agent_task(&TaskRequestBody::new("Question one?"))
        .await
        .unwrap();
    let one = a
        .client
        .execute_agent_task_step(&task.task_id, None)
        .await
        .unwrap();
    let two = b
        .client
        .execute_agent_task_step(&task.task_id, Some(&StepRequestBody::new("Question two?")))
        .await
        .unwrap();
    assert_eq!(two.output.as_deref(), Some("Second answer."));
    let second_request = &bedrock.requests()[1].body;
    let texts: Vec<&str> = second_request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"][0]["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        texts,
        ["Question one?", "First answer.", "Question two?"],
        "replica B continued A's conversation"
    );

    let steps = b
        .client
        .list_agent_task_steps(&task.task_id, PageRequest::default())
        .await
        .unwrap();
    assert_eq!(steps.steps, vec![one, two]);
    assert_eq!(
        b.client
            .list_agent_tasks(PageRequest::default())
            .await
            .unwrap()
            .tasks,
        vec![task.clone()]
    );

    let artifact = a
        .client
        .upload_agent_task_artifacts(&task.task_id, ArtifactUpload::new("a.txt", "shared"))
        .await
        .unwrap();
    assert_eq!(
        &b.client
            .download_agent_task_artifact(&task.task_id, &artifact.artifact_id)
            .await
            .unwrap()[..],
        b"shared"
    );

    // The store refuses a step or an artifact for a task it does not hold.
    let orphan = Step {
        task_id: "missing".into(),
        step_id: "s".into(),
        name: None,
        status: StepStatus::Completed,
        input: None,
        additional_input: None,
        output: None,
        additional_output: None,
        artifacts: Vec::new(),
        is_last: false,
    };
    let crowded = Step {
        artifacts: (0..=MAX_STEP_ARTIFACTS)
            .map(|i| Artifact::agent_created(format!("{i}.txt"), None))
            .collect(),
        ..orphan.clone()
    };
    assert!(matches!(tasks.add_step(orphan).await, Err(TaskStoreError::NoTask(id)) if id == "missing"));
    // A step with more artifacts than one write holds is refused as such, before anything is written.
    assert!(matches!(
        tasks.add_step(crowded).await,
        Err(TaskStoreError::TooManyArtifacts { limit: MAX_STEP_ARTIFACTS, given }) if given == MAX_STEP_ARTIFACTS + 1
    ));
    let stray = Artifact::agent_created("x", None);
    assert!(matches!(
        tasks.add_artifact("missing", stray).await,
        Err(TaskStoreError::NoTask(_))
    ));
    assert_eq!(tasks.task("missing").await.unwrap(), None::<Task>);
}

#[tokio::test]
async fn dynamodb_pages_count_and_order_like_memory() {
    let (_, store) = dynamo_task_store().await;
    let memory = MemoryTaskStore::new();
    for n in 0..5 {
        let task = Task {
            task_id: uuid::Uuid::now_v7().to_string(),
            input: Some(format!("task {n}")),
            additional_input: None,
            artifacts: Vec::new(),
        };
        store.create_task(task.clone()).await.unwrap();
        memory.create_task(task).await.unwrap();
    }
    for page in [
        PageRequest::new(1, 2),
        PageRequest::new(2, 2),
        PageRequest::new(3, 2),
        PageRequest::new(4, 2),
        PageRequest::new(1, 10),
    ] {
        assert_eq!(
            store.tasks(page).await.unwrap(),
            memory.tasks(page).await.unwrap(),
            "{page:?}"
        );
    }
}

#[tokio::test]
async fn a_dropped_step_handler_is_started_again_for_its_next_step() {
    let starts = Arc::new(AtomicUsize::new(0));
    let counted = starts.clone();
    let handler = task_fn(move |task| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            let mut n = 0;
            Ok(step_fn(move |_input: Option<StepRequestBody>| {
                n += 1;
                let result = StepResult::output(format!("{} step {n}", task.task_id));
                async move { Ok(result) }
            }))
        }
    });
    let server = start(handler, |config| config.max_step_handlers = 1).await;
    let client = &server.client;
    let a = client
        .create_agent_task(&TaskRequestBody::new("a"))
        .await
        .unwrap();
    let first = client.execute_agent_task_step(&a.task_id, None).await.unwrap();
    assert!(first.output.unwrap().ends_with("step 1"));
    let _b = client
        .create_agent_task(&TaskRequestBody::new("b"))
        .await
        .unwrap();
    assert_eq!(starts.load(Ordering::SeqCst), 2);
    // A's handler was dropped for B's: A's next step starts it again, from its first state.
    let again = client.execute_agent_task_step(&a.task_id, None).await.unwrap();
    assert_eq!(starts.load(Ordering::SeqCst), 3);
    assert!(again.output.unwrap().ends_with("step 1"));
    assert_eq!(
        client
            .list_agent_task_steps(&a.task_id, PageRequest::default())
            .await
            .unwrap()
            .steps
            .len(),
        2
    );
}

#[tokio::test]
async fn a_standard_agent_is_served_and_its_session_end_is_the_last_step() {
    use agent_worker::agents::{AgentRuntime, Catalog, Known, MemoryThreadStore};
    let bedrock = BedrockStandIn::start().await.unwrap();
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents");
    let mut known = Known::with_builtins();
    known.tools.insert("current_time".into());
    let (catalog, _) = Catalog::load(&folder, &known).unwrap();
    let client = bedrock.client();
    let runtime = AgentRuntime::builder()
        .catalog(catalog)
        .tools(support::example_tools(&["current_time"]))
        .models(support::MODEL_ID, move |id| {
            Arc::new(agent_worker::engine::BedrockModel::new(client.clone(), id))
                as Arc<dyn agent_worker::engine::Model>
        })
        .session_store(MemoryStore::new())
        .thread_store(MemoryThreadStore::new())
        .engine_config(support::config())
        .build()
        .unwrap();
    let server = start(
        AgentTaskHandler::new(runtime.agent("approval_gate").unwrap()),
        |_| {},
    )
    .await;
    let client = &server.client;

    bedrock.push(Reply::text("Approve deleting the bucket?"));
    let task = client
        .create_agent_task(&TaskRequestBody::new("Delete the bucket."))
        .await
        .unwrap();
    let ask = client.execute_agent_task_step(&task.task_id, None).await.unwrap();
    assert_eq!(ask.output.as_deref(), Some("Approve deleting the bucket?"));
    assert!(!ask.is_last);
    assert_eq!(
        ask.additional_output.as_ref().unwrap()["sessionStatus"],
        "awaiting_human"
    );

    bedrock.push(Reply::tool_call(
        "c1",
        "record_decision",
        r#"{"decision":"approved"}"#,
    ));
    let decided = client
        .execute_agent_task_step(&task.task_id, Some(&StepRequestBody::new("Yes.")))
        .await
        .unwrap();
    assert!(decided.is_last, "the session ended, so the task did");
    assert_eq!(
        decided.additional_output.as_ref().unwrap()["end"]["message"],
        "approved"
    );
}

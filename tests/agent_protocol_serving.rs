//! The Agent Protocol v1 server as it is served: the generated OpenAPI document against the pinned
//! specification and its schemas against the server's answers, every operation routed, any agent and
//! the Bedrock engine served, replicas on one DynamoDB table, a dropped step handler, a Standard
//! Agent's session.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_worker::hosts::agent_protocol::{
    AgentTaskHandler, Artifact, ArtifactUpload, Operation, PageRequest, StepRequestBody, StepResult,
    StepStatus, TaskRequestBody, openapi, step_fn, task_fn,
};
use agent_worker::hosts::agent_protocol::{
    MAX_STEP_ARTIFACTS, MemoryTaskStore, Step, Task, TaskStore, TaskStoreError,
};
use agent_worker::protocol::{AgentEvent, agent_fn};
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{BedrockStandIn, Reply};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::agent_protocol::*;

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

//! The Agent Protocol v1 server over real HTTP on 127.0.0.1, driven by the typed client: every
//! operation, every error the specification names, uploads, and the handler contract.
//! `agent_protocol_serving.rs` has the generated document and the agents served.

use crate::support;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_worker::hosts::agent_protocol::{
    ArtifactUpload, ClientError, PageRequest, StepFailed, StepRequestBody, StepResult, StepStatus,
    TaskFailed, TaskRequestBody, step_fn, task_fn,
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::agent_protocol::*;

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

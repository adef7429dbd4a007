//! The HTTP API's OpenAPI document: the repository's copy is the host's, it is OpenAPI 3.1 by a
//! validator nobody here wrote, the host serves it, and the router serves every operation in it
//! and nothing else (on each documented path, no other method). That every answer follows it is
//! checked on every answer of every in-process test server (`support::openapi`).

use crate::support;

use agent_worker::hosts::container::Route;
use agent_worker::hosts::container::openapi::document;
use agent_worker::hosts::container::routes::{Door, Method};
use serde_json::Value;

const CHECKED_IN: &str = "docs/openapi.json";

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_repositorys_document_is_the_hosts() {
    let kept = std::fs::read_to_string(root().join(CHECKED_IN)).unwrap_or_default();
    let made = format!("{}\n", serde_json::to_string_pretty(&document()).unwrap());
    assert!(
        kept == made,
        "{CHECKED_IN} is not the host's document: `make openapi` writes it (then commit it)"
    );
}

#[test]
fn the_document_is_openapi_3_1_by_openapi_spec_validator() {
    let file = std::env::temp_dir().join(format!("openapi-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, document().to_string()).unwrap();
    let out = std::process::Command::new(root().join(".venv/bin/python"))
        .args([
            "-c",
            "import sys, json\n\
             from openapi_spec_validator import OpenAPIV31SpecValidator\n\
             spec = json.load(open(sys.argv[1]))\n\
             errors = [str(e.message) + ' at ' + '/'.join(map(str, e.absolute_path)) for e in OpenAPIV31SpecValidator(spec).iter_errors()]\n\
             print('\\n'.join(errors)); sys.exit(1 if errors else 0)",
        ])
        .arg(&file)
        .output()
        .expect("the project's venv (make venv) runs");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "the document is not valid OpenAPI 3.1:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_route_is_in_the_document_once_with_its_parameters() {
    let doc = document();
    let mut ids = std::collections::HashSet::new();
    for &route in Route::ALL {
        let operation = &doc["paths"][route.path()][route.method().as_str()];
        assert!(operation.is_object(), "{route:?} is not in the document");
        assert!(
            ids.insert(operation["operationId"].as_str().unwrap().to_owned()),
            "{route:?}'s id repeats"
        );
        let named: Vec<&str> = operation["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["in"] == "path")
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(named, route.path_params().collect::<Vec<_>>(), "{route:?}");
    }
    let declared: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(
        declared,
        Route::ALL.len(),
        "the document declares an operation no route has"
    );
}

/// `route`'s path with each parameter filled in.
fn filled(route: Route) -> String {
    route
        .path()
        .split('/')
        .map(|s| if s.starts_with('{') { "x" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

fn method_of(method: Method) -> reqwest::Method {
    match method {
        Method::Get => reqwest::Method::GET,
        Method::Post => reqwest::Method::POST,
        Method::Put => reqwest::Method::PUT,
        Method::Delete => reqwest::Method::DELETE,
    }
}

/// Whether an answer is the router's own for what it does not serve.
fn unserved(status: u16, body: &Value) -> bool {
    (status == 404 && body["error"] == "no such route")
        || (status == 405 && body["error"] == "the route does not take this method")
}

#[tokio::test]
async fn the_router_serves_every_route_of_the_document_and_nothing_else() {
    let server = support::container::server(2, support::config(), std::time::Duration::from_secs(5)).await;
    let client = reqwest::Client::new();
    // The console's routes are served where the host has a console (tests/console.rs).
    for route in Route::ALL.iter().copied().filter(|r| r.door() != Door::Console) {
        let request = client.request(
            method_of(route.method()),
            format!("{}{}", server.url, filled(route)),
        );
        let (status, body) = support::container::send(request, Some(support::container::KEY)).await;
        assert!(
            !unserved(status, &body),
            "{route:?} is not served: {status} {body}"
        );
    }
    // What the document does not declare is not served: on each of its paths, every other
    // method; and paths it does not have.
    let doc = document();
    let methods = [
        reqwest::Method::GET,
        reqwest::Method::POST,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
        reqwest::Method::PATCH,
    ];
    for route in Route::ALL.iter().copied().filter(|r| r.door() != Door::Console) {
        let declared = &doc["paths"][route.path()];
        for method in methods
            .iter()
            .filter(|m| declared.get(m.as_str().to_ascii_lowercase()).is_none())
        {
            let request = client.request(method.clone(), format!("{}{}", server.url, filled(route)));
            let (status, body) = support::container::send(request, Some(support::container::KEY)).await;
            assert!(
                unserved(status, &body),
                "{method} {} is served: {status} {body}",
                route.path()
            );
        }
    }
    for path in [
        "/turns/x",
        "/nothing",
        "/conversations/x/files/x/more",
        "/a2a/tasks/x/y",
    ] {
        let request = client.get(format!("{}{path}", server.url));
        let (status, body) = support::container::send(request, Some(support::container::KEY)).await;
        assert!(unserved(status, &body), "GET {path} is served: {status} {body}");
    }
}

#[tokio::test]
async fn the_host_serves_its_document_to_anyone() {
    let server = support::container::server(2, support::config(), std::time::Duration::from_secs(5)).await;
    let request = reqwest::Client::new().get(format!("{}/openapi.json", server.url));
    let (status, body) = support::container::send(request, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(&body, support::openapi::document());
}

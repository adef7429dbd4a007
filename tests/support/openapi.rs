//! Every answer the container's test servers give, checked against the OpenAPI document: the
//! layer [`checked`] wraps each server's router in (`support::container`), so that an answer a
//! test receives and the document disagree on fails the test, whichever test it is.
//!
//! A JSON answer is validated against the schema the document gives its route and status
//! (`4XX`, `5XX` and `default` where no exact status is listed); another answer's media type must
//! be one the document lists; an event stream's events are checked as they are read
//! ([`check_event`]). A path no route serves must be answered in the error shape. A JSON body a
//! route took (2xx) must be one the document says it reads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{Value, json};

/// The document, made once.
pub fn document() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(agent_worker::hosts::container::openapi::document)
}

/// A validator for the schema at `pointer` in the document (its references resolved there).
fn validator(pointer: &str) -> Arc<jsonschema::Validator> {
    static VALIDATORS: OnceLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> = OnceLock::new();
    let mut validators = VALIDATORS.get_or_init(Default::default).lock().unwrap();
    validators
        .entry(pointer.to_owned())
        .or_insert_with(|| {
            let mut root = document().clone();
            // A fragment is a URI's: the braces of a path template escaped.
            root["$ref"] = json!(format!("#{}", pointer.replace('{', "%7B").replace('}', "%7D")));
            Arc::new(
                jsonschema::draft202012::options()
                    .build(&root)
                    .unwrap_or_else(|e| panic!("the schema at {pointer} does not compile: {e}")),
            )
        })
        .clone()
}

/// How `value` does not follow the schema at `pointer`: one line an error.
fn errors_of(pointer: &str, value: &Value) -> Vec<String> {
    validator(pointer)
        .iter_errors(value)
        .map(|e| format!("{e} (at {})", e.instance_path()))
        .collect()
}

/// What is wrong when a route took (2xx) a JSON body the document says it does not read.
fn taken_unread(method: &Method, path: &str, status: u16, sent: &[u8]) -> Option<String> {
    let template = template_of(path)?;
    let method = method.as_str().to_ascii_lowercase();
    let body = document()["paths"][template][&method].get("requestBody")?;
    let schema = body["content"].get("application/json")?.get("schema")?;
    let optional_and_none = sent.is_empty() && body["required"] != json!(true);
    if !(200..300).contains(&status) || schema == &json!({}) || optional_and_none {
        return None;
    }
    let Ok(value) = serde_json::from_slice::<Value>(sent) else {
        return Some(format!("took a body that is not JSON ({status})"));
    };
    let pointer = format!(
        "/paths/{}/{method}/requestBody/content/application~1json/schema",
        token(template)
    );
    let errors = errors_of(&pointer, &value);
    (!errors.is_empty()).then(|| {
        format!(
            "took ({status}) a body the document does not say it reads: {}: {value}",
            errors.join("; ")
        )
    })
}

/// `text` escaped as a JSON pointer's token.
fn token(text: &str) -> String {
    text.replace('~', "~0").replace('/', "~1")
}

/// The document's path template that `path` is, the one with the most literal segments.
pub fn template_of(path: &str) -> Option<&'static str> {
    let segments: Vec<&str> = path.split('/').collect();
    document()["paths"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|template| {
            let parts: Vec<&str> = template.split('/').collect();
            parts.len() == segments.len()
                && parts.iter().zip(&segments).all(|(part, segment)| {
                    part == segment || (part.starts_with('{') && part.ends_with('}') && !segment.is_empty())
                })
        })
        .max_by_key(|template| template.split('/').filter(|part| !part.starts_with('{')).count())
        .map(String::as_str)
}

/// What is wrong with an answer, if anything.
pub fn violation(method: &Method, path: &str, status: u16, media: &str, body: &[u8]) -> Option<String> {
    let error_body = "/components/schemas/ErrorBody";
    let json_of = |pointer: &str| -> Option<String> {
        let value: Value = match serde_json::from_slice(body) {
            Ok(value) => value,
            Err(e) => {
                return Some(format!(
                    "the body is not JSON ({e}): {}",
                    String::from_utf8_lossy(body)
                ));
            }
        };
        let errors = errors_of(pointer, &value);
        (!errors.is_empty()).then(|| format!("{} against {pointer}: {value}", errors.join("; ")))
    };
    let Some(template) = template_of(path) else {
        // No route: the router's refusal (or the credential check's before it), in the one shape.
        return json_of(error_body);
    };
    let item = &document()["paths"][template];
    let Some(operation) = item.get(method.as_str().to_ascii_lowercase()) else {
        return json_of(error_body);
    };
    let responses = operation["responses"].as_object().unwrap();
    let range = format!("{}XX", status / 100);
    let Some((key, response)) = [status.to_string(), range, "default".to_owned()]
        .into_iter()
        .find_map(|key| responses.get(&key).map(|response| (key, response)))
    else {
        return Some(format!("status {status} is not in the document"));
    };
    let Some(content) = response.get("content").and_then(Value::as_object) else {
        return (!body.is_empty()).then(|| format!("a body where the document says none ({key})"));
    };
    if content.contains_key("*/*") && content.len() == 1 && content["*/*"]["schema"] == json!({}) {
        return None; // The protocol's own answer.
    }
    if media == "application/json" && content.contains_key("application/json") {
        let pointer = format!(
            "/paths/{}/{}/responses/{key}/content/application~1json/schema",
            token(template),
            method.as_str().to_ascii_lowercase()
        );
        return json_of(&pointer);
    }
    let listed = content.contains_key(media) || content.contains_key("*/*");
    (!listed).then(|| {
        format!(
            "{media} is not a media type the document lists ({key}: {:?})",
            content.keys()
        )
    })
}

/// The violations each server's answers made, by its address: what [`violations_of`] takes.
fn recorded() -> &'static Mutex<HashMap<String, Vec<String>>> {
    static RECORDED: OnceLock<Mutex<HashMap<String, Vec<String>>>> = OnceLock::new();
    RECORDED.get_or_init(Default::default)
}

/// The violations the server at `url` made so far, taken.
pub fn violations_of(url: &str) -> Vec<String> {
    recorded().lock().unwrap().remove(url).unwrap_or_default()
}

/// Fails the test, when it goes, if any answer of the server at its URL did not follow the
/// document (a test that tolerated the dropped connection included).
pub struct Checked(pub String);

impl Drop for Checked {
    fn drop(&mut self) {
        let violations = violations_of(&self.0);
        if !violations.is_empty() && !std::thread::panicking() {
            panic!(
                "answers that do not follow the OpenAPI document:\n{}",
                violations.join("\n")
            );
        }
    }
}

/// Records `problem` for the server at `url`, then fails the answer (its connection dropped, the
/// violation printed), so that the test fails whether or not it looks at the answer.
fn violated(url: &str, problem: String) -> ! {
    recorded()
        .lock()
        .unwrap()
        .entry(url.to_owned())
        .or_default()
        .push(problem.clone());
    panic!("{problem}");
}

/// Fails the test when an answer and the document disagree.
async fn check(
    axum::extract::State(url): axum::extract::State<String>,
    request: Request,
    next: Next,
) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    // A JSON body, kept to be checked against what the document says the route reads.
    let is_json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let (request, sent) = if is_json {
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
        (Request::from_parts(parts, Body::from(bytes.clone())), Some(bytes))
    } else {
        (request, None)
    };
    let response = next.run(request).await;
    if let Some(problem) =
        sent.and_then(|sent| taken_unread(&method, &path, response.status().as_u16(), &sent))
    {
        violated(&url, format!("{method} {path}: {problem}"));
    }
    if method == Method::OPTIONS {
        return response; // A preflight, answered by the CORS layer before any route.
    }
    let media = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    let status = response.status().as_u16();
    if media == "text/event-stream" {
        // A stream is read as it comes; its events are checked by the reader.
        if let Some(problem) = violation(&method, &path, status, &media, b"") {
            violated(&url, format!("{method} {path}: {status}: {problem}"));
        }
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    if let Some(problem) = violation(&method, &path, status, &media, &bytes) {
        violated(
            &url,
            format!("{method} {path}: {status} does not follow the OpenAPI document: {problem}"),
        );
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// `router`, served at `url`, with every answer checked against the document.
pub fn checked(router: Router, url: String) -> Router {
    router.layer(axum::middleware::from_fn_with_state(url, check))
}

/// Checks one event of a turn's event stream (its SSE data) against the document.
pub fn check_event(data: &Value) {
    let pointer =
        "/paths/~1turns~1{turn_id}~1events/get/responses/200/content/text~1event-stream/x-event-data";
    let errors = errors_of(pointer, data);
    assert!(
        errors.is_empty(),
        "an event that does not follow the document: {data}: {errors:?}"
    );
}

/// [`serve`](agent_worker::hosts::container::serve) with every answer checked: what the tests'
/// servers run on.
pub async fn serve_checked(
    listener: tokio::net::TcpListener,
    host: agent_worker::hosts::container::ContainerHost,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let url = format!("http://{}", listener.local_addr()?);
    let router = checked(host.router(), url);
    agent_worker::hosts::container::serve_router(listener, host, router, shutdown).await
}

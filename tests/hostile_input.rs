//! Hostile input: a property-driven fuzz harness (proptest; `cargo fuzz` needs nightly, which
//! this project does not assume) for every decoder that takes bytes from outside: the turn
//! payload, the prompt and its pictures, PDF text, the Agent Protocol's paths and multipart
//! uploads, the OpenAPI loader and the Standard Agents loader.
//!
//! Each target starts from its seed corpus in `tests/corpus/<target>/` and mutates it: bytes
//! flipped, cut, spliced with hostile tokens; JSON values replaced, dropped, deepened. A case
//! passes when the decoder answers (an error that says what is wrong, or a value) without
//! panicking. Each target runs a bounded number of cases (`PROPTEST_CASES` raises it for a longer
//! run); a failing case is kept in `tests/hostile_input.proptest-regressions` and replayed first.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use agent_worker::agents::validate::check_document;
use agent_worker::engine::attachments::{image_size, pdf_text};
use agent_worker::engine::tools::openapi::{OpenApiOptions, load_openapi_tools};
use agent_worker::engine::user_message;
use agent_worker::hosts::AgentTurnPayload;
use agent_worker::protocol::{ImageRef, Prompt};
use agent_worker_testkit::DeskApi;
use base64::Engine as _;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Strings that have broken parsers and path checks before.
const HOSTILE: &[&str] = &[
    "../",
    "..\\",
    "%2e%2e%2f",
    "\0",
    "/etc/passwd",
    "C:\\Windows",
    "\u{202e}",
    "\u{feff}",
    "\r\n",
    "</user_input>",
    "<system>",
    "{{",
    "$ref",
    "#/components/schemas/",
    "endobj",
    "stream\n",
    "\u{10ffff}",
    "9999999999999999999999",
    "-1",
    "NaN",
    "\"",
    "'",
];

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&folder)
        .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect()
}

/// A document from a corpus file: JSON, or YAML read as JSON.
fn document(path: &Path, bytes: &[u8]) -> Value {
    if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    } else {
        serde_yaml::from_slice(bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}

/// Mutates bytes `rounds` times.
fn mutate_bytes(bytes: &mut Vec<u8>, rng: &mut fastrand::Rng, rounds: usize) {
    for _ in 0..rounds {
        let at = if bytes.is_empty() {
            0
        } else {
            rng.usize(..bytes.len())
        };
        match rng.u8(..6) {
            0 if !bytes.is_empty() => bytes[at] ^= 1 << rng.u8(..8),
            1 => bytes.insert(at, rng.u8(..)),
            2 if !bytes.is_empty() => {
                bytes.remove(at);
            }
            3 => bytes.truncate(at),
            4 => {
                let token = HOSTILE[rng.usize(..HOSTILE.len())].as_bytes();
                bytes.splice(at..at, token.iter().copied());
            }
            _ if !bytes.is_empty() => {
                // Repeat a slice: lengths and counts that run past the end.
                let end = (at + rng.usize(1..64)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                bytes.splice(at..at, copy);
            }
            _ => bytes.push(rng.u8(..)),
        }
    }
}

/// A JSON value an attacker might put anywhere.
fn hostile_value(rng: &mut fastrand::Rng, depth: u32) -> Value {
    match rng.u8(..9) {
        0 => Value::Null,
        1 => json!(rng.bool()),
        2 => json!(rng.i64(..)),
        3 => json!([1e308, -0.0, f64::MIN_POSITIVE, 0.1, -1e-300][rng.usize(..5)]),
        4 => json!(HOSTILE[rng.usize(..HOSTILE.len())]),
        5 => json!("x".repeat(rng.usize(0..70_000))),
        6 if depth < 6 => Value::Array(
            (0..rng.usize(0..4))
                .map(|_| hostile_value(rng, depth + 1))
                .collect(),
        ),
        7 if depth < 6 => {
            let mut map = Map::new();
            for _ in 0..rng.usize(0..4) {
                map.insert(
                    HOSTILE[rng.usize(..HOSTILE.len())].to_owned(),
                    hostile_value(rng, depth + 1),
                );
            }
            Value::Object(map)
        }
        _ => json!(""),
    }
}

/// Replaces, drops or deepens values at random places, `rounds` times.
fn mutate_json(value: &mut Value, rng: &mut fastrand::Rng, rounds: usize) {
    for _ in 0..rounds {
        let mut at = &mut *value;
        // Walk down a random path, stopping at random.
        loop {
            let next_index = match &*at {
                Value::Object(map) if !map.is_empty() && rng.bool() => Some(rng.usize(..map.len())),
                Value::Array(items) if !items.is_empty() && rng.bool() => Some(rng.usize(..items.len())),
                _ => None,
            };
            let Some(index) = next_index else { break };
            at = match at {
                Value::Object(map) => map.values_mut().nth(index).expect("in range"),
                Value::Array(items) => &mut items[index],
                _ => unreachable!("only containers have an index"),
            };
        }
        match (rng.u8(..3), &mut *at) {
            (0, Value::Object(map)) if !map.is_empty() => {
                let key = map.keys().nth(rng.usize(..map.len())).cloned().expect("in range");
                map.remove(&key);
            }
            (1, Value::Object(map)) => {
                map.insert(
                    HOSTILE[rng.usize(..HOSTILE.len())].to_owned(),
                    hostile_value(rng, 0),
                );
            }
            _ => *at = hostile_value(rng, 0),
        }
    }
}

/// How many cases a target runs: `floor`, or more when `PROPTEST_CASES` asks. Fewer than the
/// floor, or a value that is not a number, is refused: a run that quietly checks less (or
/// nothing, with `0`) must not pass as one that checked.
fn cases(floor: u32) -> u32 {
    match std::env::var("PROPTEST_CASES") {
        Err(_) => floor,
        Ok(value) => match value.parse::<u32>() {
            Ok(n) if n >= floor => n,
            _ => panic!("PROPTEST_CASES={value:?}: this target runs at least {floor} cases"),
        },
    }
}

fn config(floor: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(floor),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// The turn payload decoder: mutated bytes and mutated JSON. An error names where.
    #[test]
    fn the_turn_payload_decoder_answers_every_body(seed in any::<u64>(), rounds in 1usize..8, as_json in any::<bool>()) {
        let seeds = corpus("payload");
        let mut rng = fastrand::Rng::with_seed(seed);
        let (_, bytes) = &seeds[rng.usize(..seeds.len())];
        let body = if as_json {
            let mut value: Value = serde_json::from_slice(bytes).unwrap();
            mutate_json(&mut value, &mut rng, rounds);
            value.to_string()
        } else {
            let mut bytes = bytes.clone();
            mutate_bytes(&mut bytes, &mut rng, rounds);
            String::from_utf8_lossy(&bytes).into_owned()
        };
        match AgentTurnPayload::decode(&body) {
            Ok(turn) => {
                // What decodes is a turn the engine can take: it must build a scope and a prompt.
                prop_assert!(!turn.turn_id.is_empty() && !turn.conversation_id.is_empty());
                let _ = (turn.scope(), turn.prompt());
            }
            Err(e) => prop_assert!(!e.message.is_empty(), "an error that says nothing: {e:?}"),
        }
    }

    /// The prompt decoder with hostile pictures: bad base64, wrong types, mutated PNG headers.
    #[test]
    fn the_prompt_decoder_refuses_bad_pictures_with_a_reason(seed in any::<u64>(), rounds in 0usize..6) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x01\x00\x00\x00\x00\x80\x08\x06\x00\x00\x00".to_vec();
        mutate_bytes(&mut png, &mut rng, rounds);
        let _ = image_size(&png);
        let data = match rng.u8(..3) {
            0 => base64::engine::general_purpose::STANDARD.encode(&png),
            1 => String::from_utf8_lossy(&png).into_owned(),
            _ => HOSTILE[rng.usize(..HOSTILE.len())].to_owned(),
        };
        let mime_type = ["image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml", "", "text/html"][rng.usize(..7)];
        let prompt = Prompt::text(HOSTILE[rng.usize(..HOSTILE.len())])
            .with_image(ImageRef { mime_type: mime_type.to_owned(), data });
        if let Err(e) = user_message(&prompt) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    /// PDF text: mutated real PDFs (compressed streams, xref) are read or named unreadable.
    #[test]
    fn the_pdf_reader_survives_mutated_files(seed in any::<u64>(), rounds in 1usize..10) {
        static PDF: OnceLock<Vec<u8>> = OnceLock::new();
        let pdf = PDF.get_or_init(|| agent_worker_testkit::files::pdf(&["Quarterly figures", "Second page (with) \\ escapes"]));
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut bytes = pdf.clone();
        mutate_bytes(&mut bytes, &mut rng, rounds);
        if let Err(e) = pdf_text(&bytes) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    /// The OpenAPI loader: mutated documents load, or every problem is listed.
    #[test]
    fn the_openapi_loader_answers_every_document(seed in any::<u64>(), rounds in 1usize..6) {
        let mut seeds: Vec<Value> = corpus("openapi").iter().map(|(p, b)| document(p, b)).collect();
        seeds.push(DeskApi::document());
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut value = seeds[rng.usize(..seeds.len())].clone();
        mutate_json(&mut value, &mut rng, rounds);
        let options = OpenApiOptions::new("http://127.0.0.1:9", |_| Ok(Vec::new()));
        if let Err(e) = load_openapi_tools(&value, options) {
            prop_assert!(!e.problems.is_empty());
        }
    }

    /// The Standard Agents loader: a document that does not decode has an error issue.
    #[test]
    fn the_agents_loader_answers_every_definition(seed in any::<u64>(), rounds in 1usize..6) {
        let seeds: Vec<Value> = corpus("agents").iter().map(|(p, b)| document(p, b)).collect();
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut value = seeds[rng.usize(..seeds.len())].clone();
        mutate_json(&mut value, &mut rng, rounds);
        let (decoded, issues) = check_document(&value, "fuzz.yaml");
        if decoded.is_none() {
            prop_assert!(
                issues.iter().any(|i| i.severity == agent_worker::agents::validate::Severity::Error),
                "refused without an error: {issues:?}"
            );
        }
    }
}

/// The Agent Protocol server's paths, queries and multipart uploads, over real HTTP: every
/// answer is a 4xx or a success, nothing is written outside the workspace, and the server still
/// serves afterwards.
#[tokio::test]
async fn the_agent_protocol_server_answers_hostile_paths_and_uploads() {
    use agent_worker::hosts::agent_protocol::{
        AgentProtocolServer, ServerConfig, StepResult, Workspace, serve, step_fn, task_fn,
    };
    let root = std::env::temp_dir().join(format!("ap-fuzz-{}", uuid::Uuid::new_v4().simple()));
    // Deep enough inside `root` that no `..` chain the inputs make climbs out of it: the tree
    // checked at the end is the whole tree a relative path could reach.
    let workspace = root.join("1/2/3/4/5/6/7/8/workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    // An absolute `relative_path` (`/tmp`) or file name (`/etc/passwd…`) could reach outside
    // it: what the inputs name there is looked at before and after.
    let absolute = absolute_targets();
    let handler = task_fn(|_task| async {
        Ok(step_fn(|_input| async {
            Ok(StepResult::output("done").last(true))
        }))
    });
    let server = AgentProtocolServer::new(handler, ServerConfig::new(Workspace::new(&workspace)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, server, async move {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    let task: Value = http
        .post(format!("{url}/ap/v1/agent/tasks"))
        .json(&json!({"input": "hello"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task_id = task["task_id"].as_str().unwrap().to_owned();

    let cases = u64::from(cases(400));
    let segments = [
        "ap",
        "v1",
        "agent",
        "tasks",
        &task_id,
        "steps",
        "artifacts",
        "..",
        "%2e%2e",
        "%2F",
        "%00",
        "",
        "ap%2Fv1",
        "\u{202e}",
        "x",
    ];
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    for case in 0..cases {
        let mut path = String::from("/ap/v1/agent/tasks");
        for _ in 0..rng.usize(0..5) {
            path.push('/');
            path.push_str(segments[rng.usize(..segments.len())]);
        }
        if rng.bool() {
            path.push_str(&format!(
                "?current_page={}&page_size={}",
                ["-1", "0", "1", "99999999999999999999", "x", ""][rng.usize(..6)],
                ["-5", "0", "10", "100000", "%00", ""][rng.usize(..6)],
            ));
        }
        // What was sent, for the failure message.
        let mut sent = path.clone();
        let request = match rng.u8(..4) {
            0 => http.get(format!("{url}{path}")),
            1 => http.delete(format!("{url}{path}")),
            2 => {
                let mut body = json!({"input": "x", "additional_input": {}});
                mutate_json(&mut body, &mut rng, 3);
                let mut bytes = body.to_string().into_bytes();
                if rng.bool() {
                    mutate_bytes(&mut bytes, &mut rng, 2);
                }
                http.post(format!("{url}{path}"))
                    .header("content-type", "application/json")
                    .body(bytes)
            }
            _ => {
                let name = format!(
                    "{}{}",
                    HOSTILE[rng.usize(..HOSTILE.len())],
                    ["pwned.txt", "", ".", "a/b.txt"][rng.usize(..4)]
                );
                sent = format!("upload {name:?}");
                let mut form = reqwest::multipart::Form::new().part(
                    "file",
                    reqwest::multipart::Part::bytes(vec![b'x'; rng.usize(0..2048)]).file_name(name),
                );
                if rng.bool() {
                    let relative = format!(
                        "{}{}",
                        HOSTILE[rng.usize(..HOSTILE.len())],
                        ["", "..", "/tmp", "a/../../b"][rng.usize(..4)]
                    );
                    sent.push_str(&format!(" in {relative:?}"));
                    form = form.text("relative_path", relative);
                }
                let target = if rng.bool() {
                    format!("{url}/ap/v1/agent/tasks/{task_id}/artifacts")
                } else {
                    format!("{url}{path}")
                };
                sent.push_str(&format!(" to {target}"));
                if rng.u8(..4) == 0 {
                    // A multipart body cut short: the boundary never closes.
                    http.post(target)
                        .header("content-type", "multipart/form-data; boundary=xyz")
                        .body("--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nabc")
                } else {
                    http.post(target).multipart(form)
                }
            }
        };
        let response = request.send().await.unwrap();
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        assert!(
            !status.is_server_error(),
            "case {case}: {sent} answered {status}: {body}"
        );
    }

    // Nothing escaped the workspace: every path under the root is the workspace's, or one of
    // the folders it sits in; and nothing the inputs name appeared under `/tmp`.
    let outside: Vec<_> = paths_under(&root)
        .into_iter()
        .filter(|path| !path.starts_with(&workspace) && !workspace.starts_with(path))
        .collect();
    assert!(outside.is_empty(), "written outside the workspace: {outside:?}");
    assert_eq!(absolute_targets(), absolute, "written under /tmp");
    let still = http.get(format!("{url}/ap/v1/agent/tasks")).send().await.unwrap();
    assert_eq!(still.status(), reqwest::StatusCode::OK);
    drop(stop);
    let _ = std::fs::remove_dir_all(&root);
}

/// Every file and folder under `root`, at any depth.
fn paths_under(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path.clone());
            }
            found.push(path);
        }
    }
    found
}

/// What is at the absolute paths the inputs name (under `/tmp`, and `/etc/passwd`): each path
/// with its length and modification time, if it exists.
fn absolute_targets() -> Vec<(String, Option<(u64, std::time::SystemTime)>)> {
    let mut names: Vec<String> = [
        "/tmp/pwned.txt",
        "/tmp/a/b.txt",
        "/tmp/b",
        "/etc/passwd",
        "/etc/passwdpwned.txt",
    ]
    .map(str::to_owned)
    .to_vec();
    names.extend(HOSTILE.iter().map(|prefix| format!("/tmp/{prefix}pwned.txt")));
    names
        .into_iter()
        .map(|name| {
            let seen = std::fs::metadata(&name)
                .ok()
                .and_then(|m| Some((m.len(), m.modified().ok()?)));
            (name, seen)
        })
        .collect()
}

//! The typed client in clients/typescript: its types are what openapi-typescript makes of the
//! repository's document, its build is what tsc makes of its source, and, run by Node against a
//! live host, it sends a turn, streams the turn's events, resumes a dropped stream after the last
//! event it gave (no event lost or given twice), reads the conversations and throws a refusal as
//! an `ApiError`. (The console uses the same build in Chromium: tests/browser/console.test.cjs.)

use crate::support;

use agent_worker_testkit::Reply;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn node_tool(name: &str) -> PathBuf {
    root().join(".node/node_modules/.bin").join(name)
}

fn run(command: &mut Command) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e} (make node-tools installs it)"));
    assert!(
        out.status.success(),
        "{command:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_clients_types_are_the_documents() {
    let made = std::env::temp_dir().join(format!("api-{}.ts", uuid::Uuid::new_v4().simple()));
    run(Command::new(node_tool("openapi-typescript"))
        .arg(root().join("docs/openapi.json"))
        .arg("--output")
        .arg(&made));
    let kept = read(&root().join("clients/typescript/src/api.ts"));
    let made_text = read(&made);
    let _ = std::fs::remove_file(&made);
    assert!(
        kept == made_text,
        "clients/typescript/src/api.ts is not the document's types: `make client` writes them"
    );
}

#[test]
fn the_clients_build_is_its_source() {
    let out = std::env::temp_dir().join(format!("client-dist-{}", uuid::Uuid::new_v4().simple()));
    run(Command::new(node_tool("tsc"))
        .arg("-p")
        .arg(root().join("clients/typescript/tsconfig.json"))
        .arg("--outDir")
        .arg(&out));
    for file in ["index.js", "index.d.ts", "api.js", "api.d.ts"] {
        let kept = read(&root().join("clients/typescript/dist").join(file));
        assert!(
            kept == read(&out.join(file)),
            "clients/typescript/dist/{file} is not what tsc builds: `make client` builds it"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn an_event_narrowed_by_its_type_is_typed_and_one_not_narrowed_is_not() {
    // clients/typescript/test/narrowing.ts holds the README's loop, and an expected error where
    // an event is used without narrowing: `tsc` fails on either going wrong.
    run(Command::new(node_tool("tsc"))
        .arg("-p")
        .arg(root().join("clients/typescript/test/tsconfig.json")));
}

#[tokio::test]
async fn the_client_sends_a_turn_streams_it_resumes_a_dropped_stream_and_reads_conversations() {
    let server = support::container::server(2, support::config(), std::time::Duration::from_secs(5)).await;
    server
        .bedrock
        .push(Reply::text("Hello through the typed client."));
    let session = format!("ts-{}", uuid::Uuid::new_v4().simple());
    let out = tokio::process::Command::new("node")
        .arg(root().join("tests/typescript/client.mjs"))
        .args([&server.url, support::container::KEY, &session])
        .output()
        .await
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();

    assert_eq!(got["accepted"]["turnId"], "t-1", "{got}");
    let events = got["events"].as_array().unwrap();
    assert!(events.len() >= 3, "a turn's events: {got}");
    let ids: Vec<u64> = events.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert_eq!(
        ids,
        (0..ids.len() as u64).collect::<Vec<_>>(),
        "every event, in order: {got}"
    );
    assert_eq!(
        events.last().unwrap()["type"],
        "completed",
        "to its terminal: {got}"
    );

    // Dropped after its first event, the stream was opened again after it: the same events.
    assert_eq!(got["resumed"], got["events"], "no event lost or given twice");
    assert_eq!(
        got["asked"],
        serde_json::json!([null, "0"]),
        "the second ask resumes after event 0"
    );
    assert_eq!(
        got["after"],
        serde_json::Value::Array(events[2..].to_vec()),
        "from a position"
    );

    assert!(
        got["listed"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(session)),
        "{got}"
    );
    assert_eq!(got["view"], serde_json::json!(["user", "assistant"]), "{got}");
    assert_eq!(got["refused"]["isApiError"], true, "{got}");
    assert_eq!(got["refused"]["status"], 404, "{got}");
}

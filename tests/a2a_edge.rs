//! A2A's edge, probed as a hostile or careless caller would (issue 52), against the official
//! client (`a2a-sdk`) and by hand, on moto and the Bedrock stand-in: a message into a context
//! whose task runs is a failed precondition naming the running task, on both bindings, and keeps
//! none of its files; a caller's `messageId` never names another task's turn; a task's status
//! time is when its state was set; a context whose id holds `/` keeps a file part.

use crate::support;

use agent_worker::engine::attachments::FileArea;
use agent_worker_testkit::{Reply, StreamScript};
use serde_json::{Value, json};
use support::a2a::World;
use support::container::{changed, table};

/// A `SendMessage` of `text` as message `id` in `context` (with a file part when `file`).
fn send(id: &str, context: &str, file: bool, immediately: bool) -> Value {
    let mut parts = vec![json!({"text": "Read this"})];
    if file {
        parts.push(json!({"raw": "aGVsbG8=", "filename": "hello.txt", "mediaType": "text/plain"}));
    }
    json!({
        "message": {"messageId": id, "contextId": context, "role": "ROLE_USER", "parts": parts},
        "configuration": {"returnImmediately": immediately},
    })
}

fn rpc(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

/// The table's items but the running turn `turn`'s own log, which moves on.
fn quiet(items: Vec<String>, turn: &str) -> Vec<String> {
    let log = format!("event#{turn}#");
    items.into_iter().filter(|i| !i.contains(&log)).collect()
}

#[tokio::test]
async fn a_message_into_a_busy_context_is_a_failed_precondition_naming_the_running_task_and_keeps_nothing() {
    let world = World::start().await;
    world
        .server
        .bedrock
        .push(StreamScript::new().open_text("Working").hang().into_reply());
    let started = world
        .rpc(
            "agent-a",
            &rpc("SendMessage", send("m-1", "ctx-busy", false, true)),
            Some("1.0"),
        )
        .await;
    let running_task = started["result"]["task"]["id"].clone();
    assert!(running_task.is_string(), "{started}");
    world.server.bedrock.requested(1).await;
    let before = quiet(table(&world.server.store).await, "m-1");

    // The JSON-RPC binding: A2A's failed precondition, with a file part that is not kept.
    let answer = world
        .rpc(
            "agent-a",
            &rpc("SendMessage", send("m-2", "ctx-busy", true, false)),
            Some("1.0"),
        )
        .await;
    let error = &answer["error"];
    assert_eq!(error["code"], -32004, "{answer}");
    assert_eq!(error["data"][0]["reason"], "UNSUPPORTED_OPERATION", "{answer}");
    assert_eq!(error["data"][0]["metadata"]["runningTurnId"], "m-1", "{answer}");
    assert_eq!(
        error["data"][0]["metadata"]["runningTaskId"], running_task,
        "{answer}"
    );
    assert!(error["message"].as_str().unwrap().contains("m-1"), "{answer}");

    // The HTTP+JSON binding: 409, FAILED_PRECONDITION.
    let response = reqwest::Client::new()
        .post(format!("{}/a2a/message:send", world.server.url))
        .bearer_auth(world.token("agent-a"))
        .header("A2A-Version", "1.0")
        .json(&send("m-3", "ctx-busy", true, false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["status"], "FAILED_PRECONDITION", "{body}");
    assert_eq!(
        body["error"]["details"][0]["reason"], "UNSUPPORTED_OPERATION",
        "{body}"
    );
    assert_eq!(
        body["error"]["details"][0]["metadata"]["runningTaskId"], running_task,
        "{body}"
    );

    // The official client reads it as A2A's error, on either binding.
    for binding in ["JSONRPC", "HTTP+JSON"] {
        let out = world
            .client_answer(
                "agent-a",
                json!({"scenario": "send", "text": "And this?", "contextId": "ctx-busy", "binding": binding}),
            )
            .await;
        let failure = out["error"].as_str().unwrap_or_default();
        assert!(failure.contains("UnsupportedOperationError"), "{binding}: {out}");
    }

    assert_eq!(
        changed(&before, &quiet(table(&world.server.store).await, "m-1")),
        Vec::<String>::new(),
        "a refusal changed the table"
    );
    let kept = world.server.files.list("ctx-busy").await.unwrap();
    assert_eq!(kept, Vec::new(), "a refused message's file is not kept");
    assert_eq!(world.server.bedrock.requests().len(), 1, "nothing else ran");
}

#[tokio::test]
async fn a_message_id_never_names_another_tasks_turn() {
    let world = World::start().await;
    world.server.bedrock.push(Reply::text("Done."));
    let first = world
        .rpc(
            "agent-a",
            &rpc("SendMessage", send("m", "ctx-chain", false, false)),
            Some("1.0"),
        )
        .await;
    assert_eq!(
        first["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{first}"
    );
    let before = table(&world.server.store).await;
    // `m~1` is how the task `m` would name the turn that answers its first approval.
    world.server.bedrock.push(Reply::text("Merged?"));
    let joined = world
        .rpc(
            "agent-a",
            &rpc("SendMessage", send("m~1", "ctx-chain", false, false)),
            Some("1.0"),
        )
        .await;
    assert_eq!(joined["error"]["code"], -32602, "{joined}");
    assert!(
        joined["error"]["message"].as_str().unwrap().contains("messageId"),
        "{joined}"
    );
    assert_eq!(
        changed(&before, &table(&world.server.store).await),
        Vec::<String>::new()
    );
    let listed = world
        .rpc(
            "agent-a",
            &rpc("ListTasks", json!({"contextId": "ctx-chain"})),
            Some("1.0"),
        )
        .await;
    assert_eq!(listed["result"]["tasks"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(world.server.bedrock.requests().len(), 1);
}

/// The time the terminal of turn `turn` was logged, as the table holds it (epoch milliseconds).
async fn terminal_logged_at(world: &World, turn: &str) -> u64 {
    let items = agent_worker_testkit::session_audit::every_item(world.server.store.table())
        .await
        .unwrap();
    let prefix = format!("event#{turn}#");
    let text = |item: &std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
                name: &str| {
        item.get(name)
            .and_then(|v| v.as_s().or_else(|_| v.as_n()).ok())
            .cloned()
            .unwrap_or_default()
    };
    let terminal = items
        .iter()
        .filter(|item| text(item, "sk").starts_with(&prefix))
        .find(|item| text(item, "event").contains("\"type\":\"completed\""))
        .expect("the terminal is logged");
    text(terminal, "loggedAt")
        .parse()
        .expect("the event's time is kept")
}

#[tokio::test]
async fn a_tasks_status_time_is_when_its_state_was_set_not_when_it_is_read() {
    let world = World::start().await;
    world.server.bedrock.push(Reply::text("Paris."));
    let out = world
        .client("agent-a", "send", "The capital of France?", Some("ctx-time"))
        .await;
    let task = &out["updates"][0]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    let turn = task["history"][0]["messageId"].as_str().unwrap().to_owned();
    let logged = terminal_logged_at(&world, &turn).await;
    let at = |status: &Value| {
        let text = status["timestamp"].as_str().unwrap_or_default().to_owned();
        chrono::DateTime::parse_from_rfc3339(&text)
            .unwrap_or_else(|e| panic!("{status}: {e}"))
            .timestamp_millis()
    };
    let logged = i64::try_from(logged).unwrap();
    assert_eq!(at(&task["status"]), logged, "the send's answer: {task}");
    assert_eq!(at(&out["got"]["status"]), logged, "GetTask: {}", out["got"]);
    // Another turn later, and the task read again: the same time.
    world.server.bedrock.push(Reply::text("Berlin."));
    world
        .client("agent-a", "send", "And of Germany?", Some("ctx-time"))
        .await;
    let got = world
        .rpc("agent-a", &rpc("GetTask", json!({"id": task["id"]})), Some("1.0"))
        .await;
    assert_eq!(at(&got["result"]["status"]), logged, "{got}");
    // A list of the tasks set after it holds the later one alone (the filter takes tasks set at
    // or after its time, as A2A says: a millisecond after this task's).
    let after = chrono::DateTime::from_timestamp_millis(logged + 1)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let listed = world
        .rpc(
            "agent-a",
            &rpc(
                "ListTasks",
                json!({"contextId": "ctx-time", "statusTimestampAfter": after}),
            ),
            Some("1.0"),
        )
        .await;
    let ids: Vec<&Value> = listed["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["id"])
        .collect();
    assert!(!ids.contains(&&task["id"]), "{listed}");
    assert_eq!(ids.len(), 1, "{listed}");
}

#[tokio::test]
async fn a_file_part_in_a_context_whose_id_holds_a_slash_is_kept_for_that_context_alone() {
    let world = World::start().await;
    world.server.bedrock.push(Reply::text("The word is heliotrope."));
    let out = world
        .client_with(
            "agent-a",
            json!({"scenario": "send", "text": "What is the word in my notes?", "contextId": "team/ctx-file",
                "file": {"name": "notes.txt", "mediaType": "text/plain", "text": "The word is heliotrope."}}),
        )
        .await;
    let task = &out["updates"][0]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["contextId"], "team/ctx-file");
    let asked = world.server.bedrock.requests()[0].body["messages"].to_string();
    assert!(asked.contains("heliotrope"), "{asked}");
    let kept = world.server.files.list("team/ctx-file").await.unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(world.server.files.list("team").await.unwrap(), Vec::new());
}

/// With a signing key, the card served is signed (a JWS over its RFC 8785 form), and the official
/// SDK's own verifier takes the signature with the signer's public key and refuses it with
/// another; without one, the card carries no signature.
#[tokio::test]
async fn a_signed_card_is_verified_by_the_sdks_verifier_with_its_key_and_no_other() {
    use agent_worker::hosts::card_signature::CardSigner;
    use agent_worker_testkit::{run_a2a_client, test_key};
    let pem = std::fs::read_to_string(test_key("card-signing.pem")).unwrap();
    let signed =
        support::container::server_with(2, support::config(), std::time::Duration::from_secs(5), |s| {
            s.card_signer = Some(CardSigner::from_pem(&pem, "desk-key").unwrap());
            s.public_url =
                Some(agent_worker::hosts::container::PublicUrl::new("https://desk.example").unwrap());
        })
        .await;
    let plan = |server: &support::container::Server, key: &str| {
        json!({"url": server.url, "token": "unused: the card is open", "scenario": "card", "text": "",
            "cardKey": test_key(key)})
    };
    let out = run_a2a_client(plan(&signed, "card-signing.pub.pem"))
        .await
        .unwrap();
    assert_eq!(out["verified"], true, "{out}");
    assert_eq!(
        out["card"]["signatures"].as_array().map(Vec::len),
        Some(1),
        "{out}"
    );
    let out = run_a2a_client(plan(&signed, "other.pub.pem")).await.unwrap();
    assert!(
        out["verified"]
            .as_str()
            .is_some_and(|e| e.contains("InvalidSignatures")),
        "{out}"
    );
    let unsigned = support::container::server(2, support::config(), std::time::Duration::from_secs(5)).await;
    let out = run_a2a_client(plan(&unsigned, "card-signing.pub.pem"))
        .await
        .unwrap();
    assert!(out["card"].get("signatures").is_none(), "{out}");
    assert!(
        out["verified"]
            .as_str()
            .is_some_and(|e| e.contains("NoSignature")),
        "{out}"
    );
}

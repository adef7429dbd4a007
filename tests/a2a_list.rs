//! A2A's `ListTasks` over many tasks (issue 53, item 7), on moto and the Bedrock stand-in: one
//! person's 45 tasks, each in a conversation of its own (more than one read of their list),
//! paged by the cursor the server gives, newest status first; a task added between two pages
//! moves no task in or out of the pages after; the filters apply before paging and `totalSize`
//! counts what they let through; `historyLength` bounds each task's history; a page token the
//! server never gave is refused; the HTTP+JSON binding pages alike; past 200 conversations a list
//! names its context.

use crate::support;
use agent_worker::session::{OwnerStore as _, TurnLedger as _};

use std::collections::HashSet;

use agent_worker_testkit::Reply;
use serde_json::{Value, json};
use support::a2a::World;

const TASKS: usize = 45;

fn rpc(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

/// Sends `text` as message `id` into `context` as `who`, and waits for its task to end.
async fn send(world: &World, who: &str, id: &str, context: &str) -> Value {
    world.server.bedrock.push(Reply::text(&format!("Answer to {id}")));
    let message = json!({"message": {
        "messageId": id, "contextId": context, "role": "ROLE_USER", "parts": [{"text": format!("Question {id}")}],
    }});
    let answer = world.rpc(who, &rpc("SendMessage", message), Some("1.0")).await;
    let task = answer["result"]["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    task
}

async fn list(world: &World, who: &str, params: Value) -> Value {
    let answer = world.rpc(who, &rpc("ListTasks", params), Some("1.0")).await;
    assert!(answer.get("error").is_none(), "{answer}");
    answer["result"].clone()
}

fn ids(page: &Value) -> Vec<String> {
    page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

fn timestamps(page: &Value) -> Vec<String> {
    page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"]["timestamp"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn one_persons_45_tasks_page_by_the_servers_cursor_newest_first_with_filters_and_histories() {
    let world = World::start().await;
    let mut sent = Vec::new();
    for n in 0..TASKS {
        sent.push(send(&world, "ada", &format!("m-{n:02}"), &format!("ctx-{n:02}")).await["id"].clone());
    }
    // Another person's task is never in ada's list.
    let other = send(&world, "bob", "m-bob", "ctx-bob").await["id"].clone();

    // Pages of 10: 10, 10, 10, 10 and 5, each counting all 45; a task ada adds after the first
    // page goes to the front and moves nothing into or out of the pages after it.
    let mut seen: Vec<String> = Vec::new();
    let mut times: Vec<String> = Vec::new();
    let mut token = String::new();
    let mut sizes = Vec::new();
    loop {
        let page = list(&world, "ada", json!({"pageSize": 10, "pageToken": token})).await;
        sizes.push(page["pageSize"].as_u64().unwrap());
        if seen.is_empty() {
            assert_eq!(page["totalSize"], TASKS, "{page}");
            send(&world, "ada", "m-late", "ctx-late").await;
        } else {
            assert_eq!(page["totalSize"], TASKS + 1, "{page}");
        }
        seen.extend(ids(&page));
        times.extend(timestamps(&page));
        token = page["nextPageToken"].as_str().unwrap().to_owned();
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(sizes, [10, 10, 10, 10, 5]);
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), TASKS, "a task twice: {seen:?}");
    for task in &sent {
        assert!(seen.iter().any(|id| task == id), "{task} missing from {seen:?}");
    }
    assert!(!seen.iter().any(|id| *id == other), "bob's task in ada's list");
    // Newest first: the order they were sent in, backwards.
    let sent_backwards: Vec<String> = sent
        .iter()
        .rev()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(seen, sent_backwards);
    assert!(times.windows(2).all(|pair| pair[0] >= pair[1]), "{times:?}");

    // At or after the status time of the 11th newest of the 45 (and the late one): 12 tasks,
    // paged too.
    let after = &times[10];
    let expected = times.iter().filter(|t| *t >= after).count() + 1;
    let filtered = list(
        &world,
        "ada",
        json!({"statusTimestampAfter": after, "pageSize": 5}),
    )
    .await;
    assert_eq!(filtered["totalSize"], expected, "{filtered}");
    assert_eq!(filtered["pageSize"], 5, "{filtered}");
    assert!(!filtered["nextPageToken"].as_str().unwrap().is_empty());
    let none_after = list(
        &world,
        "ada",
        json!({"statusTimestampAfter": "2999-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(none_after["totalSize"], 0, "{none_after}");
    assert_eq!(none_after["nextPageToken"], "", "{none_after}");
    let completed = list(
        &world,
        "ada",
        json!({"status": "TASK_STATE_COMPLETED", "pageSize": 1}),
    )
    .await;
    assert_eq!(completed["totalSize"], TASKS + 1, "{completed}");
    let working = list(&world, "ada", json!({"status": "TASK_STATE_WORKING"})).await;
    assert_eq!(working["totalSize"], 0, "{working}");

    // Each task's history: the question and the answer; the last one of them; none.
    let whole = list(&world, "ada", json!({"pageSize": 3})).await;
    for task in whole["tasks"].as_array().unwrap() {
        let history = task["history"].as_array().unwrap();
        assert_eq!(history.len(), 2, "{task}");
        assert_eq!(history[0]["role"], "ROLE_USER", "{task}");
        assert_eq!(history[1]["role"], "ROLE_AGENT", "{task}");
        assert!(task.get("artifacts").is_none(), "{task}");
    }
    let last = list(
        &world,
        "ada",
        json!({"pageSize": 3, "historyLength": 1, "includeArtifacts": true}),
    )
    .await;
    for task in last["tasks"].as_array().unwrap() {
        let history = task["history"].as_array().unwrap();
        assert_eq!(history.len(), 1, "{task}");
        assert_eq!(history[0]["role"], "ROLE_AGENT", "{task}");
        assert!(task["artifacts"].is_array(), "{task}");
    }
    let bare = list(&world, "ada", json!({"pageSize": 3, "historyLength": 0})).await;
    for task in bare["tasks"].as_array().unwrap() {
        assert!(task.get("history").is_none(), "{task}");
    }

    // A token the server never gave.
    for made_up in ["not-a-token", "MTIzOg", "bm90LWEtY3Vyc29y"] {
        let answer = world
            .rpc(
                "ada",
                &rpc("ListTasks", json!({"pageToken": made_up})),
                Some("1.0"),
            )
            .await;
        assert_eq!(answer["error"]["code"], -32602, "{made_up}: {answer}");
    }

    // The HTTP+JSON binding pages alike.
    let first = list(&world, "ada", json!({"pageSize": 20})).await;
    let client = reqwest::Client::new();
    let rest: Value = client
        .get(format!(
            "{}/a2a/tasks?pageSize=20&pageToken={}",
            world.server.url,
            // base64url: nothing in it to escape in a query.
            first["nextPageToken"].as_str().unwrap()
        ))
        .bearer_auth(world.token("ada"))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let second = list(
        &world,
        "ada",
        json!({"pageSize": 20, "pageToken": first["nextPageToken"]}),
    )
    .await;
    assert_eq!(ids(&rest), ids(&second), "{rest}");
    assert_eq!(rest["totalSize"], TASKS + 1, "{rest}");

    // Past 200 conversations, a list names its context: the whole list would read them all.
    let quiet = 200 - (TASKS + 1);
    for n in 0..=quiet {
        if n == quiet {
            assert_eq!(
                list(&world, "ada", json!({"pageSize": 1})).await["totalSize"],
                200
            );
        }
        stored_turn(&world, &format!("quiet-{n:03}")).await;
    }
    let refused = world.rpc("ada", &rpc("ListTasks", json!({})), Some("1.0")).await;
    assert_eq!(refused["error"]["code"], -32602, "{}", refused["error"]);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("contextId"),
        "{}",
        refused["error"]
    );
    let one = list(&world, "ada", json!({"contextId": "ctx-07"})).await;
    assert_eq!(one["totalSize"], 1, "{}", one["totalSize"]);
}

/// A conversation of ada's with one turn stored, as the engine stores it, without a model.
async fn stored_turn(world: &World, conversation: &str) {
    use agent_worker::session::{Lease, Message, Owner, SessionId, TurnId, TurnOutcome};
    let store = &world.server.store;
    let (session, turn) = (SessionId::new(conversation).unwrap(), TurnId::new("t-1").unwrap());
    store
        .claim_owner(&session, Some(&turn), &Owner::new("ada", "agents"))
        .await
        .unwrap();
    store
        .claim_turn(&session, &turn, Lease(std::time::Duration::from_secs(60)))
        .await
        .unwrap();
    let outcome = TurnOutcome::Completed(None);
    let messages = [Message::user_text("Hi"), Message::assistant_text("Hello")];
    store
        .complete_turn(&session, &turn, &messages, &outcome)
        .await
        .unwrap();
}

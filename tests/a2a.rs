//! A2A 1.0 on `serve`'s router against the official client (`a2a-sdk` 1.3, from the project's
//! venv, which parses the agent card and every answer as A2A's own types), with DynamoDB on moto,
//! the Bedrock stand-in, and people known by their tokens (the test kit's issuer): a message
//! sent, one streamed, tasks got and listed, a task cancelled, and the JSON-RPC binding's errors.

use crate::support;
use agent_worker::session::{HistoryStore as _, OwnerStore as _};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_worker::engine::tools::{Effect, Tool, ToolSpec, tool_fn};
use agent_worker_testkit::{Reply, StreamScript, sid};
use serde_json::{Value, json};
use support::a2a::World;
use support::container::{changed, table};

#[tokio::test]
async fn a_message_sent_is_a_task_in_its_context_got_and_listed() {
    let world = World::start().await;
    world.server.bedrock.push(Reply::text("The capital is Paris."));
    let out = world
        .client(
            "agent-a",
            "send",
            "What is the capital of France?",
            Some("ctx-france"),
        )
        .await;
    let card = &out["card"];
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");
    assert_eq!(card["capabilities"]["streaming"], true);
    let task = &out["updates"][0]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["contextId"], "ctx-france");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "The capital is Paris.");
    assert_eq!(
        task["history"][0]["parts"][0]["text"],
        "What is the capital of France?"
    );
    // Any instance answers for it from the table: got and listed as sent.
    assert_eq!(out["got"]["id"], task["id"]);
    assert_eq!(out["got"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        out["got"]["artifacts"][0]["parts"][0]["text"],
        "The capital is Paris."
    );
    assert_eq!(out["listed"]["tasks"][0]["id"], task["id"]);
    // The context is the conversation, the caller's, stored.
    let history = world.server.store.load_history(&sid("ctx-france")).await.unwrap();
    assert_eq!(history.len(), 2);
    let owner = world
        .server
        .store
        .owner(&sid("ctx-france"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (owner.user_id.as_str(), owner.account_id.as_str()),
        ("agent-a", "agents")
    );
}

#[tokio::test]
async fn a_streamed_message_sends_the_task_then_working_then_the_text_then_completed() {
    let world = World::start().await;
    world.server.bedrock.push(
        StreamScript::new()
            .text("Streaming in pieces.", 4)
            .stop("end_turn")
            .into_reply(),
    );
    let out = world.client("agent-a", "stream", "Stream please", None).await;
    let updates = out["updates"].as_array().unwrap();
    let kinds: Vec<&str> = updates
        .iter()
        .map(|u| u.as_object().unwrap().keys().next().unwrap().as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"task"), "{kinds:?}");
    assert_eq!(
        updates[1]["statusUpdate"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    // The text comes as artifact chunks (as many as the event log kept: deltas written together
    // are one), appended to one artifact.
    assert!(kinds.contains(&"artifactUpdate"), "{kinds:?}");
    let last = updates.last().unwrap();
    assert_eq!(last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED");
    let streamed: String = updates
        .iter()
        .filter_map(|u| u["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, "Streaming in pieces.");
    assert_eq!(
        out["got"]["artifacts"][0]["parts"][0]["text"],
        "Streaming in pieces."
    );
}

#[tokio::test]
async fn a_task_cancelled_stops_its_turn() {
    let world = World::start().await;
    world
        .server
        .bedrock
        .push(StreamScript::new().open_text("Working on it").hang().into_reply());
    let out = world
        .client("agent-a", "cancel", "A long job", Some("ctx-cancel"))
        .await;
    assert_eq!(
        out["canceled"]["status"]["state"], "TASK_STATE_CANCELED",
        "{}",
        out["canceled"]
    );
    assert_eq!(out["got"]["status"]["state"], "TASK_STATE_CANCELED");
    assert_eq!(world.server.ended(1).await.len(), 1, "the turn ended");
}

#[tokio::test]
async fn another_callers_tasks_do_not_exist_for_them_and_errors_are_json_rpc() {
    let world = World::start().await;
    world.server.bedrock.push(Reply::text("Private."));
    let out = world
        .client("agent-a", "send", "Keep this", Some("ctx-private"))
        .await;
    let task = out["updates"][0]["task"]["id"].clone();
    let before = table(&world.server.store).await;
    let get = |id: &Value| json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}});
    for (body, code) in [
        (get(&task), -32001),
        (
            json!({"jsonrpc": "2.0", "id": 2, "method": "CancelTask", "params": {"id": task}}),
            -32001,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {"contextId": "ctx-private"}}),
            0,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 4, "method": "Bogus", "params": {}}),
            -32601,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 5, "method": "SendMessage", "params": {}}),
            -32602,
        ),
        (get(&json!("not-a-task")), -32001),
        // Answering the task as if it were theirs.
        (
            json!({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {
                "messageId": "m-answer", "taskId": task, "role": "ROLE_USER", "parts": [{"text": "approve"}]}}}),
            -32001,
        ),
    ] {
        let answer = world.rpc("agent-b", &body, Some("1.0")).await;
        if code == 0 {
            assert_eq!(answer["result"]["tasks"], json!([]), "{answer}");
        } else {
            assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        }
    }
    let sent_elsewhere = json!({"jsonrpc": "2.0", "id": 6, "method": "SendMessage", "params": {"message": {
        "messageId": "m-b", "contextId": "ctx-private", "role": "ROLE_USER", "parts": [{"text": "What did they say?"}],
    }}});
    assert_eq!(
        world.rpc("agent-b", &sent_elsewhere, Some("1.0")).await["error"]["code"],
        -32001
    );
    let older = world.rpc("agent-a", &get(&task), Some("0.3")).await;
    assert_eq!(older["error"]["code"], -32009, "{older}");
    let unversioned = world.rpc("agent-a", &get(&task), None).await;
    assert_eq!(
        unversioned["result"]["id"], task,
        "no version named is 1.0: {unversioned}"
    );
    assert_eq!(
        changed(&before, &table(&world.server.store).await),
        Vec::<String>::new()
    );
    assert_eq!(world.server.bedrock.requests().len(), 1);
}

/// A tool that needs the person's approval (it moves money), and how often it ran.
fn pay() -> (Arc<dyn Tool>, Arc<AtomicUsize>) {
    let paid = Arc::new(AtomicUsize::new(0));
    let counter = paid.clone();
    let tool = tool_fn(
        ToolSpec::new("pay", "Pays an invoice.", json!({"type": "object"}))
            .effect(Effect::Transaction)
            .title("Pay the invoice"),
        move |_: Value, _| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(json!({ "receipt": "R-7" }))
            }
        },
    );
    (Arc::new(tool), paid)
}

#[tokio::test]
async fn an_approval_is_input_required_and_the_next_message_on_the_task_answers_it() {
    let (tool, paid) = pay();
    let world = World::with_tools(vec![tool]).await;
    world
        .server
        .bedrock
        .push(Reply::tool_call("call-pay", "pay", "{}"));
    world.server.bedrock.push(Reply::text("Paid: receipt R-7."));
    let out = world
        .client_with(
            "agent-a",
            json!({"scenario": "answer", "text": "Pay the invoice", "answer": "approve", "contextId": "ctx-pay"}),
        )
        .await;
    // The task waits for the approval, and says what it waits for (never the token).
    let asked = &out["asked"][0]["task"];
    assert_eq!(asked["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let question = &asked["status"]["message"];
    assert!(
        question["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Pay the invoice"),
        "{question}"
    );
    assert!(
        question["parts"][1]["data"]["approval"]["approvalId"].is_string(),
        "{question}"
    );
    assert!(!question.to_string().contains("token"), "{question}");

    // The answer on the task: the same task goes on, and the call runs once.
    let answered = &out["answered"][0]["task"];
    assert_eq!(answered["id"], asked["id"]);
    assert_eq!(answered["status"]["state"], "TASK_STATE_COMPLETED", "{answered}");
    assert_eq!(answered["artifacts"][0]["parts"][0]["text"], "Paid: receipt R-7.");
    assert_eq!(paid.load(Ordering::SeqCst), 1);
    // The model is told what the approved call gave (the engine's `<approval>` block).
    let told = world.server.bedrock.requests()[1].body["messages"].to_string();
    assert!(told.contains("R-7"), "{told}");
    // Got and listed as one task, as it stands now, with the words of both its turns.
    assert_eq!(out["got"]["status"]["state"], "TASK_STATE_COMPLETED");
    let said: Vec<(&str, &str)> = out["got"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["parts"][0]["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(said.first(), Some(&("ROLE_USER", "Pay the invoice")), "{said:?}");
    assert_eq!(
        said.last(),
        Some(&("ROLE_AGENT", "Paid: receipt R-7.")),
        "{said:?}"
    );
    let listed = out["listed"]["tasks"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], asked["id"]);
    assert_eq!(listed[0]["status"]["state"], "TASK_STATE_COMPLETED");
    // A completed task takes no more messages; the table is left as it was.
    let before = table(&world.server.store).await;
    let again = world
        .rpc(
            "agent-a",
            &json!({"jsonrpc": "2.0", "id": 9, "method": "SendMessage", "params": {"message": {
                "messageId": "m-late", "role": "ROLE_USER", "taskId": asked["id"], "contextId": "ctx-pay",
                "parts": [{"text": "approve"}]}}}),
            Some("1.0"),
        )
        .await;
    assert_eq!(again["error"]["code"], -32004, "{again}");
    assert_eq!(
        changed(&before, &table(&world.server.store).await),
        Vec::<String>::new()
    );
    assert_eq!(paid.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_http_json_binding_sends_streams_gets_lists_and_cancels_as_json_rpc_does() {
    let world = World::start().await;
    world.server.bedrock.push(Reply::text("Sent over REST."));
    world.server.bedrock.push(
        StreamScript::new()
            .text("Streamed over REST.", 3)
            .stop("end_turn")
            .into_reply(),
    );
    world
        .server
        .bedrock
        .push(StreamScript::new().open_text("Working on it").hang().into_reply());
    let rest = |scenario: &str, text: &str, context: &str| json!({"scenario": scenario, "text": text, "contextId": context, "binding": "HTTP+JSON"});
    let sent = world
        .client_with("agent-a", rest("send", "Send", "ctx-rest"))
        .await;
    let card = &sent["card"]["supportedInterfaces"];
    assert_eq!(card[1]["protocolBinding"], "HTTP+JSON", "{card}");
    let task = &sent["updates"][0]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(sent["got"]["artifacts"][0]["parts"][0]["text"], "Sent over REST.");
    assert_eq!(sent["listed"]["tasks"][0]["id"], task["id"]);

    let streamed = world
        .client_with("agent-a", rest("stream", "Stream", "ctx-rest"))
        .await;
    let last = streamed["updates"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{last}"
    );
    assert_eq!(streamed["listed"]["tasks"].as_array().unwrap().len(), 2);

    let canceled = world
        .client_with("agent-a", rest("cancel", "A long job", "ctx-rest-cancel"))
        .await;
    assert_eq!(canceled["canceled"]["status"]["state"], "TASK_STATE_CANCELED");

    // Its failures are A2A's HTTP statuses with a google.rpc.Status body; a stranger's task does
    // not exist for them, and the table is left as it was.
    let before = table(&world.server.store).await;
    let stranger = reqwest::Client::new()
        .get(format!(
            "{}/a2a/tasks/{}",
            world.server.url,
            task["id"].as_str().unwrap()
        ))
        .bearer_auth(world.token("agent-b"))
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status(), 404);
    let body: Value = stranger.json().await.unwrap();
    assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_FOUND", "{body}");
    assert_eq!(
        changed(&before, &table(&world.server.store).await),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn a_file_part_is_a_file_the_person_attaches_and_reaches_the_model() {
    let world = World::start().await;
    world
        .server
        .bedrock
        .push(Reply::text("The code word is heliotrope."));
    let out = world
        .client_with(
            "agent-a",
            json!({"scenario": "send", "text": "What is the code word in my notes?", "contextId": "ctx-file",
                "file": {"name": "notes.txt", "mediaType": "text/plain", "text": "The code word is heliotrope."}}),
        )
        .await;
    let task = &out["updates"][0]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    // The file went to the conversation's files and reached the model with the person's words.
    let asked = world.server.bedrock.requests()[0].body["messages"].to_string();
    assert!(asked.contains("notes.txt"), "{asked}");
    assert!(asked.contains("heliotrope"), "{asked}");

    // A file by address is not fetched; a stranger's file to someone else's context keeps nothing.
    let before = table(&world.server.store).await;
    let by_url = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m-url", "contextId": "ctx-file", "role": "ROLE_USER",
        "parts": [{"url": "http://169.254.169.254/latest/meta-data", "filename": "x"}]}}});
    assert_eq!(
        world.rpc("agent-a", &by_url, Some("1.0")).await["error"]["code"],
        -32602
    );
    let stranger = json!({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": {
        "messageId": "m-b", "contextId": "ctx-file", "role": "ROLE_USER",
        "parts": [{"raw": "aGk=", "filename": "b.txt", "mediaType": "text/plain"}]}}});
    assert_eq!(
        world.rpc("agent-b", &stranger, Some("1.0")).await["error"]["code"],
        -32001
    );
    assert_eq!(
        changed(&before, &table(&world.server.store).await),
        Vec::<String>::new()
    );
}

/// A long pasted text is kept whole in the file area: the task's history, parsed by the
/// official client as A2A's own types, names it in a data part (with its size and type)
/// instead of dropping the person's message.
#[tokio::test]
async fn a_long_message_kept_whole_is_named_in_the_tasks_history() {
    let world = World::start().await;
    world.server.bedrock.push(Reply::text("A long note."));
    let pasted: String = (0..3_000).map(|i| format!("line {i:05} of the note\n")).collect();
    assert!(pasted.len() > 64 * 1024);
    let out = world.client("agent-a", "send", &pasted, Some("ctx-long")).await;
    let first = &out["got"]["history"][0];
    assert_eq!(first["role"], "ROLE_USER", "{first}");
    let file = &first["parts"][0]["data"]["file"];
    assert_eq!(
        file["id"],
        agent_worker::engine::attachments::kept_id(pasted.as_bytes()).as_str(),
        "{first}"
    );
    // A data part is a protobuf Struct to the client: its numbers are doubles.
    assert_eq!(
        (file["size"].as_f64(), file["type"].as_str()),
        (Some(pasted.len() as f64), Some("text/plain"))
    );
}

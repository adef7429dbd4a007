//! One turn of a conversation runs at a time, on every host, held by the table (the
//! conversation's run on its meta item), on moto and the Bedrock stand-in: the container answers
//! a second turn 409 naming the running one and runs it once the first has ended, with the
//! first's messages in its history; a second host reached through the queue gives the record
//! back for later and writes nothing; a turn that supersedes the running one replaces it.

use crate::support;
use agent_worker::session::{HistoryStore as _, OwnerStore as _};

use std::time::Duration;

use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::sinks::Sinks;
use agent_worker_testkit::{BedrockStandIn, Reply, StreamScript, sid};
use aws_lambda_events::event::sqs::SqsMessage;
use serde_json::{Value, json};
use support::container::{KEY, Server, changed, send, server_for, table};
use support::{MODEL_ID, config, run_batch};

fn turn(id: &str, content: &str) -> Value {
    json!({"turnId": id, "conversationId": "conv-1", "userId": "bob", "accountId": "acme", "content": content})
}

async fn post_turn(url: &str, body: &Value) -> (u16, Value) {
    send(
        reqwest::Client::new().post(format!("{url}/turns")).json(body),
        Some(KEY),
    )
    .await
}

/// Bob's turn p1 of `conv-1`, running: its model answers a word and then hangs.
async fn first_turn_running(server: &Server) {
    server
        .bedrock
        .push(StreamScript::new().open_text("Working on it").hang().into_reply());
    assert_eq!(post_turn(&server.url, &turn("p1", "First question")).await.0, 202);
    server.bedrock.requested(1).await;
}

/// The table without the running turn p1's own log, which may move on.
fn without_p1s_log(items: &[String]) -> Vec<String> {
    items
        .iter()
        .filter(|i| !i.contains("event#p1#"))
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_second_turn_of_a_running_conversation_waits_for_the_first_and_sees_it() {
    let server = server_for(2, config(), None, |_| {}).await;
    first_turn_running(&server).await;
    let before = table(&server.store).await;
    let (status, answer) = post_turn(&server.url, &turn("p2", "Second question")).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["runningTurnId"], "p1", "{answer}");
    let after = table(&server.store).await;
    assert_eq!(
        changed(&without_p1s_log(&before), &without_p1s_log(&after)),
        Vec::<String>::new()
    );
    // The first ends; the second then runs, with the first's messages in its history.
    let stop = reqwest::Client::new().post(format!(
        "{}/turns/p1/stop?session=conv-1&userId=bob&accountId=acme",
        server.url
    ));
    assert_eq!(send(stop, Some(KEY)).await.0, 202);
    server.ended(1).await;
    server.bedrock.push(Reply::text("Second answer."));
    assert_eq!(
        post_turn(&server.url, &turn("p2", "Second question")).await.0,
        202
    );
    let ends = server.ended(2).await;
    assert_eq!(ends[1].outcome.as_str(), "completed", "{:?}", ends[1]);
    let requests = server.bedrock.requests();
    assert_eq!(requests.len(), 2);
    let seen = requests[1].body["messages"].to_string();
    assert!(
        seen.contains("First question") && seen.contains("Second question"),
        "p2 saw p1: {seen}"
    );
    let history = server.store.load_history(&sid("conv-1")).await.unwrap();
    assert_eq!(history.len(), 4, "p1's two messages, then p2's");
    assert_eq!(server.store.running_turn(&sid("conv-1")).await.unwrap(), None);
}

#[tokio::test]
async fn a_second_host_gives_the_record_back_while_the_first_runs_the_conversation() {
    let server = server_for(2, config(), None, |_| {}).await;
    first_turn_running(&server).await;
    // Another host on the same table, reached through the queue.
    let other_model = BedrockStandIn::start().await.unwrap();
    let engine = Engine::builder()
        .model(BedrockModel::new(other_model.client(), MODEL_ID))
        .store(server.store.clone())
        .config(config())
        .build()
        .unwrap();
    let handler = TurnHandler::new(engine, Sinks::new());
    let before = table(&server.store).await;
    let mut record = SqsMessage::default();
    record.message_id = Some("m-2".into());
    record.body = Some(turn("p2", "Second question").to_string());
    record.event_source_arn = Some("arn:aws:sqs:us-east-1:000000000000:turns.fifo".into());
    let returned = run_batch(&handler, vec![record], None).await;
    assert_eq!(returned, ["m-2"], "the record goes back to the queue for later");
    assert!(other_model.requests().is_empty(), "p2 asked no model");
    let after = table(&server.store).await;
    assert_eq!(
        changed(&without_p1s_log(&before), &without_p1s_log(&after)),
        Vec::<String>::new()
    );
    assert_eq!(
        server
            .store
            .running_turn(&sid("conv-1"))
            .await
            .unwrap()
            .as_deref(),
        Some("p1")
    );
}

#[tokio::test]
async fn a_turn_that_supersedes_the_running_one_replaces_it() {
    let server = server_for(2, config(), None, |_| {}).await;
    first_turn_running(&server).await;
    server.bedrock.push(Reply::text("Instead."));
    let mut replacing = turn("p2", "Never mind, this instead");
    replacing["supersedes"] = json!(["p1"]);
    assert_eq!(post_turn(&server.url, &replacing).await.0, 202);
    let ends = tokio::time::timeout(Duration::from_secs(30), server.ended(2))
        .await
        .expect("both turns ended");
    let p1 = ends.iter().find(|e| e.turn_id == "p1").unwrap();
    let p2 = ends.iter().find(|e| e.turn_id == "p2").unwrap();
    assert_eq!(p1.outcome.as_str(), "stopped", "{p1:?}");
    assert_eq!(p2.outcome.as_str(), "completed", "{p2:?}");
    assert_eq!(server.bedrock.requests().len(), 2);
}

/// Twenty turns posted at once into one conversation (issue 52: seven were answered 202 and
/// only one ran; the other six were dropped without a word). Now each is either accepted and
/// runs to its terminal, or answered 409 naming the turn that holds the conversation; the
/// history holds the accepted turns, whole, in the order they ran.
#[tokio::test]
async fn of_twenty_racing_turns_every_accepted_one_runs_and_the_rest_are_409() {
    let server = server_for(20, config(), None, |_| {}).await;
    for n in 0..20 {
        server.bedrock.push(Reply::text(&format!("Answer {n}.")));
    }
    let posts = (0..20).map(|n| {
        let url = server.url.clone();
        async move {
            let id = format!("r{n}");
            let (status, answer) = post_turn(&url, &turn(&id, &format!("Question {n}"))).await;
            (id, status, answer)
        }
    });
    let answers = futures_util::future::join_all(posts).await;
    let accepted: Vec<&String> = answers
        .iter()
        .filter(|(_, status, _)| *status == 202)
        .map(|(id, _, _)| id)
        .collect();
    assert!(!accepted.is_empty(), "{answers:?}");
    for (id, status, answer) in &answers {
        if *status != 202 {
            assert_eq!(*status, 409, "{id}: {answer}");
            let running = answer["runningTurnId"].as_str().unwrap_or_default();
            assert!(
                accepted.iter().any(|a| a.as_str() == running),
                "{id} was refused for {running}, which is no accepted turn: {answers:?}"
            );
        }
    }
    let ends = server.ended(accepted.len()).await;
    assert_eq!(ends.len(), accepted.len(), "{ends:?}");
    for end in &ends {
        assert_eq!(
            end.outcome.as_str(),
            "completed",
            "an accepted turn was dropped: {end:?}"
        );
    }
    assert_eq!(server.bedrock.requests().len(), accepted.len());
    // The history: each accepted turn's question and answer, in the order the turns ended.
    let history = server.store.load_history(&sid("conv-1")).await.unwrap();
    assert_eq!(history.len(), 2 * accepted.len());
    let asked: Vec<String> = history
        .iter()
        .step_by(2)
        .map(|m| serde_json::to_value(m).unwrap()["content"].to_string())
        .collect();
    for (end, question) in ends.iter().zip(&asked) {
        let n = end.turn_id.as_str().trim_start_matches('r');
        assert!(
            question.contains(&format!("Question {n}")),
            "{question} for {end:?}"
        );
    }
    assert_eq!(server.store.running_turn(&sid("conv-1")).await.unwrap(), None);
}

/// Three turns each superseding the running p1, sent at once (issue 52: all three were
/// accepted and two were lost). One takes the conversation; the others are 409 naming the
/// turn that holds it, and nothing of theirs is written.
/// Issue 52's probe, again: turns racing into one conversation took the host's places while they
/// waited for the conversation's run, so the losers and other people's turns got 503 at
/// capacity. The run is taken first: on a host of two places, of twenty racing turns one is
/// accepted and the rest are 409, and another person's turn sent among them is accepted.
#[tokio::test]
async fn racing_turns_of_one_conversation_hold_no_place_another_persons_turn_needs() {
    let server = server_for(2, config(), None, |_| {}).await;
    server
        .bedrock
        .push(StreamScript::new().open_text("Working on it").hang().into_reply());
    server
        .bedrock
        .push(StreamScript::new().open_text("Working on it").hang().into_reply());
    let mut bodies: Vec<Value> = (0..20).map(|n| turn(&format!("r{n}"), "Question")).collect();
    bodies.insert(
        10,
        json!({"turnId": "ann-1", "conversationId": "conv-ann", "userId": "ann", "accountId": "other", "content": "Hi"}),
    );
    let posts = bodies.into_iter().map(|body| {
        let url = server.url.clone();
        async move {
            let (status, answer) = post_turn(&url, &body).await;
            (body["turnId"].as_str().unwrap().to_owned(), status, answer)
        }
    });
    let answers = futures_util::future::join_all(posts).await;
    let status = |id: &str| answers.iter().find(|(i, _, _)| i == id).map(|(_, s, _)| *s);
    assert_eq!(status("ann-1"), Some(202), "{answers:?}");
    let accepted = answers
        .iter()
        .filter(|(id, status, _)| *status == 202 && id != "ann-1")
        .count();
    assert_eq!(accepted, 1, "{answers:?}");
    for (id, status, answer) in &answers {
        assert!(*status == 202 || *status == 409, "{id}: {status} {answer}");
    }
    server.bedrock.requested(2).await;
}

#[tokio::test]
async fn of_three_turns_superseding_one_only_one_is_accepted() {
    let server = server_for(4, config(), None, |_| {}).await;
    first_turn_running(&server).await;
    // Whichever replaces p1 is still running when the others ask.
    server
        .bedrock
        .push(StreamScript::new().open_text("Replacing").hang().into_reply());
    let posts = ["s1", "s2", "s3"].map(|id| {
        let url = server.url.clone();
        async move {
            let mut replacing = turn(id, &format!("Instead, {id}"));
            replacing["supersedes"] = json!(["p1"]);
            let (status, answer) = post_turn(&url, &replacing).await;
            (id, status, answer)
        }
    });
    let answers = futures_util::future::join_all(posts).await;
    let accepted: Vec<&str> = answers
        .iter()
        .filter(|(_, status, _)| *status == 202)
        .map(|(id, _, _)| *id)
        .collect();
    assert_eq!(accepted.len(), 1, "{answers:?}");
    let winner = accepted[0];
    for (id, status, answer) in &answers {
        if *id != winner {
            assert_eq!(*status, 409, "{id}: {answer}");
            assert_eq!(answer["runningTurnId"], winner, "{id}: {answer}");
        }
    }
    server.bedrock.requested(2).await;
    // p1 was stopped and stored; the winner runs, and its stop ends it.
    let stop = reqwest::Client::new().post(format!(
        "{}/turns/{winner}/stop?session=conv-1&userId=bob&accountId=acme",
        server.url
    ));
    assert_eq!(send(stop, Some(KEY)).await.0, 202);
    let ends = server.ended(2).await;
    let outcome = |id: &str| ends.iter().find(|e| e.turn_id == id).map(|e| e.outcome.as_str());
    assert_eq!(outcome("p1"), Some("stopped"), "{ends:?}");
    assert_eq!(outcome(winner), Some("stopped"), "{ends:?}");
    let table = table(&server.store).await;
    for (id, _, _) in answers.iter().filter(|(id, _, _)| *id != winner) {
        assert!(
            !table.iter().any(|item| item.contains(&format!("#{id}"))),
            "the refused {id} left an item: {table:?}"
        );
    }
}

/// Six deletes of a conversation at once while its turn runs (issue 52: four answered 200,
/// three of them at once with the same counts; the turn record carrying the stop went with the
/// items, so the turn ran on and wrote three event items after the delete). One delete owns the
/// conversation's end: it stops the turn, waits for it, and removes everything; the others are
/// told it is under way (409) or find nothing (404); nothing is written after the tombstone.
#[tokio::test]
async fn six_deletes_racing_a_running_turn_leave_the_tombstone_alone() {
    let server = server_for(2, config(), None, |_| {}).await;
    first_turn_running(&server).await;
    let deletes = (0..6).map(|_| {
        let url = format!("{}/conversations/conv-1?userId=bob&accountId=acme", server.url);
        async move { send(reqwest::Client::new().delete(url), Some(KEY)).await }
    });
    let answers = futures_util::future::join_all(deletes).await;
    let finished: Vec<&Value> = answers
        .iter()
        .filter(|(status, _)| *status == 200)
        .map(|(_, answer)| answer)
        .collect();
    assert_eq!(finished.len(), 1, "{answers:?}");
    assert_eq!(finished[0]["stoppedTurn"], "p1", "{answers:?}");
    for (status, answer) in &answers {
        assert!(matches!(status, 200 | 404 | 409), "{status}: {answer}");
    }
    // The stopped turn ends; nothing of the conversation is left but its tombstone, then or
    // after.
    server.ended(1).await;
    let left: Vec<String> = table(&server.store)
        .await
        .into_iter()
        .filter(|item| item.contains("session#conv-1"))
        .collect();
    assert_eq!(left.len(), 1, "{left:#?}");
    assert!(left[0].contains("deletedAt"), "{left:#?}");
    assert!(!left[0].contains("purgeUntil"), "the delete finished: {left:#?}");
    let (status, _) = send(
        reqwest::Client::new().delete(format!(
            "{}/conversations/conv-1?userId=bob&accountId=acme",
            server.url
        )),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 404, "deleted already");
}

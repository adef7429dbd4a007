//! AgentCore Runtime's bidirectional WebSocket (`GET /ws` on `serve`'s router, DynamoDB on moto,
//! the Bedrock stand-in), against a WebSocket client from the registry (`websockets`): a turn
//! sent and its events received, an approval answered on the same socket, a turn aborted,
//! messages of the wrong kind refused with the socket kept open, an oversized message closing
//! it (1009); a socket closed mid-turn leaving the turn to finish in the log and the
//! conversation; another person's conversation refused before the socket opens; a socket opened
//! with a person's token closed as the token expires.

use std::sync::atomic::Ordering;

use crate::support;
use agent_worker::session::HistoryStore as _;
use agent_worker_testkit::{Reply, StreamScript, run_ws_client, sid};
use serde_json::{Value, json};
use support::approvals::Tools;
use support::container::{KEY, Server, changed, events_at, send, server_with_tools, table};

/// A conversation's id as AgentCore makes them (33 to 256 characters).
const SESSION: &str = "agentcore-ws-session-0123456789abcdef";

fn plan(server: &Server, user: &str, steps: Value) -> Value {
    let ws = server.url.replacen("http://", "ws://", 1);
    json!({
        "url": format!("{ws}/ws?userId={user}&accountId=a"),
        "headers": {"x-api-key": KEY, "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": SESSION},
        "steps": steps,
    })
}

/// The frames of kind `kind` (a message's `type`, or an event's).
fn of_kind<'a>(frames: &'a [Value], kind: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f["type"] == kind || f["event"]["type"] == kind)
        .collect()
}

#[tokio::test]
async fn one_socket_runs_a_turn_answers_its_approval_aborts_and_refuses_what_it_does_not_take() {
    let tools = Tools::new();
    let server = server_with_tools(tools.list()).await;
    server.bedrock.push(Reply::tool_call(
        "call-pay",
        "pay",
        r#"{"amount": 12, "to": "ACME"}"#,
    ));
    server.bedrock.push(Reply::text("Paid: receipt R-1."));
    server
        .bedrock
        .push(StreamScript::held_text("Working on it", " and done."));
    let out = run_ws_client(plan(
        &server,
        "u",
        json!([
            {"until": "session"},
            {"send": {"prompt": "Pay ACME 12 EUR."}, "until": "end"},
            {"send": {"type": "approval", "decision": "approve"}, "until": "end"},
            {"send": {"type": "dance"}, "until": "error"},
            {"send": "{\"prompt\": 1}", "binary": true, "until": "error"},
            {"send": "not json", "until": "error"},
            {"send": {"type": "action", "turnId": "t-ui", "callId": "c-1", "answer": {"status": "taken"}}, "until": "action"},
            {"send": {"type": "action", "turnId": "t-ui", "callId": "c-2", "answer": {"status": "done", "result": "{fill}"}}, "fill": 300 * 1024, "until": "error"},
            {"send": {"prompt": "Take your time."}, "until": "event"},
            {"send": {"type": "abort"}, "until": "command"},
            {"until": "end"},
            {"send": "x", "repeat": 2 * 1024 * 1024, "until": "close"},
        ]),
    ))
    .await
    .unwrap();
    assert!(out.get("error").is_none(), "{out}");
    let frames = out["frames"].as_array().unwrap();
    assert_eq!(frames[0]["sessionId"], SESSION, "{out}");
    // The turn, the approval it asks, and the decision's turn on the same socket: paid once.
    let turns = of_kind(frames, "turn");
    assert_eq!(turns.len(), 3, "{out}");
    let first = turns[0]["turnId"].as_str().unwrap();
    assert_eq!(
        turns[1]["turnId"],
        format!("{first}~1"),
        "the approval's turn: {out}"
    );
    let ends = of_kind(frames, "completed");
    assert_eq!(
        ends[0]["event"]["data"]["stopReason"], "approval_required",
        "{out}"
    );
    assert_eq!(of_kind(frames, "approval_required")[0]["turnId"], first);
    let paid_text: String = frames
        .iter()
        .filter(|f| f["turnId"] == turns[1]["turnId"] && f["event"]["type"] == "text")
        .filter_map(|f| f["event"]["delta"].as_str())
        .collect();
    assert_eq!(paid_text, "Paid: receipt R-1.", "{out}");
    assert_eq!(tools.paid.load(Ordering::SeqCst), 1);
    // What it does not take is refused, and the socket goes on.
    let refused: Vec<u64> = of_kind(frames, "error")
        .iter()
        .filter_map(|f| f["status"].as_u64())
        .collect();
    assert_eq!(refused, vec![400, 400, 400, 413], "{out}");
    // A UI action's answer, recorded as `POST /turns/{id}/actions/{callId}` records it.
    assert_eq!(of_kind(frames, "action")[0]["recorded"], true, "{out}");
    // Aborted on the same socket: the turn ends stopped.
    let command = &of_kind(frames, "command")[0];
    assert_eq!(command["ok"], true, "{out}");
    assert_eq!(ends[2]["turnId"], turns[2]["turnId"], "{out}");
    assert_eq!(ends[2]["event"]["data"]["stopReason"], "user_stop", "{out}");
    // A message over the limit closes the socket as too big.
    assert_eq!(out["closed"], 1009, "{out}");
    server.bedrock.release();
}

#[tokio::test]
async fn a_socket_closed_mid_turn_leaves_the_turn_to_end_and_another_person_is_refused() {
    let server = server_with_tools(Vec::new()).await;
    server
        .bedrock
        .push(StreamScript::held_text("Half", " and whole."));
    let out = run_ws_client(plan(
        &server,
        "u",
        json!([{"send": {"prompt": "Tell me everything.", "turnId": "ws-turn-1"}, "until": "event"}]),
    ))
    .await
    .unwrap();
    assert_eq!(
        of_kind(out["frames"].as_array().unwrap(), "turn").len(),
        1,
        "{out}"
    );
    // The client has gone; the turn goes on, and ends in the log and the conversation.
    server.bedrock.release();
    server.ended(1).await;
    let history = server.store.load_history(&sid(SESSION)).await.unwrap();
    assert_eq!(history.last().unwrap().text(), "Half and whole.");
    let logged = events_at(&server.url, SESSION, "ws-turn-1", None).await;
    assert_eq!(logged.last().unwrap().1["type"], "completed", "{logged:?}");

    // Another person's conversation: refused before the socket opens, nothing written.
    let before = table(&server.store).await;
    let upgrade = reqwest::Client::new()
        .get(format!("{}/ws?userId=v&accountId=a", server.url))
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("X-Amzn-Bedrock-AgentCore-Runtime-Session-Id", SESSION);
    let (status, answer) = send(upgrade, Some(KEY)).await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn a_socket_opened_with_a_persons_token_closes_when_the_token_expires() {
    use agent_worker::hosts::jwt::JwtVerifier;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    use support::container::{server_with_tokens, token_issuer};

    let (key, issuer, mut config) = token_issuer("k-ws", "app", "acme").await;
    config.leeway = Duration::ZERO;
    let server = server_with_tokens(JwtVerifier::new(config, reqwest::Client::new())).await;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let token =
        |exp: u64| key.token(&json!({"iss": issuer.issuer(), "aud": "app", "sub": "ada", "exp": exp}));
    let ws = server.url.replacen("http://", "ws://", 1);
    let plan_with = |token: String| {
        json!({
            "url": format!("{ws}/ws"),
            "headers": {"Authorization": format!("Bearer {token}"), "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": SESSION},
            "steps": [{"until": "session"}, {"until": "close"}],
        })
    };

    // Taken for some seconds more (room for the client to start and the keys to be fetched):
    // the socket opens, then the server closes it as the token ends (1008), saying why; the
    // client waits up to 30 s for that.
    let out = run_ws_client(plan_with(token(now + 6))).await.unwrap();
    assert!(out.get("error").is_none(), "{out}");
    assert_eq!(out["frames"][0]["sessionId"], SESSION, "{out}");
    assert_eq!(out["closed"], 1008, "{out}");
    assert_eq!(out["reason"], "the token has expired", "{out}");

    // One that has ended already does not open one, and nothing is written or asked.
    let before = table(&server.store).await;
    let out = run_ws_client(plan_with(token(now - 1))).await.unwrap();
    assert!(out["error"].as_str().unwrap_or_default().contains("401"), "{out}");
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
    assert!(server.bedrock.requests().is_empty());
}

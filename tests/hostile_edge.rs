//! The container's HTTP edge probed as a hostile client would (issue 52), on moto and the
//! Bedrock stand-in: what a conversation id may hold is decided once (`/` is taken, and the file
//! areas keep its files apart; characters that spoof a list are refused on every route and
//! protocol, naming the field, and change nothing); every answer has the documented shape, a
//! body over the limit and a head the server does not take included; the agent card names no
//! scheme or host a request merely says.

use crate::support;

use std::time::Duration;

use agent_worker::engine::attachments::{FileArea, LoadAs};
use agent_worker::hosts::container::PublicUrl;
use agent_worker_testkit::Reply;
use serde_json::{Value, json};
use support::config;
use support::container::{KEY, Server, changed, send, server_for, table};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PERSON: &str = "userId=u&accountId=a";

/// Sends `request` (a whole request, as its bytes) and reads the answer: its status, its head,
/// and its body as JSON.
async fn raw(server: &Server, request: &[u8]) -> (u16, String, Value) {
    let address = server.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer))
        .await
        .expect("the server answered and closed")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let json = body
        .find('{')
        .and_then(|start| body.rfind('}').map(|end| &body[start..=end]))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or(Value::Null);
    (status, head.to_ascii_lowercase(), json)
}

/// A request head for `target` with `headers`, closing the connection after.
fn head(method: &str, target: &[u8], headers: &[(&str, &str)]) -> Vec<u8> {
    let mut request = format!("{method} ").into_bytes();
    request.extend_from_slice(target);
    request.extend_from_slice(b" HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-length: 0\r\n");
    for (name, value) in headers {
        request.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    request
}

/// Whether `body` is `HostError`'s shape naming `field`.
fn names(body: &Value, field: &str) -> bool {
    body["error"].is_string() && body["field"] == field
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_in_the_shape_of_its_route() {
    let limit = 64 * 1024;
    let server = server_for(2, config(), None, |c| c.body_limit = limit).await;
    let before = table(&server.store).await;
    let client = reqwest::Client::new();
    let big = "x".repeat(limit + 1);
    let ours = [
        "/turns".to_owned(),
        format!("/invocations?{PERSON}"),
        format!("/sessions/c-1/commands?{PERSON}"),
        format!("/turns/t-1/actions/c1?session=c-1&{PERSON}"),
        format!("/conversations/c-1/files?{PERSON}&name=a.txt"),
        format!("/turns/t-1/stop?session=c-1&{PERSON}"),
    ];
    for path in ours {
        let request = client
            .post(format!("{}{path}", server.url))
            .header("content-type", "application/json")
            .body(big.clone());
        let (status, body) = send(request, Some(KEY)).await;
        assert_eq!(status, 413, "{path}: {body}");
        assert!(names(&body, "body"), "{path}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(&limit.to_string()),
            "{body}"
        );
    }
    // A2A's JSON-RPC binding answers a JSON-RPC error, as a2a-sdk's own server does.
    let request = client
        .post(format!("{}/a2a?{PERSON}", server.url))
        .header("content-type", "application/json")
        .body(big.clone());
    let (status, body) = send(request, Some(KEY)).await;
    assert_eq!((status, &body["jsonrpc"]), (200, &json!("2.0")), "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["error"]["data"][0]["metadata"]["field"], "body", "{body}");
    // Its HTTP+JSON binding, a google.rpc.Status.
    let request = client
        .post(format!("{}/a2a/message:send?{PERSON}", server.url))
        .header("content-type", "application/json")
        .body(big);
    let (status, body) = send(request, Some(KEY)).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], 413, "{body}");
    assert_eq!(body["error"]["details"][0]["reason"], "INVALID_REQUEST", "{body}");
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn a_head_the_server_does_not_take_is_answered_in_the_shape_with_its_headers() {
    let server = server_for(2, config(), None, |_| {}).await;
    let key = [("x-api-key", KEY)];
    let long_query = format!("/conversations?{PERSON}&pad={}", "q".repeat(20 * 1024));
    let many: Vec<(String, String)> = (0..150).map(|n| (format!("x-{n}"), "1".to_owned())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let huge = "h".repeat(70 * 1024);
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (head("GET", long_query.as_bytes(), &key), 414, "query"),
        (
            head("GET", format!("/conversations?{PERSON}").as_bytes(), &many),
            431,
            "headers",
        ),
        (
            head(
                "GET",
                format!("/conversations?{PERSON}").as_bytes(),
                &[("x-huge", &huge)],
            ),
            431,
            "headers",
        ),
        (
            head("GET", b"/conversations?userId=u\xFF&accountId=a", &key),
            400,
            "query",
        ),
        (head("GET", b"/conversations/c\xFF1", &key), 400, "path"),
        (
            head(
                "POST",
                b"/turns",
                &[
                    ("x-api-key", KEY),
                    ("content-length", "1"),
                    ("content-length", "2"),
                ],
            ),
            400,
            "Content-Length",
        ),
    ];
    for (request, status, field) in cases {
        let shown: String = String::from_utf8_lossy(&request).chars().take(60).collect();
        let (got, head, body) = raw(&server, &request).await;
        assert_eq!(got, status, "{shown:?}: {head} {body}");
        assert!(names(&body, field), "{shown:?}: {body}");
        assert!(head.contains("content-type: application/json"), "{head}");
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    }
    // On A2A's JSON-RPC path, a JSON-RPC error.
    let (status, _, body) = raw(&server, &head("POST", b"/a2a?x=\xFF", &key)).await;
    assert_eq!((status, &body["error"]["code"]), (200, &json!(-32600)), "{body}");
}

/// A request that asks to switch protocols and is not switched closes its connection: the
/// guard reads no heads after it, so a request pipelined behind it (one the guard would not
/// have checked) is never taken.
#[tokio::test]
async fn a_refused_switch_of_protocols_closes_its_connection() {
    let server = server_for(2, config(), None, |_| {}).await;
    let mut request =
        b"GET /health HTTP/1.1\r\nhost: localhost\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n"
            .to_vec();
    request.extend_from_slice(&head("GET", b"/health", &[]));
    let address = server.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    // The server may close before taking all of it: what it answered is what is looked at.
    let _ = stream.write_all(&request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer))
        .await
        .expect("the server answered and closed");
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert_eq!(
        answer.matches("http/1.1 ").count(),
        1,
        "one answer, then closed: {answer}"
    );
}

/// The JSON-RPC interface's URL the card names, asked with `Host: host` and forwarded headers.
async fn card(server: &Server, host: &str) -> String {
    let request = head(
        "GET",
        b"/.well-known/agent-card.json",
        &[
            ("x-forwarded-proto", "javascript"),
            ("x-forwarded-host", "evil.example"),
        ],
    );
    let request = String::from_utf8(request)
        .unwrap()
        .replace("host: localhost", &format!("host: {host}"));
    let (status, _, body) = raw(server, request.as_bytes()).await;
    assert_eq!(status, 200, "{body}");
    body["supportedInterfaces"][0]["url"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_agent_card_names_no_scheme_or_host_a_request_merely_says() {
    let server = server_for(2, config(), None, |_| {}).await;
    assert_eq!(
        card(&server, "agent.example:8080").await,
        "http://agent.example:8080/a2a"
    );
    assert_eq!(card(&server, "evil.example/x?y").await, "http://localhost/a2a");
    assert_eq!(card(&server, "a@evil.example").await, "http://localhost/a2a");
    let public = PublicUrl::new("https://agent.example.com").unwrap();
    let configured = server_for(2, config(), None, move |c| c.public_url = Some(public)).await;
    let body: Value = reqwest::Client::new()
        .get(format!("{}/.well-known/agent-card.json", configured.url))
        .header("x-forwarded-proto", "javascript")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["supportedInterfaces"][1]["url"], "https://agent.example.com/a2a",
        "{body}"
    );
}

#[tokio::test]
async fn ids_that_spoof_a_list_are_refused_on_every_route_and_protocol_and_change_nothing() {
    let server = server_for(2, config(), None, |_| {}).await;
    let before = table(&server.store).await;
    let client = reqwest::Client::new();
    let url = &server.url;
    let turn = |turn: &str, conversation: &str, user: &str| json!({"turnId": turn, "conversationId": conversation, "userId": user, "accountId": "a", "content": "Hi"});
    let agui = |thread: &str| json!({"threadId": thread, "runId": "r-1", "messages": [{"id": "m", "role": "user", "content": "Hi"}]});
    let probes: Vec<(reqwest::RequestBuilder, &str)> = vec![
        (
            client
                .post(format!("{url}/turns"))
                .json(&turn("t-1", "inv\u{202E}fdp.exe", "u")),
            "conversationId",
        ),
        (
            client
                .post(format!("{url}/turns"))
                .json(&turn("t\u{200B}1", "c-1", "u")),
            "turnId",
        ),
        (
            client
                .post(format!("{url}/turns"))
                .json(&turn("t-1", "c-1", "u\u{2028}x")),
            "userId",
        ),
        (
            client
                .post(format!(
                    "{url}/conversations/c%E2%80%AE1/files?{PERSON}&name=a.txt"
                ))
                .body("hi"),
            "conversationId",
        ),
        (
            client.post(format!("{url}/turns/t-1/stop?session=c%EF%BB%BF1&{PERSON}")),
            "session",
        ),
        (
            client.get(format!("{url}/sessions/c%E2%81%A6%31/state?{PERSON}")),
            "conversationId",
        ),
        (
            client
                .post(format!("{url}/agui?{PERSON}"))
                .json(&agui("th\u{2067}1")),
            "threadId",
        ),
    ];
    for (request, field) in probes {
        let (status, body) = send(request, Some(KEY)).await;
        assert_eq!((status, body["field"].as_str()), (400, Some(field)), "{body}");
        assert!(body["error"].as_str().unwrap().contains("U+"), "{body}");
    }
    let a2a = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m-1", "contextId": "ctx\u{202D}1", "role": "ROLE_USER", "parts": [{"text": "Hi"}]}}});
    let (status, body) = send(client.post(format!("{url}/a2a?{PERSON}")).json(&a2a), Some(KEY)).await;
    assert_eq!((status, &body["error"]["code"]), (200, &json!(-32602)), "{body}");
    assert_eq!(
        changed(&before, &table(&server.store).await),
        Vec::<String>::new()
    );
    assert_eq!(server.bedrock.requests().len(), 0);
}

#[tokio::test]
async fn a_conversation_whose_id_holds_a_slash_keeps_its_files_apart_from_every_other() {
    let server = server_for(2, config(), None, |_| {}).await;
    let (status, reference) = send(
        reqwest::Client::new()
            .post(format!(
                "{}/conversations/team%2Fconv-1/files?{PERSON}&name=notes.txt",
                server.url
            ))
            .header("content-type", "text/plain")
            .body("The code word is heliotrope."),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 201, "{reference}");
    server.bedrock.push(Reply::text("Heliotrope."));
    let body = json!({"turnId": "t-1", "conversationId": "team/conv-1", "userId": "u", "accountId": "a",
        "content": "The code word?", "attachments": [reference]});
    let (status, answer) = send(
        reqwest::Client::new()
            .post(format!("{}/turns", server.url))
            .json(&body),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    server.ended(1).await;
    let asked = server.bedrock.requests()[0].body["messages"].to_string();
    assert!(asked.contains("heliotrope"), "{asked}");
    assert_eq!(server.files.list("team").await.unwrap(), Vec::new());
    assert_eq!(server.files.list("team%2Fconv-1").await.unwrap(), Vec::new());
}

#[tokio::test]
async fn an_s3_file_area_keeps_a_slashed_conversations_files_under_its_own_prefix() {
    use agent_worker::hosts::S3FileArea;
    use agent_worker::protocol::AttachmentRef;
    let s3 = agent_worker_testkit::moto().s3();
    let bucket = format!("files-{}", uuid::Uuid::new_v4().simple());
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let area = S3FileArea::new(s3, &bucket, "attachments/");
    let notes = AttachmentRef::new("n1", "notes.txt", "text/plain", 5);
    area.put("team/conv-1", &notes, b"hello".to_vec()).await.unwrap();
    let other = AttachmentRef::new("n2", "other.txt", "text/plain", 5);
    area.put("team", &other, b"other".to_vec()).await.unwrap();
    assert_eq!(
        area.load("n1", "team/conv-1", LoadAs::Text, None).await.unwrap(),
        b"hello"
    );
    let listed = |owner: &'static str| {
        let area = area.clone();
        async move {
            let found = area.list(owner).await.unwrap();
            found.into_iter().map(|r| r.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed("team/conv-1").await, ["n1"]);
    assert_eq!(
        listed("team").await,
        ["n2"],
        "a conversation lists its own files alone"
    );
    assert_eq!(area.remove_conversation("team").await.unwrap(), 1);
    assert_eq!(listed("team/conv-1").await, ["n1"], "nor removes another's");
}

/// A file's name is shown in lists as an id is: characters that hide or reorder the text around
/// them (a name passing for another, `invoice<U+202E>fdp.exe` showing as `invoiceexe.pdf`) are
/// not kept, on an upload and on an A2A file part alike (issue 52's re-run probe).
#[tokio::test]
async fn a_files_name_keeps_no_character_that_would_let_it_pass_for_another() {
    let server = server_for(2, config(), None, |_| {}).await;
    let (status, reference) = send(
        reqwest::Client::new()
            .post(format!(
                "{}/conversations/c-names/files?{PERSON}&name=invoice%E2%80%AEfdp%E2%80%8B.exe",
                server.url
            ))
            .header("content-type", "text/plain")
            .body("total: 12"),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 201, "{reference}");
    assert_eq!(reference["name"], "invoicefdp.exe", "{reference}");
    let (status, refused) = send(
        reqwest::Client::new()
            .post(format!(
                "{}/conversations/c-names/files?{PERSON}&name=%E2%80%AE%E2%80%8B",
                server.url
            ))
            .header("content-type", "text/plain")
            .body("total: 12"),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 400, "a name of nothing shown: {refused}");
    assert_eq!(refused["field"], "name", "{refused}");
}

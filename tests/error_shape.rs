//! Every refusal of the container's routes has one body shape: `{"error": text}`, with `field`
//! when one field is at fault (and `runningTurnId` on a 409 for a busy conversation), whatever
//! refused it: the key, an id, the body, the query, the owner check, or no such route. The
//! session commands route answers the contract's own control answer (`{ok, error: {code,
//! message, retryable}}`), as the queue and the library do.

use crate::support;

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use support::config;
use support::container::{KEY, send, server};

/// Whether `body` is the one refusal shape: an `error` text, and only the known keys beside it.
fn is_refusal(body: &Value) -> bool {
    let Some(object) = body.as_object() else {
        return false;
    };
    object.get("error").is_some_and(Value::is_string)
        && object.iter().all(|(key, value)| match key.as_str() {
            "error" => true,
            "field" | "runningTurnId" => value.is_string(),
            _ => false,
        })
}

/// A refused request: its method, path and query, body, key; the status and the field at fault.
type Case = (
    Method,
    String,
    Option<String>,
    Option<&'static str>,
    u16,
    Option<&'static str>,
);

#[tokio::test]
async fn every_route_refuses_in_one_shape() {
    let server = server(2, config(), Duration::from_secs(5)).await;
    let url = &server.url;
    let person = "userId=ana&accountId=acme";
    let client = reqwest::Client::new();
    let turn = json!({"turnId": "t-1", "conversationId": "c-1", "userId": "ana", "accountId": "acme"});
    let cases: Vec<Case> = vec![
        (
            Method::POST,
            "/turns".into(),
            Some(turn.to_string()),
            Some(KEY),
            400,
            Some("content"),
        ),
        (
            Method::POST,
            "/turns".into(),
            Some("{".into()),
            Some(KEY),
            400,
            Some("body"),
        ),
        (Method::POST, "/turns".into(), Some("{}".into()), None, 401, None),
        (
            Method::POST,
            format!("/turns/t-1/stop?session=c-1&{person}"),
            Some(r#"{"reason":"bored"}"#.into()),
            Some(KEY),
            400,
            Some("reason"),
        ),
        (
            Method::POST,
            format!("/turns/t-1/stop?{person}"),
            None,
            Some(KEY),
            400,
            Some("session"),
        ),
        (
            Method::GET,
            format!("/turns/t-1/events?session=c-1&{person}&cursor=x"),
            None,
            Some(KEY),
            400,
            Some("query"),
        ),
        (
            Method::POST,
            format!("/turns/t-1/actions/c%23x?session=c-1&{person}"),
            Some(r#"{"status":"taken"}"#.into()),
            Some(KEY),
            400,
            Some("callId"),
        ),
        (
            Method::POST,
            format!("/turns/t-1/actions/c1?session=c-1&{person}"),
            Some(r#"{"status":"maybe"}"#.into()),
            Some(KEY),
            400,
            Some("body"),
        ),
        (
            Method::POST,
            format!("/conversations/c-1/files?{person}&name=a.txt&mimeType=text%2Fplain"),
            Some(String::new()),
            Some(KEY),
            400,
            None,
        ),
        (
            Method::POST,
            "/jobs/events".into(),
            Some("[]".into()),
            Some(KEY),
            400,
            Some("body"),
        ),
        (
            Method::GET,
            "/usage?accountId=acme&day=tomorrow".into(),
            None,
            Some(KEY),
            400,
            Some("day"),
        ),
        (
            Method::PUT,
            "/blocks".into(),
            Some("{}".into()),
            Some(KEY),
            400,
            Some("body"),
        ),
        (
            Method::GET,
            "/sessions/c-1/state?userId=ana".into(),
            None,
            Some(KEY),
            400,
            Some("accountId"),
        ),
        (
            Method::GET,
            format!("/sessions/c-1/entries?{person}&limit=0"),
            None,
            Some(KEY),
            400,
            Some("limit"),
        ),
        (
            Method::GET,
            format!("/conversations?{person}&limit=0"),
            None,
            Some(KEY),
            400,
            Some("limit"),
        ),
        (
            Method::GET,
            format!("/conversations/nobodys?{person}"),
            None,
            Some(KEY),
            404,
            None,
        ),
        (
            Method::DELETE,
            format!("/conversations/nobodys?{person}"),
            None,
            Some(KEY),
            404,
            None,
        ),
        (Method::GET, "/console/config".into(), None, Some(KEY), 404, None),
        (Method::GET, "/no/such/route".into(), None, Some(KEY), 404, None),
        (Method::PUT, "/turns".into(), None, Some(KEY), 405, None),
    ];
    for (method, path, body, key, status, field) in cases {
        let mut request = client.request(method.clone(), format!("{url}{path}"));
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body);
        }
        let (got, answer) = send(request, key).await;
        let what = format!("{method} {path}");
        assert_eq!(got, status, "{what}: {answer}");
        assert!(is_refusal(&answer), "{what}: not the one shape: {answer}");
        if let Some(field) = field {
            assert_eq!(answer["field"], field, "{what}: {answer}");
        }
    }
}

#[test]
fn the_shape_check_refuses_other_shapes() {
    assert!(is_refusal(&json!({"error": "x", "field": "body"})));
    assert!(!is_refusal(&json!({"ok": false, "error": {"code": "x"}})));
    assert!(!is_refusal(&json!("no such route")));
    assert!(!is_refusal(&json!({"error": "x", "detail": 1})));
}

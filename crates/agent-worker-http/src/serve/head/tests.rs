//! The guard on bytes as a client sends them, in pieces.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMITS: HeadLimits = HeadLimits {
    max_target_bytes: 64,
    max_head_bytes: 256,
    max_headers: 4,
};

/// What hyper would read of `sent`, and the refusal the guard kept.
async fn through(sent: &[u8]) -> (Vec<u8>, Option<RefusedHead>) {
    let (mut client, server) = tokio::io::duplex(64);
    let refusals = Refusals::new();
    let mut guarded = Guarded::new(server, LIMITS, refusals.clone());
    let sent = sent.to_vec();
    let writer = tokio::spawn(async move {
        // Written a few bytes at a time, so heads and bodies arrive in pieces. After a
        // refusal the guard reads no more: the rest is not taken (the server closes).
        for piece in sent.chunks(7) {
            if client.write_all(piece).await.is_err() {
                return;
            }
        }
        let _ = client.shutdown().await;
    });
    // To the end of the stream, or of a refused head's stand-in (after which the guard
    // gives nothing, and never ends the stream).
    let mut read = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        let n = guarded.read(&mut buf).await.unwrap();
        read.extend_from_slice(&buf[..n]);
        let stand_in = refusals.stand_in();
        if n == 0 || read.ends_with(&stand_in) {
            break;
        }
    }
    drop(guarded);
    writer.await.unwrap();
    let refused = refusals.take(&refusals.marker.clone());
    (read, refused)
}

#[tokio::test]
async fn good_requests_pass_as_they_came_bodies_and_chunks_included() {
    let sent = b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nGET /x\
POST /b HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3;ext=1\r\nGET\r\n0\r\nx-trailer: 1\r\n\r\n\
GET /c?q=%FF HTTP/1.1\r\nhost: x\r\n\r\n";
    let (read, refused) = through(sent).await;
    assert_eq!(read, sent, "a body that looks like a head is a body");
    assert_eq!(refused, None);
}

#[tokio::test]
async fn after_a_request_to_switch_protocols_the_new_protocols_bytes_pass_unread() {
    // A WebSocket's frames after its upgrade request: not a head, and not refused as one.
    let mut sent =
        b"GET /ws HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n".to_vec();
    sent.extend_from_slice(&[0x81, 0x85, 1, 2, 3, 4, 0xff, 0, 0x20, 0x7f, 9]);
    sent.extend_from_slice(&[b'x'; 300]);
    let (read, refused) = through(&sent).await;
    assert_eq!(refused, None);
    assert_eq!(read, sent);
}

#[tokio::test]
async fn a_head_hyper_would_refuse_is_replaced_by_the_stand_in_after_the_good_ones() {
    let good = b"POST /a HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc".to_vec();
    let cases: Vec<(Vec<u8>, StatusCode, &str)> = vec![
        (
            b"GET /a?q=\xFF HTTP/1.1\r\n\r\n".to_vec(),
            StatusCode::BAD_REQUEST,
            "query",
        ),
        (
            b"GET /\xFF HTTP/1.1\r\n\r\n".to_vec(),
            StatusCode::BAD_REQUEST,
            "path",
        ),
        (
            format!("GET /a?{} HTTP/1.1\r\n\r\n", "q".repeat(100)).into_bytes(),
            StatusCode::URI_TOO_LONG,
            "query",
        ),
        (
            format!("GET /{}", "p".repeat(200)).into_bytes(),
            StatusCode::URI_TOO_LONG,
            "path",
        ),
        (
            format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "v".repeat(300)).into_bytes(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers",
        ),
        (
            b"GET / HTTP/1.1\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\ne: 1\r\n\r\n".to_vec(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers",
        ),
        (
            b"POST / HTTP/1.1\r\ncontent-length: 1x\r\n\r\n".to_vec(),
            StatusCode::BAD_REQUEST,
            "Content-Length",
        ),
        (
            b"POST / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n".to_vec(),
            StatusCode::BAD_REQUEST,
            "Content-Length",
        ),
        (
            b"POST / HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n".to_vec(),
            StatusCode::BAD_REQUEST,
            "Transfer-Encoding",
        ),
        (
            b"CONNECT a:1 HTTP/1.1\r\n\r\n".to_vec(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method",
        ),
        (
            b"GET / HTTP/2.0\r\n\r\n".to_vec(),
            StatusCode::BAD_REQUEST,
            "version",
        ),
    ];
    for (bad, status, field) in cases {
        let mut sent = good.clone();
        sent.extend_from_slice(&bad);
        sent.extend_from_slice(b"GET /after HTTP/1.1\r\n\r\n");
        let (read, refused) = through(&sent).await;
        let shown = String::from_utf8_lossy(&bad).chars().take(60).collect::<String>();
        let refused = refused.unwrap_or_else(|| panic!("{shown:?} was not refused"));
        assert_eq!(
            (refused.status, refused.field),
            (status, field),
            "{shown:?}: {refused:?}"
        );
        assert!(read.starts_with(&good), "{shown:?}: the good request first");
        let rest = String::from_utf8_lossy(&read[good.len()..]).into_owned();
        assert!(rest.starts_with("GET /.refused-head/"), "{shown:?}: {rest}");
        assert!(
            !rest.contains("/after"),
            "{shown:?}: nothing after the refusal: {rest}"
        );
    }
}

#[test]
fn the_stand_in_is_known_by_its_connections_marker_alone() {
    let refusals = Refusals::new();
    let refused = RefusedHead::new(StatusCode::URI_TOO_LONG, "path", "long", "/".into());
    refusals.put(refused.clone());
    assert_eq!(refusals.take("/.refused-head/guess"), None);
    let marker = refusals.marker.clone();
    assert_eq!(refusals.take(&marker), Some(refused));
    assert_eq!(refusals.take(&marker), None, "answered once");
}

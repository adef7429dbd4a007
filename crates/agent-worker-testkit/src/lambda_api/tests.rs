//! The stand-in reads answers as Lambda's Runtime API does, written here byte by byte as a
//! runtime client writes them.

use base64::Engine as _;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::*;

const STREAMED_HEAD: &str = "POST /2018-06-01/runtime/invocation/r-1/response HTTP/1.1\r\n\
    Host: runtime\r\n\
    Lambda-Runtime-Function-Response-Mode: streaming\r\n\
    Transfer-Encoding: chunked\r\n\
    Trailer: Lambda-Runtime-Function-Error-Type\r\n\
    Trailer: Lambda-Runtime-Function-Error-Body\r\n\
    Content-Type: application/vnd.awslambda.http-integration-response\r\n\r\n";

fn chunk(bytes: &[u8]) -> Vec<u8> {
    let mut framed = format!("{:x}\r\n", bytes.len()).into_bytes();
    framed.extend_from_slice(bytes);
    framed.extend_from_slice(b"\r\n");
    framed
}

async fn status_line(connection: &mut TcpStream) -> String {
    let mut read = Vec::new();
    let mut buffer = [0_u8; 256];
    while !read.windows(2).any(|w| w == b"\r\n") {
        let n = connection.read(&mut buffer).await.unwrap();
        assert!(n > 0, "the stand-in answered: {read:?}");
        read.extend_from_slice(&buffer[..n]);
    }
    String::from_utf8_lossy(&read).lines().next().unwrap().to_owned()
}

#[tokio::test]
async fn a_streamed_answer_is_seen_chunk_by_chunk_and_its_error_trailers_are_read() {
    let mut api = LambdaRuntimeApi::start().await.unwrap();
    let mut connection = TcpStream::connect(api.address()).await.unwrap();
    connection.write_all(STREAMED_HEAD.as_bytes()).await.unwrap();
    let prelude = json!({"statusCode": 200, "headers": {"content-type": "text/event-stream"}, "cookies": []});
    let mut opening = prelude.to_string().into_bytes();
    opening.extend_from_slice(b"\0\0\0\0\0\0\0\0");
    connection.write_all(&chunk(&opening)).await.unwrap();
    connection.write_all(&chunk(b"data: first\n\n")).await.unwrap();

    // The first words are seen while the answer is still open.
    let seen = api.answer_when("r-1", |p| p.body().contains("data: first"));
    let seen = tokio::time::timeout(Duration::from_secs(20), seen)
        .await
        .expect("the first chunk is seen before the answer's end (a body read whole never is)");
    assert_eq!(seen.mode, ResponseMode::Streaming);
    assert!(seen.has_prelude());
    assert_eq!(seen.prelude(), Some(prelude.clone()));
    assert_eq!(seen.ended, None, "the answer goes on");
    assert_eq!(
        api.posted("r-1").map(|p| p.body()),
        Some("data: first\n\n".into())
    );

    let error = base64::engine::general_purpose::STANDARD.encode("the table went away");
    connection.write_all(&chunk(b"data: last\n\n")).await.unwrap();
    let end = format!(
        "0\r\nLambda-Runtime-Function-Error-Type: Runtime.StreamError\r\n\
         Lambda-Runtime-Function-Error-Body: {error}\r\n\r\n"
    );
    connection.write_all(end.as_bytes()).await.unwrap();
    assert!(status_line(&mut connection).await.contains(" 202 "));

    let (what, answer) = api.answer().await.unwrap();
    assert_eq!(what, "r-1/response");
    assert_eq!(answer["prelude"], prelude);
    assert_eq!(answer["body"], "data: first\n\ndata: last\n\n");
    assert_eq!(answer["error"]["errorType"], "Runtime.StreamError");
    assert_eq!(answer["error"]["errorMessage"], "the table went away");
    let posted = api.posted("r-1").unwrap();
    let first = posted.seen_at(|body| body.contains("first")).unwrap();
    let last = posted.seen_at(|body| body.contains("last")).unwrap();
    assert!(first < last, "the chunks' arrivals are recorded apart");
    assert!(posted.ended.is_some_and(|ended| ended >= last));
    assert_eq!(
        posted.stream_error(),
        Some(("Runtime.StreamError".into(), "the table went away".into()))
    );
}

#[tokio::test]
async fn a_buffered_answer_is_one_body_reported_as_its_json() {
    let mut api = LambdaRuntimeApi::start().await.unwrap();
    let mut connection = TcpStream::connect(api.address()).await.unwrap();
    let body = json!({"statusCode": 200, "body": "{\"ok\":true}"}).to_string();
    let request = format!(
        "POST /2018-06-01/runtime/invocation/r-2/response HTTP/1.1\r\nHost: runtime\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    connection.write_all(request.as_bytes()).await.unwrap();
    assert!(status_line(&mut connection).await.contains(" 202 "));

    let (what, answer) = api.answer().await.unwrap();
    assert_eq!(what, "r-2/response");
    assert_eq!(answer.to_string(), body);
    let posted = api.posted("r-2").unwrap();
    assert_eq!(posted.mode, ResponseMode::Buffered);
    assert!(!posted.has_prelude());
    assert_eq!(posted.prelude(), None);
    assert_eq!(posted.stream_error(), None);
    assert!(posted.ended.is_some());
}

//! Hostile clients against the accept loop both HTTP servers use (`hosts::http_serve`): sockets
//! that send nothing, request heads and bodies that trickle in, more sockets than the cap. Each
//! case held a connection (or a file descriptor) forever under `axum::serve`.

use std::net::SocketAddr;
use std::time::Duration;

use agent_worker::hosts::http_serve::{ConnectionLimits, serve_within};
use axum::Router;
use axum::routing::{get, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// A bound that only limits a failure: every wait below is for a connection to close.
const BOUND: Duration = Duration::from_secs(20);

struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn server(limits: ConnectionLimits) -> Server {
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/echo", post(|body: String| async move { body }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(serve_within(listener, router, limits, async move {
        let _ = stopped.await;
    }));
    Server {
        addr,
        stop: Some(stop),
        served,
    }
}

fn tight() -> ConnectionLimits {
    ConnectionLimits {
        header_read_timeout: Duration::from_millis(500),
        body_read_timeout: Duration::from_secs(1),
        send_timeout: Duration::from_secs(1),
        max_connections: 16,
        ..ConnectionLimits::default()
    }
}

/// Waits until the server closes `socket`: a read that ends (or fails) rather than waits.
async fn closed_by_server(socket: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(BOUND, async {
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the server closed the connection");
}

async fn get_ok(addr: SocketAddr) -> String {
    let response = tokio::time::timeout(BOUND, reqwest::get(format!("http://{addr}/")))
        .await
        .expect("the server answered")
        .unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

#[tokio::test]
async fn sockets_that_send_nothing_are_closed_and_more_than_the_cap_never_lock_the_server_out() {
    let server = server(tight()).await;
    // Four times the cap: the first sixteen are served (and closed when no head comes), the
    // rest wait in the backlog for their turn.
    let mut silent = Vec::new();
    for _ in 0..64 {
        silent.push(TcpStream::connect(server.addr).await.unwrap());
    }
    assert_eq!(get_ok(server.addr).await, "ok");
    for socket in &mut silent {
        closed_by_server(socket).await;
    }
    assert_eq!(get_ok(server.addr).await, "ok");
}

#[tokio::test]
async fn a_request_head_that_trickles_in_is_cut_off() {
    let server = server(tight()).await;
    let mut socket = TcpStream::connect(server.addr).await.unwrap();
    socket.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    // A header line every 100 ms, for up to ten seconds: the head never ends.
    let trickle = async {
        for i in 0..100 {
            if socket
                .write_all(format!("X-Slow-{i}: y\r\n").as_bytes())
                .await
                .is_err()
            {
                return true;
            }
            let mut buf = [0u8; 256];
            let read = tokio::time::timeout(Duration::from_millis(100), socket.read(&mut buf)).await;
            if let Ok(Ok(0) | Err(_)) = read {
                return true;
            }
        }
        false
    };
    assert!(trickle.await, "the head was still being read after ten seconds");
    assert_eq!(get_ok(server.addr).await, "ok");
}

#[tokio::test]
async fn a_body_that_trickles_in_is_cut_off_at_its_deadline() {
    let server = server(tight()).await;
    let mut socket = TcpStream::connect(server.addr).await.unwrap();
    socket
        .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
        .await
        .unwrap();
    // A byte every 100 ms: the whole body would take ten seconds.
    let mut answered = Vec::new();
    let cut = async {
        for _ in 0..100 {
            if socket.write_all(b"a").await.is_err() {
                return true;
            }
            let mut buf = [0u8; 1024];
            match tokio::time::timeout(Duration::from_millis(100), socket.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(n)) => answered.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
        }
        false
    };
    assert!(cut.await, "the body was still being read after ten seconds");
    let answer = String::from_utf8_lossy(&answered);
    assert!(
        answer.is_empty() || !answer.starts_with("HTTP/1.1 200"),
        "a cut body was answered as whole: {answer}"
    );
    assert_eq!(get_ok(server.addr).await, "ok");
}

#[tokio::test]
async fn shutdown_stops_accepting_and_returns_once_connections_close() {
    let mut server = server(ConnectionLimits::default()).await;
    assert_eq!(get_ok(server.addr).await, "ok");
    server.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(BOUND, &mut server.served)
        .await
        .expect("the server returned")
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(server.addr).await.is_err(), "still accepting");
}

//! agent-worker's test kit: the Bedrock stand-in, the model providers' stand-in (Anthropic, OpenAI-compatible), seed 004's realtime server's stand-in, moto's server, the fault proxy, the desk
//! fixture API, the MCP reference server's launcher, a Lambda Runtime API stand-in, an OIDC issuer's key set (JWKS) and tokens signed for it, an OTLP receiver, the session
//! audit, and real files (a PDF).
//!
//! A dev-dependency of the workspace's tests and benches, and of nothing the Lambda function or
//! the command line ship. The `bedrock-stand-in` binary serves the stand-in for the demo and
//! `make watch`.
#![forbid(unsafe_code)]

pub mod bedrock_stand_in;
pub mod desk_api;
pub mod document_shapes;
pub mod fault_proxy;
pub mod files;
pub mod jwks;
pub mod lambda_api;
pub mod mcp_server;
pub mod meter;
pub mod moto;
pub mod otlp_receiver;
pub mod prompt_cache;
pub mod protocol_clients;
pub mod provider_stand_in;
pub mod realtime;
pub mod session_audit;
pub mod stand_ins;

pub use bedrock_stand_in::{
    BedrockStandIn, Fallback, Frame, RecordedRequest, Reply, StreamScript, client_for,
};
pub use desk_api::{DeskApi, DeskCall};
pub use fault_proxy::{Fault, FaultProxy, Match, Rule};
pub use jwks::{IssuerAnswer, JwksStandIn, SigningKey, unsigned_token};
pub use lambda_api::{LambdaRuntimeApi, Posted, ResponseMode, function_url_event};
pub use mcp_server::{EverythingServer, everything_script};
pub use moto::{Moto, moto, queue_arn};
pub use otlp_receiver::{OtlpReceiver, ReceivedSpan};
pub use protocol_clients::{
    A2aEchoAgent, A2aPushReceiver, AguiRun, run_a2a_client, run_agui, run_mcp_client, run_mcp_python_client,
    run_ws_client, test_key,
};
pub use provider_stand_in::{ProviderRequest, ProviderStandIn, SseReply};
pub use realtime::{REALTIME_KEY, RealtimeStandIn, RealtimeState};
pub use stand_ins::{Provider, STAND_IN_API_KEY, StandIn};

/// Serves `app` on `listener` in the background until the returned sender is dropped.
pub fn serve_in_background(
    listener: tokio::net::TcpListener,
    app: axum::Router,
) -> tokio::sync::oneshot::Sender<()> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
    });
    stop
}

/// The workspace's root, where `.venv`, `.node` and `scripts/` are: found from the package under
/// test (`CARGO_MANIFEST_DIR`, as cargo sets it for a test process), so that a target directory
/// shared by two checkouts (cargo does not rebuild this crate for another checkout's path) uses
/// the tools of the one under test; else where this crate was compiled.
pub fn workspace_root() -> std::path::PathBuf {
    let compiled = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .and_then(|dir| {
            dir.ancestors()
                .find(|d| d.join("scripts/moto_server.py").is_file())
                .map(std::path::Path::to_path_buf)
        })
        .unwrap_or(compiled)
}

/// Session `id`, which a test names by literal and knows is one (panics otherwise).
pub fn sid(id: &str) -> agent_worker_core::session::SessionId {
    agent_worker_core::session::SessionId::new(id).unwrap_or_else(|e| panic!("session id {id:?} {e}"))
}

/// Turn `id`, which a test names by literal and knows is one (panics otherwise).
pub fn tid(id: &str) -> agent_worker_core::session::TurnId {
    agent_worker_core::session::TurnId::new(id).unwrap_or_else(|e| panic!("turn id {id:?} {e}"))
}

//! Test helpers: the Bedrock stand-in, moto's server, the desk fixture API, a Lambda Runtime
//! API stand-in, and real files (a PDF). Compiled with the `testing` feature (and in this
//! crate's own tests); production modules never use it.

pub mod bedrock_stand_in;
pub mod desk_api;
pub mod fault_proxy;
pub mod files;
pub mod lambda_api;
pub mod moto;
pub mod prompt_cache;
pub mod session_audit;

pub use bedrock_stand_in::{
    BedrockStandIn, Fallback, Frame, RecordedRequest, Reply, StreamScript, client_for,
};
pub use desk_api::{DeskApi, DeskCall};
pub use fault_proxy::{Fault, FaultProxy, Match, Rule};
pub use lambda_api::LambdaRuntimeApi;
pub use moto::{Moto, moto};

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

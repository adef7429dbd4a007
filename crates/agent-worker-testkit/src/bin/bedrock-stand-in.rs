//! `bedrock-stand-in`: the wire-level Bedrock stand-in on 127.0.0.1, for the demo, `make watch`
//! and any local run. It speaks ConverseStream's event stream, so the real
//! `aws-sdk-bedrockruntime` client (pointed at it with `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`)
//! runs unchanged.
//!
//! ```text
//! bedrock-stand-in [--port 4010] [--script replies.json] [--fallback echo|refuse]
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use agent_worker_testkit::{BedrockStandIn, Fallback, Reply};
use clap::{Parser, ValueEnum};

/// The stand-in's port when none is given.
const DEFAULT_PORT: u16 = 4010;

/// Serves the wire-level Bedrock stand-in on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "bedrock-stand-in", version)]
struct Args {
    /// The port on 127.0.0.1.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// A JSON file holding a list of scripted replies, answered first.
    #[arg(long)]
    script: Option<PathBuf>,
    /// What to answer once the script has run out.
    #[arg(long, value_enum, default_value = "echo")]
    fallback: FallbackArg,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FallbackArg {
    /// A small scripted assistant that calls the first tool offered, then reports its result.
    Echo,
    /// 400 ValidationException: the script ran out.
    Refuse,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match serve(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bedrock-stand-in: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), String> {
    let replies: Vec<Reply> = match &args.script {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("--script {}: {e}", path.display()))?;
            serde_json::from_str(&text)
                .map_err(|e| format!("--script {}: not a list of replies: {e}", path.display()))?
        }
        None => Vec::new(),
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let fallback = match args.fallback {
        FallbackArg::Echo => Fallback::Echo,
        FallbackArg::Refuse => Fallback::Refuse,
    };
    eprintln!(
        "Bedrock stand-in listening on http://{addr} ({} scripted replies)",
        replies.len()
    );
    BedrockStandIn::serve(listener, fallback, replies, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
    .map_err(|e| format!("the stand-in stopped: {e}"))
}

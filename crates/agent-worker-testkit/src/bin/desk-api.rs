//! `desk-api`: the fixture help desk's API on 127.0.0.1, for `make demo-tools`: its OpenAPI
//! document is `examples/config/desk.openapi.json`, and it knows `ana` by the bearer token
//! `desk-token-ana-7d3f9a`. Each request it takes is printed on stdout as one JSON line.
//!
//! ```text
//! desk-api [--port 4011]
//! ```

use std::process::ExitCode;
use std::time::Duration;

use agent_worker_testkit::DeskApi;
use clap::Parser;

/// Serves the fixture desk's API on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "desk-api", version)]
struct Args {
    /// The port on 127.0.0.1 (0: any free one).
    #[arg(long, default_value_t = 4011)]
    port: u16,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    let desk = match DeskApi::start_on(args.port).await {
        Ok(desk) => desk,
        Err(e) => {
            eprintln!("desk-api: cannot listen on 127.0.0.1:{}: {e}", args.port);
            return ExitCode::FAILURE;
        }
    };
    eprintln!("desk-api: listening on {}", desk.url());
    // A dev tool's log: print what arrived, every tenth of a second, until killed.
    let mut printed = 0;
    loop {
        let calls = desk.calls();
        for call in &calls[printed..] {
            let authorization = call.authorization.as_deref().map(|a| {
                let scheme = a.split_whitespace().next().unwrap_or_default();
                format!("{scheme} …")
            });
            println!(
                "{}",
                serde_json::json!({
                    "method": call.method, "uri": call.uri, "user": call.user,
                    "account": call.account, "authorization": authorization
                })
            );
        }
        printed = calls.len();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

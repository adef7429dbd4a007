//! The bench's peer: `agent-worker invoke --repeat N`'s one-tool turn on rig (rig-agent with
//! rig-bedrock), against the same Bedrock stand-in, written as rig's own Bedrock streaming example
//! (`streaming_with_bedrock_and_tools`) is: the client built once, `agent.prompt(..).stream()`,
//! the answer's text printed as it streams (a line per piece, so that the bench sees the first
//! one arrive), nothing else done per item. Then a summary line with the failed turns and the
//! peak resident memory.
//!
//! `rig-peer --endpoint-url URL --model-id ID --repeat N`. Each turn is a fresh prompt ("Add 1
//! and 2."), the model may call `add`, and the run allows four model calls.
//!
//! It runs on tokio's current-thread runtime, as `agent-worker invoke` does: rig's examples use
//! `#[tokio::main]` (the multi-thread runtime), whose wake-ups between worker threads cost more
//! CPU per turn than either framework's own work on this 2-core machine (BENCHMARKS.md, session
//! 20), so the bench compares the frameworks on one runtime. Until session 20 the peer also wrote
//! every stream item as a JSON line; that costs little beside the runtime, and is gone.

use std::error::Error;
use std::fmt;
use std::io::Write;

use aws_config::{BehaviorVersion, Region};
use futures::StreamExt;
use rig_agent::agent::MultiTurnStreamItem;
use rig_agent::prelude::*;
use rig_agent::streaming::{Item, StreamEvent};
use rig_agent::tool::ToolContext;
use rig_bedrock::client::BedrockRuntime;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
struct AddArgs {
    numbers: Vec<f64>,
}

#[derive(Debug)]
struct Never;

impl fmt::Display for Never {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("never")
    }
}

impl Error for Never {}

/// The `add` tool `invoke --tool add` has: the sum of `numbers`.
struct Add;

impl Tool for Add {
    const NAME: &'static str = "add";
    type Error = Never;
    type Args = AddArgs;
    type Output = f64;

    fn description(&self) -> String {
        "Adds numbers.".to_owned()
    }

    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object", "properties": {"numbers": {"type": "array", "items": {"type": "number"}}}, "required": ["numbers"]})
    }

    async fn call(&self, _context: &mut ToolContext, args: Self::Args) -> Result<Self::Output, Self::Error> {
        Ok(args.numbers.iter().sum())
    }
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// This process's peak resident memory (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?.to_owned();
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let endpoint = flag(&args, "--endpoint-url").expect("--endpoint-url");
    let model_id = flag(&args, "--model-id").unwrap_or_else(|| "bench-model".to_owned());
    let repeat: u32 = flag(&args, "--repeat").map_or(1, |n| n.parse().expect("--repeat N"));
    let config = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .load()
        .await;
    let model = BedrockRuntime::from(aws_sdk_bedrockruntime::Client::new(&config)).completion(model_id);
    let agent = AgentBuilder::new(model)
        .preamble("You are a helpful assistant.")
        .max_tokens(1024)
        .tool(Add)
        .build();
    let mut stdout = std::io::stdout().lock();
    let mut failed = 0;
    for _ in 0..repeat {
        let mut stream = agent.prompt("Add 1 and 2.").max_turns(4).stream();
        let mut ended = false;
        while let Some(item) = stream.next().await {
            match item {
                Ok(MultiTurnStreamItem::StreamAssistantItem(Item::Event(StreamEvent::Text { text, .. }))) => {
                    writeln!(stdout, "{text}").expect("stdout");
                }
                Ok(MultiTurnStreamItem::FinalResponse(_)) => ended = true,
                Ok(_) => {}
                Err(e) => writeln!(stdout, "error: {e}").expect("stdout"),
            }
        }
        failed += u32::from(!ended);
    }
    writeln!(
        stdout,
        "{}",
        json!({"failed_turns": failed, "peak_rss_kib": peak_rss_kib()})
    )
    .expect("stdout");
}

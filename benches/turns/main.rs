//! `make bench`: what a turn costs this runtime, against the Bedrock stand-in (which answers at
//! once, so the figures are the runtime's own) and moto's server.
//!
//! - In one process: turn latency, throughput, an Agent Protocol step, a Standard Agents
//!   exchange, the container host under load (`inprocess`).
//! - As a process (`agent-worker invoke --repeat`): cold start to the first event, CPU and wall
//!   time per turn with the model's time taken out, peak resident memory (`process`).
//! - At the CPU share Lambda gives 128, 256, 512 and 1,769 MB (a cgroup quota), beside rig and a
//!   bare Lambda function (the floor): the function's init, cold start and CPU per turn (`sizes`).
//! - Per provider (Bedrock, the Anthropic API, OpenAI-compatible), each against its wire-level
//!   stand-in: cold start and the CPU of a one-tool turn (`providers`).
//! - The heaviest turns the suite knows (a long answer, 8 tool calls, 1,000 messages summarized,
//!   a large PDF and pictures), each in a Lambda function of its own: peak memory, for the
//!   function's `MemorySize` (`heavy`).
//! - DynamoDB requests and bytes per turn against conversation length, and the round trips a
//!   turn waits for before the model, shown with every DynamoDB answer 50 ms later (`storage`).
//! - What watching for a stop costs a 30 s turn with a 20 s tool call, in DynamoDB requests
//!   (`watch`).
//! - DynamoDB requests per call of the conversations API: a list of 1,000, a get of a
//!   10,000-message conversation (`conversations`).
//! - Turns per second through `agent-worker poll` on moto's SQS (`poller`).
//! - Load over a long run, as processes: the container host and the poller on moto, many
//!   sessions at once: throughput, p99 and resident memory per window (`load`).
//!
//! Results are printed, and written to `benchmarks/results.json` with plots,
//! `benchmarks/dynamodb-per-turn.svg` and `benchmarks/sizes.svg`; each part's figures with the date and build of the run
//! that made them (`runs`), which `scripts/bench_front.py` turns into BENCHMARKS.md's front
//! table.

mod cgroup;
mod child;
mod conversations;
mod heavy;
mod inprocess;
mod load;
mod plot;
mod poller;
mod process;
mod sizes;
mod stamp;
mod storage;
mod watch;

use std::path::Path;

/// A new table on moto, named `<prefix>-<uuid>`.
pub async fn fresh_table(prefix: &str) -> String {
    let table = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    agent_worker::session::DynamoStore::new(
        agent_worker_testkit::moto().dynamodb(),
        agent_worker::session::DynamoConfig::new(&table).expect("a table name"),
    )
    .create_table()
    .await
    .expect("the table");
    table
}

/// Writes the plot `name` into `benchmarks/`.
pub fn write_plot(name: &str, svg: &str) {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("benchmarks");
    std::fs::create_dir_all(&out).expect("the benchmarks folder");
    std::fs::write(out.join(name), svg).expect("the plot is written");
}

#[tokio::main]
async fn main() {
    let only = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    let wants = |part: &str| only.as_deref().is_none_or(|o| o == part);
    // Taken before any part runs: the parts rewrite tracked files (the plot), which would make
    // the work tree look changed.
    let stamp = stamp::run();
    let mut results = serde_json::Map::new();
    if wants("inprocess") {
        inprocess::run().await;
    }
    if wants("process") {
        results.insert("process".into(), process::run().await);
    }
    if wants("sizes") {
        results.insert("sizes".into(), sizes::run().await);
    }
    if wants("providers") {
        results.insert("providers".into(), process::providers().await);
    }
    if wants("heavy") {
        results.insert("heavy".into(), heavy::run().await);
    }
    if wants("storage") {
        let storage = storage::run().await;
        write_plot("dynamodb-per-turn.svg", &plot::storage_svg(&storage));
        results.insert("storage".into(), serde_json::to_value(&storage).expect("JSON"));
        results.insert("roundTrip".into(), storage::round_trip().await);
    }
    if wants("watch") {
        results.insert("watch".into(), watch::run().await);
    }
    if wants("conversations") {
        results.insert("conversations".into(), conversations::run().await);
    }
    if wants("poller") {
        results.insert("poller".into(), poller::run().await);
    }
    if wants("load") {
        results.insert("load".into(), load::run().await);
    }
    if !results.is_empty() {
        let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("benchmarks");
        std::fs::create_dir_all(&out).expect("the benchmarks folder");
        // A partial run updates its parts and keeps the others' last figures.
        let path = out.join("results.json");
        let mut all: serde_json::Map<String, serde_json::Value> = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default();
        // Each part's figures name the run they come from; the machine is the last run's.
        let mut runs = all
            .remove("runs")
            .and_then(|runs| runs.as_object().cloned())
            .unwrap_or_default();
        for part in results.keys() {
            runs.insert(part.clone(), stamp.clone());
        }
        all.extend(results);
        all.insert("runs".into(), serde_json::Value::Object(runs));
        all.insert("machine".into(), stamp::machine());
        let text = serde_json::to_string_pretty(&all).expect("JSON");
        std::fs::write(&path, text + "\n").expect("the results are written");
        println!("\nwrote benchmarks/results.json (and the plots of the parts run) in benchmarks/");
    }
}

//! What names a run in `benchmarks/results.json`: the date and git build each part's figures
//! come from (`runs`), and the machine of the last run (`machine`), so that the front table of
//! BENCHMARKS.md (`scripts/bench_front.py`) is of one run and says which.

use std::process::Command;

use serde_json::{Value, json};

/// The date (UTC) and the git build of this run, `dirty` when the work tree had changes.
pub(crate) fn run() -> Value {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let date = chrono::DateTime::from_timestamp(i64::try_from(seconds).unwrap_or(0), 0)
        .map(|at| at.format("%Y-%m-%d").to_string())
        .unwrap_or_default();
    let build = output("git", &["rev-parse", "--short=7", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = output("git", &["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|changes| !changes.is_empty());
    json!({ "date": date, "build": build, "dirty": dirty })
}

/// The machine the run is on: its CPUs, memory, kernel and compiler.
pub(crate) fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, name)| name.trim().to_owned());
    let memory_gib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|info| {
        let kib: f64 = info
            .lines()
            .find_map(|line| line.strip_prefix("MemTotal:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some((kib / 1024.0 / 1024.0 * 10.0).round() / 10.0)
    });
    json!({
        "cpus": std::thread::available_parallelism().map_or(0, usize::from),
        "memoryGiB": memory_gib,
        "cpu": cpu,
        "kernel": output("uname", &["-r"]),
        "rustc": output("rustc", &["--version"]),
    })
}

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

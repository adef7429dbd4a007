//! Links the programs as position-dependent executables on Linux with glibc (`-no-pie`).
//!
//! A position-independent executable, cargo's default, makes the dynamic loader apply some
//! 125,000 relocations to these programs at every start and copy each page they touch: half of a
//! cold start's page faults and about a third of its CPU, by a profile taken by hand
//! (BENCHMARKS.md, build 57ee0df's section, "the link"). A
//! position-dependent one has those addresses fixed at link time. What it gives up is address
//! randomization of the program's own code and data (every Rust crate and the C code linked
//! into it, such as aws-lc; the system's libraries, the stack and the heap are still
//! randomized, and full RELRO stays on). That is the trade a Lambda function makes for its cold
//! start; a long-running server gains nothing from it, and the container image keeps cargo's
//! default (`AGENT_WORKER_PIE=1`, which this script honours at build time).
//!
//! Static builds (`crt-static`, as musl's) are left as rustc makes them. The floor peer
//! (`benches/peers/floor`) is built with this same script, so that the bench compares like with
//! like.

fn main() {
    // No `rerun-if-changed`: cargo reruns a build script after recompiling it, and a path
    // would be looked for beside each package that uses this script.
    println!("cargo::rerun-if-env-changed=AGENT_WORKER_PIE");
    let variable = |name: &str| std::env::var(name).unwrap_or_default();
    let glibc = variable("CARGO_CFG_TARGET_OS") == "linux" && variable("CARGO_CFG_TARGET_ENV") == "gnu";
    let static_crt = variable("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|feature| feature == "crt-static");
    let keep_pie = variable("AGENT_WORKER_PIE") == "1";
    if glibc && !static_crt && !keep_pie {
        println!("cargo::rustc-link-arg-bins=-no-pie");
    }
}

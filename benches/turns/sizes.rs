//! Part `sizes`: the runtime at the CPU share Lambda gives each memory size (128, 256, 512 and
//! 1,769 MB, the last one whole vCPU), each program started inside a cgroup with that quota
//! (`cgroup.rs`), beside rig and the floor.
//!
//! - The Lambda function (`bootstrap`, under the test kit's Runtime API stand-in, on moto) and
//!   the floor (`benches/peers/floor`: a bare function with the same SDK clients): init, process
//!   start to the first ask for an invocation (Lambda's `Init Duration`); and to the first answer.
//! - `agent-worker invoke` and the rig peer, the same one-tool turn against the same stand-in:
//!   cold start (process start to the end of the turn, wall and CPU) and CPU and wall time per
//!   turn (a long run less a one-turn run; the wall time without the stand-in's answering).
//!
//! Cold starts are taken [`REPEATS`] times per size, the programs in turn so that the machine's
//! drift falls on all; the median and the spread are reported. Where the machine allows no cgroup
//! quota, the part says why and is skipped.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_worker_testkit::{BedrockStandIn, LambdaRuntimeApi, Provider, Reply, StandIn, moto};
use serde_json::{Value, json};

use crate::cgroup::{CpuShare, ONE_VCPU_MB};
use crate::child::reap_child;
use crate::plot::{Line, sizes_svg};
use crate::process::{Runner, Scenario, measured_on, median, ms, sqs_event};

/// The memory sizes measured.
const SIZES_MB: [u32; 4] = [128, 256, 512, ONE_VCPU_MB];
/// Cold starts per program and size.
const REPEATS: usize = 9;
/// Turns in a long run, for CPU per turn.
const TURNS: u32 = 300;
/// The goals (issue 58): the function's init at most this many times the floor's ...
const INIT_OVER_FLOOR: f64 = 1.3;
/// ... a cold start (wall and CPU) at most this many times rig's ...
const COLD_OVER_RIG: f64 = 0.8;
/// ... and CPU per turn at most this many times rig's.
const CPU_OVER_RIG: f64 = 0.7;

/// What one cold start of a Lambda function took.
#[derive(Debug, Clone, Copy)]
struct FunctionStart {
    /// Process start to its first ask for an invocation.
    init: Duration,
    /// Process start to its first answer.
    answer: Duration,
    /// Its CPU time to then.
    cpu: Duration,
}

/// Samples of a figure: the median and the spread.
#[derive(Debug, Default)]
struct Samples(Vec<Duration>);

impl Samples {
    fn push(&mut self, sample: Duration) {
        self.0.push(sample);
    }

    fn median_ms(&self) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        ms(median(self.0.clone()))
    }

    fn json(&self) -> Value {
        let min = self.0.iter().min().copied().map(ms);
        let max = self.0.iter().max().copied().map(ms);
        json!({"median": self.median_ms(), "min": min, "max": max, "samples": self.0.len()})
    }

    fn text(&self) -> String {
        let (Some(min), Some(max)) = (self.0.iter().min(), self.0.iter().max()) else {
            return "—".into();
        };
        format!("{:.1} ({:.1}–{:.1})", self.median_ms(), ms(*min), ms(*max))
    }
}

/// One size's cold-start samples.
#[derive(Debug, Default)]
struct Starts {
    floor_init: Samples,
    floor_answer: Samples,
    ours_init: Samples,
    ours_answer: Samples,
    ours_init_cpu: Samples,
    floor_cpu: Samples,
    invoke_wall: Samples,
    invoke_cpu: Samples,
    rig_wall: Samples,
    rig_cpu: Samples,
}

/// The floor peer, when `make bench` built it (`FLOOR_PEER`).
fn floor() -> Option<PathBuf> {
    std::env::var_os("FLOOR_PEER")
        .map(PathBuf::from)
        .filter(|path| path.is_file())
}

/// Starts the Lambda function at `program` in `share`, under a Runtime API stand-in on moto's
/// `table` and `bedrock`, and takes its first invocation (a one-message text turn, which the
/// model answers when `runs_turns`), then ends it.
async fn function_start(
    program: &str,
    runs_turns: bool,
    share: &CpuShare,
    bedrock: &BedrockStandIn,
    table: &str,
    id: &str,
) -> FunctionStart {
    let mut api = LambdaRuntimeApi::start().await.expect("the Runtime API stand-in");
    if runs_turns {
        bedrock.push(Reply::text("The answer is forty-two."));
    }
    api.invoke("req-0", sqs_event(id));
    let mut command = Command::new(program);
    command
        .env_clear()
        .envs(api.function_environment(&bedrock.endpoint_url(), moto().endpoint(), table))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let start = Instant::now();
    let child = share.spawn(&mut command);
    let (_, answer) = api.answer().await.expect("its first answer");
    let answered = start.elapsed();
    assert_eq!(answer, json!({"batchItemFailures": []}), "{program}");
    let init = api
        .first_next()
        .expect("it asked for an invocation")
        .duration_since(start);
    let pid = child.id();
    let cpu = tokio::task::spawn_blocking(move || reap_child(pid, true))
        .await
        .expect("the reaper");
    drop(child);
    FunctionStart {
        init,
        answer: answered,
        cpu,
    }
}

/// CPU and wall time per one-tool turn of `runner` in `share` ([`TURNS`] turns less one,
/// divided by the rest), the wall time without the stand-in's own answering.
async fn per_turn(runner: &Runner, stand_in: &StandIn, share: &Arc<CpuShare>) -> (f64, f64) {
    let (one, one_model) = measured_on(runner, stand_in, Scenario::OneTool, 1, Some(share.clone())).await;
    let (many, many_model) =
        measured_on(runner, stand_in, Scenario::OneTool, TURNS, Some(share.clone())).await;
    let cpu = many.cpu.saturating_sub(one.cpu) / (TURNS - 1);
    let wall = (many.wall.saturating_sub(one.wall)).saturating_sub(many_model.saturating_sub(one_model))
        / (TURNS - 1);
    (ms(cpu), ms(wall))
}

/// `ours / theirs`, and whether it is at most `goal`.
fn ratio(ours: f64, theirs: f64, goal: f64) -> Value {
    let ratio = ours / theirs;
    json!({"ratio": ratio, "goal": goal, "met": ratio <= goal})
}

fn ratio_text(ours: f64, theirs: f64, goal: f64) -> String {
    let ratio = ours / theirs;
    if ratio.is_nan() {
        return "—".into();
    }
    format!(
        "{ratio:.2}× {}",
        if ratio <= goal { "(met)" } else { "(not met)" }
    )
}

/// Measures every size; prints the table and returns its figures.
pub(crate) async fn run() -> Value {
    println!("\n## At Lambda's memory sizes: each program in a cgroup with the CPU share of the size\n");
    if let Err(why) = CpuShare::of(SIZES_MB[0]) {
        println!("skipped: {why}");
        return json!({"skipped": why});
    }
    let stand_in = StandIn::start(Provider::Bedrock).await.expect("the stand-in");
    let StandIn::Bedrock(bedrock) = &stand_in else {
        unreachable!("started as Bedrock's")
    };
    let table = crate::fresh_table("bench-sizes").await;
    let ours = Runner::AgentWorker(Provider::Bedrock);
    let rig = Runner::rig();
    let floor = floor();
    if rig.is_none() || floor.is_none() {
        println!(
            "(rig peer: {}; floor: {}; `make bench` builds both and names them in RIG_PEER and FLOOR_PEER)",
            if rig.is_some() { "found" } else { "missing" },
            if floor.is_some() { "found" } else { "missing" },
        );
    }
    let bootstrap = env!("CARGO_BIN_EXE_bootstrap");
    let mut rows = Vec::new();
    let mut lines = [
        Line {
            name: "invoke: cold start of a one-tool turn",
            color: "#1f77b4",
            values: Vec::new(),
        },
        Line {
            name: "rig: the same",
            color: "#ff7f0e",
            values: Vec::new(),
        },
        Line {
            name: "bootstrap: init",
            color: "#2ca02c",
            values: Vec::new(),
        },
        Line {
            name: "floor: init",
            color: "#7f7f7f",
            values: Vec::new(),
        },
    ];
    println!(
        "| memory | floor init, ms | bootstrap init, ms | ÷ floor (≤ 1.3) | bootstrap to its first answer (moto), ms | \
         invoke cold, ms | rig cold, ms | ÷ rig (≤ 0.8) | invoke cold CPU, ms | rig cold CPU, ms | ÷ rig (≤ 0.8) | \
         CPU per turn, invoke, ms | rig, ms | ÷ rig (≤ 0.7) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for mb in SIZES_MB {
        let share = Arc::new(CpuShare::of(mb).expect("made once, made again"));
        let mut starts = Starts::default();
        for i in 0..REPEATS {
            if let Some(floor) = &floor {
                let start = function_start(
                    &floor.to_string_lossy(),
                    false,
                    &share,
                    bedrock,
                    &table,
                    &format!("floor-{mb}-{i}"),
                )
                .await;
                starts.floor_init.push(start.init);
                starts.floor_answer.push(start.answer);
                starts.floor_cpu.push(start.cpu);
            }
            let start = function_start(
                bootstrap,
                true,
                &share,
                bedrock,
                &table,
                &format!("sizes-{mb}-{i}"),
            )
            .await;
            starts.ours_init.push(start.init);
            starts.ours_answer.push(start.answer);
            starts.ours_init_cpu.push(start.cpu);
            let (run, _) = measured_on(&ours, &stand_in, Scenario::OneTool, 1, Some(share.clone())).await;
            starts.invoke_wall.push(run.wall);
            starts.invoke_cpu.push(run.cpu);
            if let Some(rig) = &rig {
                let (run, _) = measured_on(rig, &stand_in, Scenario::OneTool, 1, Some(share.clone())).await;
                starts.rig_wall.push(run.wall);
                starts.rig_cpu.push(run.cpu);
            }
        }
        let (ours_cpu, ours_wall) = per_turn(&ours, &stand_in, &share).await;
        let (rig_cpu, rig_wall) = match &rig {
            Some(rig) => per_turn(rig, &stand_in, &share).await,
            None => (f64::NAN, f64::NAN),
        };
        let s = &starts;
        for (line, samples) in
            lines
                .iter_mut()
                .zip([&s.invoke_wall, &s.rig_wall, &s.ours_init, &s.floor_init])
        {
            line.values.push(samples.median_ms());
        }
        println!(
            "| {} MB | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {ours_cpu:.3} | {rig_cpu:.3} | {} |",
            share.mb(),
            s.floor_init.text(),
            s.ours_init.text(),
            ratio_text(s.ours_init.median_ms(), s.floor_init.median_ms(), INIT_OVER_FLOOR),
            s.ours_answer.text(),
            s.invoke_wall.text(),
            s.rig_wall.text(),
            ratio_text(s.invoke_wall.median_ms(), s.rig_wall.median_ms(), COLD_OVER_RIG),
            s.invoke_cpu.text(),
            s.rig_cpu.text(),
            ratio_text(s.invoke_cpu.median_ms(), s.rig_cpu.median_ms(), COLD_OVER_RIG),
            ratio_text(ours_cpu, rig_cpu, CPU_OVER_RIG),
        );
        rows.push(json!({
            "memoryMb": mb,
            "floor": {"initMs": s.floor_init.json(), "firstAnswerMs": s.floor_answer.json(), "cpuMs": s.floor_cpu.json()},
            "bootstrap": {"initMs": s.ours_init.json(), "firstAnswerMs": s.ours_answer.json(), "cpuMs": s.ours_init_cpu.json()},
            "invoke": {"coldMs": s.invoke_wall.json(), "coldCpuMs": s.invoke_cpu.json(), "cpuMsPerTurn": ours_cpu, "wallMsPerTurn": ours_wall},
            "rig": {"coldMs": s.rig_wall.json(), "coldCpuMs": s.rig_cpu.json(), "cpuMsPerTurn": rig_cpu, "wallMsPerTurn": rig_wall},
            "goals": {
                "initOverFloor": ratio(s.ours_init.median_ms(), s.floor_init.median_ms(), INIT_OVER_FLOOR),
                "coldOverRig": ratio(s.invoke_wall.median_ms(), s.rig_wall.median_ms(), COLD_OVER_RIG),
                "coldCpuOverRig": ratio(s.invoke_cpu.median_ms(), s.rig_cpu.median_ms(), COLD_OVER_RIG),
                "cpuPerTurnOverRig": ratio(ours_cpu, rig_cpu, CPU_OVER_RIG),
                "coldUnder100Ms": s.invoke_wall.median_ms() < 100.0,
            },
        }));
    }
    println!(
        "\n(init: process start to the first ask for an invocation; cold: process start to the end of one one-tool turn; \
         median (least–most) of {REPEATS}; CPU per turn over {TURNS} turns; the quota over 20 ms periods)"
    );
    let svg = sizes_svg(
        "Cold start against the memory size (its CPU share), median",
        &SIZES_MB,
        &lines,
    );
    crate::write_plot("sizes.svg", &svg);
    json!({"repeats": REPEATS, "turns": TURNS, "periodMs": 20, "rows": rows})
}

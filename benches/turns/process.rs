//! The runtime as a process: `agent-worker invoke --repeat N` against the stand-in (in this
//! process, so the child's CPU time is the runtime's alone). Cold start is process start to the
//! first event of the first turn; per-turn CPU and wall time are the difference between N
//! turns and one, divided by N - 1, with the stand-in's own answering time taken out of the
//! wall time; peak resident memory is the child's own high-water mark, which it reports in its
//! summary line (`ru_maxrss` would count this process's memory: a spawned child starts in its
//! parent's address space).
//!
//! A child's resources come from `child.rs`, the one place of the project that calls the kernel
//! directly.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cgroup::CpuShare;
use crate::child::{cpu_ms, peak_rss_kib, reap, status_kib};

use agent_worker_testkit::{
    BedrockStandIn, LambdaRuntimeApi, Provider, Reply, STAND_IN_API_KEY, StandIn, moto,
};
use serde_json::{Value, json};

/// Turns in a long run.
const TURNS: u32 = 2_000;
/// Cold starts measured.
const COLD_STARTS: usize = 15;

/// What one run of the child took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    pub(crate) first_event: Duration,
    pub(crate) wall: Duration,
    pub(crate) cpu: Duration,
    max_rss_kib: u64,
}

/// The turn each scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// A question answered with text.
    Text,
    /// A question, one tool call, then the answer: the turn peer frameworks are compared on.
    OneTool,
    /// A question, two tool rounds (`add`, then `add` again), then the answer.
    TwoToolRounds,
}

fn script(stand_in: &StandIn, scenario: Scenario, turns: u32) {
    for _ in 0..turns {
        if scenario != Scenario::Text {
            stand_in.push_tool_call("c1", "add", r#"{"numbers":[1,2]}"#);
        }
        if scenario == Scenario::TwoToolRounds {
            stand_in.push_tool_call("c2", "add", r#"{"numbers":[3,4]}"#);
        }
        stand_in.push_text("The answer is forty-two.");
    }
}

/// The program that runs the turns: `agent-worker invoke` on a provider, or the rig peer
/// (`benches/peers/rig`, Bedrock only) built at the path `make bench` gives in `RIG_PEER`.
#[derive(Debug, Clone)]
pub(crate) enum Runner {
    AgentWorker(Provider),
    Rig(PathBuf),
}

impl Runner {
    /// The command that runs `turns` one-tool-or-text turns against `endpoint`, in the
    /// environment of [`lambda_like`].
    fn command(&self, endpoint: &str, turns: u32) -> Command {
        let turns = turns.to_string();
        let mut command = match self {
            Self::AgentWorker(_) => Command::new(env!("CARGO_BIN_EXE_agent-worker")),
            Self::Rig(path) => Command::new(path),
        };
        lambda_like(&mut command);
        match self {
            Self::AgentWorker(provider) => {
                command
                    .args([
                        "invoke",
                        "--session",
                        "bench",
                        "--text",
                        "Add 1 and 2.",
                        "--tool",
                        "add",
                    ])
                    .args(["--repeat", &turns])
                    .args(["--provider", provider.name(), "--model-id", provider.model_id()])
                    .args(["--endpoint-url", endpoint, "--region", "us-east-1"]);
                if let Some(variable) = provider.key_variable() {
                    command.env(variable, STAND_IN_API_KEY);
                }
                command
            }
            Self::Rig(_) => {
                command.args([
                    "--endpoint-url",
                    endpoint,
                    "--model-id",
                    Provider::Bedrock.model_id(),
                    "--repeat",
                    &turns,
                ]);
                command
            }
        }
    }

    /// The rig peer, when `make bench` built it.
    pub(crate) fn rig() -> Option<Self> {
        std::env::var_os("RIG_PEER")
            .map(PathBuf::from)
            .filter(|path| path.is_file())
            .map(Self::Rig)
    }
}

/// Gives `command` the environment a Lambda function has (its credentials, its region) and
/// nothing of this machine's: a function's environment names no certificate files, where a
/// developer's machine often does (`SSL_CERT_FILE`, `SSL_CERT_DIR`), and those make
/// `agent-worker` read the system's roots as well (`AWS_TLS_ROOTS`). Both runners get the same.
fn lambda_like(command: &mut Command) {
    command
        .env_clear()
        .env("AWS_ACCESS_KEY_ID", "bench")
        .env("AWS_SECRET_ACCESS_KEY", "bench")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("RUST_LOG", "warn");
}

/// Runs `runner` against the stand-in at `endpoint` to its end (in `share`, when given),
/// reading its events; its resources from `wait4`.
fn run_child(runner: &Runner, endpoint: &str, turns: u32, share: Option<&CpuShare>) -> Run {
    let mut command = runner.command(endpoint, turns);
    command.stdout(Stdio::piped()).stderr(Stdio::null());
    let start = Instant::now();
    let mut child = match share {
        Some(share) => share.spawn(&mut command),
        None => command.spawn().expect("the runner starts"),
    };
    let pid = i32::try_from(child.id()).expect("a pid");
    let stdout = child.stdout.take().expect("its stdout");
    let mut first_event = None;
    let mut last = String::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("a line");
        first_event.get_or_insert_with(|| start.elapsed());
        last = line;
    }
    let cpu = reap(pid);
    let wall = start.elapsed();
    drop(child);
    let summary: Value = serde_json::from_str(&last).expect("the summary line");
    assert_eq!(summary["failed_turns"], 0, "{summary}");
    Run {
        first_event: first_event.unwrap_or(wall),
        wall,
        cpu,
        max_rss_kib: summary["peak_rss_kib"].as_u64().unwrap_or(0),
    }
}

/// Runs `turns` turns of `scenario` in one child, on its own thread (the stand-in answers on
/// this runtime), and the stand-in's answering time during it.
/// (The stand-in's answering time is Bedrock's alone; the others count none.)
async fn measured(stand_in: &StandIn, scenario: Scenario, turns: u32) -> (Run, Duration) {
    measured_on(
        &Runner::AgentWorker(stand_in.provider()),
        stand_in,
        scenario,
        turns,
        None,
    )
    .await
}

/// [`measured`], with the turns run by `runner`, in `share` when given.
pub(crate) async fn measured_on(
    runner: &Runner,
    stand_in: &StandIn,
    scenario: Scenario,
    turns: u32,
    share: Option<Arc<CpuShare>>,
) -> (Run, Duration) {
    script(stand_in, scenario, turns);
    let endpoint = stand_in.endpoint_url();
    let runner = runner.clone();
    let answering = || match stand_in {
        StandIn::Bedrock(bedrock) => bedrock.answering_time(),
        StandIn::Api(..) => Duration::ZERO,
    };
    let model_before = answering();
    let run = tokio::task::spawn_blocking(move || run_child(&runner, &endpoint, turns, share.as_deref()))
        .await
        .expect("the child's thread");
    (run, answering() - model_before)
}

/// Warm invocations of the Lambda function measured.
const INVOCATIONS: usize = 300;

/// The Lambda function (`bootstrap`) under a Runtime API stand-in, on moto's DynamoDB: process
/// start to its first invocation's answer, peak memory after one invocation and after many,
/// and the wall time and CPU of a warm invocation of one turn; with each turn's metrics written
/// (EMF, `POWERTOOLS_METRICS_NAMESPACE`) when `metrics`.
async fn lambda_function(bedrock: &BedrockStandIn, metrics: bool) -> Value {
    let table = crate::fresh_table("bench-fn").await;
    let mut api = LambdaRuntimeApi::start().await.expect("the Runtime API stand-in");
    let event = |i: usize| sqs_event(&i.to_string());
    bedrock.push(Reply::text("The answer is forty-two."));
    api.invoke("req-0", event(0));
    let start = Instant::now();
    let mut function = start_function(&api, bedrock, &table, metrics);
    let pid = function.id().expect("a pid");
    let (what, answer) = api.answer().await.expect("the first answer");
    let cold = start.elapsed();
    assert_eq!(
        (what.as_str(), &answer),
        ("req-0/response", &json!({"batchItemFailures": []}))
    );
    let rss_one = peak_rss_kib(pid);
    let cpu_before = cpu_ms(pid);
    let mut walls = Vec::with_capacity(INVOCATIONS);
    for i in 1..=INVOCATIONS {
        bedrock.push(Reply::text("The answer is forty-two."));
        let sent = Instant::now();
        api.invoke(&format!("req-{i}"), event(i));
        let (_, answer) = api.answer().await.expect("an answer");
        walls.push(sent.elapsed());
        assert_eq!(answer, json!({"batchItemFailures": []}));
    }
    let cpu = (cpu_ms(pid) - cpu_before) / INVOCATIONS as f64;
    let rss_many = peak_rss_kib(pid);
    let (anon, file) = (status_kib(pid, "RssAnon"), status_kib(pid, "RssFile"));
    let _ = function.kill().await;
    let p50 = median(walls);
    println!(
        "Lambda function{}: process start to the first answer {:.1} ms; a warm invocation of one turn (DynamoDB on moto) p50 {:.2} ms, CPU {:.3} ms; \
         peak RSS {:.1} MiB after one invocation, {:.1} MiB after {} (now {:.1} MiB heap and stacks, {:.1} MiB of the binary and libraries)",
        if metrics { " with metrics" } else { "" },
        ms(cold),
        ms(p50),
        cpu,
        rss_one as f64 / 1024.0,
        rss_many as f64 / 1024.0,
        INVOCATIONS + 1,
        anon as f64 / 1024.0,
        file as f64 / 1024.0,
    );
    json!({
        "coldStartToFirstAnswerMs": ms(cold),
        "warmInvocationP50Ms": ms(p50),
        "warmInvocationCpuMs": cpu,
        "metrics": metrics,
        "peakRssMiBAfterOne": rss_one as f64 / 1024.0,
        "peakRssMiBAfterMany": rss_many as f64 / 1024.0,
        "rssAnonMiB": anon as f64 / 1024.0,
        "rssFileMiB": file as f64 / 1024.0,
        "invocations": INVOCATIONS + 1,
    })
}

/// Starts the Lambda function (`bootstrap`) under `api`, on moto's `table` and `bedrock`, with
/// metrics when `metrics`.
fn start_function(
    api: &LambdaRuntimeApi,
    bedrock: &BedrockStandIn,
    table: &str,
    metrics: bool,
) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_bootstrap"))
        .env_clear()
        .envs(api.function_environment(&bedrock.endpoint_url(), moto().endpoint(), table))
        .envs(metrics.then_some(("POWERTOOLS_METRICS_NAMESPACE", "Bench")))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the function starts")
}

/// An SQS batch of one new conversation's turn `t-{id}`.
pub(crate) fn sqs_event(id: &str) -> Value {
    json!({"Records": [{
        "messageId": format!("m-{id}"),
        "receiptHandle": "rh",
        "body": format!(r#"{{"turnId":"t-{id}","conversationId":"c-{id}","userId":"u","accountId":"a","content":"Hi"}}"#),
        "attributes": {"ApproximateReceiveCount": "1"},
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:turns.fifo",
        "awsRegion": "us-east-1"
    }]})
}

/// Cold starts of the Lambda function, taken in turn without and with metrics.
const FUNCTION_COLD_STARTS: usize = 9;

/// The Lambda function's cold starts without and with metrics, taken alternately so that the
/// machine's drift falls on both: the median of each, from process start to its first answer
/// (one turn on moto), and to its first ask for an invocation (its init, as Lambda's
/// `Init Duration` counts it).
async fn function_cold_starts(bedrock: &BedrockStandIn) -> ColdStarts {
    let table = crate::fresh_table("bench-cold").await;
    let mut answers = [Vec::new(), Vec::new()];
    let mut inits = [Vec::new(), Vec::new()];
    for i in 0..FUNCTION_COLD_STARTS {
        for metrics in [false, true] {
            let mut api = LambdaRuntimeApi::start().await.expect("the Runtime API stand-in");
            bedrock.push(Reply::text("The answer is forty-two."));
            api.invoke("req-0", sqs_event(&format!("cold-{metrics}-{i}")));
            let start = Instant::now();
            let mut function = start_function(&api, bedrock, &table, metrics);
            let (_, answer) = api.answer().await.expect("the first answer");
            answers[usize::from(metrics)].push(start.elapsed());
            let init = api.first_next().expect("the function asked for its invocation");
            inits[usize::from(metrics)].push(init.duration_since(start));
            assert_eq!(answer, json!({"batchItemFailures": []}));
            let _ = function.kill().await;
        }
    }
    let [off, on] = answers;
    let [init_off, init_on] = inits;
    ColdStarts {
        answer: [median(off), median(on)],
        init: [median(init_off), median(init_on)],
    }
}

/// The Lambda function's cold-start medians, without and with metrics.
struct ColdStarts {
    /// Process start to the first answer.
    answer: [Duration; 2],
    /// Process start to the first ask for an invocation.
    init: [Duration; 2],
}

/// The middle of `samples` (the upper one of an even count).
pub(crate) fn median<T: Ord + Copy>(mut samples: Vec<T>) -> T {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Cold start on `stand_in`: process start to the first event of a text turn, the median of
/// `runs`; and the first run whole.
async fn cold_start(stand_in: &StandIn, runs: usize) -> (Duration, Run) {
    cold_start_on(&Runner::AgentWorker(stand_in.provider()), stand_in, runs).await
}

/// [`cold_start`], with the turn run by `runner`.
async fn cold_start_on(runner: &Runner, stand_in: &StandIn, runs: usize) -> (Duration, Run) {
    let mut cold = Vec::with_capacity(runs);
    let mut single = None;
    for _ in 0..runs {
        let (run, _) = measured_on(runner, stand_in, Scenario::Text, 1, None).await;
        cold.push(run.first_event);
        single.get_or_insert(run);
    }
    (median(cold), single.expect("one run"))
}

/// Turns in a provider's long run.
const PROVIDER_TURNS: u32 = 500;

/// Per provider, against its wire-level stand-in: cold start (process start to the first event)
/// and the CPU of a turn with one tool call (N turns less one, divided by N - 1), so the
/// providers' client code is compared on the same turn.
pub(crate) async fn providers() -> Value {
    println!("\n## Per provider: agent-worker invoke --provider … against each stand-in\n");
    let mut figures = serde_json::Map::new();
    for provider in Provider::ALL {
        let stand_in = StandIn::start(provider).await.expect("the stand-in");
        let (cold, _) = cold_start(&stand_in, 9).await;
        let (one, _) = measured(&stand_in, Scenario::OneTool, 1).await;
        let (many, _) = measured(&stand_in, Scenario::OneTool, PROVIDER_TURNS).await;
        let cpu = many.cpu.saturating_sub(one.cpu) / (PROVIDER_TURNS - 1);
        println!(
            "{:<10} cold start {:.1} ms; one-tool turn CPU {:.3} ms; peak RSS after {PROVIDER_TURNS} turns {:.1} MiB",
            provider.name(),
            ms(cold),
            ms(cpu),
            many.max_rss_kib as f64 / 1024.0
        );
        figures.insert(
            provider.name().into(),
            json!({
                "coldStartMs": ms(cold),
                "cpuMsPerOneToolTurn": ms(cpu),
                "peakRssMiB": many.max_rss_kib as f64 / 1024.0,
                "turns": PROVIDER_TURNS,
            }),
        );
    }
    Value::Object(figures)
}

/// Measures cold start, per-turn CPU and wall time, and peak memory; prints and returns them.
pub(crate) async fn run() -> Value {
    println!("\n## As a process: agent-worker invoke --repeat\n");
    let stand_in = StandIn::start(Provider::Bedrock).await.expect("the stand-in");
    let (cold_p50, single) = cold_start(&stand_in, COLD_STARTS).await;
    println!(
        "cold start (process start to the first event), median of {COLD_STARTS}: {:.1} ms",
        ms(cold_p50)
    );
    let mut scenarios = serde_json::Map::new();
    println!(
        "one turn as a whole process: wall {:.1} ms, CPU {:.1} ms, peak RSS {:.1} MiB",
        ms(single.wall),
        ms(single.cpu),
        single.max_rss_kib as f64 / 1024.0
    );
    for (name, scenario) in [
        ("text", Scenario::Text),
        ("one_tool_call", Scenario::OneTool),
        ("two_tool_rounds", Scenario::TwoToolRounds),
    ] {
        let (one, one_model) = measured(&stand_in, scenario, 1).await;
        let (many, many_model) = measured(&stand_in, scenario, TURNS).await;
        let per = |a: Duration, b: Duration| (a.saturating_sub(b)) / (TURNS - 1);
        let cpu = per(many.cpu, one.cpu);
        let wall = per(many.wall, one.wall);
        let model = per(many_model, one_model);
        let runtime_wall = wall.saturating_sub(model);
        println!(
            "{name:<16} per turn: CPU {:.3} ms, wall {:.3} ms, of which the stand-in {:.3} ms, runtime wall {:.3} ms; \
             peak RSS after {TURNS} turns (each session kept in memory) {:.1} MiB",
            ms(cpu),
            ms(wall),
            ms(model),
            ms(runtime_wall),
            many.max_rss_kib as f64 / 1024.0
        );
        scenarios.insert(
            name.into(),
            json!({
                "cpuMsPerTurn": ms(cpu),
                "wallMsPerTurn": ms(wall),
                "standInMsPerTurn": ms(model),
                "runtimeWallMsPerTurn": ms(runtime_wall),
                "peakRssMiB": many.max_rss_kib as f64 / 1024.0,
                "turns": TURNS,
            }),
        );
    }
    let rig = match Runner::rig() {
        Some(rig) => against_rig(&rig, &stand_in, &scenarios).await,
        None => {
            println!("(no rig peer: `make bench` builds benches/peers/rig and names it in RIG_PEER)");
            Value::Null
        }
    };
    let StandIn::Bedrock(bedrock) = &stand_in else {
        unreachable!("started as Bedrock's")
    };
    let function = lambda_function(bedrock, false).await;
    let with_metrics = lambda_function(bedrock, true).await;
    let cold = function_cold_starts(bedrock).await;
    let [cold_off, cold_on] = cold.answer;
    let [init_off, init_on] = cold.init;
    println!(
        "Lambda function cold start, process start to the first answer (moto), median of {FUNCTION_COLD_STARTS} each, taken alternately: \
         {:.1} ms without metrics, {:.1} ms with ({:+.1}%); its init (process start to its first ask for an invocation): {:.1} ms, {:.1} ms",
        ms(cold_off),
        ms(cold_on),
        (ms(cold_on) / ms(cold_off) - 1.0) * 100.0,
        ms(init_off),
        ms(init_on),
    );
    json!({
        "lambdaColdStartMedianMs": {"withoutMetrics": ms(cold_off), "withMetrics": ms(cold_on), "samples": FUNCTION_COLD_STARTS},
        "lambdaInitMedianMs": {"withoutMetrics": ms(init_off), "withMetrics": ms(init_on), "samples": FUNCTION_COLD_STARTS},
        "lambdaFunction": function,
        "lambdaFunctionWithMetrics": with_metrics,
        "coldStartMs": ms(cold_p50),
        "singleTurnProcess": {
            "wallMs": ms(single.wall),
            "cpuMs": ms(single.cpu),
            "peakRssMiB": single.max_rss_kib as f64 / 1024.0,
        },
        "perTurn": scenarios,
        "rig": rig,
    })
}

/// The same turns on the rig peer, beside this run's figures for `invoke`: cold start and the
/// peak memory of one turn (the median of [`COLD_STARTS`] each, taken alternately, so that the
/// machine's drift falls on both), CPU per one-tool turn over [`TURNS`], the peak memory of the
/// long run; each with `invoke`'s over rig's (the issue's goal: at most 0.8).
async fn against_rig(rig: &Runner, stand_in: &StandIn, scenarios: &serde_json::Map<String, Value>) -> Value {
    let ours = Runner::AgentWorker(stand_in.provider());
    let mut samples = [Vec::new(), Vec::new()];
    for _ in 0..COLD_STARTS {
        for (i, runner) in [&ours, rig].into_iter().enumerate() {
            let (run, _) = measured_on(runner, stand_in, Scenario::Text, 1, None).await;
            samples[i].push((run.first_event, run.max_rss_kib));
        }
    }
    let medians = |runs: &[(Duration, u64)]| {
        (
            median(runs.iter().map(|r| r.0).collect()),
            median(runs.iter().map(|r| r.1).collect()),
        )
    };
    let (cold, our_rss) = medians(&samples[0]);
    let (rig_cold, rig_rss) = medians(&samples[1]);
    let (one, _) = measured_on(rig, stand_in, Scenario::OneTool, 1, None).await;
    let (many, _) = measured_on(rig, stand_in, Scenario::OneTool, TURNS, None).await;
    let rig_cpu = ms(many.cpu.saturating_sub(one.cpu) / (TURNS - 1));
    let ours = &scenarios["one_tool_call"];
    let our_cpu = ours["cpuMsPerTurn"].as_f64().unwrap_or(f64::NAN);
    let our_peak = ours["peakRssMiB"].as_f64().unwrap_or(f64::NAN);
    let mib = |kib: u64| kib as f64 / 1024.0;
    let rows = [
        ("cold start, ms (median, alternately)", ms(cold), ms(rig_cold)),
        ("CPU per one-tool turn, ms", our_cpu, rig_cpu),
        ("peak RSS, one turn, MiB (median)", mib(our_rss), mib(rig_rss)),
        (
            &*format!("peak RSS after {TURNS} turns, MiB"),
            our_peak,
            mib(many.max_rss_kib),
        ),
    ];
    println!(
        "\n| same stand-in, same turns | agent-worker invoke | rig (rig-agent + rig-bedrock 0.44) | ours ÷ rig |"
    );
    println!("| --- | --- | --- | --- |");
    for (name, ours, theirs) in &rows {
        println!("| {name} | {ours:.3} | {theirs:.3} | {:.2} |", ours / theirs);
    }
    json!({
        "coldStartMs": ms(rig_cold),
        "oursColdStartMs": ms(cold),
        "cpuMsPerOneToolTurn": rig_cpu,
        "peakRssMiBOneTurn": mib(rig_rss),
        "oursPeakRssMiBOneTurn": mib(our_rss),
        "peakRssMiBAfterMany": mib(many.max_rss_kib),
        "turns": TURNS,
        "oursOverRig": {
            "coldStart": ms(cold) / ms(rig_cold),
            "cpuPerOneToolTurn": our_cpu / rig_cpu,
            "peakRssOneTurn": mib(our_rss) / mib(rig_rss),
        },
    })
}

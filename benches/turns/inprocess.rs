//! In one process: turn latency and throughput of the engine against the stand-in, an Agent
//! Protocol step over HTTP, a two-sided Standard Agents exchange, and the container host under
//! load. A raw SDK ConverseStream call on the same stand-in is the baseline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_worker::engine::tools::examples;
use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::protocol::{AgentExt, Prompt, Scope};
use agent_worker::session::{MemoryStore, Message};
use agent_worker_testkit::{BedrockStandIn, Reply, sid};
use aws_sdk_bedrockruntime::types::{ContentBlock, ConversationRole, Message as SdkMessage};

const TURNS: usize = 400;
const WARMUP: usize = 40;
const CONCURRENCY: usize = 16;

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    println!(
        "{name:<34} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
        mean.as_secs_f64() * 1e3,
        percentile(&samples, 0.5).as_secs_f64() * 1e3,
        percentile(&samples, 0.99).as_secs_f64() * 1e3,
        samples.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

fn engine(bedrock: &BedrockStandIn, store: &MemoryStore) -> Engine {
    Engine::builder()
        .model(BedrockModel::new(bedrock.client(), "bench-model"))
        .store(store.clone())
        .system_prompt("You are a benchmark.")
        .tools(examples::NAMES.iter().filter_map(|n| examples::by_name(n)))
        .config(EngineConfig::default())
        .build()
        .expect("a valid engine")
}

async fn raw_sdk(bedrock: &BedrockStandIn, client: &aws_sdk_bedrockruntime::Client) -> Duration {
    bedrock.push(Reply::text("The answer is forty-two."));
    let start = Instant::now();
    let mut output = client
        .converse_stream()
        .model_id("bench-model")
        .messages(
            SdkMessage::builder()
                .role(ConversationRole::User)
                .content(ContentBlock::Text("Hi".into()))
                .build()
                .expect("a message"),
        )
        .send()
        .await
        .expect("the stand-in answers");
    while output.stream.recv().await.expect("a frame").is_some() {}
    start.elapsed()
}

async fn measure<F, Fut>(name: &str, mut turn: F)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Duration>,
{
    for i in 0..WARMUP {
        turn(i).await;
    }
    let mut samples = Vec::with_capacity(TURNS);
    for i in 0..TURNS {
        samples.push(turn(WARMUP + i).await);
    }
    report(name, samples);
}

/// Runs the in-process measurements.
pub(crate) async fn run() {
    let bedrock = BedrockStandIn::start().await.expect("the stand-in starts");
    println!("\n## In one process\n");
    println!("{TURNS} turns each after {WARMUP} warm-up turns; times in milliseconds");
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>9}",
        "scenario", "mean", "p50", "p99", "max"
    );

    let client = bedrock.client();
    measure("raw SDK ConverseStream call", |_| raw_sdk(&bedrock, &client)).await;

    let store = MemoryStore::new();
    let agent = engine(&bedrock, &store);
    measure("text turn (new session)", |i| {
        bedrock.push(Reply::text("The answer is forty-two."));
        let agent = agent.clone();
        async move {
            let start = Instant::now();
            agent
                .collect(
                    Scope::new(agent_worker_testkit::sid(&format!("t-{i}"))),
                    Prompt::text("Hi"),
                )
                .await
                .expect("completed");
            start.elapsed()
        }
    })
    .await;

    measure("tool turn (call + answer)", |i| {
        bedrock.push(Reply::tool_call("t1", "add", "{\"numbers\":[1,2]}"));
        bedrock.push(Reply::text("Three."));
        let agent = agent.clone();
        async move {
            let start = Instant::now();
            agent
                .collect(
                    Scope::new(agent_worker_testkit::sid(&format!("tool-{i}"))),
                    Prompt::text("1+2?"),
                )
                .await
                .expect("completed");
            start.elapsed()
        }
    })
    .await;

    let history: Vec<Message> = (0..100)
        .map(|i| {
            if i % 2 == 0 {
                Message::user_text(format!("question {i}"))
            } else {
                Message::assistant_text(format!("answer {i}"))
            }
        })
        .collect();
    measure("text turn, 100-message history", |i| {
        bedrock.push(Reply::text("The answer is forty-two."));
        let session = format!("long-{i}");
        store.put_raw_history(&sid(&session), history.clone());
        let agent = agent.clone();
        async move {
            let start = Instant::now();
            agent
                .collect(Scope::new(sid(&session)), Prompt::text("Hi"))
                .await
                .expect("completed");
            start.elapsed()
        }
    })
    .await;

    for _ in 0..TURNS {
        bedrock.push(Reply::text("The answer is forty-two."));
    }
    let agent = Arc::new(agent);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..CONCURRENCY {
        let agent = agent.clone();
        tasks.spawn(async move {
            for i in (worker..TURNS).step_by(CONCURRENCY) {
                agent
                    .collect(
                        Scope::new(agent_worker_testkit::sid(&format!("c-{i}"))),
                        Prompt::text("Hi"),
                    )
                    .await
                    .expect("completed");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a worker");
    }
    let elapsed = start.elapsed();
    println!(
        "throughput: {TURNS} text turns, {CONCURRENCY} at a time: {:.0} turns/s ({:.1} ms wall)",
        TURNS as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e3
    );

    agent_protocol_steps(&bedrock, &agent).await;
    standard_agent_exchanges(&bedrock).await;
    container_load(&bedrock).await;
}

/// One Agent Protocol step over HTTP (the typed client to the server, the engine behind it).
async fn agent_protocol_steps(bedrock: &BedrockStandIn, agent: &Arc<Engine>) {
    use agent_worker::hosts::agent_protocol::{
        AgentProtocolClient, AgentProtocolServer, AgentTaskHandler, ServerConfig, TaskRequestBody, Workspace,
        serve,
    };
    let workspace = std::env::temp_dir().join(format!("bench-ws-{}", std::process::id()));
    let server = AgentProtocolServer::new(
        AgentTaskHandler::new(agent.clone()),
        ServerConfig::new(Workspace::new(&workspace)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let client = AgentProtocolClient::new(&format!("http://{}", listener.local_addr().expect("an address")))
        .expect("a client");
    let served = tokio::spawn(serve(listener, server, std::future::pending()));
    measure("agent protocol step over HTTP", |_| {
        bedrock.push(Reply::text("The answer is forty-two."));
        let client = client.clone();
        async move {
            let task = client
                .create_agent_task(&TaskRequestBody::new("Hi"))
                .await
                .expect("a task");
            let start = Instant::now();
            client
                .execute_agent_task_step(&task.task_id, None)
                .await
                .expect("a step");
            start.elapsed()
        }
    })
    .await;
    served.abort();
    let _ = std::fs::remove_dir_all(&workspace);
}

/// A Standard Agents session of two prompt sides: one invocation, two side turns.
async fn standard_agent_exchanges(bedrock: &BedrockStandIn) {
    use agent_worker::agents::{
        AgentRuntime, Catalog, MemoryThreadStore, PromptDefinition, SideConfig, define_agent,
    };
    let mut pair = define_agent("pair", SideConfig::prompt("a"), SideConfig::prompt("b"));
    pair.max_session_turns = Some(2);
    let catalog = Catalog::new()
        .agent(pair)
        .prompt(PromptDefinition::new("a", "You are a."))
        .prompt(PromptDefinition::new("b", "You are b."));
    let client = bedrock.client();
    let runtime = AgentRuntime::builder()
        .catalog(catalog)
        .models("bench-model", move |id| {
            Arc::new(BedrockModel::new(client.clone(), id)) as Arc<dyn agent_worker::engine::Model>
        })
        .session_store(MemoryStore::new())
        .thread_store(MemoryThreadStore::new())
        .build()
        .expect("a runtime");
    let pair = runtime.agent("pair").expect("the agent");
    measure("standard agent: 2 side turns", |i| {
        bedrock.push(Reply::text("From a."));
        bedrock.push(Reply::text("From b."));
        let pair = pair.clone();
        async move {
            let start = Instant::now();
            pair.collect(
                Scope::new(agent_worker_testkit::sid(&format!("pair-{i}"))),
                Prompt::text("Go."),
            )
            .await
            .expect("completed");
            start.elapsed()
        }
    })
    .await;
}

/// Many turns posted to the container host over HTTP at once: turns per second, the time from
/// the request to the turn's end, and a count of lost or duplicated turns (both must be 0).
async fn container_load(bedrock: &BedrockStandIn) {
    use agent_worker::hosts::container::{ContainerConfig, ContainerHost, serve};
    use agent_worker::hosts::lambda::TurnHandler;
    use agent_worker::sinks::Sinks;
    use std::collections::HashMap;
    use std::sync::Mutex;

    const KEY: &str = "bench-key-0123456789";
    const LOAD: usize = 800;
    const CAPACITY: usize = 64;
    let store = MemoryStore::new();
    let handler = TurnHandler::new(engine(bedrock, &store), Sinks::new());
    let mut config = ContainerConfig::new(KEY).expect("a key");
    config.max_concurrent_turns = CAPACITY;
    let ended: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let (all_done, done) = tokio::sync::oneshot::channel::<()>();
    let all_done = Arc::new(Mutex::new(Some(all_done)));
    let seen = ended.clone();
    let host = ContainerHost::builder(handler, Arc::new(store.clone()), None, "bench-model", config)
        .on_turn_end(move |end| {
            let mut seen = seen.lock().expect("the bench's lock");
            seen.insert(end.turn_id.into_string(), Instant::now());
            if seen.len() == LOAD
                && let Some(tx) = all_done.lock().expect("the bench's lock").take()
            {
                let _ = tx.send(());
            }
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}/turns", listener.local_addr().expect("an address"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, host.build(), async move {
        let _ = stopped.await;
    }));
    for _ in 0..LOAD {
        bedrock.push(Reply::text("The answer is forty-two."));
    }
    let before = bedrock.requests().len();
    let client = reqwest::Client::new();
    let started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let start = Instant::now();
    let mut posters = tokio::task::JoinSet::new();
    for worker in 0..CAPACITY {
        let (client, url, started) = (client.clone(), url.clone(), started.clone());
        posters.spawn(async move {
            let mut refused = 0u64;
            for i in (worker..LOAD).step_by(CAPACITY) {
                let id = format!("load-{i}");
                let body = format!(r#"{{"turnId":"{id}","conversationId":"load-{i}","userId":"u","accountId":"a","content":"Hi"}}"#);
                loop {
                    started.lock().expect("the bench's lock").insert(id.clone(), Instant::now());
                    let response = client.post(&url).header("x-api-key", KEY).body(body.clone()).send().await.expect("the server answers");
                    match response.status().as_u16() {
                        202 => break,
                        503 => {
                            refused += 1;
                            tokio::task::yield_now().await;
                        }
                        other => panic!("POST /turns answered {other}"),
                    }
                }
            }
            refused
        });
    }
    let mut refused = 0;
    while let Some(done) = posters.join_next().await {
        refused += done.expect("a poster");
    }
    let _ = tokio::time::timeout(Duration::from_secs(60), done).await;
    let elapsed = start.elapsed();
    let _ = stop.send(());
    let _ = server.await;

    let ended = ended.lock().expect("the bench's lock").clone();
    let started = started.lock().expect("the bench's lock").clone();
    let mut latencies: Vec<Duration> = ended
        .iter()
        .filter_map(|(id, end)| Some(end.duration_since(*started.get(id)?)))
        .collect();
    latencies.sort();
    let served = bedrock.requests().len() - before;
    println!(
        "container: {LOAD} turns over HTTP, {CAPACITY} at a time: {:.0} turns/s; request to end p50 {:.2} ms, p99 {:.2} ms; \
         503s retried {refused}; lost {}, duplicated {}",
        LOAD as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        LOAD - ended.len(),
        served.saturating_sub(LOAD),
    );
}

//! The worker killed (SIGKILL) at random points while `agent-worker poll` runs many turns from
//! a FIFO queue on moto, then restarted: every turn ends stored exactly once or in the
//! dead-letter queue, and every stored session passes the session checker.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::session_audit::audit;
use agent_worker_testkit::{BedrockStandIn, Fallback, StreamScript, moto};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

const SESSIONS: usize = 8;
const TURNS_PER_SESSION: usize = 3;
const KILLS: usize = 6;
/// Model replies that take 0.7 s each (seven frames, 100 ms apart): turns are running, not
/// waiting, most of the time a worker lives, so the kills land inside turns. Later requests get
/// the stand-in's quick echo.
const SLOW_REPLIES: usize = 40;

/// The seed of the kill times: `CRASH_SEED` replays a run, otherwise a fresh one (printed).
fn seed() -> u64 {
    std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..))
}

pub(crate) fn worker(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-worker"));
    command
        .args(args)
        .env("SYSTEM_PROMPT", "You are a helpful assistant.")
        .env("AWS_ENDPOINT_URL", moto().endpoint())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "anything")
        .env("AWS_SECRET_ACCESS_KEY", "anything")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        // A message comes back 4 s after a worker died with it; by then the dead worker's
        // lease (a 3 s budget + 0.5 s) has run out, so the next worker takes the turn over.
        .env("STORE_MARGIN_MS", "1000")
        .env("LEASE_MARGIN_MS", "500")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    command
}

/// `agent-worker setup --table NAME --queue NAME` and `more`: what it made (`queueUrl`,
/// `deadLetterQueueUrl`, ...), or the test fails with what it said.
pub(crate) async fn set_up(name: &str, more: &[&str]) -> Value {
    let mut args = vec!["setup", "--table", name, "--queue", name];
    args.extend_from_slice(more);
    let setup = worker(&args).stdout(Stdio::piped()).output().await.unwrap();
    assert!(
        setup.status.success(),
        "{}",
        String::from_utf8_lossy(&setup.stderr)
    );
    serde_json::from_slice(&setup.stdout).unwrap()
}

fn poller(queue_url: &str, table: &str, bedrock: &BedrockStandIn) -> Child {
    poller_command(queue_url, table, bedrock)
        .spawn()
        .expect("the poller starts")
}

pub(crate) fn poller_command(queue_url: &str, table: &str, bedrock: &BedrockStandIn) -> Command {
    worker(&[
        "poll",
        "--queue-url",
        queue_url,
        "--table",
        table,
        "--endpoint-url",
        &bedrock.endpoint_url(),
    ])
}

pub(crate) async fn in_queue(sqs: &aws_sdk_sqs::Client, url: &str) -> u64 {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap_or_default();
    attributes.values().map(|v| v.parse::<u64>().unwrap_or(0)).sum()
}

async fn dead_letters(sqs: &aws_sdk_sqs::Client, url: &str) -> BTreeSet<String> {
    let mut turns = BTreeSet::new();
    loop {
        let received = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(60)
            .send()
            .await
            .unwrap();
        let messages = received.messages.unwrap_or_default();
        if messages.is_empty() {
            return turns;
        }
        for message in messages {
            let body: Value = serde_json::from_str(message.body.as_deref().unwrap_or("{}")).unwrap();
            turns.insert(body["turnId"].as_str().unwrap_or_default().to_owned());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_at_random_points_loses_and_repeats_nothing() {
    let seed = seed();
    println!("crash recovery: CRASH_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let bedrock = BedrockStandIn::bind("127.0.0.1:0".parse().unwrap(), Fallback::Echo)
        .await
        .unwrap();
    for _ in 0..SLOW_REPLIES {
        bedrock.push(
            StreamScript::new()
                .text("It is noon.", 4)
                .stop("end_turn")
                .chunk_delay(Duration::from_millis(100))
                .into_reply(),
        );
    }
    let name = format!("crash-{}", uuid::Uuid::new_v4().simple());
    let created = set_up(&name, &["--visibility-timeout", "4", "--max-receive-count", "10"]).await;
    let queue_url = created["queueUrl"].as_str().unwrap().to_owned();
    let dlq_url = created["deadLetterQueueUrl"].as_str().unwrap().to_owned();

    let sqs = moto().sqs();
    let mut accepted = Vec::new();
    for turn in 0..TURNS_PER_SESSION {
        for session in 0..SESSIONS {
            let (session, turn) = (format!("s{session}"), format!("s{session}-t{turn}"));
            let body = json!({"turnId": turn, "conversationId": session, "userId": "u", "accountId": "a",
                "content": format!("What time is it? ({turn})")});
            sqs.send_message()
                .queue_url(&queue_url)
                .message_body(body.to_string())
                .message_group_id(&session)
                .message_deduplication_id(&turn)
                .send()
                .await
                .unwrap();
            accepted.push((session, turn));
        }
    }

    // Kill a worker at a random point of a turn it runs, start the next: six times. The kill
    // waits for the worker's first streamed words (a turn is running: it was claimed), then a
    // random part of the reply's 0.7 s, so that it lands inside a turn whatever the start-up
    // takes.
    let mut kills = 0;
    for _ in 0..KILLS {
        use tokio::io::AsyncBufReadExt as _;
        let mut child = poller_command(&queue_url, &name, &bedrock)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the poller starts");
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let running = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains(r#""type":"text""#) {
                    return;
                }
            }
            panic!("the poller exited before it ran a turn");
        })
        .await;
        assert!(running.is_ok(), "the poller ran no turn within 30 s");
        let into_the_turn = Duration::from_millis(rng.u64(0..500));
        let exited = tokio::time::timeout(into_the_turn, child.wait()).await;
        assert!(exited.is_err(), "the poller exited on its own: {exited:?}");
        child.kill().await.unwrap();
        kills += 1;
    }

    // One last worker runs until the queue is empty: what the killed ones held comes back
    // when its visibility runs out.
    let mut last = poller(&queue_url, &name, &bedrock);
    let started = Instant::now();
    while in_queue(&sqs, &queue_url).await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the queue did not drain: {} left",
            in_queue(&sqs, &queue_url).await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    last.kill().await.unwrap();

    let dead = dead_letters(&sqs, &dlq_url).await;
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&name).unwrap());
    let audit = audit(&store, &accepted, &dead).await.unwrap();
    println!(
        "crash recovery (CRASH_SEED={seed}): {} turns sent, {kills} workers killed, {} turns ended ({} completed, {} failed; {} taken over from a killed worker), {} dead-lettered, {} sessions checked, {} violations",
        accepted.len(),
        audit.ended,
        audit.completed,
        audit.failed,
        audit.taken_over,
        dead.len(),
        audit.sessions,
        audit.violations.len()
    );
    assert_eq!(audit.violations, Vec::<String>::new());
    assert_eq!(audit.sessions, SESSIONS);
    assert_eq!(
        audit.ended + dead.len(),
        accepted.len(),
        "every turn ended or was dead-lettered, once"
    );
    assert_eq!(audit.completed + audit.failed, audit.ended);
    assert!(
        audit.taken_over >= 1,
        "no kill landed inside a running turn (CRASH_SEED={seed}): the test proved nothing"
    );
}

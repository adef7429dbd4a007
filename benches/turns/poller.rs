//! Turns per second through `agent-worker poll` (the binary) on moto's SQS FIFO queue and
//! DynamoDB table, against the stand-in: every turn must be stored once, none lost, none run
//! twice.

use agent_worker::session::TurnLedger as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_worker::session::{DynamoConfig, DynamoStore, SessionId, TurnId, TurnStatus};
use agent_worker_testkit::{BedrockStandIn, Reply, moto};
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use serde_json::{Value, json};

/// Turns sent.
const TURNS: usize = 300;

/// A new FIFO queue `<name>.fifo` with this visibility timeout; its URL.
pub(crate) async fn fifo_queue(sqs: &aws_sdk_sqs::Client, name: &str, visibility_secs: u32) -> String {
    sqs.create_queue()
        .queue_name(format!("{name}.fifo"))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(QueueAttributeName::VisibilityTimeout, visibility_secs.to_string())
        .send()
        .await
        .expect("the queue")
        .queue_url
        .expect("its url")
}

/// Sends turns (session, turn id, body) to a FIFO queue, ten at a time: the session is the
/// message group, the turn id the deduplication id.
pub(crate) async fn send_turns(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    turns: impl IntoIterator<Item = (String, String, String)>,
) {
    let turns: Vec<(String, String, String)> = turns.into_iter().collect();
    for (n, chunk) in turns.chunks(10).enumerate() {
        let entries: Vec<SendMessageBatchRequestEntry> = chunk
            .iter()
            .enumerate()
            .map(|(i, (session, turn, body))| {
                SendMessageBatchRequestEntry::builder()
                    .id(format!("e{n}-{i}"))
                    .message_body(body)
                    .message_group_id(session)
                    .message_deduplication_id(turn)
                    .build()
                    .expect("an entry")
            })
            .collect();
        sqs.send_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .expect("the turns are sent");
    }
}

/// Sends the turns, runs the poller until the queue is empty, checks every turn; prints and
/// returns the figures.
pub(crate) async fn run() -> Value {
    println!("\n## Through agent-worker poll (moto's SQS and DynamoDB)\n");
    let moto = moto();
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let table = format!("poll-{run_id}");
    let store = DynamoStore::new(moto.dynamodb(), DynamoConfig::new(&table).expect("a table name"));
    store.create_table().await.expect("the table");
    let sqs = moto.sqs();
    let queue_url = fifo_queue(&sqs, &format!("poll-{run_id}"), 120).await;
    send_turns(
        &sqs,
        &queue_url,
        (0..TURNS).map(|i| {
            (
                format!("conv-{i}"),
                format!("turn-{i}"),
                format!(r#"{{"turnId":"turn-{i}","conversationId":"conv-{i}","userId":"u","accountId":"a","content":"Hi"}}"#),
            )
        }),
    )
    .await;
    let bedrock = BedrockStandIn::start().await.expect("the stand-in");
    for _ in 0..TURNS {
        bedrock.push(Reply::text("The answer is forty-two."));
    }
    let start = Instant::now();
    let mut child = tokio::process::Command::from({
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-worker"));
        command
            .env("SYSTEM_PROMPT", "You are a helpful assistant.")
            .args([
                "poll",
                "--queue-url",
                &queue_url,
                "--until-empty",
                "--table",
                &table,
            ])
            .args(["--endpoint-url", &bedrock.endpoint_url(), "--region", "us-east-1"])
            .env("AWS_ENDPOINT_URL_DYNAMODB", moto.endpoint())
            .env("AWS_ENDPOINT_URL_SQS", moto.endpoint())
            .env("AWS_ACCESS_KEY_ID", "bench")
            .env("AWS_SECRET_ACCESS_KEY", "bench")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("EVENT_SINKS", "dynamo")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    })
    .spawn()
    .expect("agent-worker poll starts");
    // The poller ends a second after the queue empties; the turns' time is until the last one
    // was answered, read from the stand-in's log as it fills.
    let mut last_answered = start.elapsed();
    let mut seen = 0;
    loop {
        tokio::select! {
            status = child.wait() => {
                assert!(status.expect("the poller's status").success(), "the poller failed");
                break;
            }
            () = tokio::time::sleep(Duration::from_millis(5)) => {
                let now = bedrock.requests().len();
                if now > seen {
                    seen = now;
                    last_answered = start.elapsed();
                }
            }
        }
    }
    let served = bedrock.requests().len();
    let mut stored = 0;
    for i in 0..TURNS {
        let record = store
            .turn(
                &SessionId::new(format!("conv-{i}")).expect("an id"),
                &TurnId::new(format!("turn-{i}")).expect("an id"),
            )
            .await
            .expect("a turn record");
        if record.is_some_and(|r| r.status == TurnStatus::Completed) {
            stored += 1;
        }
    }
    let lost = TURNS - stored;
    let duplicated = served.saturating_sub(TURNS);
    let rate = TURNS as f64 / last_answered.as_secs_f64();
    println!(
        "{TURNS} turns: {rate:.0} turns/s (process start to the last answer, {:.0} ms); lost {lost}, duplicated {duplicated}",
        last_answered.as_secs_f64() * 1e3
    );
    assert_eq!((lost, duplicated), (0, 0), "every turn stored once");
    json!({
        "turns": TURNS,
        "turnsPerSecond": rate,
        "wallMs": last_answered.as_secs_f64() * 1e3,
        "lost": lost,
        "duplicated": duplicated,
    })
}

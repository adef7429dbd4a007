//! `make bench` part `heavy`: the heaviest turns the suite knows, each in a Lambda function of
//! its own (`bootstrap` under the Runtime API stand-in, on moto's DynamoDB and S3), for the
//! function's `MemorySize`: its peak resident memory (`VmHWM`, which is what Lambda's "Max
//! Memory Used" follows for a custom runtime) and its CPU, beside a plain text turn's.

use agent_worker::session::HistoryStore as _;
use std::process::Stdio;

use agent_worker::protocol::AttachmentRef;
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::{BedrockStandIn, LambdaRuntimeApi, Reply, StreamScript, files, moto};
use serde_json::{Value, json};

use crate::child::{cpu_ms, status_kib};

/// What the function is asked to do in one turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heavy {
    /// A question answered with text: the baseline.
    Plain,
    /// An answer of 256 KiB streamed in 4,096 deltas.
    LongAnswer,
    /// Eight tool calls in one step, then the answer.
    EightTools,
    /// A conversation of 1,000 messages, summarized in this turn (compaction), then answered.
    LongHistory,
    /// A 31 MiB PDF (its text read) and four pictures of 1 MiB: the most a message takes.
    Files,
}

impl Heavy {
    const ALL: [Self; 5] = [
        Self::Plain,
        Self::LongAnswer,
        Self::EightTools,
        Self::LongHistory,
        Self::Files,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Plain => "a text answer (baseline)",
            Self::LongAnswer => "a 256 KiB answer in 4,096 deltas",
            Self::EightTools => "8 tool calls in one step",
            Self::LongHistory => "1,000 messages, summarized in the turn",
            Self::Files => "a 31 MiB PDF and 4 pictures of 1 MiB",
        }
    }

    /// Scripts the model, writes what the turn finds, and gives the turn's attachments.
    async fn prepare(self, bedrock: &BedrockStandIn, table: &str, bucket: &str) -> Vec<AttachmentRef> {
        match self {
            Self::Plain => bedrock.push(Reply::text("The answer is forty-two.")),
            Self::LongAnswer => {
                let answer = "All work and no play makes a long answer. ".repeat(6_242);
                bedrock.push(
                    StreamScript::new()
                        .text(&answer[..256 * 1024], 4_096)
                        .stop("end_turn")
                        .usage(100, 65_536)
                        .into_reply(),
                );
            }
            Self::EightTools => {
                let mut step = StreamScript::new();
                for i in 0..8 {
                    step = step.tool_use(&format!("c{i}"), "add", &format!(r#"{{"numbers":[{i},1]}}"#), 2);
                }
                bedrock.push(step.stop("tool_use").usage(100, 200).into_reply());
                bedrock.push(Reply::text("The sums are 1 to 8."));
            }
            Self::LongHistory => {
                crate::storage::seed(&moto().dynamodb(), table, SESSION, 1_000).await;
                bedrock.push(Reply::text(
                    &"The person asks after items on a list; each is on track. ".repeat(40),
                ));
                bedrock.push(Reply::text("Item 7 is on track."));
            }
            Self::Files => {
                bedrock.push(Reply::text("The report and the pictures are read."));
                return put_files(bucket).await;
            }
        }
        Vec::new()
    }
}

/// The conversation every heavy turn is in (each in a table of its own).
const SESSION: &str = "c-heavy";

/// Pages of the heavy PDF: about 31 MiB, within the 32 MiB a document may be.
const PDF_PAGES: usize = 8_400;

/// A PDF of about 31 MiB and four 1 MiB pictures, in the function's file area.
async fn put_files(bucket: &str) -> Vec<AttachmentRef> {
    let area = agent_worker::hosts::S3FileArea::new(moto().s3(), bucket, "attachments/");
    // Lines of letters no two alike, so that the PDF's compressed streams stay large.
    let mut state = 7u32;
    let mut letter = || {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        char::from(b'a' + ((state >> 24) % 26) as u8)
    };
    let pages: Vec<String> = (0..PDF_PAGES)
        .map(|_| {
            (0..60)
                .map(|_| (0..90).map(|_| letter()).collect::<String>() + "\n")
                .collect()
        })
        .collect();
    let pages: Vec<&str> = pages.iter().map(String::as_str).collect();
    let pdf = files::pdf(&pages);
    println!(
        "(the PDF: {:.1} MiB, {PDF_PAGES} pages)",
        pdf.len() as f64 / 1024.0 / 1024.0
    );
    let mut references = vec![AttachmentRef::new(
        "f-report",
        "report.pdf",
        "application/pdf",
        pdf.len() as u64,
    )];
    area.put(SESSION, &references[0], pdf)
        .await
        .expect("the PDF is put");
    for i in 0..4 {
        let picture = png_of(1_568, 1_024 * 1_024 - 1, i);
        let reference = AttachmentRef::new(
            format!("f-picture-{i}"),
            format!("picture-{i}.png"),
            "image/png",
            picture.len() as u64,
        );
        area.put(SESSION, &reference, picture)
            .await
            .expect("a picture is put");
        references.push(reference);
    }
    references
}

/// A PNG of `side`×`side` pixels as its header says, `size` bytes long (its data does not
/// decode: nothing before the model does).
fn png_of(side: u32, size: usize, seed: u8) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
    bytes.extend(side.to_be_bytes());
    bytes.extend(side.to_be_bytes());
    bytes.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
    let mut state = u32::from(seed) + 1;
    while bytes.len() < size {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        bytes.push((state >> 24) as u8);
    }
    bytes
}

/// The SQS batch of the one heavy turn.
fn sqs_event(attachments: &[AttachmentRef]) -> Value {
    let body = json!({
        "turnId": "t-heavy",
        "conversationId": SESSION,
        "userId": "u",
        "accountId": "a",
        "content": "Please look at this.",
        "attachments": attachments,
    });
    json!({"Records": [{
        "messageId": "m-heavy",
        "receiptHandle": "rh",
        "body": body.to_string(),
        "attributes": {"ApproximateReceiveCount": "1"},
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:turns.fifo",
        "awsRegion": "us-east-1"
    }]})
}

/// Runs each heavy turn in a function of its own; prints and returns each one's peak memory and
/// CPU (process start to its answer, init included) beside the baseline's.
pub(crate) async fn run() -> Value {
    println!("\n## The heaviest turns: the Lambda function's peak memory (one function each)\n");
    let bedrock = BedrockStandIn::start().await.expect("the stand-in");
    let bucket = format!("bench-heavy-{}", uuid::Uuid::new_v4().simple());
    moto()
        .s3()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("the bucket");
    println!(
        "| turn | peak RSS, MiB | heap and stacks, MiB | CPU, ms (init included) | stored messages |\n| --- | --- | --- | --- | --- |"
    );
    let mut rows = Vec::new();
    for heavy in Heavy::ALL {
        let table = crate::fresh_table("bench-heavy").await;
        let attachments = heavy.prepare(&bedrock, &table, &bucket).await;
        let mut api = LambdaRuntimeApi::start().await.expect("the Runtime API stand-in");
        api.invoke("req-0", sqs_event(&attachments));
        let mut function = tokio::process::Command::new(env!("CARGO_BIN_EXE_bootstrap"))
            .env_clear()
            .envs(api.function_environment(&bedrock.endpoint_url(), moto().endpoint(), &table))
            .envs([
                ("FILES_BUCKET", bucket.as_str()),
                ("AWS_ENDPOINT_URL_S3", moto().endpoint()),
                ("TOOLS", "add"),
                ("SYSTEM_PROMPT", "You are a benchmark."),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the function starts");
        let pid = function.id().expect("a pid");
        let (what, answer) = api.answer().await.expect("the answer");
        assert_eq!(
            (what.as_str(), &answer),
            ("req-0/response", &json!({"batchItemFailures": []})),
            "{}",
            heavy.name()
        );
        let (peak, anon, cpu) = (status_kib(pid, "VmHWM"), status_kib(pid, "RssAnon"), cpu_ms(pid));
        let _ = function.kill().await;
        let store = DynamoStore::new(
            moto().dynamodb(),
            DynamoConfig::new(&table).expect("a table name"),
        );
        let session = agent_worker::session::SessionId::new(SESSION).expect("an id");
        let stored = store.load_history(&session).await.expect("the history").len();
        assert!(stored >= 2, "{}: the turn was stored", heavy.name());
        let mib = |kib: u64| kib as f64 / 1024.0;
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {stored} |",
            heavy.name(),
            mib(peak),
            mib(anon),
            cpu
        );
        rows.push(json!({
            "turn": heavy.name(),
            "peakRssMiB": mib(peak),
            "heapAndStacksMiB": mib(anon),
            "cpuMsWithInit": cpu,
            "storedMessages": stored,
        }));
    }
    let peak = rows
        .iter()
        .filter_map(|row| row["peakRssMiB"].as_f64())
        .fold(0.0, f64::max);
    println!("\nthe heaviest turn's peak: {peak:.1} MiB");
    json!({"turns": rows, "peakRssMiB": peak})
}

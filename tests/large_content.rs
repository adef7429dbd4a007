//! Content of any size, kept whole: with a file area, a tool's result, the person's pasted text
//! and pictures larger than the inline limit are kept in it under their SHA-256, the stored
//! message holding a reference, and read back byte for byte. Through the handler the Lambda
//! function runs, on moto's DynamoDB and S3, with the Bedrock stand-in; every item of the table
//! is measured.

use crate::support;
use agent_worker::session::HistoryStore as _;
use agent_worker_testkit::sid;
use std::sync::Arc;

use agent_worker::engine::attachments::{FileArea, LoadAs, kept_id, pdf_text, restore_kept};
use agent_worker::engine::tools::{Tool, ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::hosts::{AgentTurnPayload, S3FileArea};
use agent_worker::protocol::{AgentEvent, AttachmentRef};
use agent_worker::session::history::check;
use agent_worker::session::{ContentBlock, DynamoConfig, DynamoStore, Message};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::{BedrockStandIn, Reply, moto};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use support::*;

/// What the report tool answers: 5 MB of numbered rows, each page of it different.
fn report() -> String {
    let mut text = String::with_capacity(5_000_100);
    let mut row = 0;
    while text.len() < 5_000_000 {
        text.push_str(&format!(
            "row {row:07}: revenue {} units {}\n",
            row * 7 % 1000,
            row % 97
        ));
        row += 1;
    }
    text
}

fn report_tool() -> Arc<dyn Tool> {
    Arc::new(tool_fn(
        ToolSpec::new("report", "Returns the report.", json!({"type": "object"})),
        |_args: Value, _| async move { Ok(Value::String(report())) },
    ))
}

/// A table, a bucket, and the handler on an engine that keeps large content in the bucket.
struct Setup {
    bedrock: BedrockStandIn,
    store: DynamoStore,
    area: Arc<S3FileArea>,
    bucket: String,
    handler: TurnHandler,
}

async fn setup() -> Setup {
    setup_on(true).await
}

/// The same, on a bucket that exists only with `bucket_exists`.
async fn setup_on(bucket_exists: bool) -> Setup {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let table = format!("content-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).unwrap());
    store.create_table().await.unwrap();
    let s3 = moto().s3();
    let bucket = format!("content-{}", uuid::Uuid::new_v4().simple());
    if bucket_exists {
        s3.create_bucket().bucket(&bucket).send().await.unwrap();
    }
    let area = Arc::new(S3FileArea::new(s3, &bucket, "attachments/"));
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), MODEL_ID))
        .store(store.clone())
        .tools(vec![report_tool()])
        .config(config())
        .keep_large_content(area.clone())
        .build()
        .unwrap();
    let handler = TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(store.clone())));
    Setup {
        bedrock,
        store,
        area,
        bucket,
        handler,
    }
}

impl Setup {
    async fn turn(&self, session: &str, turn: &str, body: Value) {
        let mut body = body;
        body["turnId"] = turn.into();
        body["conversationId"] = session.into();
        body["userId"] = "u".into();
        body["accountId"] = "a".into();
        let payload = AgentTurnPayload::decode(&body.to_string()).unwrap();
        let run = self.handler.run_turn_to_end(&payload, None).await;
        assert!(
            matches!(run.terminal, Some(AgentEvent::Completed { .. })),
            "turn {turn}: {:?}",
            run.terminal
        );
    }

    async fn history(&self, session: &str) -> Vec<Message> {
        let history = self.store.load_history(&sid(session)).await.unwrap();
        check(&history).unwrap();
        history
    }

    /// Every item of the table is under DynamoDB's 400 KB, as DynamoDB measures it.
    async fn assert_every_item_fits(&self) {
        let items = support::table_items::item_sizes(self.store.table()).await;
        assert!(!items.is_empty(), "the table holds the conversation");
        for (sk, bytes) in items {
            assert!(bytes < 400 * 1024, "item {sk} is {bytes} bytes");
        }
    }

    /// The file of `session` the area keeps under `id`, whole.
    async fn file(&self, session: &str, id: &str) -> Vec<u8> {
        self.area.load(id, session, LoadAs::Text, None).await.unwrap()
    }
}

/// The text of every `text` block of a Bedrock request, and every tool result's JSON, joined.
fn request_text(body: &Value) -> String {
    body.to_string()
}

#[tokio::test]
async fn a_5_mb_result_is_kept_whole_its_head_given_and_a_later_turn_reads_its_third_page() {
    let s = setup().await;
    let report = report();
    let id = kept_id(report.as_bytes());
    s.bedrock.push(Reply::tool_call("c1", "report", "{}"));
    s.bedrock
        .push(Reply::text("The report is long; I read its start."));
    s.turn("big-result", "t1", json!({"content": "Get the report."}))
        .await;

    // The stored result is the reference, its first page and a note; the file is every byte.
    let history = s.history("big-result").await;
    let kept = history
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(kept["kept"]["id"], id.as_str(), "{kept}");
    assert_eq!(kept["kept"]["size"], report.len());
    let head: String = report.chars().take(20_000).collect();
    assert_eq!(kept["head"], head.as_str());
    assert!(
        kept["note"].as_str().unwrap().contains("attachment_read"),
        "{kept}"
    );
    assert_eq!(
        s.file("big-result", &id).await,
        report.as_bytes(),
        "kept byte for byte"
    );
    let mut whole = history.clone();
    assert_eq!(
        restore_kept(s.area.as_ref(), "big-result", &mut whole)
            .await
            .unwrap(),
        1
    );
    assert!(
        whole.iter().flat_map(|m| &m.content).any(|b| matches!(
            b,
            ContentBlock::ToolResult { content, .. } if content.as_str() == Some(report.as_str())
        )),
        "the history read back whole holds the result as the tool returned it"
    );

    // `agent-worker history` with the bucket prints it whole.
    let printed = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"))
        .args(["history", "--session", "big-result", "--table", s.store.table()])
        .args(["--files-bucket", &s.bucket])
        .env("AWS_ENDPOINT_URL", moto().endpoint())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "anything")
        .env("AWS_SECRET_ACCESS_KEY", "anything")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .unwrap();
    assert!(
        printed.status.success(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let whole = String::from_utf8(printed.stdout).unwrap();
    assert!(
        whole.lines().any(|line| {
            let message: Message = serde_json::from_str(line).unwrap();
            message.content.iter().any(|b| {
                matches!(
                    b,
                    ContentBlock::ToolResult { content, .. } if content.as_str() == Some(report.as_str())
                )
            })
        }),
        "the printed history holds the result whole"
    );

    // The model was given the head and the read tool, never the whole.
    let requests = s.bedrock.requests();
    let answer = request_text(&requests[1].body);
    assert!(answer.contains("row 0000000") && !answer.contains("row 0100000"));
    let tools: Vec<&str> = requests[1].body["toolConfig"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["toolSpec"]["name"].as_str())
        .collect();
    assert!(tools.contains(&"attachment_read"), "{tools:?}");

    // The call's event carries the same reference, not the 5 MB.
    let logged = DynamoEventLog::new(s.store.clone())
        .read("big-result", "t1", None)
        .await
        .unwrap();
    let ended = logged
        .iter()
        .find_map(|l| match &l.event {
            AgentEvent::ToolEnded { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(ended["kept"]["id"], id.as_str());

    // A second turn reads the third page.
    s.bedrock.push(Reply::tool_call(
        "c2",
        "attachment_read",
        &json!({"id": id, "from": 40_000}).to_string(),
    ));
    s.bedrock.push(Reply::text("Page three read."));
    s.turn("big-result", "t2", json!({"content": "Read page three."}))
        .await;
    let page_three: String = report.chars().skip(40_000).take(20_000).collect();
    let requests = s.bedrock.requests();
    let read = request_text(&requests[3].body);
    let first_row = &page_three[..page_three.find('\n').unwrap()];
    assert!(
        read.contains(&serde_json::to_string(&page_three).unwrap()[1..200]),
        "the model was given page three, from {first_row:?}"
    );
    assert!(
        read.contains("\"next\":60000"),
        "and told where the next page starts"
    );
    assert_eq!(s.history("big-result").await.len(), 8, "both turns stored once");
    s.assert_every_item_fits().await;
}

#[tokio::test]
async fn a_2_mb_pasted_text_is_kept_whole_and_the_model_given_its_first_page() {
    let s = setup().await;
    let pasted: String = (0..2_000_000 / 40)
        .map(|i| format!("paragraph {i:08} of the pasted contract\n"))
        .collect();
    s.bedrock.push(Reply::text("A long contract."));
    s.turn("big-paste", "t1", json!({"content": pasted})).await;

    let history = s.history("big-paste").await;
    let id = kept_id(pasted.as_bytes());
    let reference = match &history[0].content[..] {
        [ContentBlock::Attachment { reference }] => reference.clone(),
        other => panic!(
            "the stored message is {} blocks: {:?}",
            other.len(),
            other.first()
        ),
    };
    assert_eq!(
        (reference.id.as_str(), reference.size),
        (id.as_str(), pasted.len() as u64)
    );
    assert_eq!(
        s.file("big-paste", &id).await,
        pasted.as_bytes(),
        "kept byte for byte"
    );
    let mut whole = history.clone();
    restore_kept(s.area.as_ref(), "big-paste", &mut whole)
        .await
        .unwrap();
    assert_eq!(
        whole[0].content,
        vec![ContentBlock::text(pasted.clone())],
        "read back whole"
    );

    let sent = request_text(&s.bedrock.requests()[0].body);
    assert!(sent.contains("paragraph 00000000") && !sent.contains("paragraph 00010000"));
    assert!(
        sent.contains(&format!("[cut at character 20000 of {}]", pasted.chars().count())),
        "the model is told how much there is"
    );
    s.assert_every_item_fits().await;
}

#[tokio::test]
async fn a_long_pdf_is_given_a_page_of_its_text_and_read_on_where_the_page_ends() {
    let s = setup().await;
    let pages: Vec<String> = (0..100)
        .map(|p| {
            (0..20)
                .map(|l| format!("page {p:03} line {l:02} of the filing\n"))
                .collect()
        })
        .collect();
    let pdf = agent_worker_testkit::files::pdf(&pages.iter().map(String::as_str).collect::<Vec<_>>());
    let whole = pdf_text(&pdf).unwrap();
    let total = whole.chars().count();
    assert!(total > 60_000, "{total}");
    let reference = AttachmentRef::new("f-filing", "filing.pdf", "application/pdf", pdf.len() as u64);
    s.area.put("long-pdf", &reference, pdf).await.unwrap();
    s.bedrock.push(Reply::tool_call(
        "c1",
        "attachment_read",
        &json!({"id": "f-filing", "from": 20_000}).to_string(),
    ));
    s.bedrock.push(Reply::text("Read on."));
    s.turn(
        "long-pdf",
        "t1",
        json!({"content": "Read the filing.", "attachments": [reference]}),
    )
    .await;

    // Each page the model is given is that part of the whole text, and says where it stops.
    let in_json = |part: String| serde_json::to_string(&part).unwrap().trim_matches('"').to_owned();
    let requests = s.bedrock.requests();
    let first = request_text(&requests[0].body);
    assert!(first.contains(&in_json(whole.chars().take(20_000).collect())));
    assert!(
        first.contains(&format!("[cut at character 20000 of {total}]")),
        "{total}"
    );
    assert!(!first.contains("page 099"), "nothing past the first page");
    let read = request_text(&requests[1].body);
    assert!(read.contains(&in_json(whole.chars().skip(20_000).take(20_000).collect())));
    assert!(
        read.contains(&format!("\"total\":{total}")) && read.contains("\"next\":40000"),
        "the read says how long the text is and where the next page starts"
    );
    assert!(!read.contains("page 099"));
}

/// A PNG of `bytes` bytes, different for each `seed`: a 1×1 picture with data after its end.
fn picture(seed: u32, bytes: usize) -> Vec<u8> {
    const PNG_1X1: &str =
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";
    let mut png = BASE64.decode(PNG_1X1).unwrap();
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    while png.len() < bytes {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        png.push(state as u8);
    }
    png
}

#[tokio::test]
async fn a_conversation_of_30_pictures_keeps_every_one_byte_for_byte() {
    let s = setup().await;
    let mut sent = Vec::new();
    for turn in 0..6u32 {
        let pictures: Vec<Vec<u8>> = (0..5).map(|i| picture(turn * 5 + i, 120_000)).collect();
        let images: Vec<Value> = pictures
            .iter()
            .map(|p| json!({"mimeType": "image/png", "data": BASE64.encode(p)}))
            .collect();
        s.bedrock.push(Reply::text("Five more pictures."));
        s.turn(
            "pictures",
            &format!("t{turn}"),
            json!({"content": "Here are five pictures.", "images": images}),
        )
        .await;
        // The model was given this turn's pictures as they were sent.
        let request = s.bedrock.requests().last().unwrap().body.clone();
        let given: Vec<String> = request["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b["image"]["source"]["bytes"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(
            given,
            pictures.iter().map(|p| BASE64.encode(p)).collect::<Vec<_>>(),
            "turn {turn}"
        );
        sent.extend(pictures);
    }

    let history = s.history("pictures").await;
    let kept: Vec<String> = history
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::Attachment { reference } => Some(reference.id.clone()),
            ContentBlock::Image { .. } => panic!("a picture stored inline"),
            _ => None,
        })
        .collect();
    assert_eq!(kept.len(), 30);
    let mut whole = history.clone();
    assert_eq!(
        restore_kept(s.area.as_ref(), "pictures", &mut whole)
            .await
            .unwrap(),
        30
    );
    let restored: Vec<String> = whole
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::Image { data, .. } => Some(data.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        restored,
        sent.iter().map(|p| BASE64.encode(p)).collect::<Vec<_>>(),
        "read back whole"
    );
    for (id, picture) in kept.iter().zip(&sent) {
        assert_eq!(id, &kept_id(picture));
        assert_eq!(&s.file("pictures", id).await, picture, "kept byte for byte");
    }
    s.assert_every_item_fits().await;
}

/// The person reads what was kept for their conversation whole, at the files route, and no one
/// else does; deleting the conversation deletes it. On the container host (its file area a
/// folder, so the route serves the bytes).
#[tokio::test]
async fn the_person_reads_kept_content_whole_over_http_and_no_one_else_does() {
    use support::container::{KEY, post, send, server};
    let server = server(2, config(), std::time::Duration::from_secs(5)).await;
    let pasted: String = (0..3_000)
        .map(|i| format!("clause {i:05} of the lease\n"))
        .collect();
    server.bedrock.push(Reply::text("A lease."));
    let body = json!({"turnId": "t1", "conversationId": "lease", "userId": "u", "accountId": "a", "content": pasted});
    let (status, _) = post(&format!("{}/turns", server.url), Some(KEY), &body.to_string()).await;
    assert_eq!(status, 202);
    server.ended(1).await;

    let client = reqwest::Client::new();
    let (status, view) = send(
        client.get(format!("{}/conversations/lease?userId=u&accountId=a", server.url)),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 200, "{view}");
    let file = &view["messages"][0]["attachments"][0];
    let id = kept_id(pasted.as_bytes());
    assert_eq!(file["id"], id.as_str(), "{view}");
    assert_eq!(
        (file["size"].as_u64(), file["mediaType"].as_str()),
        (Some(pasted.len() as u64), Some("text/plain"))
    );

    let path = format!("{}/conversations/lease/files/{id}", server.url);
    let response = client
        .get(format!("{path}?userId=u&accountId=a"))
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-disposition"], "attachment");
    assert_eq!(response.headers()["x-content-type-options"], "nosniff");
    let policy = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        policy.starts_with("default-src 'none'"),
        "nothing of it runs: {policy}"
    );
    assert_eq!(
        response.bytes().await.unwrap(),
        pasted.as_bytes(),
        "whole, byte for byte"
    );
    for (who, query) in [
        ("another person", "userId=v&accountId=a"),
        ("another account", "userId=u&accountId=b"),
    ] {
        let (status, _) = send(client.get(format!("{path}?{query}")), Some(KEY)).await;
        assert_eq!(status, 404, "{who}");
    }
    let (status, _) = send(
        client.get(format!(
            "{}/conversations/lease/files/content-00?userId=u&accountId=a",
            server.url
        )),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 404, "no such file");

    let (status, _) = send(
        client.delete(format!("{}/conversations/lease?userId=u&accountId=a", server.url)),
        Some(KEY),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        server.files.reference(&id, "lease").await.is_err(),
        "the kept content went with its conversation"
    );
}

/// An S3 file area answers the files route with a signed link, which gives the bytes whole.
#[tokio::test]
async fn an_s3_file_area_signs_a_link_that_gives_the_kept_content_whole() {
    use std::time::Duration;
    let s = setup().await;
    let report = report();
    s.bedrock.push(Reply::tool_call("c1", "report", "{}"));
    s.bedrock.push(Reply::text("Read."));
    s.turn("linked", "t1", json!({"content": "Get the report."}))
        .await;
    let id = kept_id(report.as_bytes());
    let link = s
        .area
        .presign_download(&id, "linked", Duration::from_secs(60))
        .await
        .unwrap()
        .expect("S3 signs links");
    let response = reqwest::get(&link).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await.unwrap(), report.as_bytes());
}

/// A pasted text larger than an item, which the file area cannot take (its bucket is gone),
/// goes back to the queue before anything runs: retryable, no model call, nothing stored.
#[tokio::test]
async fn a_pasted_text_the_file_area_cannot_take_is_tried_again_before_anything_runs() {
    let s = setup_on(false).await;
    let pasted = "a clause of the contract\n".repeat(20_000);
    let body = json!({"turnId": "t1", "conversationId": "no-bucket", "userId": "u", "accountId": "a", "content": pasted});
    let payload = AgentTurnPayload::decode(&body.to_string()).unwrap();
    let run = s.handler.run_turn_to_end(&payload, None).await;
    let Some(AgentEvent::Failed { retryable, code, .. }) = &run.terminal else {
        panic!("not refused: {:?}", run.terminal)
    };
    assert!(*retryable, "tried again");
    assert_eq!(code.as_deref(), Some("store_failed"));
    assert!(s.bedrock.requests().is_empty(), "no model call");
    assert!(
        s.store.load_history(&sid("no-bucket")).await.unwrap().is_empty(),
        "nothing stored"
    );
}

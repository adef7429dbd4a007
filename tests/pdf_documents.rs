//! PDFs as documents (`pdfAsDocument`): a scanned PDF (a page that is a picture, no text layer)
//! reaches each provider's stand-in as the document block that provider documents, its bytes
//! whole, through the real clients (the AWS SDK's Converse, the Anthropic and OpenAI adapters);
//! the stand-ins refuse a block of the wrong shape as the services do. Without the setting, or on
//! an endpoint that takes no files, a PDF goes as its text, as before.

use crate::support;

use agent_worker::engine::{BedrockModel, Engine, LocalFileArea, Model};
use agent_worker::models::{AnthropicModel, ApiKey, OpenAiModel};
use agent_worker::protocol::{Agent, AgentEvent, AttachmentRef, Prompt, Scope};
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::files::scanned_pdf;
use agent_worker_testkit::{BedrockStandIn, ProviderStandIn, Reply, SseReply, moto, tid};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures_util::StreamExt;
use serde_json::Value;

const KEY: &str = "sk-stand-in-0123456789";

async fn store() -> DynamoStore {
    let table = format!("pdf-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    store
}

/// A turn that attaches the scanned PDF, on `model`, with PDFs as documents as `documents` says.
async fn turn_with_the_scan(model: impl Model + 'static, documents: bool) -> Vec<AgentEvent> {
    let root = std::env::temp_dir().join(format!("pdf-files-{}", uuid::Uuid::new_v4().simple()));
    let area = LocalFileArea::new(&root);
    let bytes = scanned_pdf();
    let scan = AttachmentRef::new(
        "f-scan",
        "Invoice 7 (scan).pdf",
        "application/pdf",
        bytes.len() as u64,
    );
    area.put("conv-pdf", &scan, &bytes).unwrap();
    let engine = Engine::builder()
        .model(model)
        .store(store().await)
        .file_area(area)
        .pdf_as_document(documents)
        .config(support::config())
        .build()
        .unwrap();
    let prompt = Prompt::text("What does the invoice say?").with_attachment(scan);
    let events = engine
        .invoke(
            Scope::new("conv-pdf".parse().unwrap()).with_turn_id(tid("t1")),
            prompt,
        )
        .collect()
        .await;
    let _ = std::fs::remove_dir_all(root);
    events
}

fn completed(events: &[AgentEvent]) {
    assert!(
        matches!(events.last(), Some(AgentEvent::Completed { .. })),
        "{events:?}"
    );
}

/// Every content block of every message of `body`.
fn blocks(body: &Value) -> Vec<Value> {
    agent_worker_testkit::document_shapes::blocks(body)
        .cloned()
        .collect()
}

fn decoded(data: &str) -> Vec<u8> {
    STANDARD.decode(data).unwrap()
}

#[tokio::test]
async fn on_bedrock_the_scan_is_a_converse_document_block_with_its_bytes_whole() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("It is invoice 7."));
    completed(&turn_with_the_scan(BedrockModel::new(bedrock.client(), support::MODEL_ID), true).await);
    let body = &bedrock.requests()[0].body;
    let document = blocks(body)
        .into_iter()
        .find_map(|b| b.get("document").cloned())
        .expect("a document block");
    assert_eq!(document["format"], "pdf");
    // The name as Converse takes one: no dot, no extension.
    assert_eq!(document["name"], "Invoice 7 (scan)");
    assert_eq!(
        decoded(document["source"]["bytes"].as_str().unwrap()),
        scanned_pdf()
    );
}

#[tokio::test]
async fn on_the_anthropic_api_the_scan_is_a_base64_document() {
    let stand_in = ProviderStandIn::start().await.unwrap();
    stand_in.push(SseReply::text("It is invoice 7."));
    let model = AnthropicModel::new(ApiKey::new(KEY).unwrap(), "claude-sonnet-4-6").base_url(stand_in.url());
    completed(&turn_with_the_scan(model, true).await);
    let body = &stand_in.requests()[0].body;
    let document = blocks(body)
        .into_iter()
        .find(|b| b["type"] == "document")
        .expect("a document block");
    assert_eq!(document["source"]["media_type"], "application/pdf");
    assert_eq!(
        decoded(document["source"]["data"].as_str().unwrap()),
        scanned_pdf()
    );
}

#[tokio::test]
async fn on_an_openai_endpoint_that_takes_files_the_scan_is_a_file_part_and_elsewhere_its_text() {
    let stand_in = ProviderStandIn::start().await.unwrap();
    stand_in.push(SseReply::openai_text("It is invoice 7."));
    let model = OpenAiModel::new(ApiKey::new(KEY).unwrap(), "gpt-4.1-mini")
        .base_url(stand_in.openai_url())
        .with_file_input(true);
    completed(&turn_with_the_scan(model, true).await);
    let body = &stand_in.requests()[0].body;
    let file = blocks(body)
        .into_iter()
        .find(|b| b["type"] == "file")
        .expect("a file part");
    assert_eq!(file["file"]["filename"], "Invoice 7 (scan).pdf");
    let data = file["file"]["file_data"].as_str().unwrap();
    let data = data.strip_prefix("data:application/pdf;base64,").unwrap();
    assert_eq!(decoded(data), scanned_pdf());

    // An endpoint that takes no files gets the PDF's text, as before: none for a scan.
    stand_in.push(SseReply::openai_text("I cannot read it."));
    let plain = OpenAiModel::new(ApiKey::new(KEY).unwrap(), "llama3.1").base_url(stand_in.openai_url());
    completed(&turn_with_the_scan(plain, true).await);
    let body = stand_in.requests()[1].body.to_string();
    assert!(!body.contains(r#""type":"file""#), "{body}");
    assert!(body.contains("Invoice 7 (scan).pdf"), "{body}");
}

#[tokio::test]
async fn without_the_setting_a_pdf_goes_as_its_text() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("I see no words."));
    completed(&turn_with_the_scan(BedrockModel::new(bedrock.client(), support::MODEL_ID), false).await);
    let body = &bedrock.requests()[0].body;
    assert!(blocks(body).iter().all(|b| b.get("document").is_none()), "{body}");
}

#[test]
fn the_stand_ins_refuse_a_document_of_the_wrong_shape() {
    use agent_worker_testkit::document_shapes::{anthropic_problem, bedrock_problem, openai_problem};
    use serde_json::json;
    let pdf = STANDARD.encode(scanned_pdf());
    let bedrock = |name: &str, bytes: &str| json!({"messages": [{"content": [{"document": {"format": "pdf", "name": name, "source": {"bytes": bytes}}}]}]});
    assert_eq!(bedrock_problem(&bedrock("Invoice 7", &pdf)), None);
    assert!(bedrock_problem(&bedrock("invoice.pdf", &pdf)).is_some(), "a dot");
    assert!(bedrock_problem(&bedrock("a  b", &pdf)).is_some(), "two spaces");
    assert!(bedrock_problem(&bedrock("x", &STANDARD.encode("not a pdf"))).is_some());
    let anthropic = |media: &str| json!({"messages": [{"content": [{"type": "document", "source": {"type": "base64", "media_type": media, "data": pdf}}]}]});
    assert_eq!(anthropic_problem(&anthropic("application/pdf")), None);
    assert!(anthropic_problem(&anthropic("image/png")).is_some());
    let openai = |data: String| json!({"messages": [{"content": [{"type": "file", "file": {"filename": "a.pdf", "file_data": data}}]}]});
    assert_eq!(
        openai_problem(&openai(format!("data:application/pdf;base64,{pdf}"))),
        None
    );
    assert!(openai_problem(&openai(pdf.clone())).is_some(), "not a data URL");
}

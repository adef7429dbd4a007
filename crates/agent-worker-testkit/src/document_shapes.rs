//! What each provider documents a PDF document block to be, checked the way its API checks a
//! request: the stand-ins refuse a request whose document block is not one (400), so a test sees
//! the shape the real service would refuse.
//!
//! - Bedrock Converse: `{"document": {"format": "pdf", "name", "source": {"bytes": base64}}}`;
//!   the name letters, digits, single spaces, hyphens, parentheses and square brackets; at most
//!   4.5 MB.
//! - Anthropic Messages: `{"type": "document", "source": {"type": "base64", "media_type":
//!   "application/pdf", "data": base64}}`.
//! - OpenAI Chat Completions: `{"type": "file", "file": {"filename", "file_data":
//!   "data:application/pdf;base64,…"}}`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

/// The largest document block Converse takes.
const BEDROCK_DOCUMENT_BYTES: usize = 4_500_000;

/// Every content block of every message of a request's `body`.
pub fn blocks(body: &Value) -> impl Iterator<Item = &Value> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten()
}

/// Bytes that must be a PDF, base64-encoded.
fn pdf_problem(data: Option<&str>, limit: usize) -> Option<String> {
    let Some(data) = data else {
        return Some("the document has no base64 data".into());
    };
    let Ok(bytes) = STANDARD.decode(data) else {
        return Some("the document's data is not base64".into());
    };
    if !bytes.starts_with(b"%PDF-") {
        return Some("the document's bytes are not a PDF".into());
    }
    (bytes.len() > limit).then(|| format!("the document is {} bytes, over {limit}", bytes.len()))
}

/// Why a Converse request's document block is not one Bedrock takes, if it is not.
pub fn bedrock_problem(body: &Value) -> Option<String> {
    for block in blocks(body) {
        let Some(document) = block.get("document") else {
            continue;
        };
        if document["format"] != "pdf" {
            return Some(format!("document.format {} is not pdf", document["format"]));
        }
        let name = document["name"].as_str().unwrap_or_default();
        let allowed = |c: char| c.is_ascii_alphanumeric() || c == ' ' || "-()[]".contains(c);
        if name.is_empty() || !name.chars().all(allowed) || name.contains("  ") {
            return Some(format!("document.name {name:?} is not a name Converse takes"));
        }
        if let Some(problem) = pdf_problem(document["source"]["bytes"].as_str(), BEDROCK_DOCUMENT_BYTES) {
            return Some(problem);
        }
    }
    None
}

/// Why an Anthropic Messages request's document block is not one the API takes, if it is not.
pub fn anthropic_problem(body: &Value) -> Option<String> {
    for block in blocks(body).filter(|b| b["type"] == "document") {
        let source = &block["source"];
        if source["type"] != "base64" || source["media_type"] != "application/pdf" {
            return Some(format!("document.source {source} is not a base64 PDF"));
        }
        if let Some(problem) = pdf_problem(source["data"].as_str(), usize::MAX) {
            return Some(problem);
        }
    }
    None
}

/// Why a Chat Completions request's file part is not one OpenAI takes, if it is not.
pub fn openai_problem(body: &Value) -> Option<String> {
    for block in blocks(body).filter(|b| b["type"] == "file") {
        let file = &block["file"];
        if file["filename"].as_str().is_none_or(str::is_empty) {
            return Some("file.filename is missing".into());
        }
        let data = file["file_data"].as_str().unwrap_or_default();
        let Some(data) = data.strip_prefix("data:application/pdf;base64,") else {
            return Some("file.file_data is not a data URL of a PDF".into());
        };
        if let Some(problem) = pdf_problem(Some(data), usize::MAX) {
            return Some(problem);
        }
    }
    None
}

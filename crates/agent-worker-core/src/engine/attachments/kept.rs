//! [`ContentKeeper`]: content too large for a stored item, kept whole in the conversation's
//! file area.
//!
//! DynamoDB holds an item of at most 400 KB, and a turn's messages and events are items. With a
//! keeper, any block over its inline limit (a tool's result, the person's pasted text or
//! picture) is written once to the file area as a file of the conversation named by its
//! SHA-256 (`content-<hex>`: the same content twice is one file, and a turn resumed after a
//! crash writes the same file again), and the message keeps a reference:
//!
//! - a result becomes `{"kept": <the file's summary>, "head": <its first page: at most
//!   `MAX_TEXT_CHARS` characters and the inline limit's bytes>, "note": ...}`,
//!   the note telling the model how much there is and that `attachment_read` reads the rest,
//!   page by page from `from`; the event that reports the call carries the same;
//! - the person's text or picture becomes an attachment of the turn's message: the model is
//!   given it as any file the person attaches (a text's first page with a line saying where it
//!   was cut, a picture whole), and later turns its reference line.
//!
//! Nothing is cut: the file holds every byte, and reading it back (`attachment_read`, the
//! conversation's files, [`restore_kept`]) gives them. When the file area cannot be written,
//! the block stays as it was: a result is then cut to fit its message, as without a keeper; the
//! person's message, when it does not fit an item, sends the turn back to the queue before
//! anything runs.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{FileUploads, Given, MAX_TEXT_CHARS, TextWindow, Unavailable, image_size, page_of};
use crate::engine::tools::ToolOutcome;
use crate::protocol::AttachmentRef;
use crate::session::ContentBlock;

/// The prefix of a kept content's file id; the rest is its SHA-256 in lowercase hex.
pub const KEPT_PREFIX: &str = "content-";

/// Keeps blocks over `inline_limit` bytes in a file area. Cheap to clone.
#[derive(Clone)]
pub struct ContentKeeper {
    area: Arc<dyn FileUploads>,
    inline_limit: usize,
}

impl std::fmt::Debug for ContentKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContentKeeper")
            .field("inline_limit", &self.inline_limit)
            .finish_non_exhaustive()
    }
}

/// The file id content of these bytes is kept under.
///
/// ```
/// use agent_worker_core::engine::attachments::kept_id;
///
/// assert_eq!(
///     kept_id(b"abc"),
///     "content-ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
/// );
/// ```
pub fn kept_id(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut id = String::with_capacity(KEPT_PREFIX.len() + 64);
    id.push_str(KEPT_PREFIX);
    for byte in digest {
        id.push_str(&format!("{byte:02x}"));
    }
    id
}

impl ContentKeeper {
    /// Keeps blocks over `inline_limit` bytes in `area`.
    pub fn new(area: Arc<dyn FileUploads>, inline_limit: usize) -> Self {
        Self { area, inline_limit }
    }

    /// The largest block kept inline, in bytes.
    pub fn inline_limit(&self) -> usize {
        self.inline_limit
    }

    /// The file area content is kept in.
    pub fn area(&self) -> Arc<dyn super::FileArea> {
        self.area.clone()
    }

    /// Writes `bytes` as the conversation's file named by their hash, unless it is there.
    async fn keep(
        &self,
        owner: &str,
        name: String,
        media_type: &str,
        bytes: Vec<u8>,
    ) -> Result<AttachmentRef, Unavailable> {
        let id = kept_id(&bytes);
        if let Ok(mut found) = self.area.reference(&id, owner).await {
            // The same bytes kept before: this message names them its own way.
            found.name = name;
            return Ok(found);
        }
        let mut reference = AttachmentRef::new(id, name, media_type, bytes.len() as u64);
        if let Some((width, height)) = image_size(&bytes) {
            reference.width = Some(width);
            reference.height = Some(height);
        }
        self.area.upload(owner, &reference, bytes).await?;
        Ok(reference)
    }

    /// `outcome` as it is kept: its content, when larger than the inline limit, in the file
    /// area, and in its place the file's summary, its first page and a note.
    pub(crate) async fn keep_result(&self, owner: &str, call_id: &str, outcome: ToolOutcome) -> ToolOutcome {
        self.keep_result_over(owner, call_id, outcome, self.inline_limit)
            .await
    }

    /// `outcome` kept whatever its size (for a step whose results together do not fit).
    pub(crate) async fn keep_result_whole(
        &self,
        owner: &str,
        call_id: &str,
        outcome: ToolOutcome,
    ) -> ToolOutcome {
        self.keep_result_over(owner, call_id, outcome, 0).await
    }

    async fn keep_result_over(
        &self,
        owner: &str,
        call_id: &str,
        mut outcome: ToolOutcome,
        limit: usize,
    ) -> ToolOutcome {
        let (text, media_type) = match &outcome.content {
            Value::String(text) if text.len() > limit => (text.clone(), "text/plain"),
            Value::String(_) => return outcome,
            content => match serde_json::to_string(content) {
                Ok(text) if text.len() > limit => (text, "application/json"),
                _ => return outcome,
            },
        };
        let head = head_of(&text, MAX_TEXT_CHARS, self.inline_limit).to_owned();
        let total = text.chars().count();
        let head_chars = head.chars().count();
        let name = format!("result of call {call_id}");
        match self.keep(owner, name, media_type, text.into_bytes()).await {
            Ok(reference) => {
                outcome.content = json!({
                    "kept": reference.summary(),
                    "head": head,
                    "note": format!(
                        "The result is {} bytes ({total} characters), more than is given at once; its first {head_chars} characters are in `head`. \
                         Read the rest with attachment_read (id {:?}, from {head_chars}), a page at a time.",
                        reference.size, reference.id
                    ),
                });
                outcome
            }
            Err(why) => {
                tracing::warn!(call_id, error = %why, "a large result could not be kept in the file area; the store's limit applies");
                outcome
            }
        }
    }

    /// The person's `blocks` as they are kept: each text or picture larger than the inline
    /// limit in the file area, and an attachment of the message in its place. A block the file
    /// area cannot take stays as it was. Returns what was kept, with the blocks it replaced.
    pub(crate) async fn keep_prompt(&self, owner: &str, blocks: &mut [ContentBlock]) -> Vec<KeptBlock> {
        let mut kept = Vec::new();
        for (n, block) in blocks.iter_mut().enumerate() {
            let (name, media_type, bytes) = match &*block {
                ContentBlock::Text { text } if text.len() > self.inline_limit => (
                    format!("pasted text {}", n + 1),
                    "text/plain".to_owned(),
                    text.as_bytes().to_vec(),
                ),
                ContentBlock::Image { mime_type, data } if data.len() > self.inline_limit => {
                    let Ok(bytes) = BASE64.decode(data.as_bytes()) else {
                        continue;
                    };
                    (format!("picture {}", n + 1), mime_type.clone(), bytes)
                }
                _ => continue,
            };
            match self.keep(owner, name, &media_type, bytes).await {
                Ok(reference) => {
                    let original = std::mem::replace(
                        block,
                        ContentBlock::Attachment {
                            reference: reference.clone(),
                        },
                    );
                    kept.push(KeptBlock { reference, original });
                }
                Err(why) => {
                    tracing::warn!(error = %why, "the person's content could not be kept in the file area; the store's limit applies")
                }
            }
        }
        kept
    }
}

/// The start of `text` a kept result shows: at most `chars` characters and `bytes` bytes.
fn head_of(text: &str, chars: usize, bytes: usize) -> &str {
    let mut end = 0;
    for (taken, (at, c)) in text.char_indices().enumerate() {
        if taken == chars || at + c.len_utf8() > bytes {
            break;
        }
        end = at + c.len_utf8();
    }
    &text[..end]
}

/// A block of the person's message kept in the file area, and the block it was.
#[derive(Debug)]
pub(crate) struct KeptBlock {
    /// Its reference, which the stored message holds.
    pub(crate) reference: AttachmentRef,
    /// The block as the person sent it.
    original: ContentBlock,
}

impl KeptBlock {
    /// What the model is given of it in its turn, outside the files' budget as the message was:
    /// a picture as it was sent; a text whole when its estimated tokens fit in `token_limit`,
    /// else its first page, with a line saying where it was cut and how long it is (the rest is
    /// read with `attachment_read`).
    pub(crate) fn given(self, token_limit: u64) -> Given {
        let blocks = match self.original {
            ContentBlock::Text { text } if estimated_tokens_of(&text) > token_limit => {
                vec![ContentBlock::text(
                    page_of(&self.reference, &TextWindow::of(&text, 0, MAX_TEXT_CHARS)).enclosed,
                )]
            }
            original => vec![original],
        };
        Given::as_sent(&self.reference, blocks)
    }
}

/// The tokens a text is estimated to cost, as [`estimated_tokens`](super::estimated_tokens)
/// counts a text block.
fn estimated_tokens_of(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// `messages` (a conversation's, `owner`'s) with the content kept for them back whole: each
/// kept text or picture the person sent as its block again, each kept result as the tool
/// returned it. Returns how many blocks came back; content no longer in the area (deleted
/// with its conversation, or expired) stays a reference.
pub async fn restore_kept(
    area: &dyn super::FileArea,
    owner: &str,
    messages: &mut [crate::session::Message],
) -> Result<usize, Unavailable> {
    let mut restored = 0;
    for block in messages.iter_mut().flat_map(|m| m.content.iter_mut()) {
        let (id, media_type) = match &*block {
            ContentBlock::Attachment { reference } if reference.id.starts_with(KEPT_PREFIX) => {
                (reference.id.clone(), reference.media_type.clone())
            }
            ContentBlock::ToolResult { content, .. } => {
                match (content["kept"]["id"].as_str(), content["kept"]["type"].as_str()) {
                    (Some(id), Some(media_type)) if id.starts_with(KEPT_PREFIX) => {
                        (id.to_owned(), media_type.to_owned())
                    }
                    _ => continue,
                }
            }
            _ => continue,
        };
        let bytes = match area.load(&id, owner, super::LoadAs::Document, None).await {
            Ok(bytes) => bytes,
            Err(Unavailable::Gone) => continue,
            Err(e) => return Err(e),
        };
        let whole = match &mut *block {
            ContentBlock::ToolResult { content, .. } => {
                let value = if media_type == "application/json" {
                    serde_json::from_slice(&bytes).ok()
                } else {
                    String::from_utf8(bytes).ok().map(Value::String)
                };
                value.map(|value| *content = value)
            }
            _ if media_type.starts_with("image/") => {
                *block = ContentBlock::Image {
                    mime_type: media_type,
                    data: BASE64.encode(&bytes),
                };
                Some(())
            }
            _ => String::from_utf8(bytes)
                .ok()
                .map(|text| *block = ContentBlock::Text { text }),
        };
        restored += usize::from(whole.is_some());
    }
    Ok(restored)
}

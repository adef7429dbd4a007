//! Tool results that fit the message that keeps them.
//!
//! A step's results are stored as one message, and a store keeps messages up to a size
//! ([`TurnLedger::max_message_bytes`](crate::session::TurnLedger::max_message_bytes)). A
//! turn whose results do not fit would run its tools and then fail to store, and each retry would
//! run them again. So before the results join the turn, the largest are cut down to a share of
//! the room, each with a note the model reads; the model sees exactly what is stored.
//!
//! Where the engine keeps large content ([`ContentKeeper`]), the largest results are first
//! kept whole in the file area ([`keep_to_fit`]), each under the inline limit or not, until
//! the rest fit: nothing is lost. Only when even the kept results' first pages do not fit
//! (dozens of them in one step) are those pages shortened, the reference to the whole kept.

use serde_json::{Value, json};

use crate::engine::attachments::ContentKeeper;
use crate::engine::tools::ToolOutcome;
use crate::session::ContentBlock;

/// What a message holds besides its results: its role and framing.
const MESSAGE_OVERHEAD: usize = 256;
/// What one result's block adds around its content: the call id, the error flag, the framing.
const BLOCK_OVERHEAD: usize = 160;
/// What a cut result's note takes besides the text it keeps.
const NOTE_OVERHEAD: usize = 400;

/// Cuts the largest results in `blocks` until, as JSON, they fit in `limit` bytes with their
/// message; returns how many were cut. Results already small enough are left whole.
pub(super) fn fit_results(blocks: &mut [ContentBlock], limit: usize) -> usize {
    let sizes: Vec<usize> = blocks.iter().map(content_size).collect();
    let room = limit
        .saturating_sub(MESSAGE_OVERHEAD)
        .saturating_sub(BLOCK_OVERHEAD * blocks.len());
    if sizes.iter().sum::<usize>() <= room {
        return 0;
    }
    let share = fair_share(&sizes, room);
    let mut cut = 0;
    for (block, size) in blocks.iter_mut().zip(sizes) {
        if size <= share {
            continue;
        }
        if let ContentBlock::ToolResult { content, .. } = block {
            *content = shortened(content, size, share);
            cut += 1;
        }
    }
    cut
}

/// Keeps the largest of a step's `results` (answering `calls`, in order) whole in `keeper`'s
/// file area, one at a time, until as JSON they fit in `limit` bytes with their message. A
/// result the area cannot take stops it: [`fit_results`] cuts what is left, as without a keeper.
pub(super) async fn keep_to_fit(
    keeper: &ContentKeeper,
    owner: &str,
    calls: &[String],
    results: &mut [Option<ToolOutcome>],
    limit: usize,
) {
    let room = limit
        .saturating_sub(MESSAGE_OVERHEAD)
        .saturating_sub(BLOCK_OVERHEAD * results.len());
    loop {
        let sizes: Vec<usize> = results
            .iter()
            .map(|r| r.as_ref().map_or(0, |o| json_size(&o.content)))
            .collect();
        if sizes.iter().sum::<usize>() <= room {
            return;
        }
        let largest = sizes
            .iter()
            .enumerate()
            .filter(|(i, _)| results[*i].as_ref().is_some_and(|o| !is_kept(&o.content)))
            .max_by_key(|(_, size)| **size)
            .map(|(i, _)| i);
        let (Some(index), Some(call)) = (largest, largest.and_then(|i| calls.get(i))) else {
            return;
        };
        let Some(outcome) = results[index].take() else {
            return;
        };
        let outcome = keeper.keep_result_whole(owner, call, outcome).await;
        let kept = is_kept(&outcome.content);
        results[index] = Some(outcome);
        if !kept {
            return;
        }
    }
}

/// Whether a result's content is a reference to content kept whole.
fn is_kept(content: &Value) -> bool {
    content["kept"]["id"].is_string() && content["head"].is_string()
}

/// The bytes of `content` as JSON.
fn json_size(content: &Value) -> usize {
    serde_json::to_string(content).map_or(0, |s| s.len())
}

/// The bytes of a result's content as JSON; 0 for a block that is not a result.
fn content_size(block: &ContentBlock) -> usize {
    match block {
        ContentBlock::ToolResult { content, .. } => json_size(content),
        _ => 0,
    }
}

/// The largest size `s` such that every result cut to at most `s` makes them fit in `room`:
/// small results keep their size, and the large ones share what is left equally.
fn fair_share(sizes: &[usize], room: usize) -> usize {
    let mut sorted = sizes.to_vec();
    sorted.sort_unstable();
    let mut left = room;
    for (i, &size) in sorted.iter().enumerate() {
        let sharing = sorted.len() - i;
        let even = left / sharing;
        if size > even {
            return even;
        }
        left -= size;
    }
    room
}

/// `content` (of `size` bytes as JSON) cut to about `share` bytes: the start of its JSON text,
/// and a note that says how much there was.
fn shortened(content: &Value, size: usize, share: usize) -> Value {
    // A kept result keeps its reference: only its first page is shortened.
    if is_kept(content) {
        let mut content = content.clone();
        let head = content["head"].as_str().unwrap_or_default();
        // Measured as JSON: escaping can make a head's text twice its bytes.
        let room = share.saturating_sub(NOTE_OVERHEAD + 600);
        let mut keep = floor_char_boundary(head, room);
        while keep > 0 && json_size(&Value::String(head[..keep].to_owned())) > room {
            keep = floor_char_boundary(head, keep - keep / 4 - 1);
        }
        let chars = head[..keep].chars().count();
        content["head"] = Value::String(head[..keep].to_owned());
        content["note"] = Value::String(format!(
            "The result is kept whole; its first {chars} characters are in `head` (this step's results together were too large for more). \
             Read the rest with attachment_read (id {}, from {chars}), a page at a time.",
            content["kept"]["id"]
        ));
        return content;
    }
    let text = serde_json::to_string(content).unwrap_or_default();
    let keep = floor_char_boundary(&text, share.saturating_sub(NOTE_OVERHEAD));
    json!({
        "truncated": true,
        "note": format!(
            "The tool returned {size} bytes, more than the conversation can keep; its first {keep} bytes (of its JSON) are below. Ask it for less: a narrower query, or one page at a time."
        ),
        "start": &text[..keep],
    })
}

/// The largest index at most `at` that falls between two characters of `text`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{Message, Role};

    fn result(id: &str, bytes: usize) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: json!({ "data": "x".repeat(bytes) }),
            is_error: false,
        }
    }

    fn stored_size(blocks: &[ContentBlock]) -> usize {
        serde_json::to_string(&Message::new(Role::User, blocks.to_vec()))
            .unwrap()
            .len()
    }

    #[test]
    fn results_that_fit_are_left_whole() {
        let mut blocks = vec![result("a", 1_000), result("b", 2_000)];
        let before = blocks.clone();
        assert_eq!(fit_results(&mut blocks, 350 * 1024), 0);
        assert_eq!(blocks, before);
    }

    #[test]
    fn thirty_large_results_are_cut_to_fit_one_message_and_say_so() {
        let limit = 350 * 1024;
        let mut blocks: Vec<ContentBlock> = (0..30).map(|i| result(&format!("c{i}"), 300 * 1024)).collect();
        assert_eq!(fit_results(&mut blocks, limit), 30);
        assert!(stored_size(&blocks) <= limit, "{} bytes", stored_size(&blocks));
        for block in &blocks {
            let ContentBlock::ToolResult { content, .. } = block else {
                panic!("not a result")
            };
            assert_eq!(content["truncated"], true);
            assert!(content["note"].as_str().unwrap().contains("bytes"));
            assert!(content["start"].as_str().unwrap().starts_with("{\"data\":\"xxx"));
        }
    }

    #[test]
    fn only_the_large_results_are_cut_and_small_ones_stay_whole() {
        let limit = 350 * 1024;
        let mut blocks = vec![
            result("small", 500),
            result("huge", 2 * 1024 * 1024),
            result("mid", 10_000),
        ];
        assert_eq!(fit_results(&mut blocks, limit), 1);
        assert_eq!(blocks[0], result("small", 500));
        assert_eq!(blocks[2], result("mid", 10_000));
        assert!(stored_size(&blocks) <= limit);
    }

    /// Thirty results of 60 KB, each under the inline limit, do not fit one message together:
    /// with a keeper the largest are kept whole until the rest fit, and what is cut after is
    /// only the kept results' first pages, each still naming its whole.
    #[tokio::test]
    async fn with_a_keeper_results_too_large_together_are_kept_whole_not_cut() {
        use crate::engine::attachments::{FileArea, LoadAs, LocalFileArea, kept_id};
        use std::sync::Arc;

        let root = std::env::temp_dir().join(format!("keep-to-fit-{}", uuid::Uuid::new_v4().simple()));
        let area = Arc::new(LocalFileArea::new(&root));
        let keeper = ContentKeeper::new(area.clone(), 64 * 1024);
        let limit = 350 * 1024;
        let calls: Vec<String> = (0..30).map(|i| format!("c{i}")).collect();
        let whole: Vec<String> = (0..30).map(|i| format!("{i:02}").repeat(30 * 1024)).collect();
        let mut results: Vec<Option<ToolOutcome>> = whole
            .iter()
            .map(|w| Some(ToolOutcome::ok(Value::String(w.clone()))))
            .collect();
        keep_to_fit(&keeper, "conv", &calls, &mut results, limit).await;
        let mut blocks: Vec<ContentBlock> = calls
            .iter()
            .zip(results)
            .map(|(id, r)| {
                let outcome = r.unwrap();
                ContentBlock::ToolResult {
                    tool_use_id: id.clone(),
                    content: outcome.content,
                    is_error: false,
                }
            })
            .collect();
        fit_results(&mut blocks, limit);
        assert!(stored_size(&blocks) <= limit, "{} bytes", stored_size(&blocks));
        for (block, whole) in blocks.iter().zip(&whole) {
            let ContentBlock::ToolResult { content, .. } = block else {
                panic!("not a result")
            };
            let id = kept_id(whole.as_bytes());
            assert_eq!(content["kept"]["id"], id.as_str(), "each is kept whole");
            let bytes = area.load(&id, "conv", LoadAs::Text, None).await.unwrap();
            assert_eq!(bytes, whole.as_bytes());
            assert!(content["note"].as_str().unwrap().contains(&id));
        }
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        let text = "é".repeat(10);
        assert_eq!(floor_char_boundary(&text, 3), 2);
        assert_eq!(floor_char_boundary(&text, 100), text.len());
    }
}

//! The stand-in's prompt cache: it remembers each prefix a request marks with a `cachePoint`,
//! and reports, as Bedrock does, how many input tokens were read from the cache and how many
//! written to it. A prefix is read only when it is byte for byte one seen before (same model,
//! tools, system blocks and messages up to the checkpoint, or up to one of the 20 blocks
//! before it, as Anthropic models look back). Tokens are estimated at four characters of the
//! prefix's JSON each; unlike Bedrock, there is no minimum prefix length.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What the prompt cache did for one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheUse {
    /// Tokens of the longest marked prefix found in the cache.
    pub read_tokens: u64,
    /// Tokens of the request's longest marked prefix beyond what was read, newly cached.
    pub write_tokens: u64,
}

/// The prefixes seen so far, by hash.
#[derive(Debug, Default)]
pub(super) struct PromptCache {
    seen: HashSet<[u8; 32]>,
}

/// How far back from a checkpoint a prefix is looked for, in blocks, as Anthropic models do.
const LOOKBACK_BLOCKS: usize = 20;

/// The prefix up to one block boundary.
#[derive(Clone, Copy)]
struct Boundary {
    hash: [u8; 32],
    tokens: u64,
}

/// A request's prefix as it is read, in the order the model reads it.
struct Prefix {
    hasher: Sha256,
    length: u64,
    /// The prefix after each block read.
    boundaries: Vec<Boundary>,
    /// For each checkpoint, how many boundaries come before it.
    checkpoints: Vec<usize>,
}

impl Prefix {
    fn new(model_id: &str) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(model_id.as_bytes());
        Self {
            hasher,
            length: model_id.len() as u64,
            boundaries: Vec::new(),
            checkpoints: Vec::new(),
        }
    }

    /// Reads one block: a `cachePoint` marks the prefix so far, anything else extends it.
    fn read(&mut self, block: &Value) {
        if block.get("cachePoint").is_some() {
            if !self.boundaries.is_empty() {
                self.checkpoints.push(self.boundaries.len());
            }
            return;
        }
        let text = block.to_string();
        self.length += text.len() as u64 + 1;
        self.hasher.update([0x1e]);
        self.hasher.update(text.as_bytes());
        self.boundaries.push(Boundary {
            hash: self.hasher.clone().finalize().into(),
            tokens: self.length.div_ceil(4),
        });
    }
}

fn items(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

impl PromptCache {
    /// Looks the request's marked prefixes up, then remembers them.
    pub(super) fn apply(&mut self, model_id: &str, request: &Value) -> CacheUse {
        let marked = |blocks: &[Value]| blocks.iter().any(|b| b.get("cachePoint").is_some());
        let any = marked(items(&request["toolConfig"]["tools"]))
            || marked(items(&request["system"]))
            || items(&request["messages"])
                .iter()
                .any(|m| marked(items(&m["content"])));
        if !any {
            return CacheUse::default();
        }
        let mut prefix = Prefix::new(model_id);
        for block in items(&request["toolConfig"]["tools"])
            .iter()
            .chain(items(&request["system"]))
        {
            prefix.read(block);
        }
        for message in items(&request["messages"]) {
            prefix.read(&message["role"]);
            for block in items(&message["content"]) {
                prefix.read(block);
            }
        }
        let Prefix {
            boundaries,
            checkpoints,
            ..
        } = prefix;
        // A checkpoint reads the longest cached prefix ending at it or a few blocks before it.
        let read_tokens = checkpoints
            .iter()
            .filter_map(|&end| {
                boundaries[end.saturating_sub(LOOKBACK_BLOCKS)..end]
                    .iter()
                    .rev()
                    .find(|b| self.seen.contains(&b.hash))
                    .map(|b| b.tokens)
            })
            .max()
            .unwrap_or(0);
        let longest = checkpoints
            .iter()
            .map(|&end| boundaries[end - 1].tokens)
            .max()
            .unwrap_or(0);
        self.seen
            .extend(checkpoints.iter().map(|&end| boundaries[end - 1].hash));
        CacheUse {
            read_tokens,
            write_tokens: longest.saturating_sub(read_tokens),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_prefix_seen_before_is_read_and_the_rest_written() {
        let mut cache = PromptCache::default();
        let first = json!({
            "system": [{"text": "You help."}, {"cachePoint": {"type": "default"}}],
            "messages": [
                {"role": "user", "content": [{"text": "hi"}, {"cachePoint": {"type": "default"}}]},
            ]
        });
        let used = cache.apply("m", &first);
        assert_eq!(used.read_tokens, 0);
        assert!(used.write_tokens > 0);
        let again = cache.apply("m", &first);
        assert_eq!(
            again,
            CacheUse {
                read_tokens: used.write_tokens,
                write_tokens: 0
            }
        );
        let changed = json!({
            "system": [{"text": "You help."}, {"cachePoint": {"type": "default"}}],
            "messages": [
                {"role": "user", "content": [{"text": "hello"}, {"cachePoint": {"type": "default"}}]},
            ]
        });
        let partly = cache.apply("m", &changed);
        assert!(partly.read_tokens > 0 && partly.read_tokens < used.write_tokens);
        assert!(partly.write_tokens > 0);
        assert_eq!(cache.apply("other-model", &first).read_tokens, 0);
    }
}

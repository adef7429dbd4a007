//! A turn's history read beside its claim, so that the person waits one round trip before the
//! model is called, not two.
//!
//! The history a turn reads is bounded by the version its claim's write returns, which is not
//! known until that write answers. So the read goes out with the claim and brings its own
//! bound: one strongly consistent query of the session's partition from its meta item through
//! its last message (`meta` sorts before `msg#…`), which reads the meta item first and the
//! messages after it, as the opening in two steps reads them (the meta item, then the
//! messages). It is used only when its meta item is the claim's (the same version, no summary,
//! no branch), and holds every message below that version; anything else (a commit between the
//! two, a summary, a branch, messages gone, a failed read) leaves it unused and the history is
//! read as before, bounded by the claim's version.
//!
//! The read makes one attempt (a failure leaves it to the read after the claim, which retries as
//! every read does), and a claim that is refused does not wait for it.
//!
//! What it costs: a conversation with a summary is read from the summary on, so the query reads
//! its meta item and up to [`FIRST_PAGE_ITEMS`] of its oldest messages for nothing, stops there,
//! and this process does not read ahead for that conversation again (another process may, once);
//! a refused claim's read is sent and not used; a new conversation's finds nothing, a request
//! its first turn did not make before.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use agent_worker_core::protocol::ErrorChain;
use agent_worker_core::session::{HistoryView, Message, StoreError};
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::types::AttributeValue;

use super::DynamoStore;
use super::codec::get_s;
use super::history::stored_message;
use super::keys::{MESSAGE_PREFIX, META_SK, SK};
use super::opening::Meta;
use super::sdk_error::store_error;

/// Items in the read's first page: what a conversation with a summary costs a process that has
/// not met it (its meta item and its oldest messages, read for nothing); a conversation without
/// one and longer than this reads the rest in a second round trip.
const FIRST_PAGE_ITEMS: i32 = 128;

/// Conversations remembered as not worth reading ahead; past it they are all forgotten.
const MAX_REMEMBERED: usize = 4096;

/// The conversations this process found with a summary or a branch: their history is read
/// after the claim, from the summary on.
#[derive(Debug, Clone, Default)]
pub(super) struct ReadBehind(Arc<Mutex<HashSet<String>>>);

impl ReadBehind {
    fn remember(&self, session: &str) {
        if let Ok(mut sessions) = self.0.lock() {
            if sessions.len() >= MAX_REMEMBERED {
                sessions.clear();
            }
            sessions.insert(session.to_owned());
        }
    }

    fn knows(&self, session: &str) -> bool {
        self.0.lock().is_ok_and(|sessions| sessions.contains(session))
    }
}

/// A session's meta item and its messages from the first, read in one query.
#[derive(Debug)]
pub(super) struct ReadAhead {
    meta: Meta,
    messages: Vec<(u64, Message)>,
}

impl ReadAhead {
    /// The history at `meta` (what the claim's write returned), when this read holds it whole.
    pub(super) fn view_at(self, meta: &Meta) -> Option<HistoryView> {
        if self.meta != *meta || !meta.reads_from_start() {
            return None;
        }
        let version = usize::try_from(meta.version).ok()?;
        // Messages at or past the version are a large turn's writes ahead of its commit.
        let kept = self.messages.into_iter().take(version);
        let mut messages = Vec::with_capacity(version);
        for (expected, (seq, message)) in (0u64..).zip(kept) {
            if seq != expected {
                return None;
            }
            messages.push(message);
        }
        (messages.len() == version).then_some(HistoryView {
            summary: None,
            messages,
        })
    }
}

impl DynamoStore {
    /// Notes what the claim's `meta` says of `session` for its next turns: with a summary or a
    /// branch, its history is not read ahead.
    pub(super) fn note_history_shape(&self, session: &str, meta: &Meta) {
        if !meta.reads_from_start() {
            self.read_behind.remember(session);
        }
    }

    /// The session's meta item and messages, read beside the claim; `None` when this process
    /// knows the conversation has a summary or a branch, when the read finds one, or when it
    /// fails (the history is then read after the claim, which reports a failure of its own).
    pub(super) async fn read_ahead(&self, session: &str) -> Option<ReadAhead> {
        if self.read_behind.knows(session) {
            return None;
        }
        match self.read_meta_and_messages(session).await {
            Ok(Some(read)) => Some(read),
            Ok(None) => {
                self.read_behind.remember(session);
                None
            }
            Err(e) => {
                tracing::debug!(error = %ErrorChain(&e), "the history read beside the claim failed; reading it after");
                None
            }
        }
    }

    /// The query: its first page of [`FIRST_PAGE_ITEMS`], then the rest in whole pages, unless
    /// the meta item names a summary or a branch (`None`).
    async fn read_meta_and_messages(&self, session: &str) -> Result<Option<ReadAhead>, StoreError> {
        let mut meta = None;
        let mut messages = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .range_query(session, META_SK.to_owned(), format!("{MESSAGE_PREFIX}~"))
                .set_limit(start.is_none().then_some(FIRST_PAGE_ITEMS))
                .set_exclusive_start_key(start.take())
                .customize()
                .config_override(
                    aws_sdk_dynamodb::config::Builder::default().retry_config(RetryConfig::disabled()),
                )
                .send()
                .await
                .map_err(|e| store_error("reading the history beside the claim", e))?;
            for item in page.items() {
                if get_s(item, SK) == Some(META_SK) {
                    let read = Meta::of(Some(item))?;
                    if !read.reads_from_start() {
                        return Ok(None);
                    }
                    meta = Some(read);
                } else {
                    let stored = stored_message(item)?;
                    messages.push((stored.seq, stored.message));
                }
            }
            match page.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        Ok(Some(ReadAhead {
            // No meta item: a conversation with no messages yet.
            meta: meta.unwrap_or_default(),
            messages,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(version: u64, seqs: &[u64]) -> ReadAhead {
        ReadAhead {
            meta: Meta {
                version,
                ..Meta::default()
            },
            messages: seqs
                .iter()
                .map(|&seq| (seq, Message::user_text(format!("m{seq}"))))
                .collect(),
        }
    }

    fn at(version: u64) -> Meta {
        Meta {
            version,
            ..Meta::default()
        }
    }

    #[test]
    fn the_read_is_used_only_when_it_holds_the_claims_version_whole() {
        let view = read(3, &[0, 1, 2, 3]).view_at(&at(3)).expect("used");
        assert_eq!(
            view.messages.len(),
            3,
            "a message written ahead of the version is left out"
        );
        assert_eq!(view.messages[2], Message::user_text("m2"));
        assert!(
            read(0, &[])
                .view_at(&at(0))
                .is_some_and(|v| v.messages.is_empty())
        );
        // A commit landed between the read and the claim.
        assert!(read(2, &[0, 1]).view_at(&at(4)).is_none());
        // A message missing below the version.
        assert!(read(3, &[0, 2, 3]).view_at(&at(3)).is_none());
        assert!(read(3, &[0, 1]).view_at(&at(3)).is_none());
        // A summary the claim found.
        let summarized = Meta {
            summary_upto: Some(1),
            ..at(3)
        };
        assert!(read(3, &[0, 1, 2]).view_at(&summarized).is_none());
    }
}

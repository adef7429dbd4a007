//! [`Conversations`]: what a product's UI asks of a person's conversations (list, get, delete),
//! each answered for the person only, in the form a chat UI shows.
//!
//! ```
//! use agent_worker_core::conversations::Conversations;
//! use agent_worker_core::session::{MemoryStore, Owner};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let conversations = Conversations::new(MemoryStore::new());
//! let page = conversations.list(&Owner::new("ann", "acme"), None, None).await?;
//! assert!(page.conversations.is_empty());
//! # Ok::<_, agent_worker_core::session::ConversationError>(())
//! # }).unwrap();
//! ```

mod display;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

pub use display::{
    ApprovalCard, ConversationView, DisplayMessage, StoppedMarker, ToolCallStatus, ToolCallView,
};

use crate::Failure;
use crate::engine::attachments::Unavailable;
use crate::engine::{FileArea, ToolSpec};
use crate::session::conversations::{ConversationPage, Deleted, page_size};
use crate::session::{ConversationError, ConversationStore, Owner, SessionId};

/// A person's conversations: the store that keeps them, the tools' declarations (which say whose
/// arguments may be shown), and the file area whose files go with a deleted conversation.
/// Cheap to clone.
#[derive(Clone)]
pub struct Conversations {
    store: Arc<dyn ConversationStore>,
    specs: Arc<HashMap<String, ToolSpec>>,
    files: Option<Arc<dyn FileArea>>,
}

impl fmt::Debug for Conversations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conversations")
            .field("store", &self.store)
            .field("tools", &self.specs.len())
            .field("files", &self.files.is_some())
            .finish()
    }
}

impl Conversations {
    /// The conversations `store` keeps. No tool's arguments are shown until their declarations
    /// are given ([`tools`](Self::tools)).
    pub fn new(store: impl ConversationStore + 'static) -> Self {
        Self {
            store: Arc::new(store),
            specs: Arc::default(),
            files: None,
        }
    }

    /// The declarations of the tools the conversations' turns ran with.
    #[must_use]
    pub fn tools<'a>(mut self, specs: impl IntoIterator<Item = &'a ToolSpec>) -> Self {
        self.specs = Arc::new(specs.into_iter().map(|s| (s.name.clone(), s.clone())).collect());
        self
    }

    /// The file area whose files a deleted conversation takes with it.
    #[must_use]
    pub fn file_area(mut self, files: Arc<dyn FileArea>) -> Self {
        self.files = Some(files);
        self
    }

    /// `owner`'s conversations, most recent first: `limit` (default 20, at most 100) from
    /// `cursor`.
    pub async fn list(
        &self,
        owner: &Owner,
        limit: Option<usize>,
        cursor: Option<&str>,
    ) -> Result<ConversationPage, ConversationError> {
        let limit = page_size(limit)?;
        self.store.list_conversations(owner, limit, cursor).await
    }

    /// Conversation `id` of `owner` in display form: its newest `limit` messages (default 20, at
    /// most 100) before message `before`.
    pub async fn get(
        &self,
        owner: &Owner,
        id: &str,
        limit: Option<usize>,
        before: Option<u64>,
    ) -> Result<ConversationView, ConversationError> {
        let limit = page_size(limit)?;
        let Ok(session) = SessionId::new(id) else {
            return Err(ConversationError::NotFound(id.to_owned()));
        };
        let stored = self
            .store
            .read_conversation(owner, &session, limit, before)
            .await?;
        Ok(display::view(stored, &self.specs))
    }

    /// Deletes conversation `id` of `owner`, with its files: counts of what went.
    pub async fn delete(&self, owner: &Owner, id: &str) -> Result<Deleted, ConversationError> {
        let Ok(session) = SessionId::new(id) else {
            return Err(ConversationError::NotFound(id.to_owned()));
        };
        let mut deleted = self.store.delete_conversation(owner, &session).await?;
        if let Some(files) = &self.files {
            deleted.files = files.remove_conversation(id).await.map_err(|e| {
                ConversationError::Files(match e {
                    Unavailable::Store(failure) => failure,
                    other => Failure::new(other.to_string()),
                })
            })?;
        }
        tracing::info!(
            conversation = %id,
            messages = deleted.messages,
            turns = deleted.turns,
            events = deleted.events,
            files = deleted.files,
            "deleted a conversation"
        );
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::test_ids::{sid, tid};
    use crate::session::{
        Lease, MemoryStore, Message, OwnerCheck, OwnerStore, SignalStore, TurnLedger, TurnOutcome,
    };

    async fn turn(store: &MemoryStore, owner: &Owner, session: &str, turn_id: &str) {
        let (session, turn_id) = (&sid(session), &tid(turn_id));
        assert_ne!(
            store.claim_owner(session, Some(turn_id), owner).await.unwrap(),
            OwnerCheck::Deleted
        );
        store
            .claim_turn(session, turn_id, Lease(std::time::Duration::from_secs(60)))
            .await
            .unwrap();
        let outcome = TurnOutcome::Completed(None);
        let messages = [
            Message::user_text(format!("about {session}")),
            Message::assistant_text("ok"),
        ];
        store
            .complete_turn(session, turn_id, &messages, &outcome)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn the_memory_store_lists_pages_and_deletes_for_the_owner_alone() {
        let store = MemoryStore::new();
        let ann = Owner::new("ann", "acme");
        let bob = Owner::new("bob", "acme");
        for i in 0..12 {
            turn(
                &store,
                if i % 3 == 0 { &bob } else { &ann },
                &format!("c{i:02}"),
                "t1",
            )
            .await;
        }
        let conversations = Conversations::new(store.clone());
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let page = conversations
                .list(&ann, Some(3), cursor.as_deref())
                .await
                .unwrap();
            seen.extend(page.conversations);
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let mut ids: Vec<&str> = seen.iter().map(|c| c.id.as_str()).collect();
        assert!(
            seen.windows(2)
                .all(|w| w[0].last_active_at >= w[1].last_active_at)
        );
        ids.sort_unstable();
        assert_eq!(ids, ["c01", "c02", "c04", "c05", "c07", "c08", "c10", "c11"]);
        assert_eq!(seen[0].title, format!("about {}", seen[0].id));

        let view = conversations.get(&ann, "c01", Some(1), None).await.unwrap();
        assert_eq!((view.messages.len(), view.older), (1, Some(1)));
        assert_eq!(
            conversations.get(&bob, "c01", None, None).await.unwrap_err(),
            ConversationError::NotFound("c01".into())
        );
        // A turn running when it is deleted is stopped, and stores nothing.
        store
            .claim_owner(&sid("c01"), Some(&tid("t2")), &ann)
            .await
            .unwrap();
        store
            .claim_turn(&sid("c01"), &tid("t2"), Lease(std::time::Duration::from_secs(60)))
            .await
            .unwrap();
        let deleted = conversations.delete(&ann, "c01").await.unwrap();
        assert_eq!((deleted.messages, deleted.turns), (2, 2));
        assert_eq!(deleted.stopped_turn.as_deref(), Some("t2"));
        assert!(
            store
                .stop_requested(&sid("c01"), &tid("t2"))
                .await
                .unwrap()
                .is_some()
        );
        let outcome = TurnOutcome::Completed(None);
        let late = store
            .complete_turn(&sid("c01"), &tid("t2"), &[Message::user_text("x")], &outcome)
            .await;
        assert!(
            matches!(late, Err(crate::session::StoreError::Deleted(_))),
            "{late:?}"
        );
        assert_eq!(
            store
                .claim_owner(&sid("c01"), Some(&tid("t2")), &ann)
                .await
                .unwrap(),
            OwnerCheck::Deleted
        );
        assert!(conversations.delete(&ann, "c01").await.unwrap().messages == 0);
        assert_eq!(
            conversations.delete(&bob, "c02").await.unwrap_err(),
            ConversationError::NotFound("c02".into())
        );
    }
}

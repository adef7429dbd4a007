//! The conversations of a [`MemoryStore`]: a person's list, a page of one, and its delete.

use std::time::SystemTime;

use async_trait::async_trait;

use super::{MemoryStore, SessionData};
use crate::clock::now_ms;
use crate::session::conversations::{
    ConversationError, ConversationPage, ConversationStore, ConversationSummary, Deleted, ListCursor,
    StoredConversation, StoredMessage, is_waiting, page_range, preview_of, title_of,
};
use crate::session::{Owner, SessionId, Stop, StopCause, TurnStatus};

#[async_trait]
impl ConversationStore for MemoryStore {
    async fn list_conversations(
        &self,
        owner: &Owner,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<ConversationPage, ConversationError> {
        let after = cursor.map(|c| ListCursor::decode(c, owner)).transpose()?;
        let sessions = self.lock()?;
        let mut theirs: Vec<ConversationSummary> = sessions
            .iter()
            .filter(|(_, data)| !data.deleted && data.owner.as_ref() == Some(owner))
            .map(|(id, data)| summary(id, data))
            .collect();
        // Most recent first; ties by id, as a stable order for the cursor.
        theirs.sort_by(|a, b| b.last_active_at.cmp(&a.last_active_at).then(a.id.cmp(&b.id)));
        let start = after.map_or(0, |after| {
            theirs
                .iter()
                .position(|c| {
                    c.last_active_at < after.at || (c.last_active_at == after.at && c.id > after.session)
                })
                .unwrap_or(theirs.len())
        });
        let conversations: Vec<ConversationSummary> =
            theirs.iter().skip(start).take(limit).cloned().collect();
        let more = start + conversations.len() < theirs.len();
        Ok(ConversationPage::of(owner, conversations, more))
    }

    async fn read_conversation(
        &self,
        owner: &Owner,
        id: &SessionId,
        limit: usize,
        before: Option<u64>,
    ) -> Result<StoredConversation, ConversationError> {
        let stored = {
            let sessions = self.lock()?;
            let data = sessions
                .get(id.as_str())
                .filter(|d| !d.deleted && d.owner.as_ref() == Some(owner))
                .ok_or_else(|| ConversationError::NotFound(id.to_string()))?;
            let range = page_range(before, limit, data.messages.len() as u64);
            let messages = range
                .clone()
                .filter_map(|seq| {
                    let at = usize::try_from(seq).ok()?;
                    Some(StoredMessage {
                        seq,
                        turn_id: data.message_turns.get(at).cloned().flatten(),
                        message: data.messages.get(at)?.clone(),
                    })
                })
                .collect();
            StoredConversation {
                summary: summary(id, data),
                messages,
                older: (range.start > 0).then_some(range.start),
                waiting: Vec::new(),
            }
        };
        let now = now_ms();
        let waiting = self
            .approvals()?
            .iter()
            .filter(|((of, _), (approval, status))| of == id && is_waiting(*status, approval, now))
            .map(|(_, (approval, _))| approval.clone())
            .collect();
        Ok(StoredConversation { waiting, ..stored })
    }

    async fn delete_conversation(&self, owner: &Owner, id: &SessionId) -> Result<Deleted, ConversationError> {
        let mut deleted = Deleted::default();
        {
            let mut sessions = self.lock()?;
            let data = sessions
                .get_mut(id.as_str())
                .filter(|d| d.deleted || d.owner.as_ref() == Some(owner))
                .ok_or_else(|| ConversationError::NotFound(id.to_string()))?;
            if data.deleted {
                return Ok(deleted);
            }
            let now = SystemTime::now();
            deleted.stopped_turn = data
                .turns
                .values()
                .find(|t| t.status == TurnStatus::Running && t.lease_until > now)
                .map(|t| t.turn_id.clone());
            deleted.messages = data.messages.len() as u64;
            deleted.turns = data.turns.len() as u64;
            deleted.other = u64::from(data.summary.is_some()) + 1;
            *data = SessionData {
                deleted: true,
                ..SessionData::default()
            };
            // The running turn sees its stop; whatever it then stores is refused.
            if let Some(turn) = &deleted.stopped_turn {
                data.stops.insert(turn.clone(), Stop::now(StopCause::UserStop));
            }
        }
        let mut approvals = self.approvals()?;
        let before = approvals.len();
        approvals.retain(|(of, _), _| of != id);
        deleted.approvals = (before - approvals.len()) as u64;
        Ok(deleted)
    }
}

/// What the list shows of a session held in memory.
fn summary(id: &str, data: &SessionData) -> ConversationSummary {
    let now = SystemTime::now();
    ConversationSummary {
        id: id.to_owned(),
        title: title_of(&data.messages).unwrap_or_default(),
        last_active_at: data.last_active,
        turns: data.turns.values().filter(|t| t.status.is_done()).count() as u64,
        preview: preview_of(&data.messages).unwrap_or_default(),
        running: data
            .turns
            .values()
            .any(|t| t.status == TurnStatus::Running && t.lease_until > now),
    }
}

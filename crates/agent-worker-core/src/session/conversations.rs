//! [`ConversationStore`]: a person's conversations as a product's UI reads them: listed most
//! recent first, read back page by page, deleted whole.
//!
//! The store answers in stored form ([`StoredConversation`]); what a chat UI shows is made from
//! it by `crate::conversations`, which knows the tools' declarations.

use async_trait::async_trait;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use super::{ApprovalStatus, Message, Owner, PendingApproval, Role, StoreError};
use crate::Failure;

/// How many conversations a page lists when the caller names no limit.
pub const DEFAULT_PAGE: usize = 20;
/// The most conversations, or messages, one page holds.
pub const MAX_PAGE: usize = 100;
/// The longest title, in characters (the first user message, cleaned and cut).
pub const TITLE_CHARS: usize = 80;
/// The longest preview of the last answer, in characters.
pub const PREVIEW_CHARS: usize = 160;

/// One conversation as a list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConversationSummary {
    /// The conversation's id.
    pub id: String,
    /// Its first user message, cleaned and cut; empty until a turn is stored.
    pub title: String,
    /// When it last had a turn, in milliseconds since the Unix epoch.
    pub last_active_at: u64,
    /// How many of its turns have ended.
    pub turns: u64,
    /// The start of its last answer.
    pub preview: String,
    /// Whether one of its turns is running now.
    pub running: bool,
}

/// A page of a person's conversations, most recent first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConversationPage {
    /// The conversations.
    pub conversations: Vec<ConversationSummary>,
    /// Where the next page starts; `None` on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl ConversationPage {
    /// A page of `owner`'s list; with `more` after it, its cursor reads on from its last
    /// conversation.
    pub fn of(owner: &Owner, conversations: Vec<ConversationSummary>, more: bool) -> Self {
        let cursor = conversations
            .last()
            .filter(|_| more)
            .map(|last| ListCursor::new(owner, last.last_active_at, &last.id).encode());
        Self {
            conversations,
            cursor,
        }
    }
}

/// The positions of a page of a conversation of `length` messages: the newest `limit` before
/// `before` (before the end without it).
pub fn page_range(before: Option<u64>, limit: usize, length: u64) -> std::ops::Range<u64> {
    let end = before.unwrap_or(u64::MAX).min(length);
    end.saturating_sub(limit as u64)..end
}

/// A stored message with its place: what a page of a conversation holds, and an entry of its
/// durable history (`turnId` in JSON).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StoredMessage {
    /// Its position in the conversation, from 0.
    pub seq: u64,
    /// The turn that stored it, where the store knows it.
    pub turn_id: Option<super::TurnId>,
    /// The message.
    // Its schema: an object in the store's message form (`role`, `content` blocks).
    #[cfg_attr(
        feature = "schema",
        schemars(with = "serde_json::Map<String, serde_json::Value>")
    )]
    pub message: Message,
}

/// One conversation as its store holds it: the list's summary, a page of messages (oldest
/// first), and the approvals still waiting for the person.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredConversation {
    /// What the list shows of it.
    pub summary: ConversationSummary,
    /// The page's messages, oldest first.
    pub messages: Vec<StoredMessage>,
    /// The `before` that reads the page older than this one; `None` when this page starts at
    /// the first message.
    pub older: Option<u64>,
    /// Approvals waiting for the person's decision.
    pub waiting: Vec<PendingApproval>,
}

/// What a delete removed, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Deleted {
    /// Stored messages.
    pub messages: u64,
    /// Turn records.
    pub turns: u64,
    /// Events of the turns' logs.
    pub events: u64,
    /// Approvals.
    pub approvals: u64,
    /// Everything else of it: its summary, a Standard Agents thread record, its version item.
    pub other: u64,
    /// Files of the file area that only it held.
    pub files: u64,
    /// The turn that was running and was stopped first, if one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_turn: Option<super::TurnId>,
}

/// A conversations call that cannot be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConversationError {
    /// No conversation of this person has that id (it may be someone else's: the answer is
    /// the same, so that it does not say that it exists).
    #[error("no conversation {0} of yours")]
    NotFound(String),
    /// Another delete of the conversation is removing it now.
    #[error("conversation {0} is being deleted by an earlier request")]
    DeleteUnderway(String),
    /// The cursor is not one this store gave this person.
    #[error("the cursor is not one of your pages")]
    ForeignCursor,
    /// A page's limit out of range.
    #[error("limit must be between 1 and {MAX_PAGE}, not {0}")]
    Limit(usize),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The file area failed while the conversation's files were removed (its items are gone;
    /// deleting it again removes the files).
    #[error("the conversation's files could not be removed")]
    Files(#[source] Failure),
}

/// A page's size: `limit` as asked, [`DEFAULT_PAGE`] when not, refused outside 1..=[`MAX_PAGE`].
pub fn page_size(limit: Option<usize>) -> Result<usize, ConversationError> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(ConversationError::Limit(n)),
    }
}

/// A person's conversations, as the stores keep them.
#[async_trait]
pub trait ConversationStore: Send + Sync + std::fmt::Debug {
    /// `owner`'s conversations, most recent first, `limit` of them from `cursor` (a cursor
    /// given to someone else is refused). A bounded number of requests, however many there are.
    async fn list_conversations(
        &self,
        owner: &Owner,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<ConversationPage, ConversationError>;

    /// Conversation `id` of `owner`: its summary, its newest `limit` messages before message
    /// `before` (the newest of all without it), and its waiting approvals. A bounded number of
    /// requests, however long it is.
    async fn read_conversation(
        &self,
        owner: &Owner,
        id: &super::SessionId,
        limit: usize,
        before: Option<u64>,
    ) -> Result<StoredConversation, ConversationError>;

    /// Deletes conversation `id` of `owner`: a running turn is stopped first, then every item
    /// of it goes. A turn of it delivered later runs nothing. Deleting it again removes nothing
    /// and says so.
    async fn delete_conversation(
        &self,
        owner: &Owner,
        id: &super::SessionId,
    ) -> Result<Deleted, ConversationError>;
}

/// Whether a stored approval is still waiting for the person at `now_ms`.
pub fn is_waiting(status: ApprovalStatus, approval: &PendingApproval, now_ms: u64) -> bool {
    status == ApprovalStatus::Pending && approval.expires_at > now_ms
}

/// The title a conversation takes from the messages of its first stored turn: its first user
/// message's text, cleaned (whitespace runs made one space) and cut to [`TITLE_CHARS`].
pub fn title_of(messages: &[Message]) -> Option<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| clean_cut(&m.text(), TITLE_CHARS))
        .find(|t| !t.is_empty())
}

/// The preview of a turn's answer: its last assistant text, cleaned and cut to
/// [`PREVIEW_CHARS`].
pub fn preview_of(messages: &[Message]) -> Option<String> {
    messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| clean_cut(&m.text(), PREVIEW_CHARS))
        .find(|t| !t.is_empty())
}

/// `text` on one line, control characters dropped, at most `chars` characters (an ellipsis
/// marks a cut).
pub fn clean_cut(text: &str, chars: usize) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let line: String = words.join(" ").chars().filter(|c| !c.is_control()).collect();
    if line.chars().count() <= chars {
        return line;
    }
    let mut cut: String = line.chars().take(chars.saturating_sub(1)).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

/// A list's position: after the conversation `session` last active at `at`, for one person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListCursor {
    /// Whose list it pages (a digest of the owner, never their ids).
    #[serde(rename = "o")]
    owner: String,
    /// The last listed conversation's activity time.
    #[serde(rename = "t")]
    pub at: u64,
    /// The last listed conversation's id.
    #[serde(rename = "s")]
    pub session: String,
}

impl ListCursor {
    /// The cursor after `session` (active at `at`) in `owner`'s list.
    pub fn new(owner: &Owner, at: u64, session: impl Into<String>) -> Self {
        Self {
            owner: owner_digest(owner),
            at,
            session: session.into(),
        }
    }

    /// Its text form, opaque to callers.
    pub fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    /// Reads `text` as a cursor of `owner`'s list: refused when it is not one, or is another
    /// person's.
    pub fn decode(text: &str, owner: &Owner) -> Result<Self, ConversationError> {
        let cursor: Self = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()
            .and_then(|json| serde_json::from_slice(&json).ok())
            .ok_or(ConversationError::ForeignCursor)?;
        if cursor.owner != owner_digest(owner) {
            return Err(ConversationError::ForeignCursor);
        }
        Ok(cursor)
    }
}

/// The key a person's conversations are indexed under: both ids, unambiguous whatever they hold
/// (the account's length first).
pub fn owner_key(owner: &Owner) -> String {
    format!(
        "{}:{}#{}",
        owner.account_id.len(),
        owner.account_id,
        owner.user_id
    )
}

/// A digest of the owner: what cursors and deletion markers keep instead of the ids.
pub fn owner_digest(owner: &Owner) -> String {
    let digest = sha2::Sha256::digest(owner_key(owner).as_bytes());
    digest.iter().take(12).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_one_clean_line_cut_at_a_character() {
        let messages = [
            Message::user_text("  Where is\n\tmy   order?  "),
            Message::assistant_text("It ships today."),
        ];
        assert_eq!(title_of(&messages).as_deref(), Some("Where is my order?"));
        assert_eq!(preview_of(&messages).as_deref(), Some("It ships today."));
        let long = "é".repeat(200);
        let cut = clean_cut(&long, 10);
        assert_eq!(cut.chars().count(), 10);
        assert!(cut.ends_with('…'));
        assert_eq!(title_of(&[Message::assistant_text("x")]), None);
    }

    #[test]
    fn a_cursor_reads_back_for_its_person_only() {
        let ann = Owner::new("ann", "acme");
        let bob = Owner::new("bob", "acme");
        let cursor = ListCursor::new(&ann, 42, "c#1");
        let text = cursor.encode();
        assert_eq!(ListCursor::decode(&text, &ann).unwrap(), cursor);
        assert_eq!(
            ListCursor::decode(&text, &bob),
            Err(ConversationError::ForeignCursor)
        );
        assert_eq!(
            ListCursor::decode("not a cursor", &ann),
            Err(ConversationError::ForeignCursor)
        );
    }

    #[test]
    fn owner_keys_do_not_collide_across_the_separator() {
        assert_ne!(
            owner_key(&Owner::new("b", "a#")),
            owner_key(&Owner::new("#b", "a"))
        );
    }

    #[test]
    fn page_sizes_are_bounded() {
        assert_eq!(page_size(None).unwrap(), DEFAULT_PAGE);
        assert_eq!(page_size(Some(100)).unwrap(), 100);
        assert_eq!(page_size(Some(0)), Err(ConversationError::Limit(0)));
        assert_eq!(page_size(Some(101)), Err(ConversationError::Limit(101)));
    }
}

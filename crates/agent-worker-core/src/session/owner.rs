//! [`Owner`]: the person a conversation belongs to, recorded by its first turn.

use serde::{Deserialize, Serialize};

/// The person a conversation belongs to: the `userId` and `accountId` its first turn carried.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Owner {
    /// The person.
    pub user_id: String,
    /// Their account.
    pub account_id: String,
}

impl Owner {
    /// The owner `user_id` of `account_id`.
    pub fn new(user_id: impl Into<String>, account_id: impl Into<String>) -> Self {
        Self {
            user_id: user_id.into(),
            account_id: account_id.into(),
        }
    }

    /// What a store answers as the owner of a deleted conversation: an owner no person can be
    /// (ids are never empty), so that nothing of it is anyone's.
    pub fn of_deleted() -> Self {
        Self::new(String::new(), String::new())
    }

    /// Whether this is [`of_deleted`](Self::of_deleted): the conversation was deleted.
    pub fn is_of_deleted(&self) -> bool {
        self.user_id.is_empty() && self.account_id.is_empty()
    }

    /// Logs, at warn, that this person asked for `what` of `holder`'s conversation: both ids,
    /// never the content.
    pub fn warn_refused(&self, holder: &Owner, what: &str) {
        tracing::warn!(
            user_id = %self.user_id,
            account_id = %self.account_id,
            owner_user_id = %holder.user_id,
            owner_account_id = %holder.account_id,
            "refused {what} of another person's conversation"
        );
    }
}

/// What [`SessionStore::claim_owner`](super::SessionStore::claim_owner) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerCheck {
    /// The conversation had no owner; it has this one now (a new conversation, or one stored
    /// before owners were recorded).
    Claimed,
    /// It belongs to this person already.
    Same,
    /// It belongs to someone else, named here.
    Other(Owner),
    /// It was deleted: no turn of it runs again.
    Deleted,
}

/// What a person's first act on a conversation found
/// ([`SessionStore::claim_conversation`](super::SessionStore::claim_conversation)): whose it is,
/// and the turn that held its run under a live lease when it was read (so that a host refusing a
/// second turn needs no other read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationClaim {
    /// Whose it is now.
    pub owner: OwnerCheck,
    /// The turn running in it, if any.
    pub running_turn: Option<super::TurnId>,
}

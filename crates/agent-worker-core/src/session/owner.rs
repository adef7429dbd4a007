//! What a store found of a conversation's [`Owner`] (the person it belongs to, recorded by its
//! first turn; the type is the contract's).

pub use crate::protocol::Owner;

/// What [`OwnerStore::claim_owner`](super::OwnerStore::claim_owner) found.
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
/// ([`OwnerStore::claim_conversation`](super::OwnerStore::claim_conversation)): whose it is,
/// and the turn that held its run under a live lease when it was read (so that a host refusing a
/// second turn needs no other read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationClaim {
    /// Whose it is now.
    pub owner: OwnerCheck,
    /// The turn running in it, if any.
    pub running_turn: Option<super::TurnId>,
}

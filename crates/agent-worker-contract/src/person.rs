//! [`Owner`] and [`ApprovalDecision`]: who a turn is for, and what they decided on a call that
//! waited for them. Both arrive with a turn (a payload, a request) and are typed where it enters.

use serde::{Deserialize, Serialize};

/// The person a conversation belongs to: the `userId` and `accountId` its first turn carried.
///
/// ```
/// use agent_worker_contract::Owner;
///
/// let ana = Owner::new("ana", "acme");
/// assert_eq!(serde_json::to_string(&ana).unwrap(), r#"{"userId":"ana","accountId":"acme"}"#);
/// assert!(!ana.is_of_deleted());
/// ```
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

/// The person's decision on a call that waited for their approval, as the next turn carries it
/// under `approval`. The engine redeems it once: the token must open exactly the stored call, and
/// a word other than `approve` or `decline` is refused there, with the model told why.
///
/// ```
/// use agent_worker_contract::ApprovalDecision;
///
/// let decision = ApprovalDecision::approve("ap-1", "tok");
/// assert_eq!(
///     serde_json::to_string(&decision).unwrap(),
///     r#"{"approvalId":"ap-1","decision":"approve","token":"tok"}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ApprovalDecision {
    /// The approval.
    pub approval_id: String,
    /// `approve` or `decline`, as the person's client sent it.
    pub decision: String,
    /// The token, with `approve`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl ApprovalDecision {
    /// The word that approves.
    pub const APPROVE: &'static str = "approve";
    /// The word that declines.
    pub const DECLINE: &'static str = "decline";

    /// Approves `approval_id` with the `token` its request carried.
    pub fn approve(approval_id: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            approval_id: approval_id.into(),
            decision: Self::APPROVE.to_owned(),
            token: Some(token.into()),
        }
    }

    /// Declines `approval_id`.
    pub fn decline(approval_id: impl Into<String>) -> Self {
        Self {
            approval_id: approval_id.into(),
            decision: Self::DECLINE.to_owned(),
            token: None,
        }
    }
}

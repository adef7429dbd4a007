//! Approvals: a call that may run only on the person's word, stored until they decide.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{SessionId, StoreError, TurnId};

/// A call waiting for the person's approval, bound to exactly this tool and these arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingApproval {
    /// The approval's id.
    pub id: String,
    /// The session the call belongs to.
    pub session: SessionId,
    /// The person whose approval it needs.
    pub user_id: String,
    /// The turn that asked.
    pub turn_id: TurnId,
    /// The tool.
    pub tool: String,
    /// The exact arguments.
    pub args: Value,
    /// SHA-256 (hex) of the arguments' canonical JSON (RFC 8785).
    pub args_hash: String,
    /// When it was asked, in milliseconds since the Unix epoch.
    pub created_at: u64,
    /// When it stops being redeemable, in milliseconds since the Unix epoch.
    pub expires_at: u64,
    /// What the person was shown when it was asked (title, consequence, fields), kept so that
    /// the card read back later shows the same, even for a tool only that turn had (a UI
    /// action of the page). Never the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<Value>,
}

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for the person.
    Pending,
    /// Approved and used: the call ran.
    Redeemed,
    /// Declined: the call never runs.
    Declined,
    /// Not decided in time.
    Expired,
}

impl ApprovalStatus {
    /// The status's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Redeemed => "redeemed",
            Self::Declined => "declined",
            Self::Expired => "expired",
        }
    }
}

/// Where pending approvals are kept. Settling is one conditional write from `Pending`, so two
/// turns racing with one token settle it once.
#[async_trait]
pub trait ApprovalStore: Send + Sync + std::fmt::Debug {
    /// Stores a new pending approval.
    async fn put_approval(&self, approval: &PendingApproval) -> Result<(), StoreError>;

    /// The approval `id` of `session`, with its status.
    async fn get_approval(
        &self,
        session: &SessionId,
        id: &str,
    ) -> Result<Option<(PendingApproval, ApprovalStatus)>, StoreError>;

    /// Moves the approval from `Pending` to `to`; `false` when it was no longer pending (someone
    /// else settled it first).
    async fn settle_approval(
        &self,
        session: &SessionId,
        id: &str,
        to: ApprovalStatus,
    ) -> Result<bool, StoreError>;

    /// Expires every approval of turn `turn_id` still waiting for its decision: the person's next
    /// message replaced that turn, so its cards must no longer run anything. Returns how many
    /// were withdrawn.
    async fn withdraw_turn_approvals(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<usize, StoreError>;
}

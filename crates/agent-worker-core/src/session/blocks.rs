//! The kill switch: an account or a person whose turns are stopped and refused until the block
//! is lifted. A turn of a blocked account or person does not start (`failed{code:"blocked"}`,
//! not redriven, no model call), and a running one stops at its watch's next look
//! (`completed{data:{stopReason:"blocked"}}`).

use async_trait::async_trait;

use super::StoreError;

/// What a block stands on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BlockTarget {
    /// Every turn of an account.
    Account(String),
    /// Every turn of a person (of an account, when the person is named with one).
    Person {
        /// The account, if any.
        account: Option<String>,
        /// The person.
        user: String,
    },
}

impl BlockTarget {
    /// Whether a turn of `account` and `user` falls under it.
    pub fn covers(&self, account: Option<&str>, user: Option<&str>) -> bool {
        match self {
            Self::Account(blocked) => account == Some(blocked.as_str()),
            Self::Person {
                account: blocked_account,
                user: blocked,
            } => {
                user == Some(blocked.as_str())
                    && blocked_account.as_deref().is_none_or(|a| account == Some(a))
            }
        }
    }

    /// What it is called in a refusal.
    pub fn describe(&self) -> String {
        match self {
            Self::Account(account) => format!("account {account}"),
            Self::Person { user, .. } => format!("person {user}"),
        }
    }
}

/// A block: its target, since when (epoch milliseconds), and why, if the one who set it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// What it stands on.
    pub target: BlockTarget,
    /// Since when.
    pub since_ms: u64,
    /// Why.
    pub reason: Option<String>,
}

/// Where blocks are kept and asked for.
#[async_trait]
pub trait Blocklist: Send + Sync + std::fmt::Debug {
    /// The block a turn of `account` and `user` falls under, if one stands.
    async fn block_on(&self, account: Option<&str>, user: Option<&str>) -> Result<Option<Block>, StoreError>;
}

/// The first of `blocks` a turn of `account` and `user` falls under.
pub fn block_on<'a>(blocks: &'a [Block], account: Option<&str>, user: Option<&str>) -> Option<&'a Block> {
    blocks.iter().find(|b| b.target.covers(account, user))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_covers_its_account_or_its_person() {
        let account = BlockTarget::Account("acme".into());
        assert!(account.covers(Some("acme"), Some("ana")));
        assert!(!account.covers(Some("other"), Some("ana")));
        assert!(!account.covers(None, Some("ana")));
        let person = BlockTarget::Person {
            account: Some("acme".into()),
            user: "ana".into(),
        };
        assert!(person.covers(Some("acme"), Some("ana")));
        assert!(
            !person.covers(Some("other"), Some("ana")),
            "another account's ana"
        );
        assert!(!person.covers(Some("acme"), Some("bo")));
        let anywhere = BlockTarget::Person {
            account: None,
            user: "ana".into(),
        };
        assert!(anywhere.covers(Some("other"), Some("ana")));
    }
}

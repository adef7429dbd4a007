//! The kill switch's blocks in the table ([`Blocklist`]): one item per blocked account or
//! person, all in one partition (`blocks`), so that a worker reads every block in one query, at
//! most once in a while ([`CachedBlocklist`]).
//!
//! | item | `pk` | `sk` |
//! | --- | --- | --- |
//! | a blocked account | `blocks` | `account#<account>` |
//! | a blocked person | `blocks` | `person#<owner key>` (`person#*#<user>` for every account's) |

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use agent_worker_core::session::blocks::block_on;
use agent_worker_core::session::conversations::owner_key;
use agent_worker_core::session::{Block, BlockTarget, Blocklist, Owner, StoreError};

use super::DynamoStore;
use super::codec::{get_n, get_s, n, s};
use super::keys::{PK, SK};
use super::sdk_error::store_error;

/// The partition every block is kept in.
const BLOCKS_PK: &str = "blocks";

/// How long a worker keeps the blocks it read before it reads them again, by default: a block
/// reaches every worker's new turns, and stops their running ones, within it (and a watch's
/// look).
pub const DEFAULT_BLOCKS_FRESH_FOR: Duration = Duration::from_secs(5);

fn block_sk(target: &BlockTarget) -> String {
    match target {
        BlockTarget::Account(account) => format!("account#{account}"),
        BlockTarget::Person {
            account: Some(account),
            user,
        } => format!(
            "person#{}",
            owner_key(&Owner {
                user_id: user.clone(),
                account_id: account.clone(),
            })
        ),
        BlockTarget::Person { account: None, user } => format!("person#*#{user}"),
    }
}

fn decode(item: &HashMap<String, AttributeValue>) -> Option<Block> {
    let target = match get_s(item, "kind")? {
        "account" => BlockTarget::Account(get_s(item, "account")?.to_owned()),
        "person" => BlockTarget::Person {
            account: get_s(item, "account").map(str::to_owned),
            user: get_s(item, "user")?.to_owned(),
        },
        _ => return None,
    };
    Some(Block {
        target,
        since_ms: get_n(item, "sinceMs").unwrap_or(0),
        reason: get_s(item, "reason").map(str::to_owned),
    })
}

impl DynamoStore {
    /// Blocks `target`: its running turns stop, and its new ones are refused, until
    /// [`lift`](Self::lift).
    pub async fn block(&self, target: &BlockTarget, reason: Option<&str>) -> Result<(), StoreError> {
        let mut item = HashMap::from([
            (PK.to_owned(), s(BLOCKS_PK)),
            (SK.to_owned(), s(block_sk(target))),
            ("sinceMs".to_owned(), n(agent_worker_core::clock::now_ms())),
        ]);
        match target {
            BlockTarget::Account(account) => {
                item.insert("kind".to_owned(), s("account"));
                item.insert("account".to_owned(), s(account));
            }
            BlockTarget::Person { account, user } => {
                item.insert("kind".to_owned(), s("person"));
                item.insert("user".to_owned(), s(user));
                if let Some(account) = account {
                    item.insert("account".to_owned(), s(account));
                }
            }
        }
        if let Some(reason) = reason {
            item.insert("reason".to_owned(), s(reason));
        }
        self.client()
            .put_item()
            .table_name(self.table())
            .set_item(Some(item))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| store_error("blocking", e))
    }

    /// Lifts the block on `target`; `false` when there was none.
    pub async fn lift(&self, target: &BlockTarget) -> Result<bool, StoreError> {
        let deleted = self
            .client()
            .delete_item()
            .table_name(self.table())
            .key(PK, s(BLOCKS_PK))
            .key(SK, s(block_sk(target)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| store_error("lifting a block", e))?;
        Ok(deleted.attributes().is_some_and(|a| !a.is_empty()))
    }

    /// Every block that stands.
    pub async fn blocks(&self) -> Result<Vec<Block>, StoreError> {
        let mut pages = self
            .client()
            .query()
            .table_name(self.table())
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(BLOCKS_PK))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let mut blocks = Vec::new();
        while let Some(item) = pages.next().await {
            let item = item.map_err(|e| store_error("reading the blocks", e))?;
            blocks.extend(decode(&item));
        }
        Ok(blocks)
    }
}

/// The blocks last read, and when.
type LastRead = Option<(Instant, Arc<Vec<Block>>)>;

/// The table's blocks as a worker asks for them: read at most once every `fresh_for`, shared by
/// its clones.
#[derive(Debug, Clone)]
pub struct CachedBlocklist {
    store: DynamoStore,
    fresh_for: Duration,
    read: Arc<Mutex<LastRead>>,
}

impl CachedBlocklist {
    /// The blocks of `store`'s table, read again once they are [`DEFAULT_BLOCKS_FRESH_FOR`] old.
    pub fn new(store: DynamoStore) -> Self {
        Self {
            store,
            fresh_for: DEFAULT_BLOCKS_FRESH_FOR,
            read: Arc::default(),
        }
    }

    /// Reads them again once they are `fresh_for` old.
    #[must_use]
    pub fn fresh_for(mut self, fresh_for: Duration) -> Self {
        self.fresh_for = fresh_for;
        self
    }

    async fn current(&self) -> Result<Arc<Vec<Block>>, StoreError> {
        let kept = self.read.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some((at, blocks)) = kept
            && at.elapsed() < self.fresh_for
        {
            return Ok(blocks);
        }
        let blocks = Arc::new(self.store.blocks().await?);
        *self.read.lock().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), blocks.clone()));
        Ok(blocks)
    }
}

#[async_trait]
impl Blocklist for CachedBlocklist {
    async fn block_on(&self, account: Option<&str>, user: Option<&str>) -> Result<Option<Block>, StoreError> {
        let blocks = self.current().await?;
        Ok(block_on(&blocks, account, user).cloned())
    }
}

//! [`ConversationStore`] on the table: a person's list from the [`OWNER_INDEX`] index, a
//! conversation read back page by page, and deletion of every item of it.
//!
//! Requests: a list is one `Query` of the index and at most one `BatchGetItem` (the turns its
//! page shows as started and not ended); a get is one `GetItem`, then one `Query` of its page of
//! messages, one of its approvals and at most one `GetItem` of a running turn, together. Neither
//! grows with the conversation's length or the person's number of conversations.

use agent_worker_core::session::{SignalStore as _, TurnLedger as _};
use std::collections::HashMap;
use std::time::Duration;

use agent_worker_core::clock::now_ms;
use agent_worker_core::session::conversations::{
    ConversationPage, ConversationSummary, Deleted, ListCursor, StoredConversation, is_waiting, owner_digest,
    owner_key, page_range,
};
use agent_worker_core::session::{
    ApprovalStatus, ConversationError, ConversationStore, Owner, PendingApproval, SessionId, Stop, StopCause,
    StopOutcome, StoreError, TurnId,
};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, KeysAndAttributes, ReturnValue, WriteRequest};

use super::DynamoStore;
use super::codec::{get_n, get_s, n, parse_status, s};
use super::keys::*;
use super::sdk_error::{build_error, store_error};

type Item = HashMap<String, AttributeValue>;

/// How often a delete looks whether a turn it stopped has ended.
const STOP_POLL: Duration = Duration::from_millis(200);
/// How long a delete holds its lease on finishing after the wait for a stopped turn: the time
/// to delete a long conversation's items.
const PURGE_MARGIN: Duration = Duration::from_secs(60);
/// How many times unprocessed keys or writes of a batch call are sent again.
const BATCH_RETRIES: u32 = 5;

impl DynamoStore {
    /// Which of `turns` (session, turn) run now: one `BatchGetItem` of their records.
    async fn running_turns(&self, turns: &[(String, String)]) -> Result<Vec<bool>, StoreError> {
        if turns.is_empty() {
            return Ok(Vec::new());
        }
        let mut keys: Vec<Item> = turns
            .iter()
            .map(|(session, turn)| self.key(session, turn_sk(turn)))
            .collect();
        let mut found: HashMap<(String, String), bool> = HashMap::new();
        let now = now_ms();
        for _ in 0..BATCH_RETRIES {
            let ask = KeysAndAttributes::builder()
                .set_keys(Some(std::mem::take(&mut keys)))
                .projection_expression("pk, sk, #status, leaseUntil")
                .expression_attribute_names("#status", "status")
                .consistent_read(true)
                .build()
                .map_err(build_error)?;
            let out = self
                .client()
                .batch_get_item()
                .request_items(self.table(), ask)
                .send()
                .await
                .map_err(|e| store_error("reading the turns a list shows", e))?;
            for item in out
                .responses()
                .and_then(|r| r.get(self.table()))
                .into_iter()
                .flatten()
            {
                let running = get_s(item, "status").and_then(parse_status)
                    == Some(agent_worker_core::session::TurnStatus::Running)
                    && get_n(item, "leaseUntil").unwrap_or(0) > now;
                let pk = get_s(item, PK).unwrap_or_default().to_owned();
                let sk = get_s(item, SK).unwrap_or_default().to_owned();
                found.insert((pk, sk), running);
            }
            keys = out
                .unprocessed_keys()
                .and_then(|u| u.get(self.table()))
                .map(|k| k.keys().to_vec())
                .unwrap_or_default();
            if keys.is_empty() {
                break;
            }
        }
        Ok(turns
            .iter()
            .map(|(session, turn)| {
                found
                    .get(&(session_pk(session), turn_sk(turn)))
                    .copied()
                    .unwrap_or(false)
            })
            .collect())
    }

    /// The conversation's meta item when it is `owner`'s and not deleted.
    async fn owned_meta(&self, owner: &Owner, id: &str) -> Result<Item, ConversationError> {
        let item = self.meta_item(id).await?;
        item.filter(|item| {
            !item.contains_key(DELETED_AT)
                && get_s(item, OWNER_USER) == Some(owner.user_id.as_str())
                && get_s(item, OWNER_ACCOUNT) == Some(owner.account_id.as_str())
        })
        .ok_or_else(|| ConversationError::NotFound(id.to_owned()))
    }

    /// The conversation's approvals still waiting: one page of its approval items.
    async fn waiting_approvals(&self, id: &str) -> Result<Vec<PendingApproval>, StoreError> {
        let out = self
            .client()
            .query()
            .table_name(self.table())
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .filter_expression("#status = :pending")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":pk", s(session_pk(id)))
            .expression_attribute_values(":prefix", s(APPROVAL_PREFIX))
            .expression_attribute_values(":pending", s(ApprovalStatus::Pending.as_str()))
            .send()
            .await
            .map_err(|e| store_error("reading the conversation's approvals", e))?;
        let now = now_ms();
        Ok(out
            .items()
            .iter()
            .filter_map(|item| get_s(item, "approval"))
            .filter_map(|json| serde_json::from_str::<PendingApproval>(json).ok())
            .filter(|a| is_waiting(ApprovalStatus::Pending, a, now))
            .collect())
    }

    /// Deletes every item of `id`'s partition but its meta item: counts by kind.
    async fn delete_items(&self, id: &str, deleted: &mut Deleted) -> Result<(), StoreError> {
        let mut pages = self
            .client()
            .query()
            .table_name(self.table())
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(session_pk(id)))
            .projection_expression("pk, sk")
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let mut batch = Vec::with_capacity(25);
        while let Some(item) = pages.next().await {
            let item = item.map_err(|e| store_error("listing the conversation's items", e))?;
            let sk = get_s(&item, SK).unwrap_or_default().to_owned();
            if sk == META_SK {
                continue;
            }
            let count = if sk.starts_with(MESSAGE_PREFIX) {
                &mut deleted.messages
            } else if sk.starts_with("turn#") {
                &mut deleted.turns
            } else if sk.starts_with("event#") {
                &mut deleted.events
            } else if sk.starts_with(APPROVAL_PREFIX) {
                &mut deleted.approvals
            } else {
                &mut deleted.other
            };
            *count += 1;
            batch.push(self.key(id, sk));
            if batch.len() == 25 {
                self.delete_batch(std::mem::take(&mut batch)).await?;
            }
        }
        self.delete_batch(batch).await
    }

    /// One `BatchWriteItem` of up to 25 deletes, with its unprocessed ones sent again.
    async fn delete_batch(&self, keys: Vec<Item>) -> Result<(), StoreError> {
        let mut requests = keys
            .into_iter()
            .map(|key| {
                DeleteRequest::builder()
                    .set_key(Some(key))
                    .build()
                    .map(|d| WriteRequest::builder().delete_request(d).build())
                    .map_err(build_error)
            })
            .collect::<Result<Vec<_>, _>>()?;
        for attempt in 0..BATCH_RETRIES {
            if requests.is_empty() {
                return Ok(());
            }
            if attempt > 0 {
                tokio::time::sleep(STOP_POLL * attempt).await;
            }
            let out = self
                .client()
                .batch_write_item()
                .request_items(self.table(), std::mem::take(&mut requests))
                .send()
                .await
                .map_err(|e| store_error("deleting the conversation's items", e))?;
            requests = out
                .unprocessed_items()
                .and_then(|u| u.get(self.table()))
                .cloned()
                .unwrap_or_default();
        }
        if requests.is_empty() {
            Ok(())
        } else {
            Err(StoreError::Throttled(
                format!(
                    "{} items were still unprocessed; delete again to finish",
                    requests.len()
                )
                .into(),
            ))
        }
    }

    /// Waits, a bounded time, for a turn asked to stop to end (or for its worker's lease to run
    /// out), so that what it stores at its end is deleted too.
    async fn until_ended(&self, id: &SessionId, turn_id: &TurnId) -> Result<(), StoreError> {
        let waited = tokio::time::timeout(self.config.stop_wait, async {
            loop {
                match self.turn(id, turn_id).await? {
                    Some(record)
                        if !record.status.is_done() && record.lease_until > std::time::SystemTime::now() =>
                    {
                        tokio::time::sleep(STOP_POLL).await;
                    }
                    _ => return Ok::<_, StoreError>(()),
                }
            }
        })
        .await;
        match waited {
            Ok(result) => result,
            Err(_) => {
                tracing::warn!(
                    %turn_id,
                    "a stopped turn had not ended when its conversation was deleted"
                );
                Ok(())
            }
        }
    }
}

fn summary(item: &Item, running: bool) -> ConversationSummary {
    let id = get_s(item, PK)
        .and_then(|pk| pk.strip_prefix("session#"))
        .unwrap_or_default();
    ConversationSummary {
        id: id.to_owned(),
        title: get_s(item, "title").unwrap_or_default().to_owned(),
        last_active_at: get_n(item, LAST_ACTIVE_AT).unwrap_or(0),
        turns: get_n(item, "turns").unwrap_or(0),
        preview: get_s(item, "preview").unwrap_or_default().to_owned(),
        running,
    }
}

/// The turn an item shows as started and not yet ended, if one.
fn started_turn(item: &Item) -> Option<TurnId> {
    get_s(item, ACTIVE_TURN)
        .filter(|active| Some(*active) != get_s(item, ENDED_TURN))
        .and_then(|active| TurnId::new(active).ok())
}

/// The turn running in a conversation whose meta item was `item`: the one holding its run
/// under a live lease, or else the one it marks started and not ended.
fn running_turn(item: &Item) -> Option<TurnId> {
    let live = get_n(item, RUN_UNTIL).is_some_and(|until| until > now_ms());
    live.then(|| get_s(item, RUN_TURN).and_then(|turn| TurnId::new(turn).ok()))
        .flatten()
        .or_else(|| started_turn(item))
}

#[async_trait]
impl ConversationStore for DynamoStore {
    async fn list_conversations(
        &self,
        owner: &Owner,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<ConversationPage, ConversationError> {
        let key = owner_key(owner);
        let start = cursor
            .map(|c| ListCursor::decode(c, owner))
            .transpose()?
            .map(|after| {
                HashMap::from([
                    (PK.to_owned(), s(session_pk(&after.session))),
                    (SK.to_owned(), s(META_SK)),
                    (OWNER_KEY.to_owned(), s(&key)),
                    (LAST_ACTIVE_AT.to_owned(), n(after.at)),
                ])
            });
        let out = self
            .client()
            .query()
            .table_name(self.table())
            .index_name(OWNER_INDEX)
            .key_condition_expression("#okey = :okey")
            .expression_attribute_names("#okey", OWNER_KEY)
            .expression_attribute_values(":okey", s(&key))
            .scan_index_forward(false)
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| store_error("listing the person's conversations", e))?;
        let items = out.items();
        let started: Vec<(String, String)> = items
            .iter()
            .filter_map(|item| {
                let session = get_s(item, PK)?.strip_prefix("session#")?;
                Some((session.to_owned(), started_turn(item)?.into_string()))
            })
            .collect();
        let running = self.running_turns(&started).await?;
        let running: HashMap<&str, bool> = started
            .iter()
            .map(|(session, _)| session.as_str())
            .zip(running)
            .collect();
        let conversations: Vec<ConversationSummary> = items
            .iter()
            .map(|item| {
                let mut shown = summary(item, false);
                shown.running = running.get(shown.id.as_str()).copied().unwrap_or(false);
                shown
            })
            .collect();
        Ok(ConversationPage::of(
            owner,
            conversations,
            out.last_evaluated_key().is_some(),
        ))
    }

    async fn read_conversation(
        &self,
        owner: &Owner,
        id: &SessionId,
        limit: usize,
        before: Option<u64>,
    ) -> Result<StoredConversation, ConversationError> {
        let meta = self.owned_meta(owner, id).await?;
        let version = get_n(&meta, "version").unwrap_or(0);
        let range = page_range(before, limit, version);
        let started = started_turn(&meta).map(TurnId::into_string);
        let lineage = super::lineage::lineage_of(&meta)?;
        let running = async {
            match &started {
                Some(turn) => Ok(self
                    .running_turns(&[(id.to_string(), turn.clone())])
                    .await?
                    .first()
                    .copied()
                    .unwrap_or(false)),
                None => Ok::<_, StoreError>(false),
            }
        };
        let (messages, waiting, running) = tokio::join!(
            self.page(id, &lineage, range.clone()),
            self.waiting_approvals(id),
            running
        );
        let mut summary = summary(&meta, running?);
        summary.id = id.to_string();
        Ok(StoredConversation {
            summary,
            messages: messages?,
            older: (range.start > 0).then_some(range.start),
            waiting: waiting?,
        })
    }

    async fn delete_conversation(&self, owner: &Owner, id: &SessionId) -> Result<Deleted, ConversationError> {
        let digest = owner_digest(owner);
        // First the tombstone, with the lease of the one delete that finishes it: from here no
        // turn of it starts, none stores anything, its log writes nothing, and a second delete
        // finds it under way.
        let marked = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(self.key(id, META_SK.to_owned())))
            .update_expression(
                "SET #deleted = :now, deletedBy = :by, #exp = :exp, #purge = :purge \
                 REMOVE #user, #account, #okey, #last, title, preview, turns, version, summaryUpto, #active, #ended, #run, #until",
            )
            .condition_expression("#user = :user AND #account = :account")
            .expression_attribute_names("#deleted", DELETED_AT)
            .expression_attribute_names("#exp", EXPIRES_AT)
            .expression_attribute_names("#purge", PURGE_UNTIL)
            .expression_attribute_names("#user", OWNER_USER)
            .expression_attribute_names("#account", OWNER_ACCOUNT)
            .expression_attribute_names("#okey", OWNER_KEY)
            .expression_attribute_names("#last", LAST_ACTIVE_AT)
            .expression_attribute_names("#active", ACTIVE_TURN)
            .expression_attribute_names("#ended", ENDED_TURN)
            .expression_attribute_names("#run", RUN_TURN)
            .expression_attribute_names("#until", RUN_UNTIL)
            .expression_attribute_values(":now", n(now_ms()))
            .expression_attribute_values(":by", s(&digest))
            .expression_attribute_values(":exp", n(self.expires_at()))
            .expression_attribute_values(":purge", n(self.purge_until()))
            .expression_attribute_values(":user", s(&owner.user_id))
            .expression_attribute_values(":account", s(&owner.account_id))
            .return_values(ReturnValue::AllOld)
            .send()
            .await;
        let mut deleted = Deleted::default();
        match marked {
            Ok(out) => {
                deleted.other += 1;
                // The turn running when it was deleted is stopped, and its end waited for, so
                // that it stops spending before its items go (it can write nothing after the
                // tombstone either way).
                if let Some(turn) = out.attributes().and_then(running_turn) {
                    let stop = Stop::now(StopCause::UserStop);
                    if self.request_stop(id, &turn, stop).await? == StopOutcome::Recorded {
                        self.until_ended(id, &turn).await?;
                        deleted.stopped_turn = Some(turn);
                    }
                }
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                self.take_over_purge(id, &digest).await?;
            }
            Err(e) => return Err(store_error("marking the conversation deleted", e).into()),
        }
        self.delete_items(id, &mut deleted).await?;
        self.purged(id, &digest).await?;
        Ok(deleted)
    }
}

impl DynamoStore {
    /// When a delete begun now gives up its lease on finishing it: past the wait for a stopped
    /// turn, and the time to delete a long conversation's items.
    fn purge_until(&self) -> u64 {
        now_ms().saturating_add(
            u64::try_from((self.config.stop_wait + PURGE_MARGIN).as_millis()).unwrap_or(u64::MAX),
        )
    }

    /// A delete that found the conversation already deleted. By this person: under way in
    /// another delete, [`ConversationError::DeleteUnderway`]; interrupted (that delete's lease ran
    /// out), taken over in one conditional write; finished, nothing to take over (what is left to
    /// remove is what a failure after it left, its files). Anyone else's: not found.
    async fn take_over_purge(&self, id: &SessionId, digest: &str) -> Result<(), ConversationError> {
        let tomb = self.meta_item(id).await?;
        let theirs = tomb
            .as_ref()
            .is_some_and(|t| t.contains_key(DELETED_AT) && get_s(t, "deletedBy") == Some(digest));
        if !theirs {
            return Err(ConversationError::NotFound(id.to_string()));
        }
        let Some(until) = tomb.as_ref().and_then(|t| get_n(t, PURGE_UNTIL)) else {
            return Ok(());
        };
        if until > now_ms() {
            return Err(ConversationError::DeleteUnderway(id.to_string()));
        }
        let taken = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(self.key(id, META_SK.to_owned())))
            .update_expression("SET #purge = :purge")
            .condition_expression("#purge = :was")
            .expression_attribute_names("#purge", PURGE_UNTIL)
            .expression_attribute_values(":purge", n(self.purge_until()))
            .expression_attribute_values(":was", n(until))
            .send()
            .await;
        match taken {
            Ok(_) => {
                tracing::info!(conversation = %id, "finishing a delete that was interrupted");
                Ok(())
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Err(ConversationError::DeleteUnderway(id.to_string()))
            }
            Err(e) => Err(store_error("taking over an interrupted delete", e).into()),
        }
    }

    /// Marks the delete finished: the tombstone alone is left, and a later delete finds nothing.
    async fn purged(&self, id: &SessionId, digest: &str) -> Result<(), StoreError> {
        self.client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(self.key(id, META_SK.to_owned())))
            .update_expression("REMOVE #purge")
            .condition_expression("deletedBy = :by")
            .expression_attribute_names("#purge", PURGE_UNTIL)
            .expression_attribute_values(":by", s(digest))
            .send()
            .await
            .map_err(|e| store_error("marking the delete finished", e))?;
        Ok(())
    }
}

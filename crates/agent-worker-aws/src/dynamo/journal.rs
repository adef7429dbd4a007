//! Turns' journals in the table ([`agent_worker_core::session::journal`]).
//!
//! A checkpoint is items under `journal#<turnId>#`: one per message of the turn
//! (`…#m#<index, 6 digits>`, each within the item limit as a stored message is) and the step
//! (`…#step`: the open answer, its calls, the round, the count of messages it stands on). A
//! checkpoint writes the step and only the messages that changed since this process last wrote
//! them, in one transaction that lands only while this worker's claim holds (the turn item's
//! `writeToken` is still the claim's): a worker whose lease ran out, and whose turn another
//! took, writes nothing. A call's result is one more item (`…#call#<callId>`), under the same
//! condition. Every item names its turn (`turnId`): a turn whose id begins another's reads only
//! its own. The items live as long as the table's TTL keeps a turn's events.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex, PoisonError};

use agent_worker_core::Failure;
use agent_worker_core::session::{
    CallResult, Checkpoint, JOURNAL_VERSION, Journal, Message, SessionId, StoreError, TurnId,
};
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, TransactWriteItem};

use super::DynamoStore;
use super::codec::{get_n, get_s, n, s, storable};
use super::keys::{EXPIRES_AT, PK, SK, WRITE_TOKEN, session_pk, turn_sk};
use super::sdk_error::{build_error, cancellation_reasons, is_condition_reason, store_error};
use super::transact::{item_size, plan};

/// On a journal item: the turn it belongs to.
const TURN_ID: &str = "turnId";
/// On a journal item: its JSON.
const BODY: &str = "body";
/// On the step item: the journal's form.
const VERSION: &str = "v";
/// On the step item: how many message items the checkpoint stands on.
const MESSAGES: &str = "messages";

/// Turns open in this process may keep this many journal states; past it all are forgotten
/// (a checkpoint then writes every message again, and conditions on the turn's status alone).
const MAX_OPEN_JOURNALS: usize = 4096;

fn prefix(turn_id: &str) -> String {
    format!("journal#{turn_id}#")
}

fn message_sk(turn_id: &str, index: usize) -> String {
    format!("{}m#{index:06}", prefix(turn_id))
}

fn step_sk(turn_id: &str) -> String {
    format!("{}step", prefix(turn_id))
}

fn call_sk(turn_id: &str, call_id: &str) -> String {
    format!("{}call#{call_id}", prefix(turn_id))
}

/// What this process knows of each open turn's journal: the claim's token, and a digest of each
/// message item it wrote.
#[derive(Debug, Clone, Default)]
pub(super) struct OpenJournals(Arc<Mutex<HashMap<(String, String), OpenJournal>>>);

#[derive(Debug, Default)]
struct OpenJournal {
    token: Option<String>,
    written: Vec<u64>,
}

impl OpenJournals {
    fn with<T>(&self, session: &str, turn_id: &str, f: impl FnOnce(&mut OpenJournal) -> T) -> T {
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if open.len() >= MAX_OPEN_JOURNALS {
            open.clear();
        }
        f(open.entry((session.to_owned(), turn_id.to_owned())).or_default())
    }

    /// Keeps the token of this worker's claim of `turn_id`: its journal is written only while
    /// the claim holds.
    pub(super) fn claimed(&self, session: &str, turn_id: &str, token: &str) {
        self.with(session, turn_id, |open| {
            *open = OpenJournal {
                token: Some(token.to_owned()),
                written: Vec::new(),
            };
        });
    }

    /// The token of this worker's claim of `turn_id`, when the process knows it (read, not
    /// kept: a turn this process never claimed leaves no entry).
    fn token(&self, session: &str, turn_id: &str) -> Option<String> {
        let open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&(session.to_owned(), turn_id.to_owned()))
            .and_then(|journal| journal.token.clone())
    }

    /// Forgets `turn_id` (it ended, or was given up), saying the token of this worker's claim of
    /// it, when it knew one.
    pub(super) fn forget(&self, session: &str, turn_id: &str) -> Option<String> {
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        open.remove(&(session.to_owned(), turn_id.to_owned()))
            .and_then(|journal| journal.token)
    }
}

fn digest(json: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    json.hash(&mut hasher);
    hasher.finish()
}

impl DynamoStore {
    /// The condition that turn `turn_id` is still this worker's: running, under its claim.
    fn still_ours(&self, session: &str, turn_id: &str) -> Result<TransactWriteItem, StoreError> {
        let token = self.journals.token(session, turn_id);
        let mut check = ConditionCheck::builder()
            .table_name(self.table())
            .set_key(Some(self.key(session, turn_sk(turn_id))))
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":running", s("running"));
        check = match token {
            Some(token) => check
                .condition_expression("#status = :running AND #token = :token")
                .expression_attribute_names("#token", WRITE_TOKEN)
                .expression_attribute_values(":token", s(token)),
            None => check.condition_expression("#status = :running"),
        };
        let check = check.build().map_err(build_error)?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    fn journal_item(
        &self,
        session: &str,
        turn_id: &str,
        sk: String,
        body: String,
    ) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (PK.to_owned(), s(session_pk(session))),
            (SK.to_owned(), s(sk)),
            (TURN_ID.to_owned(), s(turn_id)),
            (BODY.to_owned(), s(body)),
            (EXPIRES_AT.to_owned(), n(self.expires_at())),
        ])
    }

    /// Writes `items` with the condition that the turn is still ours, in one transaction.
    async fn write_journal_items(
        &self,
        session: &str,
        turn_id: &str,
        items: Vec<HashMap<String, AttributeValue>>,
    ) -> Result<(), StoreError> {
        let mut writes = vec![self.still_ours(session, turn_id)?];
        for item in items {
            let put = Put::builder()
                .table_name(self.table())
                .set_item(Some(item))
                .build()
                .map_err(build_error)?;
            writes.push(TransactWriteItem::builder().put(put).build());
        }
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(writes))
            .send()
            .await
        {
            Ok(_) => Ok(()),
            // The first write is the check that the turn is still ours.
            Err(e) if is_condition_reason(cancellation_reasons(&e).first()) => Err(StoreError::LostLease(
                format!("turn {turn_id} is no longer this worker's: its journal was not written"),
            )),
            Err(e) => Err(store_error("writing the turn's journal", e)),
        }
    }

    /// [`TurnLedger::write_checkpoint`](agent_worker_core::session::TurnLedger::write_checkpoint).
    pub(super) async fn checkpoint(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        let written = self.journals.with(session, turn_id, |open| open.written.clone());
        let mut changed = Vec::new();
        let mut digests = Vec::with_capacity(checkpoint.messages.len());
        for (index, message) in checkpoint.messages.iter().enumerate() {
            let json = storable(message)?;
            let sum = digest(&json);
            digests.push(sum);
            if written.get(index) != Some(&sum) {
                changed.push(self.journal_item(session, turn_id, message_sk(turn_id, index), json));
            }
        }
        let step = Checkpoint {
            messages: Vec::new(),
            ..checkpoint.clone()
        };
        let body = serde_json::to_string(&step)
            .map_err(|e| StoreError::Corrupt(Failure::caused_by("a checkpoint does not encode", e)))?;
        let mut step_item = self.journal_item(session, turn_id, step_sk(turn_id), body);
        step_item.insert(VERSION.to_owned(), n(u64::from(checkpoint.version)));
        step_item.insert(MESSAGES.to_owned(), n(checkpoint.messages.len() as u64));
        // The messages first, where no reader looks past the step's count; the step last.
        let sizes: Vec<usize> = changed.iter().map(item_size).collect();
        let (earlier, last) = plan(&sizes, 2, item_size(&step_item));
        let mut changed = changed.into_iter();
        for range in earlier {
            let items = changed.by_ref().take(range.len()).collect();
            self.write_journal_items(session, turn_id, items).await?;
        }
        let mut items: Vec<_> = changed.by_ref().take(last.len()).collect();
        items.push(step_item);
        self.write_journal_items(session, turn_id, items).await?;
        self.journals
            .with(session, turn_id, |open| open.written = digests);
        Ok(())
    }

    /// [`TurnLedger::record_result`](agent_worker_core::session::TurnLedger::record_result).
    pub(super) async fn record_call(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        result: &CallResult,
    ) -> Result<(), StoreError> {
        let item = self.result_item(session, turn_id, result)?;
        self.write_journal_items(session, turn_id, vec![item]).await
    }

    fn result_item(
        &self,
        session: &str,
        turn_id: &str,
        result: &CallResult,
    ) -> Result<HashMap<String, AttributeValue>, StoreError> {
        let body = serde_json::to_string(result)
            .map_err(|e| StoreError::Corrupt(Failure::caused_by("a call's result does not encode", e)))?;
        Ok(self.journal_item(session, turn_id, call_sk(turn_id, &result.call_id), body))
    }

    /// The writes that record `results` in turn `turn_id`'s journal within another write of the
    /// turn (its event log's, [`TurnLedger::record_result_later`]): first the check that the turn
    /// is still this worker's, then an item per result.
    ///
    /// [`TurnLedger::record_result_later`]: agent_worker_core::session::TurnLedger::record_result_later
    pub(super) fn result_writes(
        &self,
        session: &str,
        turn_id: &str,
        results: &[CallResult],
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let mut writes = vec![self.still_ours(session, turn_id)?];
        for result in results {
            let put = Put::builder()
                .table_name(self.table())
                .set_item(Some(self.result_item(session, turn_id, result)?))
                .build()
                .map_err(build_error)?;
            writes.push(TransactWriteItem::builder().put(put).build());
        }
        Ok(writes)
    }

    /// [`TurnLedger::read_journal`](agent_worker_core::session::TurnLedger::read_journal): one
    /// paged, strongly consistent query of the turn's journal items.
    pub(super) async fn journal(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<Option<Journal>, StoreError> {
        let mut pages = self
            .client
            .query()
            .table_name(self.table())
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", s(session_pk(session)))
            .expression_attribute_values(":prefix", s(prefix(turn_id)))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let (mut step, mut messages, mut results) = (None, HashMap::new(), Vec::new());
        while let Some(item) = pages.next().await {
            let item = item.map_err(|e| store_error("reading the turn's journal", e))?;
            // Another turn's, whose id begins with this one's.
            if get_s(&item, TURN_ID) != Some(turn_id.as_str()) {
                continue;
            }
            let (Some(sk), Some(body)) = (get_s(&item, SK), get_s(&item, BODY)) else {
                continue;
            };
            let Some(part) = sk.strip_prefix(&prefix(turn_id)) else {
                continue;
            };
            if part == "step" {
                step = Some((item.clone(), body.to_owned()));
            } else if let Some(index) = part.strip_prefix("m#") {
                messages.insert(index.to_owned(), body.to_owned());
            } else if part.starts_with("call#") {
                results.push(decode::<CallResult>(body, "a call's result")?);
            }
        }
        let Some((item, body)) = step else {
            return Ok(None);
        };
        if get_n(&item, VERSION) != Some(u64::from(JOURNAL_VERSION)) {
            tracing::warn!("the turn's journal is of another version; it is not read");
            return Ok(None);
        }
        let mut checkpoint = decode::<Checkpoint>(&body, "the turn's checkpoint")?;
        if !Journal::is_for(&checkpoint, turn_id) {
            return Ok(None);
        }
        let count = get_n(&item, MESSAGES).unwrap_or(0);
        for index in 0..count {
            let body = messages.get(&format!("{index:06}")).ok_or_else(|| {
                StoreError::Corrupt(format!("the turn's journal lacks its message {index}").into())
            })?;
            checkpoint
                .messages
                .push(decode::<Message>(body, "a message of the turn's journal")?);
        }
        Ok(Some(Journal { checkpoint, results }))
    }
}

fn decode<T: serde::de::DeserializeOwned>(body: &str, what: &str) -> Result<T, StoreError> {
    serde_json::from_str(body)
        .map_err(|e| StoreError::Corrupt(Failure::caused_by(format!("{what} does not decode"), e)))
}

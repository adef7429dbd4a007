//! [`DynamoStore`]: a [`SessionStore`] on one DynamoDB table, so that any worker can serve any
//! turn of any session (portable conformance).
//!
//! - A turn is claimed with a conditional put; a redelivery finds the record and does not run.
//!   A record whose lease ran out (its worker died) is claimed again with a conditional update.
//! - History is one paged, strongly consistent `Query`, bounded by the session's version. A
//!   compacted session keeps its [`Summary`] in its own item and the position it covers on the
//!   version item: a turn reads the version item, then the summary and the messages after it
//!   (together), and nothing older. The summary is written with its position in one
//!   transaction; the version item stays small, so each turn's write of it stays cheap.
//! - A turn's messages, the session's version and the turn's completion are written in one
//!   `TransactWriteItems`. A turn too large for one transaction writes its first messages beyond
//!   the version first, where no reader looks, then the rest with the version and the completion:
//!   readers see all of it or none of it.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};

use agent_worker_core::clock::now_ms;
use agent_worker_core::session::{
    CallResult, Checkpoint, Claim, ConversationClaim, ForkOutcome, HistoryStore, HistoryView, Journal, Lease,
    Message, Opened, Owner, OwnerCheck, OwnerStore, SessionId, SignalBoards, StoreError, StoredMessage,
    Summary, TurnEnding, TurnId, TurnLedger, TurnOpening, TurnOutcome, TurnRecord,
};

use super::codec::*;
use super::journal::OpenJournals;
use super::keys::*;
use super::log_tail::LogTails;
use super::opening::{Meta, VersionHints};
use super::read_ahead::ReadBehind;
use super::sdk_error::{build_error, store_error};
use super::transact::item_size;

/// What the version bump and the turn's end add to the last transaction, generously: the
/// outcome is the terminal event's data.
pub(super) const TAIL_BYTES: usize = 64 * 1024;

/// How long stored items live before the table's TTL removes them, by default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(90 * 24 * 3600);
/// How long deleting a conversation waits for a turn it stopped to end, by default.
pub const DEFAULT_STOP_WAIT: Duration = Duration::from_secs(10);
/// How many times a completion is retried when another writer moved the session's version.
pub(super) const VERSION_RETRIES: u32 = 5;

/// Where and how long the store keeps things.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoConfig {
    /// The table's name.
    pub table: String,
    /// How long items live (the TTL attribute's offset).
    pub ttl: Duration,
    /// How long deleting a conversation waits for a turn it stopped to end, so that what the
    /// turn stores at its end goes too.
    pub stop_wait: Duration,
}

impl DynamoConfig {
    /// The configuration for `table`, with the default TTL. An empty name is refused.
    pub fn new(table: impl Into<String>) -> Result<Self, StoreError> {
        let table = table.into();
        if table.trim().is_empty() {
            return Err(StoreError::Backend("the DynamoDB table name is empty".into()));
        }
        Ok(Self {
            table,
            ttl: DEFAULT_TTL,
            stop_wait: DEFAULT_STOP_WAIT,
        })
    }
}

/// A session store on DynamoDB. Cheap to clone.
///
/// The client's own retry policy handles throttling with backoff (the SDK's standard mode); what
/// still fails surfaces as [`StoreError::Throttled`] or [`StoreError::Backend`].
#[derive(Clone)]
pub struct DynamoStore {
    pub(super) client: Client,
    pub(super) config: DynamoConfig,
    /// The version each open turn read with its claim: its commit's first guess.
    pub(super) versions: VersionHints,
    /// The conversations whose history this process does not read beside the claim.
    pub(super) read_behind: ReadBehind,
    /// The looks the event log's writes take at the signals of turns watched in this process.
    pub(super) signals: SignalBoards,
    /// The unwritten ends of the event logs open in this process, which a turn's commit may write.
    pub(super) log_tails: LogTails,
    /// What this process knows of the journals of the turns it runs.
    pub(super) journals: OpenJournals,
}

impl fmt::Debug for DynamoStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoStore")
            .field("table", &self.config.table)
            .finish_non_exhaustive()
    }
}

impl DynamoStore {
    /// A store on `client`'s DynamoDB, in `config.table`.
    pub fn new(client: Client, config: DynamoConfig) -> Self {
        Self {
            client,
            config,
            versions: VersionHints::default(),
            read_behind: ReadBehind::default(),
            signals: SignalBoards::default(),
            log_tails: LogTails::default(),
            journals: OpenJournals::default(),
        }
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.config.table
    }

    /// The client, for the table module's other stores.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The TTL value for an item written now.
    pub fn expires_at(&self) -> u64 {
        (now_ms() / 1000).saturating_add(self.config.ttl.as_secs())
    }

    /// The key of item `sk` of `session`.
    pub(super) fn key(&self, session: &str, sk: String) -> HashMap<String, AttributeValue> {
        HashMap::from([(PK.to_owned(), s(session_pk(session))), (SK.to_owned(), s(sk))])
    }

    /// The check, in a transaction, that `session` was not deleted: a write of the conversation's
    /// that carries it lands only before its tombstone.
    pub(super) fn not_deleted(
        &self,
        session: &str,
    ) -> Result<aws_sdk_dynamodb::types::TransactWriteItem, aws_sdk_dynamodb::error::BuildError> {
        let check = aws_sdk_dynamodb::types::ConditionCheck::builder()
            .table_name(&self.config.table)
            .set_key(Some(self.key(session, META_SK.to_owned())))
            .condition_expression("attribute_not_exists(#deleted)")
            .expression_attribute_names("#deleted", DELETED_AT)
            .build()?;
        Ok(aws_sdk_dynamodb::types::TransactWriteItem::builder()
            .condition_check(check)
            .build())
    }

    /// The session's version, for a write: refused when the conversation was deleted.
    pub(super) async fn version(&self, session: &str) -> Result<u64, StoreError> {
        let out = self.meta_item(session).await?;
        match out {
            Some(item) if item.contains_key(DELETED_AT) => Err(StoreError::Deleted(format!(
                "conversation {session} was deleted while a turn of it ran"
            ))),
            Some(item) => Ok(get_n(&item, "version").unwrap_or(0)),
            None => Ok(0),
        }
    }

    /// The session's version, how many of its first messages its summary holds, and its
    /// lineage (a branch's parents).
    async fn meta(&self, session: &str) -> Result<Meta, StoreError> {
        Meta::of(self.meta_item(session).await?.as_ref())
    }

    /// What a turn reads of the session whose meta item says `meta`: its summary, if it has
    /// one, and the messages after it (one round trip: the summary is read beside them).
    pub(super) async fn view_at(&self, session: &str, meta: &Meta) -> Result<HistoryView, StoreError> {
        let Meta {
            version,
            summary_upto,
            lineage,
        } = meta;
        let Some(upto) = *summary_upto else {
            return Ok(HistoryView {
                summary: None,
                messages: self.messages(session, lineage, 0, *version).await?,
            });
        };
        let first = upto.min(*version);
        let (summary, messages) = if lineage.is_empty() {
            self.summary_and_messages(session, first..*version).await?
        } else {
            let (summary, messages) = tokio::join!(
                self.summary(session),
                self.messages(session, lineage, first, *version)
            );
            (summary?, messages?)
        };
        let summary = summary.filter(|s| s.upto == upto).ok_or_else(|| {
            StoreError::Corrupt(format!("the summary of the first {upto} messages is missing").into())
        })?;
        Ok(HistoryView {
            summary: Some(summary),
            messages,
        })
    }

    /// The session's meta item, read strongly.
    pub(super) async fn meta_item(
        &self,
        session: &str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(self.key(session, META_SK.to_owned())))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("reading the session's version", e))?;
        Ok(out.item)
    }

    /// The session's summary item.
    async fn summary(&self, session: &str) -> Result<Option<Summary>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(self.key(session, SUMMARY_SK.to_owned())))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("reading the session's summary", e))?;
        Ok(out.item().and_then(super::history::summary_of))
    }

    /// An update of a turn item; `#status` names its status attribute.
    pub(super) fn update_turn(
        &self,
        session: &str,
        turn_id: &str,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(self.key(session, turn_sk(turn_id))))
            .expression_attribute_names("#status", "status")
    }

    /// A read of a turn item.
    pub(super) fn get_turn(
        &self,
        session: &str,
        turn_id: &str,
    ) -> aws_sdk_dynamodb::operation::get_item::builders::GetItemFluentBuilder {
        self.client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(self.key(session, turn_sk(turn_id))))
            .consistent_read(true)
    }

    /// A turn's record, and the token of the write that last claimed or ended it.
    pub(super) async fn read_turn_with_token(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<Option<(TurnRecord, Option<String>)>, StoreError> {
        let out = self
            .get_turn(session, turn_id)
            .send()
            .await
            .map_err(|e| store_error("reading the turn record", e))?;
        match out.item() {
            // A stop asked before the turn was claimed leaves an item without a status.
            Some(item) if item.contains_key("status") => {
                let token = get_s(item, WRITE_TOKEN).map(str::to_owned);
                decode_turn(turn_id, item).map(|record| Some((record, token)))
            }
            _ => Ok(None),
        }
    }

    async fn read_turn(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<Option<TurnRecord>, StoreError> {
        Ok(self
            .read_turn_with_token(session, turn_id)
            .await?
            .map(|(record, _)| record))
    }

    /// The write of one message, and its size as DynamoDB counts it.
    pub(super) fn message_put(
        &self,
        session: &str,
        turn_id: &str,
        seq: u64,
        message: &Message,
    ) -> Result<(TransactWriteItem, usize), StoreError> {
        let mut item = self.key(session, message_sk(seq));
        item.insert("message".into(), s(storable(message)?));
        item.insert("turnId".into(), s(turn_id));
        item.insert(EXPIRES_AT.into(), n(self.expires_at()));
        let size = item_size(&item);
        let put = Put::builder()
            .table_name(&self.config.table)
            .set_item(Some(item))
            .build()
            .map_err(build_error)?;
        Ok((TransactWriteItem::builder().put(put).build(), size))
    }

    /// A condition that holds while the session's version is `version`.
    pub(super) fn version_condition(
        &self,
        version: u64,
    ) -> (
        &'static str,
        HashMap<String, String>,
        HashMap<String, AttributeValue>,
    ) {
        let names = HashMap::from([
            ("#version".to_owned(), "version".to_owned()),
            ("#deleted".to_owned(), DELETED_AT.to_owned()),
        ]);
        if version == 0 {
            (
                "(attribute_not_exists(#version) OR #version = :old) AND attribute_not_exists(#deleted)",
                names,
                HashMap::from([(":old".to_owned(), n(0))]),
            )
        } else {
            (
                "#version = :old AND attribute_not_exists(#deleted)",
                names,
                HashMap::from([(":old".to_owned(), n(version))]),
            )
        }
    }
}

#[async_trait]
impl OwnerStore for DynamoStore {
    fn max_id_bytes(&self) -> Option<usize> {
        Some(MAX_ID_BYTES)
    }

    async fn claim_owner(
        &self,
        session: &SessionId,
        turn_id: Option<&TurnId>,
        owner: &Owner,
    ) -> Result<OwnerCheck, StoreError> {
        match turn_id {
            Some(turn_id) => super::owner::claim(self, session, turn_id, owner).await,
            // No turn to mark as the latest activity: the conversation's claim, which marks none.
            None => Ok(super::owner::claim_without_turn(self, session, owner)
                .await?
                .owner),
        }
    }

    async fn owner(&self, session: &SessionId) -> Result<Option<Owner>, StoreError> {
        super::owner::read(self, session).await
    }

    async fn claim_conversation(
        &self,
        session: &SessionId,
        owner: &Owner,
    ) -> Result<ConversationClaim, StoreError> {
        super::owner::claim_without_turn(self, session, owner).await
    }

    async fn claim_run(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        lease: Lease,
    ) -> Result<Option<TurnId>, StoreError> {
        let until = lease.ends_at_ms(agent_worker_core::clock::now_ms());
        Ok(match self.take_run(session, turn_id, until).await? {
            super::owner::MetaAnswer::Busy(holder) => Some(holder),
            _ => None,
        })
    }

    async fn end_run(&self, session: &SessionId, turn_id: &TurnId) -> Result<(), StoreError> {
        self.give_back_run(session, turn_id).await
    }

    async fn running_turn(&self, session: &SessionId) -> Result<Option<TurnId>, StoreError> {
        self.run_holder(session).await
    }

    async fn active_turn(&self, session: &SessionId) -> Result<Option<TurnId>, StoreError> {
        self.read_active_turn(session).await
    }
}

#[async_trait]
impl HistoryStore for DynamoStore {
    async fn load_history(&self, session: &SessionId) -> Result<Vec<Message>, StoreError> {
        // A deleted conversation's tombstone has no version: its history is empty.
        let meta = self.meta(session).await?;
        self.messages(session, &meta.lineage, 0, meta.version).await
    }

    async fn load_view(&self, session: &SessionId) -> Result<HistoryView, StoreError> {
        let meta = self.meta(session).await?;
        self.view_at(session, &meta).await
    }

    async fn save_summary(&self, session: &SessionId, summary: &Summary) -> Result<bool, StoreError> {
        let expires = n(self.expires_at());
        let put = Put::builder()
            .table_name(&self.config.table)
            .set_item(Some(HashMap::from([
                (PK.to_owned(), s(session_pk(session))),
                (SK.to_owned(), s(SUMMARY_SK)),
                ("summary".to_owned(), s(summary.text.clone())),
                ("upto".to_owned(), n(summary.upto)),
                (EXPIRES_AT.to_owned(), expires),
            ])))
            .build()
            .map_err(build_error)?;
        let mark = Update::builder()
            .table_name(&self.config.table)
            .set_key(Some(self.key(session, META_SK.to_owned())))
            .update_expression("SET #upto = :upto")
            .condition_expression("#version >= :upto AND (attribute_not_exists(#upto) OR #upto < :upto)")
            .expression_attribute_names("#upto", "summaryUpto")
            .expression_attribute_names("#version", "version")
            .expression_attribute_values(":upto", n(summary.upto))
            .build()
            .map_err(build_error)?;
        let saved = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(mark).build())
            .transact_items(TransactWriteItem::builder().put(put).build())
            .send()
            .await;
        match saved {
            Ok(_) => Ok(true),
            Err(error) if error.code() == Some("TransactionCanceledException") => Ok(false),
            Err(error) => Err(store_error("keeping the session's summary", error)),
        }
    }

    async fn entries(
        &self,
        session: &SessionId,
        since: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let meta = self.meta(session).await?;
        let end = meta.version.min(since.saturating_add(limit as u64));
        self.page(session, &meta.lineage, since.min(end)..end).await
    }

    async fn fork(
        &self,
        session: &SessionId,
        parent: &SessionId,
        hints: &[String],
        asking: Option<&Owner>,
    ) -> Result<ForkOutcome, StoreError> {
        self.branch(session, parent, hints, asking).await
    }
}

#[async_trait]
impl TurnLedger for DynamoStore {
    fn max_message_bytes(&self) -> Option<usize> {
        Some(MAX_MESSAGE_BYTES)
    }

    async fn claim_turn(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        lease: Lease,
    ) -> Result<Claim, StoreError> {
        Ok(self.claim(session, turn_id, lease).await?.claim)
    }

    async fn open_turn(&self, opening: TurnOpening<'_>) -> Result<Opened, StoreError> {
        self.open(opening).await
    }

    async fn complete_turn(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        messages: &[Message],
        outcome: &TurnOutcome,
    ) -> Result<(), StoreError> {
        self.complete(session, turn_id, messages, outcome, None).await
    }

    async fn complete_turn_seen(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        messages: &[Message],
        outcome: &TurnOutcome,
        seen: usize,
    ) -> Result<(), StoreError> {
        self.complete(session, turn_id, messages, outcome, Some(seen))
            .await
    }

    fn keeps_journal(&self) -> bool {
        true
    }

    async fn write_checkpoint(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        self.checkpoint(session, turn_id, checkpoint).await
    }

    async fn record_result(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        result: &CallResult,
    ) -> Result<(), StoreError> {
        self.record_call(session, turn_id, result).await
    }

    fn record_result_later(&self, session: &SessionId, turn_id: &TurnId, result: &CallResult) -> bool {
        self.log_tails.hand_result(session, turn_id, result.clone())
    }

    async fn read_journal(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<Option<Journal>, StoreError> {
        self.journal(session, turn_id).await
    }

    fn ending_next(&self, session: &SessionId, turn_id: &TurnId, ending: TurnEnding) {
        self.log_tails.announce(session, turn_id, ending);
    }

    async fn turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<Option<TurnRecord>, StoreError> {
        self.read_turn(session, turn_id).await
    }

    async fn release_turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<(), StoreError> {
        // A worker whose claim another took gives back neither the turn nor its run.
        if self.give_up_lease(session, turn_id).await? {
            self.give_back_run(session, turn_id).await?;
        }
        Ok(())
    }

    async fn hand_over_turn(&self, session: &SessionId, turn_id: &TurnId) -> Result<(), StoreError> {
        self.give_up_lease(session, turn_id).await.map(|_| ())
    }
}

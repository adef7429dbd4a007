//! A conversation's messages read back by key range: what a turn's history and a page of a
//! conversation read.

use agent_worker_core::Failure;
use agent_worker_core::session::conversations::StoredMessage;
use std::collections::HashMap;

use agent_worker_core::session::{Message, StoreError, Summary, TurnId};
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;

use super::DynamoStore;
use super::codec::{get_n, get_s, s};
use super::keys::{MESSAGE_PREFIX, SK, SUMMARY_SK, message_sk, session_pk};
use super::lineage::Segment;
use super::sdk_error::store_error;

impl DynamoStore {
    /// Messages `from..to` of the session whose lineage is `lineage` (its parents' parts from
    /// their partitions), each part in one paged, strongly consistent query.
    pub(super) async fn messages(
        &self,
        session: &str,
        lineage: &[Segment],
        from: u64,
        to: u64,
    ) -> Result<Vec<Message>, StoreError> {
        Ok(self
            .page(session, lineage, from..to)
            .await?
            .into_iter()
            .map(|stored| stored.message)
            .collect())
    }

    /// Messages `range` of the session's own partition, with their places and turns: one
    /// paged, strongly consistent query of exactly that key range.
    pub(super) async fn message_page(
        &self,
        session: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let mut messages = Vec::with_capacity(usize::try_from(range.end - range.start).unwrap_or_default());
        self.each_in_range(
            session,
            message_sk(range.start),
            message_sk(range.end - 1),
            |item| {
                messages.push(stored_message(&item)?);
                Ok(())
            },
        )
        .await?;
        Ok(messages)
    }

    /// The summary and messages `range` of the session's own partition, in one paged, strongly
    /// consistent query: the summary's key sorts right after the messages', so the key range
    /// from the first message to the summary holds both (and messages past `range`, written
    /// ahead of a version by a large turn, which are left out).
    pub(super) async fn summary_and_messages(
        &self,
        session: &str,
        range: std::ops::Range<u64>,
    ) -> Result<(Option<Summary>, Vec<Message>), StoreError> {
        let mut summary = None;
        let mut messages = Vec::with_capacity(usize::try_from(range.end - range.start).unwrap_or_default());
        self.each_in_range(session, message_sk(range.start), SUMMARY_SK.to_owned(), |item| {
            if get_s(&item, SK) == Some(SUMMARY_SK) {
                summary = summary_of(&item);
                return Ok(());
            }
            let stored = stored_message(&item)?;
            if range.contains(&stored.seq) {
                messages.push(stored.message);
            }
            Ok(())
        })
        .await?;
        Ok((summary, messages))
    }

    /// The strongly consistent query of the session's partition from sort key `first` to `last`
    /// (both included), in key order.
    pub(super) fn range_query(&self, session: &str, first: String, last: String) -> QueryFluentBuilder {
        self.client()
            .query()
            .table_name(self.table())
            .key_condition_expression("pk = :pk AND sk BETWEEN :first AND :last")
            .expression_attribute_values(":pk", s(session_pk(session)))
            .expression_attribute_values(":first", s(first))
            .expression_attribute_values(":last", s(last))
            .consistent_read(true)
    }

    /// Hands each item of the session's partition from sort key `first` to `last` (both
    /// included) to `take`, in key order: one paged, strongly consistent query.
    async fn each_in_range(
        &self,
        session: &str,
        first: String,
        last: String,
        mut take: impl FnMut(HashMap<String, AttributeValue>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut pages = self
            .range_query(session, first, last)
            .into_paginator()
            .items()
            .send();
        while let Some(item) = pages.next().await {
            take(item.map_err(|e| store_error("reading the history", e))?)?;
        }
        Ok(())
    }
}

/// A summary item's summary.
pub(super) fn summary_of(item: &HashMap<String, AttributeValue>) -> Option<Summary> {
    Some(Summary {
        text: get_s(item, "summary")?.to_owned(),
        upto: get_n(item, "upto")?,
    })
}

/// A message item's message, place and turn.
pub(super) fn stored_message(item: &HashMap<String, AttributeValue>) -> Result<StoredMessage, StoreError> {
    let sk = get_s(item, SK).unwrap_or_default();
    let seq = sk
        .strip_prefix(MESSAGE_PREFIX)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("{sk} is not a message's key").into()))?;
    let json =
        get_s(item, "message").ok_or_else(|| StoreError::Corrupt(format!("{sk} has no message").into()))?;
    let message = serde_json::from_str(json)
        .map_err(|e| StoreError::Corrupt(Failure::caused_by(format!("{sk} does not decode"), e)))?;
    Ok(StoredMessage {
        seq,
        turn_id: get_s(item, "turnId").and_then(|turn| TurnId::new(turn).ok()),
        message,
    })
}

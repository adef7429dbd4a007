//! A branched conversation's lineage (`lineage` on its meta item): the parents' messages it
//! begins with, read from their own partitions, never copied. Segment `i` holds places
//! `[upto of i - 1, upto of i)` of the session `i` names; the conversation's own messages follow,
//! numbered on from the last segment's end, so that a branch's places are its parent's up to the
//! branch point. A branch of a branch takes its parent's segments up to the branch point, so a
//! read never looks further than one meta item.

use std::collections::HashMap;

use agent_worker_core::session::conversations::StoredMessage;
use agent_worker_core::session::fork::branch_point;
use agent_worker_core::session::{ForkOutcome, Owner, StoreError};
use aws_sdk_dynamodb::types::AttributeValue;

use super::DynamoStore;
use super::codec::{get_n, get_s, n, s};
use super::keys::{DELETED_AT, EXPIRES_AT, LINEAGE, OWNER_ACCOUNT, OWNER_USER};
use super::sdk_error::{is_conditional_failure, store_error};

/// One parent's part of a branch: its messages before `upto`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Segment {
    pub(super) session: String,
    pub(super) upto: u64,
}

/// The lineage on a meta item; empty for a conversation that is no branch.
pub(super) fn lineage_of(meta: &HashMap<String, AttributeValue>) -> Result<Vec<Segment>, StoreError> {
    let Some(list) = meta.get(LINEAGE) else {
        return Ok(Vec::new());
    };
    let corrupt = || StoreError::Corrupt("a conversation's lineage cannot be read".into());
    list.as_l()
        .map_err(|_| corrupt())?
        .iter()
        .map(|segment| {
            let map = segment.as_m().map_err(|_| corrupt())?;
            Ok(Segment {
                session: get_s(map, "session").ok_or_else(corrupt)?.to_owned(),
                upto: get_n(map, "upto").ok_or_else(corrupt)?,
            })
        })
        .collect()
}

fn encode(lineage: &[Segment]) -> AttributeValue {
    AttributeValue::L(
        lineage
            .iter()
            .map(|segment| {
                AttributeValue::M(HashMap::from([
                    ("session".to_owned(), s(&segment.session)),
                    ("upto".to_owned(), n(segment.upto)),
                ]))
            })
            .collect(),
    )
}

impl DynamoStore {
    /// Places `range` of `session`, whose lineage is `lineage`: each segment's part from its
    /// parent's partition, the rest from the session's own. A parent's part that is gone (the
    /// parent was deleted, or its items expired) is left out, with a warning: the branch keeps
    /// its own messages.
    pub(super) async fn page(
        &self,
        session: &str,
        lineage: &[Segment],
        range: std::ops::Range<u64>,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let mut messages = Vec::new();
        let mut start = 0;
        for segment in lineage {
            let part = range.start.max(start)..range.end.min(segment.upto);
            if !part.is_empty() {
                let read = self.message_page(&segment.session, part.clone()).await?;
                if (read.len() as u64) < part.end - part.start {
                    tracing::warn!(
                        parent = %segment.session,
                        "part of the conversation this one branched from is gone; it is left out"
                    );
                }
                messages.extend(read);
            }
            start = segment.upto;
        }
        messages.extend(
            self.message_page(session, range.start.max(start)..range.end)
                .await?,
        );
        Ok(messages)
    }

    /// Starts `session` as a branch of `parent` at the point `hints` name (see
    /// [`HistoryStore::fork`](agent_worker_core::session::HistoryStore::fork)): one conditional
    /// write of its lineage and version, refused when it holds messages already.
    pub(super) async fn branch(
        &self,
        session: &str,
        parent: &str,
        hints: &[String],
        asking: Option<&Owner>,
    ) -> Result<ForkOutcome, StoreError> {
        let (child, meta) = tokio::join!(self.meta_item(session), self.meta_item(parent));
        let holds_messages = |item: &HashMap<String, AttributeValue>| {
            item.contains_key(DELETED_AT) || get_n(item, "version").unwrap_or(0) > 0
        };
        if child?.as_ref().is_some_and(holds_messages) {
            return Ok(ForkOutcome::Exists);
        }
        let Some(meta) = meta? else {
            return Ok(ForkOutcome::NoParent);
        };
        let version = get_n(&meta, "version").unwrap_or(0);
        if meta.contains_key(DELETED_AT) || version == 0 {
            return Ok(ForkOutcome::NoParent);
        }
        if let Some(user) = get_s(&meta, OWNER_USER) {
            let owner = Owner::new(user, get_s(&meta, OWNER_ACCOUNT).unwrap_or_default());
            if asking != Some(&owner) {
                return Ok(ForkOutcome::NotOwner);
            }
        }
        let parents = lineage_of(&meta)?;
        let upto = if hints.is_empty() {
            version
        } else {
            let stored = self.page(parent, &parents, 0..version).await?;
            let turns: Vec<Option<&str>> = stored.iter().map(|m| m.turn_id.as_deref()).collect();
            stored
                .get(branch_point(&turns, hints).wrapping_sub(1))
                .map_or(0, |last| last.seq + 1)
        };
        let mut lineage: Vec<Segment> = parents.into_iter().filter(|s| s.upto <= upto).collect();
        if lineage.last().map_or(0, |s| s.upto) < upto {
            lineage.push(Segment {
                session: parent.to_owned(),
                upto,
            });
        }
        let written = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(self.key(session, super::keys::META_SK.to_owned())))
            .update_expression("SET #lineage = :lineage, #version = :upto, #exp = if_not_exists(#exp, :exp)")
            .condition_expression(
                "(attribute_not_exists(#version) OR #version = :zero) AND attribute_not_exists(#deleted)",
            )
            .expression_attribute_names("#lineage", LINEAGE)
            .expression_attribute_names("#version", "version")
            .expression_attribute_names("#deleted", DELETED_AT)
            .expression_attribute_names("#exp", EXPIRES_AT)
            .expression_attribute_values(":lineage", encode(&lineage))
            .expression_attribute_values(":upto", n(upto))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":exp", n(self.expires_at()))
            .send()
            .await;
        match written {
            Ok(_) => Ok(ForkOutcome::Forked { upto }),
            Err(e) if is_conditional_failure(&e) => Ok(ForkOutcome::Exists),
            Err(e) => Err(store_error("starting the session as a branch", e)),
        }
    }
}

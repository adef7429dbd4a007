//! [`Documents`]: JSON documents at keys of the session table, for stores whose items are a
//! typed value and nothing else to query by (Agent Protocol tasks, steps and artifact records).
//!
//! Each item holds the value's JSON in `doc` and the table's TTL attribute. Reads are strongly
//! consistent. The caller chooses the keys (from [`keys`](super::keys)) and the types; this
//! module alone turns them into DynamoDB items.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, Select, TransactWriteItem};
use serde::Serialize;
use serde::de::DeserializeOwned;

use agent_worker_core::Failure;
use agent_worker_core::session::StoreError;

use super::DynamoStore;
use super::codec::s;
use super::keys::{EXPIRES_AT, PK, SK};
use super::sdk_error::{cancellation_reasons, is_condition_reason, store_error};

/// The attribute that holds an item's JSON.
const DOC: &str = "doc";

/// The most documents one [`Documents::put_under`] writes (a transaction holds 100 items, one
/// of them the parent's check).
pub const MAX_DOCUMENTS_PER_WRITE: usize = 99;

/// Where a document lives: its partition and sort keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocKey {
    /// The partition key.
    pub pk: String,
    /// The sort key.
    pub sk: String,
}

impl DocKey {
    /// The key `pk` / `sk`.
    pub fn new(pk: impl Into<String>, sk: impl Into<String>) -> Self {
        Self {
            pk: pk.into(),
            sk: sk.into(),
        }
    }
}

/// What a document call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum DocumentsError {
    /// [`Documents::create`] found a document at the key already.
    #[error("a document exists at {0:?} already")]
    Exists(DocKey),
    /// [`Documents::put_under`] found no document at the parent key: nothing was written.
    #[error("there is no document at {0:?}")]
    NoParent(DocKey),
    /// A value that does not encode, or an item that does not decode (what was being done; the
    /// encoder's or the SDK's error, when there is one, is its source).
    #[error(transparent)]
    Codec(Failure),
    /// The table failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// JSON documents in a [`DynamoStore`]'s table. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Documents {
    store: DynamoStore,
}

impl Documents {
    /// Documents in `store`'s table.
    pub fn new(store: DynamoStore) -> Self {
        Self { store }
    }

    fn item(
        &self,
        key: &DocKey,
        doc: &impl Serialize,
    ) -> Result<HashMap<String, AttributeValue>, DocumentsError> {
        let json = serde_json::to_string(doc)
            .map_err(|e| DocumentsError::Codec(Failure::caused_by(format!("encoding {key:?}"), e)))?;
        Ok(HashMap::from([
            (PK.to_owned(), s(key.pk.clone())),
            (SK.to_owned(), s(key.sk.clone())),
            (DOC.to_owned(), s(json)),
            (
                EXPIRES_AT.to_owned(),
                AttributeValue::N(self.store.expires_at().to_string()),
            ),
        ]))
    }

    /// Writes `doc` at `key`, unless a document is there already.
    pub async fn create(&self, key: &DocKey, doc: &impl Serialize) -> Result<(), DocumentsError> {
        let written = self
            .store
            .client
            .put_item()
            .table_name(self.store.table())
            .set_item(Some(self.item(key, doc)?))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match written {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Err(DocumentsError::Exists(key.clone()))
            }
            Err(e) => Err(store_error("writing a document", e).into()),
        }
    }

    /// The document at `key`, if there is one.
    pub async fn get<T: DeserializeOwned>(&self, key: &DocKey) -> Result<Option<T>, DocumentsError> {
        let out = self
            .store
            .client
            .get_item()
            .table_name(self.store.table())
            .key(PK, s(key.pk.clone()))
            .key(SK, s(key.sk.clone()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("reading a document", e))?;
        out.item().map(decode).transpose()
    }

    /// The documents of partition `pk` whose sort key starts with `prefix`, in sort-key order,
    /// from the `skip`th, at most `take`; and how many there are in all (counted by the same
    /// query, so it stays right as items expire).
    pub async fn page<T: DeserializeOwned>(
        &self,
        pk: &str,
        prefix: &str,
        skip: usize,
        take: usize,
    ) -> Result<(Vec<T>, u64), DocumentsError> {
        let query = |select: Select| {
            self.store
                .client
                .query()
                .table_name(self.store.table())
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":pk", s(pk))
                .expression_attribute_values(":prefix", s(prefix))
                .consistent_read(true)
                .select(select)
        };
        let mut total = 0u64;
        let mut counts = query(Select::Count).into_paginator().send();
        while let Some(page) = counts.next().await {
            let page = page.map_err(|e| store_error("counting documents", e))?;
            total += u64::try_from(page.count()).unwrap_or_default();
        }
        let mut items = Vec::new();
        if take > 0 && (skip as u64) < total {
            let mut pages = query(Select::AllAttributes).into_paginator().items().send();
            let mut index = 0usize;
            while let Some(item) = pages.next().await {
                let item = item.map_err(|e| store_error("reading documents", e))?;
                if index >= skip {
                    items.push(decode(&item)?);
                    if items.len() == take {
                        break;
                    }
                }
                index += 1;
            }
        }
        Ok((items, total))
    }

    /// Writes `docs` in one transaction, if a document exists at `parent`; otherwise nothing.
    /// At most [`MAX_DOCUMENTS_PER_WRITE`].
    pub async fn put_under(
        &self,
        parent: &DocKey,
        docs: &[(DocKey, serde_json::Value)],
    ) -> Result<(), DocumentsError> {
        if docs.len() > MAX_DOCUMENTS_PER_WRITE {
            return Err(DocumentsError::Codec(Failure::new(format!(
                "one write takes at most {MAX_DOCUMENTS_PER_WRITE} documents, not {}",
                docs.len()
            ))));
        }
        let codec = |e: aws_sdk_dynamodb::error::BuildError| {
            DocumentsError::Codec(Failure::caused_by("a DynamoDB request cannot be built", e))
        };
        let check = ConditionCheck::builder()
            .table_name(self.store.table())
            .key(PK, s(parent.pk.clone()))
            .key(SK, s(parent.sk.clone()))
            .condition_expression("attribute_exists(pk)")
            .build()
            .map_err(codec)?;
        let mut items = vec![TransactWriteItem::builder().condition_check(check).build()];
        for (key, doc) in docs {
            let put = Put::builder()
                .table_name(self.store.table())
                .set_item(Some(self.item(key, doc)?))
                .build()
                .map_err(codec)?;
            items.push(TransactWriteItem::builder().put(put).build());
        }
        let result = self
            .store
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                if is_condition_reason(cancellation_reasons(&e).first()) {
                    Err(DocumentsError::NoParent(parent.clone()))
                } else {
                    Err(store_error("writing documents", e).into())
                }
            }
        }
    }
}

fn decode<T: DeserializeOwned>(item: &HashMap<String, AttributeValue>) -> Result<T, DocumentsError> {
    let doc = item
        .get(DOC)
        .and_then(|d| d.as_s().ok())
        .ok_or_else(|| DocumentsError::Codec(Failure::new("an item has no doc")))?;
    serde_json::from_str(doc)
        .map_err(|e| DocumentsError::Codec(Failure::caused_by("an item does not decode", e)))
}

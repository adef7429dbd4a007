//! [`ApprovalStore`] on the session table: `approval#<id>` items.

use agent_worker_core::Failure;
use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::AttributeValue;

use agent_worker_core::session::{
    ApprovalStatus, ApprovalStore, PendingApproval, SessionId, StoreError, TurnId,
};

use super::DynamoStore;
use super::keys::{APPROVAL_PREFIX, EXPIRES_AT, PK, SK, approval_sk, session_pk};
use super::sdk_error::store_error;

/// How long an approval item outlives its expiry, for the record.
const KEEP_AFTER_EXPIRY_SECS: u64 = 24 * 3600;

fn key(session: &SessionId, id: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (PK.to_owned(), AttributeValue::S(session_pk(session))),
        (SK.to_owned(), AttributeValue::S(approval_sk(id))),
    ])
}

#[async_trait]
impl ApprovalStore for DynamoStore {
    async fn put_approval(&self, approval: &PendingApproval) -> Result<(), StoreError> {
        let mut item = key(&approval.session, &approval.id);
        let json = serde_json::to_string(approval)
            .map_err(|e| StoreError::Corrupt(Failure::caused_by("the approval does not encode", e)))?;
        item.insert("approval".into(), AttributeValue::S(json));
        item.insert(
            "status".into(),
            AttributeValue::S(ApprovalStatus::Pending.as_str().into()),
        );
        item.insert(
            EXPIRES_AT.into(),
            AttributeValue::N((approval.expires_at / 1000 + KEEP_AFTER_EXPIRY_SECS).to_string()),
        );
        self.client()
            .put_item()
            .table_name(self.table())
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await
            .map_err(|e| store_error("storing the approval", e))?;
        Ok(())
    }

    async fn get_approval(
        &self,
        session: &SessionId,
        id: &str,
    ) -> Result<Option<(PendingApproval, ApprovalStatus)>, StoreError> {
        let out = self
            .client()
            .get_item()
            .table_name(self.table())
            .set_key(Some(key(session, id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("reading the approval", e))?;
        let Some(item) = out.item() else {
            return Ok(None);
        };
        decode(item, id).map(Some)
    }

    async fn settle_approval(
        &self,
        session: &SessionId,
        id: &str,
        to: ApprovalStatus,
    ) -> Result<bool, StoreError> {
        let result = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(key(session, id)))
            .update_expression("SET #status = :to")
            .condition_expression("#status = :pending")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":to", AttributeValue::S(to.as_str().into()))
            .expression_attribute_values(
                ":pending",
                AttributeValue::S(ApprovalStatus::Pending.as_str().into()),
            )
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => Ok(false),
            Err(e) => Err(store_error("settling the approval", e)),
        }
    }

    async fn withdraw_turn_approvals(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<usize, StoreError> {
        let mut pages = self
            .client()
            .query()
            .table_name(self.table())
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", AttributeValue::S(session_pk(session)))
            .expression_attribute_values(":prefix", AttributeValue::S(APPROVAL_PREFIX.into()))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let mut waiting = Vec::new();
        while let Some(item) = pages.next().await {
            let item = item.map_err(|e| store_error("reading the session's approvals", e))?;
            let id = item
                .get(SK)
                .and_then(|v| v.as_s().ok())
                .and_then(|sk| sk.strip_prefix(APPROVAL_PREFIX))
                .unwrap_or_default()
                .to_owned();
            let (approval, status) = decode(&item, &id)?;
            if approval.turn_id == *turn_id && status == ApprovalStatus::Pending {
                waiting.push(approval.id);
            }
        }
        let mut withdrawn = 0;
        for id in waiting {
            withdrawn += usize::from(
                self.settle_approval(session, &id, ApprovalStatus::Expired)
                    .await?,
            );
        }
        Ok(withdrawn)
    }
}

/// An approval item's body and status.
fn decode(
    item: &HashMap<String, AttributeValue>,
    id: &str,
) -> Result<(PendingApproval, ApprovalStatus), StoreError> {
    let json = item
        .get("approval")
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("approval {id} has no body").into()))?;
    let approval = serde_json::from_str(json)
        .map_err(|e| StoreError::Corrupt(Failure::caused_by(format!("approval {id} does not decode"), e)))?;
    let status = item
        .get("status")
        .and_then(|v| v.as_s().ok())
        .and_then(|s| serde_json::from_value(serde_json::Value::String(s.clone())).ok())
        .ok_or_else(|| StoreError::Corrupt(format!("approval {id} has no valid status").into()))?;
    Ok((approval, status))
}

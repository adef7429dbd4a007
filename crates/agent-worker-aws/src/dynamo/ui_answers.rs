//! The tab's answers to UI actions on the table (`uianswer#<turnId>#<callId>` in the session's
//! partition), so that a call waiting on any worker, Lambda included, reads the answer the tab
//! gave through any other (the container's route, or the product's API).

use std::collections::HashMap;
use std::time::Duration;

use agent_worker_core::Failure;
use agent_worker_core::session::{
    ActionAnswer, ActionAnswerStore, ActionAnswers, SessionId, StoreError, TurnId,
};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use super::DynamoStore;
use super::codec::{get_s, n, s};
use super::keys::{EXPIRES_AT, PK, SK, session_pk, ui_answer_sk};
use super::sdk_error::store_error;

/// How long an answer is kept.
const KEEP_ANSWERS: Duration = Duration::from_secs(24 * 3600);

fn key(session: &SessionId, turn_id: &TurnId, call_id: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (PK.to_owned(), s(session_pk(session))),
        (SK.to_owned(), s(ui_answer_sk(turn_id, call_id))),
    ])
}

#[async_trait]
impl ActionAnswers for DynamoStore {
    async fn look(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        call_id: &str,
    ) -> Result<Option<ActionAnswer>, StoreError> {
        let out = self
            .client()
            .get_item()
            .table_name(self.table())
            .set_key(Some(key(session, turn_id, call_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("looking for a UI action's answer", e))?;
        let Some(item) = out.item() else {
            return Ok(None);
        };
        let json = get_s(item, "answer").unwrap_or_default();
        serde_json::from_str(json)
            .map(Some)
            .map_err(|e| StoreError::Corrupt(Failure::caused_by("a UI action's answer does not decode", e)))
    }
}

#[async_trait]
impl ActionAnswerStore for DynamoStore {
    async fn record(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        call_id: &str,
        answer: &ActionAnswer,
    ) -> Result<bool, StoreError> {
        let json = serde_json::to_string(answer).map_err(|e| {
            StoreError::Corrupt(Failure::caused_by("a UI action's answer does not encode", e))
        })?;
        let expires = (agent_worker_core::clock::now_ms() / 1000).saturating_add(KEEP_ANSWERS.as_secs());
        let mut item = key(session, turn_id, call_id);
        item.insert("answer".into(), s(json));
        item.insert("final".into(), AttributeValue::Bool(answer.is_final()));
        item.insert(EXPIRES_AT.into(), n(expires));
        // A final answer replaces "taken" and is kept once; "taken" replaces nothing.
        let condition = if answer.is_final() {
            "attribute_not_exists(pk) OR #final = :no"
        } else {
            "attribute_not_exists(pk)"
        };
        let mut put = self
            .client()
            .put_item()
            .table_name(self.table())
            .set_item(Some(item))
            .condition_expression(condition);
        if answer.is_final() {
            put = put
                .expression_attribute_names("#final", "final")
                .expression_attribute_values(":no", AttributeValue::Bool(false));
        }
        match put.send().await {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(store_error("recording a UI action's answer", e)),
        }
    }
}

//! A2A push configurations on the table: where a task's updates are POSTed
//! (`push#<task turn>#<config id>` in the conversation's partition, so that the worker that runs
//! any turn of the task finds them, and a deleted conversation takes them with it).
//!
//! The config itself is kept as the A2A door checked it (JSON in `config`); the table adds how
//! many deliveries to it failed in a row (`failures`), so that a webhook that keeps failing is
//! dropped rather than tried forever.

use std::collections::HashMap;

use agent_worker_core::session::{SessionId, StoreError, TurnId};
use aws_sdk_dynamodb::types::AttributeValue;

use super::DynamoStore;
use super::codec::{get_n, get_s, n, s};
use super::keys::{EXPIRES_AT, PK, SK, session_pk};
use super::sdk_error::{cancellation_reasons, is_condition_reason, store_error};

/// A task's push configuration as the table keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPushConfig {
    /// The config's id, unique within its task.
    pub id: String,
    /// The config, as JSON.
    pub config: String,
    /// How many deliveries to it failed in a row.
    pub failures: u64,
}

/// What [`DynamoStore::put_push_config`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushConfigPut {
    /// Kept (a config of the same id replaced).
    Kept,
    /// Refused: the task has as many configs as it may.
    Full,
    /// Refused: the conversation was deleted.
    Deleted,
    /// Refused ([`PushConfigWrite::New`]): the task has a config of that id.
    Exists,
}

/// Whether a config may replace one of the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushConfigWrite {
    /// It replaces one of the same id.
    Replace,
    /// It is kept only where the task has none of that id.
    New,
}

/// The sort key prefix of task `task_turn`'s push configs.
fn push_prefix(task_turn: &TurnId) -> String {
    format!("push#{task_turn}#")
}

/// The config id sort key `sk` names, when it is one of `task_turn`'s (a config id holds no `#`,
/// so another task whose id begins with this one's followed by `#` is told apart).
fn config_id<'a>(sk: &'a str, task_turn: &TurnId) -> Option<&'a str> {
    sk.strip_prefix(&push_prefix(task_turn))
        .filter(|id| !id.is_empty() && !id.contains('#'))
}

fn key(session: &SessionId, task_turn: &TurnId, id: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (PK.to_owned(), s(session_pk(session))),
        (SK.to_owned(), s(format!("{}{id}", push_prefix(task_turn)))),
    ])
}

impl DynamoStore {
    /// Task `task_turn`'s push configs (the task of conversation `session` whose first turn is
    /// `task_turn`), read consistently.
    pub async fn push_configs(
        &self,
        session: &SessionId,
        task_turn: &TurnId,
    ) -> Result<Vec<StoredPushConfig>, StoreError> {
        let out = self
            .client()
            .query()
            .table_name(self.table())
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", s(session_pk(session)))
            .expression_attribute_values(":prefix", s(push_prefix(task_turn)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("reading a task's push configs", e))?;
        Ok(out
            .items()
            .iter()
            .filter_map(|item| {
                let id = config_id(get_s(item, SK)?, task_turn)?;
                Some(StoredPushConfig {
                    id: id.to_owned(),
                    config: get_s(item, "config")?.to_owned(),
                    failures: get_n(item, "failures").unwrap_or(0),
                })
            })
            .collect())
    }

    /// Keeps push config `id` (JSON `config`) of task `task_turn`, replacing one of the same id
    /// when `write` says so; refused when the task holds `most` configs already and this is not
    /// one of them (two kept at once may pass it by one), or when the conversation was deleted
    /// (checked in the same write, so no config outlives its conversation).
    pub async fn put_push_config(
        &self,
        session: &SessionId,
        task_turn: &TurnId,
        id: &str,
        config: &str,
        most: usize,
        write: PushConfigWrite,
    ) -> Result<PushConfigPut, StoreError> {
        let kept = self.push_configs(session, task_turn).await?;
        if kept.len() >= most && !kept.iter().any(|c| c.id == id) {
            return Ok(PushConfigPut::Full);
        }
        let mut item = key(session, task_turn, id);
        item.insert("config".into(), s(config));
        item.insert("failures".into(), n(0));
        item.insert(EXPIRES_AT.into(), n(self.expires_at()));
        let built = |e: aws_sdk_dynamodb::error::BuildError| {
            StoreError::Backend(agent_worker_core::Failure::caused_by("a push config's write", e))
        };
        let mut put = aws_sdk_dynamodb::types::Put::builder()
            .table_name(self.table())
            .set_item(Some(item));
        if write == PushConfigWrite::New {
            put = put.condition_expression("attribute_not_exists(sk)");
        }
        let put = put.build().map_err(built)?;
        let written = self
            .client()
            .transact_write_items()
            .transact_items(self.not_deleted(session).map_err(built)?)
            .transact_items(
                aws_sdk_dynamodb::types::TransactWriteItem::builder()
                    .put(put)
                    .build(),
            )
            .send()
            .await;
        let Err(e) = written else {
            return Ok(PushConfigPut::Kept);
        };
        let reasons = cancellation_reasons(&e);
        if is_condition_reason(reasons.first()) {
            Ok(PushConfigPut::Deleted)
        } else if is_condition_reason(reasons.get(1)) {
            Ok(PushConfigPut::Exists)
        } else {
            Err(store_error("keeping a push config", e))
        }
    }

    /// Deletes push config `id` of task `task_turn`; whether there was one.
    pub async fn delete_push_config(
        &self,
        session: &SessionId,
        task_turn: &TurnId,
        id: &str,
    ) -> Result<bool, StoreError> {
        let out = self
            .client()
            .delete_item()
            .table_name(self.table())
            .set_key(Some(key(session, task_turn, id)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| store_error("deleting a push config", e))?;
        Ok(out.attributes().is_some())
    }

    /// Counts one more failed delivery to push config `id`; once `drop_after` have failed in a
    /// row the config is deleted. Whether it was.
    pub async fn push_failed(
        &self,
        session: &SessionId,
        task_turn: &TurnId,
        id: &str,
        drop_after: u64,
    ) -> Result<bool, StoreError> {
        let out = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(key(session, task_turn, id)))
            .update_expression("ADD #failures :one")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_names("#failures", "failures")
            .expression_attribute_values(":one", n(1))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
            .send()
            .await;
        let failures = match out {
            Ok(out) => out.attributes().and_then(|a| get_n(a, "failures")).unwrap_or(0),
            // Deleted meanwhile: nothing left to count against.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                return Ok(false);
            }
            Err(e) => return Err(store_error("counting a failed push", e)),
        };
        if failures < drop_after {
            return Ok(false);
        }
        // Only the config that failed so: one set again meanwhile starts its count anew.
        let dropped = self
            .client()
            .delete_item()
            .table_name(self.table())
            .set_key(Some(key(session, task_turn, id)))
            .condition_expression("#failures >= :most")
            .expression_attribute_names("#failures", "failures")
            .expression_attribute_values(":most", n(drop_after))
            .send()
            .await;
        match dropped {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(store_error("dropping a failing push config", e)),
        }
    }

    /// Push config `id` took a delivery: its count of failures starts again (written only where
    /// it had any).
    pub async fn push_delivered(
        &self,
        session: &SessionId,
        task_turn: &TurnId,
        id: &str,
    ) -> Result<(), StoreError> {
        let out = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(key(session, task_turn, id)))
            .update_expression("SET #failures = :zero")
            .condition_expression("#failures > :zero")
            .expression_attribute_names("#failures", "failures")
            .expression_attribute_values(":zero", n(0))
            .send()
            .await;
        match out {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(store_error("clearing a push's failures", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tasks_configs_are_its_own_whatever_its_turn_id_holds() {
        let turn = TurnId::new("t").unwrap();
        assert_eq!(config_id("push#t#c-1", &turn), Some("c-1"));
        assert_eq!(config_id("push#t#x#c-1", &turn), None);
        assert_eq!(config_id("push#t#", &turn), None);
        assert_eq!(config_id("push#tt#c", &turn), None);
    }
}

//! A2A's push notification configs: `CreateTaskPushNotificationConfig` (or `SendMessage`'s
//! `configuration.taskPushNotificationConfig`), `GetTaskPushNotificationConfig`,
//! `ListTaskPushNotificationConfigs`, `DeleteTaskPushNotificationConfig`. A config is checked
//! ([`PushConfig::check`]) and kept in the table beside the task's conversation, where the worker
//! that runs the task's turn reads it and pushes ([`agent_worker_runtime::a2a_push`]). Each call
//! checks that the task is the person's before it reads or writes anything: another person's
//! task does not exist for them. Where the workers do not push (`A2A_PUSH=off`, or no table),
//! every call is refused as not supported, and the card says so.

use serde::Deserialize;
use serde_json::{Value, json};

use super::Call;
use super::rpc::{self, RpcError};
use crate::ContainerHost;
use agent_worker_aws::dynamo::{DynamoStore, PushConfigPut, PushConfigWrite, StoredPushConfig};
use agent_worker_core::session::{SessionId, StoreError, TurnId};
use agent_worker_runtime::a2a_push::{MAX_CONFIGS_PER_TASK, PushConfig, PushPolicy};

/// The policy and the table of a host whose workers push; `None` where they do not.
pub(super) fn pushes(host: &ContainerHost) -> Option<(PushPolicy, &DynamoStore)> {
    Some((host.config().a2a_push?, host.table()?))
}

/// `Get…` and `Delete…`'s params (by their JSON names, or their proto field names, which A2A's
/// JSON, protobuf's, takes too).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigParams {
    #[serde(alias = "task_id")]
    task_id: String,
    id: String,
}

/// `List…`'s params: a page of at most `page_size` configs after the one `page_token` names.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListParams {
    #[serde(alias = "task_id")]
    task_id: String,
    #[serde(default, alias = "page_size")]
    page_size: Option<i64>,
    #[serde(default, alias = "page_token")]
    page_token: Option<String>,
}

impl Call<'_> {
    fn pushes(&self) -> Result<(PushPolicy, &DynamoStore), RpcError> {
        pushes(self.host).ok_or_else(RpcError::push_not_supported)
    }

    /// `CreateTaskPushNotificationConfig`: the config as kept.
    pub(super) async fn create_push(&self, params: Value) -> Result<Value, RpcError> {
        let (policy, store) = self.pushes()?;
        let config: PushConfig = rpc::params(params)?;
        if config.task_id.is_empty() {
            return Err(RpcError::invalid_params("taskId is required"));
        }
        let checked = checked(config, policy)?;
        let (session, first) = self.owned_task(&checked.task_id).await?;
        keep(store, &session, &first, &checked, PushConfigWrite::Replace).await?;
        Ok(json!(checked))
    }

    /// The config `SendMessage` carries for task `task`, checked before anything is written
    /// ([`keep_sent_push`](Self::keep_sent_push) keeps it once the task is the person's); one
    /// without an id is named by message `message_id`, so the message sent again adds none.
    pub(super) fn sent_push(
        &self,
        config: Option<PushConfig>,
        task: &str,
        message_id: &str,
    ) -> Result<Option<PushConfig>, RpcError> {
        let Some(mut config) = config else {
            return Ok(None);
        };
        let (policy, _) = self.pushes()?;
        task.clone_into(&mut config.task_id);
        if config.id.is_empty() {
            use sha2::Digest as _;
            let digest = sha2::Sha256::digest(message_id.as_bytes());
            let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
            config.id = format!("message-{hex}");
        }
        checked(config, policy).map(Some)
    }

    /// Keeps a config [`sent_push`](Self::sent_push) checked, for task `first` of `session`,
    /// which is the person's: answers the config this message added (to take back should the
    /// message be refused after all), none where the task had it already. One of the same id
    /// that says otherwise is refused: a message replaces no webhook.
    pub(super) async fn keep_sent_push<'a>(
        &self,
        config: Option<&'a PushConfig>,
        session: &SessionId,
        first: &TurnId,
    ) -> Result<Option<&'a PushConfig>, RpcError> {
        let Some(config) = config else {
            return Ok(None);
        };
        let (_, store) = self.pushes()?;
        match keep(store, session, first, config, PushConfigWrite::New).await? {
            Kept::Added => Ok(Some(config)),
            Kept::There => {
                let kept = store.push_configs(session, first).await.map_err(failed)?;
                let same = kept.iter().any(|c| {
                    c.id == config.id
                        && serde_json::from_str::<PushConfig>(&c.config).ok().as_ref() == Some(config)
                });
                if same {
                    Ok(None)
                } else {
                    Err(RpcError::invalid_params(format!(
                        "task {} has a push config {} already: a message adds a webhook, never replaces one (CreateTaskPushNotificationConfig does)",
                        config.task_id, config.id
                    )))
                }
            }
        }
    }

    /// Takes back a config [`keep_sent_push`](Self::keep_sent_push) kept for a message that was
    /// then refused: a refusal keeps nothing.
    pub(super) async fn unkeep_sent_push(
        &self,
        config: Option<&PushConfig>,
        session: &SessionId,
        first: &TurnId,
    ) {
        let (Some(config), Ok((_, store))) = (config, self.pushes()) else {
            return;
        };
        if let Err(e) = store.delete_push_config(session, first, &config.id).await {
            tracing::warn!(error = %agent_worker_contract::ErrorChain(&e), task = %config.task_id, "a refused message's push config cannot be taken back");
        }
    }

    /// The configs of task `task_id`, which is the person's, as kept.
    async fn kept(&self, task_id: &str) -> Result<Vec<(StoredPushConfig, Value)>, RpcError> {
        let (_, store) = self.pushes()?;
        let (session, first) = self.owned_task(task_id).await?;
        let kept = store.push_configs(&session, &first).await.map_err(failed)?;
        Ok(kept
            .into_iter()
            .filter_map(|stored| match serde_json::from_str(&stored.config) {
                Ok(shown) => Some((stored, shown)),
                Err(e) => {
                    tracing::warn!(error = %e, task = task_id, config = %stored.id, "a kept push config does not decode; not shown");
                    None
                }
            })
            .collect())
    }

    /// `GetTaskPushNotificationConfig`.
    pub(super) async fn get_push(&self, params: Value) -> Result<Value, RpcError> {
        let ConfigParams { task_id, id } = rpc::params(params)?;
        self.kept(&task_id)
            .await?
            .into_iter()
            .find(|(stored, _)| stored.id == id)
            .map(|(_, shown)| shown)
            .ok_or_else(|| RpcError::task_not_found_saying(format!("task {task_id} has no push config {id}")))
    }

    /// `ListTaskPushNotificationConfigs`: in the order of their ids, a page at a time.
    pub(super) async fn list_push(&self, params: Value) -> Result<Value, RpcError> {
        let ListParams {
            task_id,
            page_size,
            page_token,
        } = rpc::params(params)?;
        let size = match page_size {
            None | Some(0) => MAX_CONFIGS_PER_TASK,
            Some(n) => {
                usize::try_from(n).map_err(|_| RpcError::invalid_params("pageSize must not be negative"))?
            }
        };
        let kept = self.kept(&task_id).await?;
        let after = page_token.filter(|t| !t.is_empty());
        let rest: Vec<(StoredPushConfig, Value)> = kept
            .into_iter()
            .filter(|(stored, _)| {
                after
                    .as_ref()
                    .is_none_or(|after| stored.id.as_str() > after.as_str())
            })
            .collect();
        let more = rest.len() > size;
        let page: Vec<(StoredPushConfig, Value)> = rest.into_iter().take(size).collect();
        let next = match page.last() {
            Some((last, _)) if more => last.id.clone(),
            _ => String::new(),
        };
        let configs: Vec<Value> = page.into_iter().map(|(_, shown)| shown).collect();
        Ok(json!({ "configs": configs, "nextPageToken": next }))
    }

    /// `DeleteTaskPushNotificationConfig`: nothing to say, whether there was one or not.
    pub(super) async fn delete_push(&self, params: Value) -> Result<Value, RpcError> {
        let (_, store) = self.pushes()?;
        let ConfigParams { task_id, id } = rpc::params(params)?;
        let (session, first) = self.owned_task(&task_id).await?;
        store
            .delete_push_config(&session, &first, &id)
            .await
            .map_err(failed)?;
        Ok(json!({}))
    }
}

/// `config` checked under `policy`, named where the caller did not name it.
fn checked(mut config: PushConfig, policy: PushPolicy) -> Result<PushConfig, RpcError> {
    if config.id.is_empty() {
        config.id = uuid::Uuid::new_v4().to_string();
    }
    config
        .check(policy)
        .map_err(|e| RpcError::invalid_params(format!("the push config's {e}")))?;
    Ok(config)
}

/// What [`keep`] did.
enum Kept {
    /// The config was written.
    Added,
    /// One of its id was there, and stays ([`PushConfigWrite::New`]).
    There,
}

/// Keeps `config` for task `first` of `session`, as `write` says.
async fn keep(
    store: &DynamoStore,
    session: &SessionId,
    first: &TurnId,
    config: &PushConfig,
    write: PushConfigWrite,
) -> Result<Kept, RpcError> {
    let json = serde_json::to_string(config).map_err(|e| RpcError::internal(e.to_string()))?;
    match store
        .put_push_config(session, first, &config.id, &json, MAX_CONFIGS_PER_TASK, write)
        .await
        .map_err(failed)?
    {
        PushConfigPut::Kept => Ok(Kept::Added),
        PushConfigPut::Exists => Ok(Kept::There),
        PushConfigPut::Full => Err(RpcError::invalid_params(format!(
            "task {} has {MAX_CONFIGS_PER_TASK} push configs, the most it keeps; delete one first",
            config.task_id
        ))),
        PushConfigPut::Deleted => Err(RpcError::task_not_found()),
    }
}

/// A store's failure, as a call's.
pub(super) fn failed(e: StoreError) -> RpcError {
    RpcError::internal(e.client_message())
}

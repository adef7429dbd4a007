//! [`DynamoTaskStore`]: tasks, steps and artifact records in the session table, so that several
//! replicas (or Lambda instances) serve the same tasks.
//!
//! Items, beside the sessions' (see [`keys`](crate::session::dynamo::keys)):
//! a task is `aptasks` / `task#<taskId>`; its steps are `aptask#<taskId>` / `step#<stepId>`; its
//! artifact records are `aptask#<taskId>` / `artifact#<ms>#<n>#<artifactId>`. Each item holds its
//! wire JSON in `doc` and the table's TTL attribute. Task and step ids are UUIDv7, so sort keys
//! list them oldest first; totals are counted by the same queries, so they stay right as items
//! expire. Reads are strongly consistent. A page deep in a long list reads the items before it.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, Select, TransactWriteItem};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::store::{Page, TaskStore, TaskStoreError};
use super::types::{Artifact, PageRequest, Pagination, Step, Task};
use crate::clock::now_ms;
use crate::session::DynamoStore;
use crate::session::dynamo::keys::{
    AP_ARTIFACT_PREFIX, AP_STEP_PREFIX, AP_TASK_PREFIX, AP_TASKS_PK, EXPIRES_AT, PK, SK, ap_artifact_sk,
    ap_task_pk,
};
use crate::session::dynamo::store_error;

/// The attribute that holds an item's wire JSON.
const DOC: &str = "doc";

/// The most artifact records one step may add (a transaction holds 100 items).
pub const MAX_STEP_ARTIFACTS: usize = 98;

/// Agent Protocol tasks in a [`DynamoStore`]'s table. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DynamoTaskStore {
    store: DynamoStore,
}

impl DynamoTaskStore {
    /// Tasks in `store`'s table.
    pub fn new(store: DynamoStore) -> Self {
        Self { store }
    }

    fn item(
        &self,
        pk: String,
        sk: String,
        doc: &impl Serialize,
    ) -> Result<HashMap<String, AttributeValue>, TaskStoreError> {
        let json = serde_json::to_string(doc)
            .map_err(|e| TaskStoreError::Unavailable(format!("encoding an item: {e}")))?;
        Ok(HashMap::from([
            (PK.to_owned(), AttributeValue::S(pk)),
            (SK.to_owned(), AttributeValue::S(sk)),
            (DOC.to_owned(), AttributeValue::S(json)),
            (
                EXPIRES_AT.to_owned(),
                AttributeValue::N(self.store.expires_at().to_string()),
            ),
        ]))
    }

    fn put(&self, item: HashMap<String, AttributeValue>) -> Result<TransactWriteItem, TaskStoreError> {
        let put = Put::builder()
            .table_name(self.store.table())
            .set_item(Some(item))
            .build()
            .map_err(|e| TaskStoreError::Unavailable(e.to_string()))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    fn task_exists(&self, task_id: &str) -> Result<TransactWriteItem, TaskStoreError> {
        let check = ConditionCheck::builder()
            .table_name(self.store.table())
            .key(PK, AttributeValue::S(AP_TASKS_PK.into()))
            .key(SK, AttributeValue::S(format!("{AP_TASK_PREFIX}{task_id}")))
            .condition_expression("attribute_exists(pk)")
            .build()
            .map_err(|e| TaskStoreError::Unavailable(e.to_string()))?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// Writes `items` in one transaction, the first being the check that the task exists.
    async fn transact(&self, task_id: &str, items: Vec<TransactWriteItem>) -> Result<(), TaskStoreError> {
        let result = self
            .store
            .client()
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                let task_missing = match e.as_service_error() {
                    Some(TransactWriteItemsError::TransactionCanceledException(canceled)) => {
                        canceled.cancellation_reasons().first().and_then(|r| r.code())
                            == Some("ConditionalCheckFailed")
                    }
                    _ => false,
                };
                if task_missing {
                    Err(TaskStoreError::NoTask(task_id.to_owned()))
                } else {
                    Err(unavailable(store_error("writing an Agent Protocol task", &e)))
                }
            }
        }
    }

    /// The items of partition `pk` whose sort key starts with `prefix`, from `skip`, at most
    /// `take` of them; and how many there are in all.
    async fn query_page<T: DeserializeOwned>(
        &self,
        pk: &str,
        prefix: &str,
        skip: usize,
        take: usize,
    ) -> Result<(Vec<T>, u64), TaskStoreError> {
        let query = |select: Select| {
            self.store
                .client()
                .query()
                .table_name(self.store.table())
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":pk", AttributeValue::S(pk.to_owned()))
                .expression_attribute_values(":prefix", AttributeValue::S(prefix.to_owned()))
                .consistent_read(true)
                .select(select)
        };
        let mut total = 0u64;
        let mut counts = query(Select::Count).into_paginator().send();
        while let Some(page) = counts.next().await {
            let page = page.map_err(|e| unavailable(store_error("counting Agent Protocol items", &e)))?;
            total += u64::try_from(page.count()).unwrap_or_default();
        }
        let mut items = Vec::new();
        if take > 0 && (skip as u64) < total {
            let mut pages = query(Select::AllAttributes).into_paginator().items().send();
            let mut index = 0usize;
            while let Some(item) = pages.next().await {
                let item = item.map_err(|e| unavailable(store_error("reading Agent Protocol items", &e)))?;
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

    async fn artifacts(&self, task_id: &str) -> Result<Vec<Artifact>, TaskStoreError> {
        let (artifacts, _) = self
            .query_page(&ap_task_pk(task_id), AP_ARTIFACT_PREFIX, 0, usize::MAX)
            .await?;
        Ok(artifacts)
    }

    async fn get<T: DeserializeOwned>(&self, pk: String, sk: String) -> Result<Option<T>, TaskStoreError> {
        let out = self
            .store
            .client()
            .get_item()
            .table_name(self.store.table())
            .key(PK, AttributeValue::S(pk))
            .key(SK, AttributeValue::S(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable(store_error("reading an Agent Protocol item", &e)))?;
        out.item().map(decode).transpose()
    }

    /// The task item and its artifact records, read together.
    async fn full_task(&self, mut task: Task) -> Result<Task, TaskStoreError> {
        task.artifacts = self.artifacts(&task.task_id).await?;
        Ok(task)
    }

    fn artifact_items(
        &self,
        task_id: &str,
        artifacts: &[Artifact],
    ) -> Result<Vec<TransactWriteItem>, TaskStoreError> {
        let at = now_ms();
        artifacts
            .iter()
            .enumerate()
            .map(|(n, artifact)| {
                self.put(self.item(
                    ap_task_pk(task_id),
                    ap_artifact_sk(at, n, &artifact.artifact_id),
                    artifact,
                )?)
            })
            .collect()
    }
}

fn unavailable(e: crate::session::StoreError) -> TaskStoreError {
    TaskStoreError::Unavailable(e.to_string())
}

fn decode<T: DeserializeOwned>(item: &HashMap<String, AttributeValue>) -> Result<T, TaskStoreError> {
    let doc = item
        .get(DOC)
        .and_then(|d| d.as_s().ok())
        .ok_or_else(|| TaskStoreError::Unavailable("an Agent Protocol item has no doc".into()))?;
    serde_json::from_str(doc)
        .map_err(|e| TaskStoreError::Unavailable(format!("an Agent Protocol item does not decode: {e}")))
}

fn pagination(request: PageRequest, total_items: u64) -> Pagination {
    Pagination {
        total_items,
        total_pages: total_items.div_ceil(u64::from(request.page_size.max(1))),
        current_page: request.current_page,
        page_size: request.page_size,
    }
}

fn window(request: PageRequest) -> (usize, usize) {
    let size = request.page_size.max(1) as usize;
    (
        (request.current_page.max(1) as usize - 1).saturating_mul(size),
        size,
    )
}

#[async_trait]
impl TaskStore for DynamoTaskStore {
    async fn create_task(&self, task: Task) -> Result<(), TaskStoreError> {
        let stored = Task {
            artifacts: Vec::new(),
            ..task
        };
        let item = self.item(
            AP_TASKS_PK.into(),
            format!("{AP_TASK_PREFIX}{}", stored.task_id),
            &stored,
        )?;
        self.store
            .client()
            .put_item()
            .table_name(self.store.table())
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await
            .map_err(|e| unavailable(store_error("storing an Agent Protocol task", &e)))?;
        Ok(())
    }

    async fn task(&self, task_id: &str) -> Result<Option<Task>, TaskStoreError> {
        match self
            .get::<Task>(AP_TASKS_PK.into(), format!("{AP_TASK_PREFIX}{task_id}"))
            .await?
        {
            Some(task) => Ok(Some(self.full_task(task).await?)),
            None => Ok(None),
        }
    }

    async fn tasks(&self, page: PageRequest) -> Result<Page<Task>, TaskStoreError> {
        let (skip, take) = window(page);
        let (tasks, total) = self
            .query_page::<Task>(AP_TASKS_PK, AP_TASK_PREFIX, skip, take)
            .await?;
        let items = futures_util::future::try_join_all(tasks.into_iter().map(|t| self.full_task(t))).await?;
        Ok(Page {
            items,
            pagination: pagination(page, total),
        })
    }

    async fn add_step(&self, step: Step) -> Result<(), TaskStoreError> {
        if step.artifacts.len() > MAX_STEP_ARTIFACTS {
            return Err(TaskStoreError::Unavailable(format!(
                "a step may add at most {MAX_STEP_ARTIFACTS} artifacts, not {}",
                step.artifacts.len()
            )));
        }
        let mut items = vec![self.task_exists(&step.task_id)?];
        items.push(self.put(self.item(
            ap_task_pk(&step.task_id),
            format!("{AP_STEP_PREFIX}{}", step.step_id),
            &step,
        )?)?);
        items.extend(self.artifact_items(&step.task_id, &step.artifacts)?);
        self.transact(&step.task_id, items).await
    }

    async fn step(&self, task_id: &str, step_id: &str) -> Result<Option<Step>, TaskStoreError> {
        self.get(ap_task_pk(task_id), format!("{AP_STEP_PREFIX}{step_id}"))
            .await
    }

    async fn steps(&self, task_id: &str, page: PageRequest) -> Result<Option<Page<Step>>, TaskStoreError> {
        if self
            .get::<Task>(AP_TASKS_PK.into(), format!("{AP_TASK_PREFIX}{task_id}"))
            .await?
            .is_none()
        {
            return Ok(None);
        }
        let (skip, take) = window(page);
        let (items, total) = self
            .query_page(&ap_task_pk(task_id), AP_STEP_PREFIX, skip, take)
            .await?;
        Ok(Some(Page {
            items,
            pagination: pagination(page, total),
        }))
    }

    async fn add_artifact(&self, task_id: &str, artifact: Artifact) -> Result<(), TaskStoreError> {
        let mut items = vec![self.task_exists(task_id)?];
        items.extend(self.artifact_items(task_id, std::slice::from_ref(&artifact))?);
        self.transact(task_id, items).await
    }
}

//! The table's definition, as `template.yaml` declares it: for local runs and tests.

use aws_sdk_dynamodb::error::ProvideErrorMetadata as _;

use super::DynamoStore;
use super::keys::{ACTIVE_TURN, ENDED_TURN, EXPIRES_AT, LAST_ACTIVE_AT, OWNER_INDEX, OWNER_KEY, PK, SK};
use super::sdk_error::{build_error, store_error};
use agent_worker_core::session::StoreError;

impl DynamoStore {
    /// Creates the table as `template.yaml` defines it (`pk`/`sk` strings, on-demand billing,
    /// TTL on `expiresAt`, the index of conversations by owner). A table that already exists
    /// gets the index if it lacks it, and is otherwise left as it is.
    pub async fn create_table(&self) -> Result<(), StoreError> {
        use aws_sdk_dynamodb::types::{BillingMode, KeyType, TimeToLiveSpecification};
        let index = owner_index()?;
        let created = self
            .client
            .create_table()
            .table_name(&self.config.table)
            .set_attribute_definitions(Some(attributes()?))
            .key_schema(key(PK, KeyType::Hash)?)
            .key_schema(key(SK, KeyType::Range)?)
            .global_secondary_indexes(index)
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match created {
            Ok(_) => {}
            Err(e) if e.code() == Some("ResourceInUseException") => return self.add_owner_index().await,
            Err(e) => return Err(store_error("creating the table", e)),
        }
        self.client
            .update_time_to_live()
            .table_name(&self.config.table)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .attribute_name(EXPIRES_AT)
                    .enabled(true)
                    .build()
                    .map_err(build_error)?,
            )
            .send()
            .await
            .map_err(|e| store_error("enabling the table's TTL", e))?;
        Ok(())
    }

    /// Adds the index of conversations by owner to a table made before it existed.
    async fn add_owner_index(&self) -> Result<(), StoreError> {
        use aws_sdk_dynamodb::types::{CreateGlobalSecondaryIndexAction, GlobalSecondaryIndexUpdate};
        let table = self
            .client
            .describe_table()
            .table_name(&self.config.table)
            .send()
            .await
            .map_err(|e| store_error("describing the table", e))?;
        let has_index = table
            .table()
            .map(|t| t.global_secondary_indexes())
            .unwrap_or_default()
            .iter()
            .any(|i| i.index_name() == Some(OWNER_INDEX));
        if has_index {
            return Ok(());
        }
        let index = owner_index()?;
        let create = CreateGlobalSecondaryIndexAction::builder()
            .index_name(OWNER_INDEX)
            .set_key_schema(Some(index.key_schema().to_vec()))
            .set_projection(index.projection().cloned())
            .build()
            .map_err(build_error)?;
        self.client
            .update_table()
            .table_name(&self.config.table)
            .set_attribute_definitions(Some(attributes()?))
            .global_secondary_index_updates(GlobalSecondaryIndexUpdate::builder().create(create).build())
            .send()
            .await
            .map_err(|e| store_error("adding the index of conversations by owner", e))?;
        tracing::info!(
            index = OWNER_INDEX,
            "added the index of conversations by owner to the table"
        );
        Ok(())
    }
}

fn key(
    name: &str,
    kind: aws_sdk_dynamodb::types::KeyType,
) -> Result<aws_sdk_dynamodb::types::KeySchemaElement, StoreError> {
    aws_sdk_dynamodb::types::KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .map_err(build_error)
}

/// The key attributes of the table and its index.
fn attributes() -> Result<Vec<aws_sdk_dynamodb::types::AttributeDefinition>, StoreError> {
    use aws_sdk_dynamodb::types::{AttributeDefinition, ScalarAttributeType as T};
    [(PK, T::S), (SK, T::S), (OWNER_KEY, T::S), (LAST_ACTIVE_AT, T::N)]
        .into_iter()
        .map(|(name, kind)| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(kind)
                .build()
                .map_err(build_error)
        })
        .collect()
}

/// The index of conversations by owner, most recent first: it carries what a list shows.
fn owner_index() -> Result<aws_sdk_dynamodb::types::GlobalSecondaryIndex, StoreError> {
    use aws_sdk_dynamodb::types::{GlobalSecondaryIndex, KeyType, Projection, ProjectionType};
    GlobalSecondaryIndex::builder()
        .index_name(OWNER_INDEX)
        .key_schema(key(OWNER_KEY, KeyType::Hash)?)
        .key_schema(key(LAST_ACTIVE_AT, KeyType::Range)?)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::Include)
                .set_non_key_attributes(Some(
                    ["title", "preview", "turns", ACTIVE_TURN, ENDED_TURN]
                        .map(str::to_owned)
                        .to_vec(),
                ))
                .build(),
        )
        .build()
        .map_err(build_error)
}

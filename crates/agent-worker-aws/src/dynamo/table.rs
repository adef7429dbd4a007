//! The table's definition, as `template.yaml` declares it: for local runs and tests.

use agent_worker_core::Failure;
use aws_sdk_dynamodb::error::ProvideErrorMetadata as _;

use super::DynamoStore;
use super::keys::{EXPIRES_AT, PK, SK};
use super::sdk_error::store_error;
use agent_worker_core::session::StoreError;

impl DynamoStore {
    /// Creates the table as `template.yaml` defines it (`pk`/`sk` strings, on-demand billing,
    /// TTL on `expiresAt`). A table that already exists is left as it is.
    pub async fn create_table(&self) -> Result<(), StoreError> {
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
            TimeToLiveSpecification,
        };
        let attribute = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(|e| StoreError::Backend(Failure::caused_by(e.to_string(), e)))
        };
        let key = |name: &str, kind: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kind)
                .build()
                .map_err(|e| StoreError::Backend(Failure::caused_by(e.to_string(), e)))
        };
        let created = self
            .client
            .create_table()
            .table_name(&self.config.table)
            .attribute_definitions(attribute(PK)?)
            .attribute_definitions(attribute(SK)?)
            .key_schema(key(PK, KeyType::Hash)?)
            .key_schema(key(SK, KeyType::Range)?)
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match created {
            Ok(_) => {}
            Err(e) if e.code() == Some("ResourceInUseException") => return Ok(()),
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
                    .map_err(|e| StoreError::Backend(Failure::caused_by(e.to_string(), e)))?,
            )
            .send()
            .await
            .map_err(|e| store_error("enabling the table's TTL", e))?;
        Ok(())
    }
}

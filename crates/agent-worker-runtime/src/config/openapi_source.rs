//! The configuration file's OpenAPI documents, as it writes them (`openapi:`).

use serde::Deserialize;

use agent_worker_core::engine::tools::openapi::{Audience, EventDeclarations};

use super::{AssertionConfig, TokenHeader};

/// One OpenAPI document.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OpenApiSource {
    /// Where the document is: a path (beside the configuration file), `https://…` or
    /// `s3://bucket/key`.
    pub document: String,
    /// Where calls go.
    pub base_url: String,
    /// Which operations become tools.
    #[serde(default)]
    pub audience: AudienceName,
    /// How a call acts as the person.
    pub act_as: ActAsConfig,
    /// The product's event declarations, for operations that start a job and end with an event
    /// (`x-async-binding`).
    pub events: Option<EventDeclarations>,
}

/// `agents` or `pa`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AudienceName {
    /// Every exposed operation.
    #[default]
    Agents,
    /// Only operations flagged `pa: true`.
    Pa,
}

/// How the product's API is told who a call is for.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ActAsConfig {
    /// The payload's `userToken`, sent as this header.
    pub token: Option<TokenHeader>,
    /// The person's `userId`, sent as this header.
    pub user_id_header: Option<String>,
    /// Their `accountId`, sent as this header.
    pub account_id_header: Option<String>,
    /// A signed assertion of the person, the account and the turn, sent as this header.
    pub assertion: Option<AssertionConfig>,
}

impl From<AudienceName> for Audience {
    fn from(name: AudienceName) -> Self {
        match name {
            AudienceName::Agents => Audience::Agents,
            AudienceName::Pa => Audience::Pa,
        }
    }
}

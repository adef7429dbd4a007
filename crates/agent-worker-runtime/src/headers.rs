//! Headers a configuration sets on the calls tools make: a value written in the file, one read
//! from a secret store at start-up, or the person's token for the turn.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::Deserialize;

/// Reads secrets: where assertion keys and secret header values come from. An id is a Secrets
/// Manager secret (its ARN or name), or an SSM parameter (`ssm:<name>`, or its ARN).
#[async_trait]
pub trait SecretSource: Send + Sync {
    /// The text of secret `id`.
    async fn secret(&self, id: &str) -> Result<String, SecretError>;
}

/// Why a secret could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The AWS store failed or refused (no such secret, access denied, no answer in time).
    #[error(transparent)]
    Aws(#[from] super::AwsError),
    /// It holds no text: an SSM parameter without a value, or a binary secret.
    #[error("{0}")]
    NoText(&'static str),
    /// Another store's failure.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// A header that carries the person's token (the payload's `userToken`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TokenHeader {
    /// The header, such as `Authorization`.
    pub header: String,
    /// What goes before the token, such as `Bearer `.
    #[serde(default)]
    pub prefix: String,
}

/// A header's value as the file gives it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum HeaderValue {
    /// Written in the file.
    Text(String),
    /// Read from a secret store at start-up (never logged).
    Secret {
        /// The secret's id (see [`SecretSource`]).
        secret: String,
    },
}

/// Why a header's value could not be had; each names the header and the secret.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// The value is a secret, and there is no store to read it from.
    #[error("headers.{header}: no secret store to read {secret} from")]
    NoStore {
        /// The header.
        header: String,
        /// The secret's id.
        secret: String,
    },
    /// The secret could not be read.
    #[error("headers.{header}: cannot read {secret}")]
    Read {
        /// The header.
        header: String,
        /// The secret's id.
        secret: String,
        /// Why.
        #[source]
        cause: SecretError,
    },
}

/// Whether `name` can name a configured source of tools (an MCP server, a remote agent) within a
/// tool's name: letters, digits, `_` and `-`, at least one.
pub fn is_source_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Every header's value, secrets read through `secrets`; a problem names the header.
pub async fn resolve(
    headers: &BTreeMap<String, HeaderValue>,
    secrets: Option<&dyn SecretSource>,
) -> Result<Vec<(String, String)>, HeaderError> {
    let mut values = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let text = match value {
            HeaderValue::Text(text) => text.clone(),
            HeaderValue::Secret { secret } => {
                let source = secrets.ok_or_else(|| HeaderError::NoStore {
                    header: name.clone(),
                    secret: secret.clone(),
                })?;
                source.secret(secret).await.map_err(|cause| HeaderError::Read {
                    header: name.clone(),
                    secret: secret.clone(),
                    cause,
                })?
            }
        };
        values.push((name.clone(), text));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Vault;

    #[async_trait]
    impl SecretSource for Vault {
        async fn secret(&self, id: &str) -> Result<String, SecretError> {
            match id {
                "api-key" => Ok("k-1".into()),
                _ => Err(SecretError::Other("no such secret".into())),
            }
        }
    }

    #[tokio::test]
    async fn values_are_written_or_read_from_secrets_and_a_problem_names_the_header() {
        let headers: BTreeMap<String, HeaderValue> =
            serde_yaml::from_str("X-Plain: one\nX-Key: { secret: api-key }\n").unwrap();
        assert_eq!(
            resolve(&headers, Some(&Vault)).await.unwrap(),
            [
                ("X-Key".to_owned(), "k-1".to_owned()),
                ("X-Plain".into(), "one".into())
            ]
        );
        let missing: BTreeMap<String, HeaderValue> =
            serde_yaml::from_str("X-Key: { secret: other }\n").unwrap();
        let why = resolve(&missing, Some(&Vault)).await.unwrap_err();
        assert!(matches!(why, HeaderError::Read { .. }), "{why:?}");
        assert!(
            why.to_string().starts_with("headers.X-Key: cannot read other"),
            "{why}"
        );
        assert!(
            resolve(&missing, None)
                .await
                .unwrap_err()
                .to_string()
                .contains("no secret store")
        );
    }
}

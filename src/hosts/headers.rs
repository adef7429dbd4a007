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
    async fn secret(&self, id: &str) -> Result<String, String>;
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

/// Every header's value, secrets read through `secrets`; a problem names the header.
pub async fn resolve(
    headers: &BTreeMap<String, HeaderValue>,
    secrets: Option<&dyn SecretSource>,
) -> Result<Vec<(String, String)>, String> {
    let mut values = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let text = match value {
            HeaderValue::Text(text) => text.clone(),
            HeaderValue::Secret { secret } => {
                let source = secrets
                    .ok_or_else(|| format!("headers.{name}: no secret store to read {secret} from"))?;
                source
                    .secret(secret)
                    .await
                    .map_err(|e| format!("headers.{name}: cannot read {secret}: {e}"))?
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
        async fn secret(&self, id: &str) -> Result<String, String> {
            match id {
                "api-key" => Ok("k-1".into()),
                _ => Err("no such secret".into()),
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
        assert!(why.starts_with("headers.X-Key: cannot read other"), "{why}");
        assert!(
            resolve(&missing, None)
                .await
                .unwrap_err()
                .contains("no secret store")
        );
    }
}

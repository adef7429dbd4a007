//! Settings kept in AWS Secrets Manager: a binary reads them once at start-up and hands their
//! values to [`WorkerSettings`](super::WorkerSettings) as if they had been set directly.
//!
//! For each setting in [`SECRET_SETTINGS`], `<NAME>_SECRET_ARN` names the secret whose string is
//! `<NAME>`'s value, so the key never appears in the function's configuration. Setting both
//! `<NAME>` and `<NAME>_SECRET_ARN` is refused: one of them would be silently ignored.

use std::collections::HashMap;

use super::{SettingsError, sdk_error_text};

/// The settings that may come from Secrets Manager.
pub const SECRET_SETTINGS: [&str; 2] = ["APPROVAL_SECRET", "EMIT_API_KEY"];

/// Secrets Manager as the configuration's [`SecretSource`](super::config::SecretSource): where
/// the keys of signed assertions are read from.
#[derive(Debug, Clone)]
pub struct SecretsManager(pub aws_sdk_secretsmanager::Client);

#[async_trait::async_trait]
impl super::config::SecretSource for SecretsManager {
    async fn secret(&self, id: &str) -> Result<String, String> {
        let answer = self
            .0
            .get_secret_value()
            .secret_id(id)
            .send()
            .await
            .map_err(|e| sdk_error_text(&e))?;
        answer
            .secret_string
            .ok_or_else(|| "it holds no string (a binary secret cannot be used)".to_owned())
    }
}

/// The values of the settings whose `<NAME>_SECRET_ARN` is set, read from Secrets Manager on
/// the client `secrets` makes (made only when at least one is set). `get` answers a setting by
/// name, as for [`WorkerSettings::from_lookup`](super::WorkerSettings::from_lookup).
pub async fn read_secret_settings(
    get: impl Fn(&str) -> Option<String>,
    secrets: impl FnOnce() -> aws_sdk_secretsmanager::Client,
) -> Result<HashMap<String, String>, SettingsError> {
    let set = |name: &str| get(name).filter(|v| !v.trim().is_empty());
    let mut wanted = Vec::new();
    for name in SECRET_SETTINGS {
        let arn_name = format!("{name}_SECRET_ARN");
        if let Some(arn) = set(&arn_name) {
            if set(name).is_some() {
                return Err(SettingsError {
                    name: arn_name,
                    problem: format!("is set, and so is {name}: set one of them"),
                });
            }
            wanted.push((name, arn_name, arn));
        }
    }
    let mut values = HashMap::new();
    if wanted.is_empty() {
        return Ok(values);
    }
    let client = secrets();
    for (name, arn_name, arn) in wanted {
        let answer = client
            .get_secret_value()
            .secret_id(&arn)
            .send()
            .await
            .map_err(|e| SettingsError {
                name: arn_name.clone(),
                problem: format!("cannot read the secret {arn}: {}", sdk_error_text(&e)),
            })?;
        let value = answer.secret_string.ok_or_else(|| SettingsError {
            name: arn_name.clone(),
            problem: format!("the secret {arn} holds no string (a binary secret cannot be used)"),
        })?;
        values.insert(name.to_owned(), value);
    }
    Ok(values)
}

//! Settings kept in AWS Secrets Manager: a binary reads them once at start-up and hands their
//! values to [`WorkerSettings`](super::WorkerSettings) as if they had been set directly.
//!
//! For each setting in [`SECRET_SETTINGS`], a second one (`<NAME>_SECRET_ARN`, and
//! `APPROVAL_SECRET_ARN` for `APPROVAL_SECRET`) names the secret whose string is `<NAME>`'s
//! value, so the key never appears in the function's configuration. Setting both is refused:
//! one of them would be silently ignored.

use std::collections::HashMap;
use std::time::Duration;

use aws_smithy_types::timeout::TimeoutConfig;

use super::headers::SecretError;
use super::{AwsError, SettingsError};

/// How long one read of a secret or a parameter may take, by default: a store that never answers
/// fails start-up with an error naming the secret instead of holding it forever.
pub const SECRET_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Every call of a client ends within `timeout`, its tries included.
fn within(timeout: Duration) -> TimeoutConfig {
    TimeoutConfig::builder().operation_timeout(timeout).build()
}

/// A Secrets Manager client on `aws` whose every call ends within `timeout`.
pub fn secrets_manager_client(
    aws: &aws_config::SdkConfig,
    timeout: Duration,
) -> aws_sdk_secretsmanager::Client {
    let config = aws_sdk_secretsmanager::config::Builder::from(aws)
        .timeout_config(within(timeout))
        .build();
    aws_sdk_secretsmanager::Client::from_conf(config)
}

/// An SSM client on `aws` whose every call ends within `timeout`.
pub fn ssm_client(aws: &aws_config::SdkConfig, timeout: Duration) -> aws_sdk_ssm::Client {
    let config = aws_sdk_ssm::config::Builder::from(aws)
        .timeout_config(within(timeout))
        .build();
    aws_sdk_ssm::Client::from_conf(config)
}

/// The settings that may come from Secrets Manager (or SSM), each with the setting that names
/// its secret.
pub const SECRET_SETTINGS: [(&str, &str); 6] = [
    ("AGENT_WORKER_API_KEY", "AGENT_WORKER_API_KEY_SECRET_ARN"),
    ("APPROVAL_SECRET", "APPROVAL_SECRET_ARN"),
    ("EMIT_API_KEY", "EMIT_API_KEY_SECRET_ARN"),
    ("ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY_SECRET_ARN"),
    ("OPENAI_API_KEY", "OPENAI_API_KEY_SECRET_ARN"),
    ("AGENT_CARD_SIGNING_KEY", "AGENT_CARD_SIGNING_KEY_SECRET_ARN"),
];

/// Secrets Manager and SSM Parameter Store as the configuration's
/// [`SecretSource`](super::headers::SecretSource): where the keys of signed assertions and secret
/// header values are read from. An id `ssm:<name>` or an SSM parameter's ARN is read from SSM
/// (decrypted: a `SecureString` is the usual kind); any other id names a Secrets Manager secret.
#[derive(Debug, Clone)]
pub struct AwsSecrets {
    secrets_manager: aws_sdk_secretsmanager::Client,
    ssm: aws_sdk_ssm::Client,
}

impl AwsSecrets {
    /// Both stores, on `aws`, each read within [`SECRET_READ_TIMEOUT`].
    pub fn new(aws: &aws_config::SdkConfig) -> Self {
        Self::from_clients(
            secrets_manager_client(aws, SECRET_READ_TIMEOUT),
            ssm_client(aws, SECRET_READ_TIMEOUT),
        )
    }

    /// Both stores, on the clients given.
    pub fn from_clients(secrets_manager: aws_sdk_secretsmanager::Client, ssm: aws_sdk_ssm::Client) -> Self {
        Self { secrets_manager, ssm }
    }
}

/// The SSM parameter `id` names, if it names one.
fn ssm_parameter(id: &str) -> Option<&str> {
    let arn = id.starts_with("arn:") && id.split(':').nth(2) == Some("ssm");
    id.strip_prefix("ssm:").or(arn.then_some(id))
}

#[async_trait::async_trait]
impl super::headers::SecretSource for AwsSecrets {
    async fn secret(&self, id: &str) -> Result<String, SecretError> {
        if let Some(name) = ssm_parameter(id) {
            let answer = self
                .ssm
                .get_parameter()
                .name(name)
                .with_decryption(true)
                .send()
                .await
                .map_err(AwsError::new)?;
            return answer
                .parameter
                .and_then(|p| p.value)
                .ok_or(SecretError::NoText("the parameter has no value"));
        }
        let answer = self
            .secrets_manager
            .get_secret_value()
            .secret_id(id)
            .send()
            .await
            .map_err(AwsError::new)?;
        answer.secret_string.ok_or(SecretError::NoText(
            "it holds no string (a binary secret cannot be used)",
        ))
    }
}

/// The values of the settings whose secret's setting ([`SECRET_SETTINGS`]) is set, read from
/// the stores `secrets` makes (made only when at least one is set): a Secrets Manager secret, or
/// an SSM parameter (`ssm:<name>` or its ARN). `get` answers a setting by name, as for
/// [`WorkerSettings::from_lookup`](super::WorkerSettings::from_lookup).
pub async fn read_secret_settings<S: super::headers::SecretSource>(
    get: impl Fn(&str) -> Option<String>,
    secrets: impl FnOnce() -> S,
) -> Result<HashMap<String, String>, SettingsError> {
    let set = |name: &str| get(name).filter(|v| !v.trim().is_empty());
    let mut wanted = Vec::new();
    for (name, arn_name) in SECRET_SETTINGS {
        if let Some(arn) = set(arn_name) {
            if set(name).is_some() {
                return Err(SettingsError::new(
                    arn_name,
                    format!("is set, and so is {name}: set one of them"),
                ));
            }
            wanted.push((name, arn_name, arn));
        }
    }
    let mut values = HashMap::new();
    if wanted.is_empty() {
        return Ok(values);
    }
    let store = secrets();
    for (name, arn_name, arn) in wanted {
        let value = store
            .secret(&arn)
            .await
            .map_err(|e| SettingsError::caused_by(arn_name, format!("cannot read the secret {arn}"), e))?;
        values.insert(name.to_owned(), value);
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::headers::{SecretError, SecretSource};
    use super::{SECRET_SETTINGS, read_secret_settings, ssm_parameter};

    /// Secrets by id; an unknown id fails.
    struct Store(HashMap<&'static str, &'static str>);

    #[async_trait::async_trait]
    impl SecretSource for Store {
        async fn secret(&self, id: &str) -> Result<String, SecretError> {
            self.0
                .get(id)
                .map(|v| (*v).to_owned())
                .ok_or(SecretError::NoText("no such secret"))
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn each_key_is_read_from_the_secret_its_setting_names() {
        let store = || Store(HashMap::from([("arn:approval", "a-key"), ("arn:emit", "e-key")]));
        let env = HashMap::from([
            ("APPROVAL_SECRET_ARN", "arn:approval"),
            ("EMIT_API_KEY_SECRET_ARN", "arn:emit"),
        ]);
        let values = read_secret_settings(|name| env.get(name).map(|v| (*v).to_owned()), store)
            .await
            .unwrap();
        assert_eq!(values.get("APPROVAL_SECRET").map(String::as_str), Some("a-key"));
        assert_eq!(values.get("EMIT_API_KEY").map(String::as_str), Some("e-key"));
        assert_eq!(values.len(), 2);
        let both = HashMap::from([("APPROVAL_SECRET_ARN", "arn:approval"), ("APPROVAL_SECRET", "k")]);
        let refused = read_secret_settings(|name| both.get(name).map(|v| (*v).to_owned()), store)
            .await
            .unwrap_err();
        assert_eq!(refused.name, "APPROVAL_SECRET_ARN");
        for (name, arn_name) in SECRET_SETTINGS {
            assert!(
                arn_name.starts_with(name) && arn_name.ends_with("_ARN"),
                "{arn_name}"
            );
        }
    }

    #[test]
    fn ssm_ids_are_told_from_secrets_manager_ids() {
        assert_eq!(ssm_parameter("ssm:/desk/key"), Some("/desk/key"));
        let arn = "arn:aws:ssm:eu-west-1:123456789012:parameter/desk/key";
        assert_eq!(ssm_parameter(arn), Some(arn));
        let china = "arn:aws-cn:ssm:cn-north-1:123456789012:parameter/k";
        assert_eq!(ssm_parameter(china), Some(china));
        assert_eq!(ssm_parameter("arn:aws:secretsmanager:eu-west-1:1:secret:k"), None);
        assert_eq!(ssm_parameter("desk-key"), None);
    }
}

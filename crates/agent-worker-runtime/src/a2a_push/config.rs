//! A push config as A2A sends one (`TaskPushNotificationConfig`), checked before it is kept.

use reqwest::header::HeaderValue;
use serde::{Deserialize, Serialize};

use super::address::check_url;
use super::{MAX_CONFIG_ID_BYTES, MAX_SECRET_BYTES, PushPolicy};

/// Where a task's updates go, and what the POST carries to be believed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushConfig {
    /// The config's id within its task (the door gives one where the caller named none).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub id: String,
    /// The task it is of (`taskId`, or `task_id` as protobuf's JSON takes it too).
    #[serde(default, alias = "task_id")]
    pub task_id: String,
    /// The webhook.
    pub url: String,
    /// Sent as `X-A2A-Notification-Token`, for the webhook to tell the pushes it asked for.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "blank_as_none"
    )]
    pub token: Option<String>,
    /// Sent as `Authorization: <scheme> <credentials>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<PushAuthentication>,
}

/// How a push authenticates itself to its webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushAuthentication {
    /// The scheme, such as `Bearer`.
    pub scheme: String,
    /// What follows it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "blank_as_none"
    )]
    pub credentials: Option<String>,
}

/// A string that may be missing, `null` or empty: all three none (as protobuf's JSON leaves a
/// field out when it is empty, and some callers send it empty).
fn blank_as_none<'de, D: serde::Deserializer<'de>>(from: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(from)?.filter(|s| !s.is_empty()))
}

/// A string that may be `null`: empty then.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(from: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(from)?.unwrap_or_default())
}

/// Why a push config is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushConfigError {
    /// Its webhook may not be pushed to.
    #[error("url: {0}")]
    Url(#[from] super::AddressRefused),
    /// A field holds what it may not.
    #[error("{field}: {problem}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

fn field(field: &'static str, problem: impl Into<String>) -> PushConfigError {
    PushConfigError::Field {
        field,
        problem: problem.into(),
    }
}

impl PushConfig {
    /// Whether the config may be kept under `policy`: its URL ([`check_url`]), an id of at most
    /// [`MAX_CONFIG_ID_BYTES`] letters, digits and `-_.:` (empty: the door names it), and a
    /// token, scheme and credentials that a header can carry, within [`MAX_SECRET_BYTES`].
    pub fn check(&self, policy: PushPolicy) -> Result<(), PushConfigError> {
        check_url(&self.url, policy)?;
        if self.id.len() > MAX_CONFIG_ID_BYTES
            || !self
                .id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        {
            return Err(field(
                "id",
                format!("at most {MAX_CONFIG_ID_BYTES} letters, digits and -_.:"),
            ));
        }
        if let Some(token) = &self.token {
            header_safe("token", token)?;
        }
        if let Some(auth) = &self.authentication {
            if auth.scheme.is_empty()
                || auth.scheme.len() > 64
                || !auth
                    .scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                return Err(field(
                    "authentication.scheme",
                    "a word of at most 64 letters, digits and -",
                ));
            }
            if let Some(credentials) = &auth.credentials {
                header_safe("authentication.credentials", credentials)?;
            }
        }
        Ok(())
    }

    /// The `Authorization` header's value, where the config has credentials.
    pub(super) fn authorization(&self) -> Option<String> {
        let auth = self.authentication.as_ref()?;
        let credentials = auth.credentials.as_deref().filter(|c| !c.is_empty())?;
        Some(format!("{} {credentials}", auth.scheme))
    }
}

fn header_safe(name: &'static str, value: &str) -> Result<(), PushConfigError> {
    if value.len() > MAX_SECRET_BYTES {
        return Err(field(name, format!("longer than {MAX_SECRET_BYTES} bytes")));
    }
    if value.is_empty() || HeaderValue::from_str(value).is_err() || !value.is_ascii() {
        return Err(field(name, "must be visible ASCII, as a header carries it"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(value: serde_json::Value) -> PushConfig {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a2as_config_reads_and_is_checked() {
        let taken = config(json!({
            "taskId": "t", "id": "hook_1", "url": "https://example.com/h",
            "token": "tok-1", "authentication": {"scheme": "Bearer", "credentials": "abc"}
        }));
        assert_eq!(taken.check(PushPolicy::default()), Ok(()));
        assert_eq!(taken.authorization().as_deref(), Some("Bearer abc"));
        let bare = config(json!({"url": "https://example.com/h"}));
        assert_eq!(bare.check(PushPolicy::default()), Ok(()));
        assert_eq!(bare.authorization(), None);
        let blank = config(json!({"url": "https://example.com/h", "id": null, "token": "",
            "authentication": {"scheme": "Bearer", "credentials": ""}}));
        assert_eq!(blank.check(PushPolicy::default()), Ok(()));
        assert_eq!(
            (blank.id.as_str(), blank.token.as_deref(), blank.authorization()),
            ("", None, None)
        );
        let proto_named = config(json!({"task_id": "t-1", "url": "https://example.com/h"}));
        assert_eq!(proto_named.task_id, "t-1", "the proto field's name is taken too");
    }

    #[test]
    fn what_a_header_cannot_carry_is_refused_naming_the_field() {
        for (bad, named) in [
            (json!({"url": "https://example.com/h", "token": "a\nb"}), "token"),
            (json!({"url": "https://example.com/h", "id": "a#b"}), "id"),
            (
                json!({"url": "https://example.com/h", "authentication": {"scheme": "Bear er"}}),
                "authentication.scheme",
            ),
            (
                json!({"url": "https://example.com/h", "authentication": {"scheme": "Bearer", "credentials": "é"}}),
                "authentication.credentials",
            ),
            (json!({"url": "https://10.1.2.3/h"}), "url"),
        ] {
            let e = config(bad.clone()).check(PushPolicy::default()).unwrap_err();
            assert!(e.to_string().starts_with(named), "{bad}: {e}");
        }
        let long = "x".repeat(MAX_SECRET_BYTES + 1);
        let e = config(json!({"url": "https://example.com/h", "token": long}))
            .check(PushPolicy::default())
            .unwrap_err();
        assert!(e.to_string().contains("longer"), "{e}");
    }
}

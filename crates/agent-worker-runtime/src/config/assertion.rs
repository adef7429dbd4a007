//! Signed assertions: a call says whom it is for with a value the product's API can check, an
//! HMAC-SHA256 over the person, their account, the turn and an expiry, keyed with a secret the
//! product shares (kept in Secrets Manager, read at start-up and again every `refreshSeconds`).
//!
//! The value is `v1.<payload>.<mac>`: the payload is the JSON `{"sub": userId, "acc": accountId,
//! "turn": turnId, "exp": epoch seconds}` in base64url (no padding), and the MAC is over the
//! payload's base64url text, also base64url. [`verify`] is what the product runs.

use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::headers::SecretSource;
use agent_worker_contract::ErrorChain;
use agent_worker_core::engine::tools::openapi::ActAsContext;

/// How long an assertion holds, by default.
pub const DEFAULT_ASSERTION_TTL: Duration = Duration::from_secs(300);
/// How often the key is read again, by default.
pub const DEFAULT_KEY_REFRESH: Duration = Duration::from_secs(300);

/// `actAs.assertion` of the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AssertionConfig {
    /// The header it is sent in.
    pub header: String,
    /// The secret that holds the key, at least 32 bytes: a Secrets Manager secret (its ARN or
    /// name), or an SSM parameter (`ssm:<name>`, or its ARN).
    pub key_secret: String,
    /// How long an assertion holds, in seconds (300).
    pub ttl_seconds: Option<u64>,
    /// How often the key is read again, in seconds (300): a rotated key is used from then on.
    pub refresh_seconds: Option<u64>,
}

/// What an assertion says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The person.
    pub sub: String,
    /// Their account.
    pub acc: String,
    /// The turn the call belongs to.
    pub turn: String,
    /// When it stops holding, in seconds since the Unix epoch.
    pub exp: u64,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// Why an assertion cannot be made, or does not hold.
#[derive(Debug, thiserror::Error)]
pub enum AssertionError {
    /// The key cannot key an HMAC.
    #[error("the key cannot be used")]
    Key(#[source] hmac::digest::InvalidLength),
    /// The claims could not be written as JSON.
    #[error("the claims cannot be written")]
    Claims(#[source] serde_json::Error),
    /// The value is not `v1.<payload>.<mac>`.
    #[error("not a v1 assertion")]
    NotV1,
    /// The MAC is not base64url.
    #[error("the MAC is not base64url")]
    MacNotBase64(#[source] base64::DecodeError),
    /// The MAC is not the key's over the payload.
    #[error("the MAC does not match")]
    MacMismatch,
    /// The payload is not base64url.
    #[error("the payload is not base64url")]
    PayloadNotBase64(#[source] base64::DecodeError),
    /// The payload is not the claims.
    #[error("the payload is not claims")]
    NotClaims(#[source] serde_json::Error),
    /// It held until a time that has passed.
    #[error("it has expired")]
    Expired,
    /// The turn does not say whom the call is for.
    #[error("the turn does not name its person (userId and accountId), so the call cannot be asserted")]
    NoPerson,
    /// The key's lock was poisoned (a panic while it was being replaced).
    #[error("the assertion key's lock was poisoned")]
    Poisoned,
}

fn hmac(key: &[u8]) -> Result<Hmac<Sha256>, AssertionError> {
    <Hmac<Sha256> as KeyInit>::new_from_slice(key).map_err(AssertionError::Key)
}

/// The assertion of `claims` under `key`.
pub fn sign(key: &[u8], claims: &Claims) -> Result<String, AssertionError> {
    let payload = b64().encode(serde_json::to_vec(claims).map_err(AssertionError::Claims)?);
    let mut mac = hmac(key)?;
    mac.update(payload.as_bytes());
    let mac = b64().encode(mac.finalize().into_bytes());
    Ok(format!("v1.{payload}.{mac}"))
}

/// What `value` asserts, when `key` signed it and it holds at `now` (seconds since the epoch).
pub fn verify(key: &[u8], value: &str, now: u64) -> Result<Claims, AssertionError> {
    let mut parts = value.split('.');
    let (Some("v1"), Some(payload), Some(mac), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AssertionError::NotV1);
    };
    let given = b64().decode(mac).map_err(AssertionError::MacNotBase64)?;
    let mut check = hmac(key)?;
    check.update(payload.as_bytes());
    check
        .verify_slice(&given)
        .map_err(|_| AssertionError::MacMismatch)?;
    let claims: Claims =
        serde_json::from_slice(&b64().decode(payload).map_err(AssertionError::PayloadNotBase64)?)
            .map_err(AssertionError::NotClaims)?;
    if claims.exp <= now {
        return Err(AssertionError::Expired);
    }
    Ok(claims)
}

/// Signs calls' assertions with the current key.
pub(super) struct Signer {
    header: String,
    ttl: Duration,
    key: Arc<RwLock<Vec<u8>>>,
}

impl Signer {
    /// Reads the key (refusing one under 32 bytes) and keeps it fresh in the background.
    pub(super) async fn start(
        config: &AssertionConfig,
        secrets: Option<Arc<dyn SecretSource>>,
    ) -> Result<Self, String> {
        let secrets = secrets.ok_or("keySecret: no secret store to read it from")?;
        let key = read_key(secrets.as_ref(), &config.key_secret).await?;
        let key = Arc::new(RwLock::new(key));
        let refresh = config
            .refresh_seconds
            .map_or(DEFAULT_KEY_REFRESH, Duration::from_secs);
        tokio::spawn(keep_fresh(
            Arc::downgrade(&key),
            secrets,
            config.key_secret.clone(),
            refresh,
        ));
        Ok(Self {
            header: config.header.clone(),
            ttl: config
                .ttl_seconds
                .map_or(DEFAULT_ASSERTION_TTL, Duration::from_secs),
            key,
        })
    }

    /// The header asserting whom `ctx`'s call is for, now.
    pub(super) fn header(&self, ctx: &ActAsContext) -> Result<(String, String), AssertionError> {
        let (Some(user), Some(account)) = (&ctx.user_id, &ctx.account_id) else {
            return Err(AssertionError::NoPerson);
        };
        let now = agent_worker_core::clock::now_ms() / 1000;
        let claims = Claims {
            sub: user.clone(),
            acc: account.clone(),
            turn: ctx.turn_id.to_string(),
            exp: now.saturating_add(self.ttl.as_secs()),
        };
        let key = self.key.read().map_err(|_| AssertionError::Poisoned)?;
        Ok((self.header.clone(), sign(&key, &claims)?))
    }
}

async fn read_key(secrets: &dyn SecretSource, id: &str) -> Result<Vec<u8>, String> {
    let key = secrets
        .secret(id)
        .await
        .map_err(|e| format!("keySecret: cannot read {id}: {}", ErrorChain(&e)))?;
    if key.len() < 32 {
        return Err(format!(
            "keySecret: the key in {id} is {} bytes; it needs at least 32",
            key.len()
        ));
    }
    Ok(key.into_bytes())
}

/// Reads the key again every `refresh` while its signer lives; a failed read keeps the old key.
async fn keep_fresh(
    key: Weak<RwLock<Vec<u8>>>,
    secrets: Arc<dyn SecretSource>,
    id: String,
    refresh: Duration,
) {
    loop {
        tokio::time::sleep(refresh).await;
        let Some(held) = key.upgrade() else {
            return;
        };
        match read_key(secrets.as_ref(), &id).await {
            Ok(fresh) => {
                if let Ok(mut current) = held.write() {
                    *current = fresh;
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not read the assertion key again; the old one stays"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assertion_verifies_with_its_key_only_and_until_it_expires() {
        let key = [7u8; 32];
        let claims = Claims {
            sub: "ana".into(),
            acc: "acme".into(),
            turn: "t1".into(),
            exp: 1_000,
        };
        let value = sign(&key, &claims).unwrap();
        assert_eq!(verify(&key, &value, 999).unwrap(), claims);
        assert!(matches!(
            verify(&key, &value, 1_000),
            Err(AssertionError::Expired)
        ));
        assert!(matches!(
            verify(&[8u8; 32], &value, 999),
            Err(AssertionError::MacMismatch)
        ));
        let forged = value.replacen("v1.", "v1.e", 1);
        assert!(matches!(
            verify(&key, &forged, 999),
            Err(AssertionError::MacMismatch)
        ));
        assert!(matches!(verify(&key, "v2.a.b", 999), Err(AssertionError::NotV1)));
    }
}

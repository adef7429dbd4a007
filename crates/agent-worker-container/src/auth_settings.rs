//! How the API knows the person, from named values: `AUTH` (`api-key`, the default, with
//! `AGENT_WORKER_API_KEY`; `jwt` or `apigw-jwt`, with `JWT_ISSUER`, `JWT_AUDIENCE`, `JWKS_URL`,
//! `JWKS_MAX_AGE_SECONDS`, `JWT_USER_CLAIM`, `JWT_ACCOUNT_CLAIM` / `JWT_ACCOUNT`, and the backend's own tokens
//! `JWT_BACKEND_CLIENT_IDS` / `JWT_BACKEND_SCOPE`; `iam`, the
//! Function URL's signatures); and the web origins whose pages may
//! call it, `ALLOWED_ORIGINS`; and how the agent presents itself to other agents (its A2A card):
//! `AGENT_NAME`, `AGENT_DESCRIPTION`, `PUBLIC_URL`, and the key that signs it,
//! `AGENT_CARD_SIGNING_KEY` (an EC P-256 private key in PEM) named `AGENT_CARD_KEY_ID`. `agent-worker serve` answers them from
//! its flags and the environment, the `api` function from the environment: one reading for both.

use std::sync::Arc;

use super::{AllowedOrigins, ContainerConfig, PublicUrl};
use crate::jwt::{AccountFrom, DEFAULT_USER_CLAIM, JwtConfig, JwtVerifier};
use agent_worker_runtime::SettingsError;
use agent_worker_runtime::card_signature::CardSigner;

/// The account of the people AgentCore Runtime names (`serve --auth iam`) when
/// `AGENTCORE_ACCOUNT` names none.
pub const DEFAULT_AGENTCORE_ACCOUNT: &str = "default";

/// The names [`ContainerConfig::from_lookup`] reads.
pub const AUTH_SETTINGS: [&str; 17] = [
    "AUTH",
    "AGENT_WORKER_API_KEY",
    "JWT_ISSUER",
    "JWT_AUDIENCE",
    "JWKS_URL",
    "JWKS_MAX_AGE_SECONDS",
    "JWT_BACKEND_CLIENT_IDS",
    "JWT_BACKEND_SCOPE",
    "JWT_USER_CLAIM",
    "JWT_ACCOUNT_CLAIM",
    "JWT_ACCOUNT",
    "ALLOWED_ORIGINS",
    "AGENT_NAME",
    "AGENT_DESCRIPTION",
    "PUBLIC_URL",
    "AGENT_CARD_SIGNING_KEY",
    "AGENT_CARD_KEY_ID",
];

/// The key id a signed card's signature names when `AGENT_CARD_KEY_ID` names none.
pub const DEFAULT_CARD_KEY_ID: &str = "agent-card";

impl ContainerConfig {
    /// The settings `get` names (see the module): with `AUTH=api-key` (or unset) the API key,
    /// with `AUTH=jwt` or `apigw-jwt` a verifier fetching the issuer's keys with `http`, with
    /// `AUTH=iam` none (Lambda verified the caller). A value that cannot be
    /// used fails here, naming it.
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
        http: reqwest::Client,
    ) -> Result<Self, SettingsError> {
        let set = |name: &str| get(name).filter(|value| !value.trim().is_empty());
        let allowed_origins = AllowedOrigins::parse(&set("ALLOWED_ORIGINS").unwrap_or_default())
            .map_err(|e| SettingsError::new("ALLOWED_ORIGINS", e.to_string()))?;
        let mut config = Self::authenticated(&set, http)?;
        config.allowed_origins = allowed_origins;
        if let Some(name) = set("AGENT_NAME") {
            config.agent_name = name;
        }
        if let Some(description) = set("AGENT_DESCRIPTION") {
            config.agent_description = description;
        }
        config.public_url = set("PUBLIC_URL")
            .map(|url| PublicUrl::new(&url))
            .transpose()
            .map_err(|e| SettingsError::new("PUBLIC_URL", e.to_string()))?;
        if let Some(pem) = set("AGENT_CARD_SIGNING_KEY") {
            // A signed card names where the agent is: never a host a request merely says.
            if config.public_url.is_none() {
                return Err(SettingsError::new(
                    "AGENT_CARD_SIGNING_KEY",
                    "is set without PUBLIC_URL: a signed card must name the agent's own URL, not the Host a request sends",
                ));
            }
            let kid = set("AGENT_CARD_KEY_ID").unwrap_or_else(|| DEFAULT_CARD_KEY_ID.to_owned());
            let signer = CardSigner::from_pem(&pem, kid)
                .map_err(|e| SettingsError::new("AGENT_CARD_SIGNING_KEY", e.to_string()))?;
            config.card_signer = Some(signer);
        }
        Ok(config)
    }

    /// How people are known, from `set` (the values that are not blank).
    fn authenticated(
        set: &impl Fn(&str) -> Option<String>,
        http: reqwest::Client,
    ) -> Result<Self, SettingsError> {
        match set("AUTH").as_deref().unwrap_or("api-key") {
            "api-key" => Self::new(set("AGENT_WORKER_API_KEY").unwrap_or_default())
                .map_err(|e| SettingsError::new("AGENT_WORKER_API_KEY", e.to_string())),
            "iam" => Ok(Self::signed_by_iam()),
            mode @ ("jwt" | "apigw-jwt") => {
                let account = match (set("JWT_ACCOUNT_CLAIM"), set("JWT_ACCOUNT")) {
                    (Some(_), Some(_)) => {
                        return Err(SettingsError::new(
                            "JWT_ACCOUNT_CLAIM",
                            "is set, and so is JWT_ACCOUNT: set one of them",
                        ));
                    }
                    (Some(claim), None) => AccountFrom::Claim(claim),
                    (None, Some(account)) => AccountFrom::Fixed(account),
                    (None, None) => {
                        return Err(SettingsError::new(
                            "JWT_ACCOUNT_CLAIM",
                            "is required with AUTH=jwt (the claim naming the person's account), or JWT_ACCOUNT",
                        ));
                    }
                };
                let mut config = JwtConfig::new(
                    set("JWT_ISSUER").unwrap_or_default(),
                    set("JWT_AUDIENCE").unwrap_or_default(),
                    set("JWKS_URL"),
                    account,
                )
                .map_err(|e| SettingsError::new(e.setting, e.problem))?;
                config.user_claim = set("JWT_USER_CLAIM").unwrap_or_else(|| DEFAULT_USER_CLAIM.to_owned());
                if let Some(seconds) = set("JWKS_MAX_AGE_SECONDS") {
                    config.max_age = match seconds.trim().parse::<u64>() {
                        Ok(seconds) if seconds > 0 => std::time::Duration::from_secs(seconds),
                        _ => {
                            return Err(SettingsError::new(
                                "JWKS_MAX_AGE_SECONDS",
                                format!("is {seconds:?}; it is a whole number of seconds, 1 or more"),
                            ));
                        }
                    };
                }
                config.backend.client_ids = set("JWT_BACKEND_CLIENT_IDS")
                    .map(|ids| {
                        ids.split(',')
                            .map(str::trim)
                            .filter(|id| !id.is_empty())
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                config.backend.scope = set("JWT_BACKEND_SCOPE");
                let verifier = Arc::new(JwtVerifier::new(config, http));
                Ok(match mode {
                    "jwt" => Self::people_by_tokens(verifier),
                    _ => Self::people_by_gateway_tokens(verifier),
                })
            }
            other => Err(SettingsError::new(
                "AUTH",
                format!("is {other:?}; it is api-key, jwt, apigw-jwt or iam"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<ContainerConfig, SettingsError> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ContainerConfig::from_lookup(
            |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
            reqwest::Client::new(),
        )
    }

    #[test]
    fn each_setting_that_cannot_be_used_is_named() {
        assert!(from(&[("AGENT_WORKER_API_KEY", "0123456789abcdef")]).is_ok());
        assert_eq!(from(&[]).unwrap_err().name, "AGENT_WORKER_API_KEY");
        assert_eq!(from(&[("AUTH", "cookie")]).unwrap_err().name, "AUTH");
        let key = ("AGENT_WORKER_API_KEY", "0123456789abcdef");
        let origins = from(&[key, ("ALLOWED_ORIGINS", "https://app.example.com")]).unwrap();
        assert!(!origins.allowed_origins.is_empty());
        assert_eq!(
            from(&[key, ("ALLOWED_ORIGINS", "*")]).unwrap_err().name,
            "ALLOWED_ORIGINS"
        );
        let jwt = [
            ("AUTH", "jwt"),
            ("JWT_ISSUER", "https://issuer.example"),
            ("JWT_AUDIENCE", "app"),
        ];
        assert_eq!(from(&jwt).unwrap_err().name, "JWT_ACCOUNT_CLAIM");
        let mut with_account = jwt.to_vec();
        with_account.push(("JWT_ACCOUNT", "acme"));
        assert!(from(&with_account).is_ok());
        let max_age = |config: ContainerConfig| match config.auth {
            super::super::access::ApiAuth::Tokens(verifier) => verifier.config().max_age,
            other => panic!("{other:?}"),
        };
        assert_eq!(max_age(from(&with_account).unwrap()), crate::jwt::DEFAULT_MAX_AGE);
        for (age, taken) in [("120", Some(120)), ("0", None), ("five minutes", None)] {
            let mut aged = with_account.clone();
            aged.push(("JWKS_MAX_AGE_SECONDS", age));
            match (from(&aged), taken) {
                (Ok(config), Some(seconds)) => {
                    assert_eq!(max_age(config), std::time::Duration::from_secs(seconds));
                }
                (Err(e), None) => assert_eq!(e.name, "JWKS_MAX_AGE_SECONDS", "{age}"),
                (answer, _) => panic!("{age}: {:?}", answer.map(|_| "taken")),
            }
        }
        with_account.push(("JWT_ACCOUNT_CLAIM", "custom:account"));
        assert_eq!(from(&with_account).unwrap_err().name, "JWT_ACCOUNT_CLAIM");
        let no_audience = [
            ("AUTH", "jwt"),
            ("JWT_ISSUER", "https://issuer.example"),
            ("JWT_ACCOUNT", "acme"),
        ];
        assert_eq!(from(&no_audience).unwrap_err().name, "JWT_AUDIENCE");
        assert!(
            from(&[("AUTH", "iam")]).is_ok(),
            "Lambda verified the caller: no key"
        );
        // The header AgentCore Runtime passes is never believed from the settings alone: only
        // `serve --auth iam` says so (`with_people_named_by_the_runtime`), never the api function.
        assert_eq!(from(&[("AUTH", "agentcore-iam")]).unwrap_err().name, "AUTH");
        let named = from(&[("AUTH", "iam")])
            .unwrap()
            .with_people_named_by_the_runtime("acme");
        assert!(format!("{:?}", named.auth).contains("\"acme\""));
        let mut gateway = with_account.clone();
        gateway.retain(|(name, _)| *name != "JWT_ACCOUNT_CLAIM");
        gateway[0] = ("AUTH", "apigw-jwt");
        assert!(from(&gateway).is_ok());
        gateway.retain(|(name, _)| *name != "JWT_ISSUER");
        assert_eq!(from(&gateway).unwrap_err().name, "JWT_ISSUER");
    }

    #[test]
    fn a_card_is_signed_only_where_it_names_the_public_url() {
        let key = ("AGENT_WORKER_API_KEY", "0123456789abcdef");
        let pem = include_str!("../../agent-worker-testkit/keys/card-signing.pem");
        let signing = ("AGENT_CARD_SIGNING_KEY", pem);
        assert_eq!(from(&[key, signing]).unwrap_err().name, "AGENT_CARD_SIGNING_KEY");
        let signed = from(&[key, signing, ("PUBLIC_URL", "https://agent.example.com")]).unwrap();
        assert!(signed.card_signer.is_some());
        let not_a_key = ("AGENT_CARD_SIGNING_KEY", "-----BEGIN PRIVATE KEY-----");
        let refused = from(&[key, not_a_key, ("PUBLIC_URL", "https://agent.example.com")]);
        assert_eq!(refused.unwrap_err().name, "AGENT_CARD_SIGNING_KEY");
    }

    #[test]
    fn a_public_url_is_checked_at_start_naming_it() {
        let key = ("AGENT_WORKER_API_KEY", "0123456789abcdef");
        for (url, taken) in [
            ("https://agent.example.com", true),
            ("javascript://evil.example", false),
            ("agent.example.com", false),
        ] {
            let found = from(&[key, ("PUBLIC_URL", url)]);
            match taken {
                true => assert_eq!(found.unwrap().public_url.unwrap().as_str(), url),
                false => assert_eq!(found.unwrap_err().name, "PUBLIC_URL", "{url}"),
            }
        }
    }
}

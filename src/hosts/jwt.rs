//! People by their own tokens: a JWT (`Authorization: Bearer …`) verified against its issuer's
//! key set (JWKS), as an OIDC issuer such as a Cognito user pool signs them. The verification is
//! `jsonwebtoken`'s, on aws-lc-rs; this module chooses the key and says who the person is.
//!
//! - RS256 and ES256 only; `alg: none`, an HMAC algorithm or any other is refused.
//! - `iss` and `aud` must be the configured ones, `exp` must be present and not past, `nbf` not
//!   ahead, each with [`DEFAULT_LEEWAY`] for clocks that disagree.
//! - The key is the set's key with the token's `kid` (with no `kid`, the set's one key of the
//!   token's algorithm). Keys are cached; a `kid` the cache does not hold fetches the set again,
//!   at most once per [`DEFAULT_REFETCH_INTERVAL`], so a rotation is picked up and a flood of
//!   forged `kid`s is not a flood of fetches.
//! - The person is the claim [`JwtConfig::user_claim`] (`sub`); the account the claim
//!   [`AccountFrom::Claim`] names or a fixed one. Both must be ids the store can key.

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use crate::session::Owner;

/// How far clocks may disagree on `exp` and `nbf`.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(60);
/// The least time between two fetches of the key set for a `kid` it did not hold.
pub const DEFAULT_REFETCH_INTERVAL: Duration = Duration::from_secs(60);
/// How long one fetch of the key set may take.
pub const JWKS_FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The claim that names the person when none is configured.
pub const DEFAULT_USER_CLAIM: &str = "sub";

/// Where a person's account comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountFrom {
    /// The token's claim of this name (`custom:account`, say).
    Claim(String),
    /// The same account for everyone (a product with one account per deployment).
    Fixed(String),
}

/// What a token must be to be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtConfig {
    /// The issuer (`iss`), such as `https://cognito-idp.<region>.amazonaws.com/<pool id>`.
    pub issuer: String,
    /// The audience (`aud`): the app client's id, for a Cognito ID token.
    pub audience: String,
    /// The key set's URL; `<issuer>/.well-known/jwks.json` unless given.
    pub jwks_url: String,
    /// The claim that names the person.
    pub user_claim: String,
    /// Where the person's account comes from.
    pub account: AccountFrom,
    /// How far clocks may disagree.
    pub leeway: Duration,
    /// The least time between two fetches of the key set.
    pub refetch_interval: Duration,
}

/// A setting of [`JwtConfig`] that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {problem}")]
pub struct JwtConfigError {
    /// The setting, by its name in the environment (its flag is the same, lower-case, `--jwt-…`).
    pub setting: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl JwtConfig {
    /// Tokens of `issuer` for `audience`, their keys at `jwks_url` (or the issuer's well-known
    /// place), the person from `sub`, the account from `account`.
    pub fn new(
        issuer: impl Into<String>,
        audience: impl Into<String>,
        jwks_url: Option<String>,
        account: AccountFrom,
    ) -> Result<Self, JwtConfigError> {
        let issuer = issuer.into();
        let audience = audience.into();
        let problem = |setting, problem: &str| JwtConfigError {
            setting,
            problem: problem.to_owned(),
        };
        if issuer.trim().is_empty() {
            return Err(problem("JWT_ISSUER", "is required with AUTH=jwt or apigw-jwt"));
        }
        if audience.trim().is_empty() {
            return Err(problem("JWT_AUDIENCE", "is required with AUTH=jwt or apigw-jwt"));
        }
        let jwks_url = jwks_url
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| format!("{}/.well-known/jwks.json", issuer.trim_end_matches('/')));
        if reqwest::Url::parse(&jwks_url).is_err() {
            return Err(problem("JWKS_URL", "is not a URL"));
        }
        match &account {
            AccountFrom::Claim(name) | AccountFrom::Fixed(name) if name.trim().is_empty() => {
                return Err(problem("JWT_ACCOUNT_CLAIM", "must not be empty"));
            }
            _ => {}
        }
        Ok(Self {
            issuer,
            audience,
            jwks_url,
            user_claim: DEFAULT_USER_CLAIM.to_owned(),
            account,
            leeway: DEFAULT_LEEWAY,
            refetch_interval: DEFAULT_REFETCH_INTERVAL,
        })
    }
}

/// Why a token was not taken. Each is a 401, but [`TokenError::KeysUnavailable`], which is the
/// issuer's failure, not the token's (503).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a JWT, or one whose header cannot be read (`alg: none` among them).
    #[error("the token cannot be read: {0}")]
    Malformed(String),
    /// An algorithm other than RS256 and ES256.
    #[error("the token's algorithm {0} is not taken (RS256 or ES256)")]
    Algorithm(String),
    /// No key of the issuer's has the token's `kid` (or fits its algorithm).
    #[error("the token's key {0} is not one of the issuer's")]
    UnknownKey(String),
    /// The signature, the issuer, the audience or the time is wrong.
    #[error("the token is not valid: {0}")]
    Invalid(String),
    /// The person or the account the token names cannot be an id.
    #[error("the token's claim {claim} {problem}")]
    Claim {
        /// The claim.
        claim: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The issuer's key set could not be fetched.
    #[error("the issuer's keys cannot be read: {0}")]
    KeysUnavailable(String),
}

/// Verifies tokens as its [`JwtConfig`] says.
#[derive(Debug)]
pub struct JwtVerifier {
    config: JwtConfig,
    http: reqwest::Client,
    keys: tokio::sync::RwLock<KeyCache>,
}

#[derive(Debug, Default)]
struct KeyCache {
    keys: Vec<Jwk>,
    fetched: Option<Instant>,
}

impl KeyCache {
    /// The key for a token whose header says `kid` and `alg`.
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
        let fits = |key: &&Jwk| match &key.algorithm {
            AlgorithmParameters::RSA(_) => alg == Algorithm::RS256,
            AlgorithmParameters::EllipticCurve(ec) => {
                alg == Algorithm::ES256 && ec.curve == EllipticCurve::P256
            }
            _ => false,
        };
        let mut candidates = self.keys.iter().filter(fits);
        let key = match kid {
            Some(kid) => candidates.find(|key| key.common.key_id.as_deref() == Some(kid)),
            None => {
                let only = candidates.next();
                only.filter(|_| candidates.next().is_none())
            }
        }?;
        DecodingKey::from_jwk(key).ok()
    }
}

impl JwtVerifier {
    /// A verifier fetching keys with `http`.
    pub fn new(config: JwtConfig, http: reqwest::Client) -> Self {
        Self {
            config,
            http,
            keys: tokio::sync::RwLock::new(KeyCache::default()),
        }
    }

    /// What it takes.
    pub fn config(&self) -> &JwtConfig {
        &self.config
    }

    /// The person `token` stands for, if it is a token of the issuer's for the audience.
    pub async fn verify(&self, token: &str) -> Result<Owner, TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| TokenError::Malformed(e.to_string()))?;
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err(TokenError::Algorithm(format!("{:?}", header.alg)));
        }
        let key = self.key(header.kid.as_deref(), header.alg).await?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_nbf = true;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|e| TokenError::Invalid(e.to_string()))?
            .claims;
        self.person_of(&claims)
    }

    /// The person verified `claims` name: the user claim, and the account claim (or the fixed
    /// account). For claims this verifier checked, or that a gateway in front of the API checked
    /// with the same issuer and audience.
    pub fn person_of(&self, claims: &Map<String, Value>) -> Result<Owner, TokenError> {
        let user = claim(claims, &self.config.user_claim)?;
        let account = match &self.config.account {
            AccountFrom::Claim(name) => claim(claims, name)?,
            AccountFrom::Fixed(account) => account.clone(),
        };
        Ok(Owner::new(user, account))
    }

    /// The key for `kid` and `alg`: from the cache, or from the set fetched again when the
    /// cache does not hold it and the last fetch is old enough.
    async fn key(&self, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, TokenError> {
        if let Some(key) = self.keys.read().await.find(kid, alg) {
            return Ok(key);
        }
        let mut cache = self.keys.write().await;
        // Another request may have fetched the set while this one waited.
        if let Some(key) = cache.find(kid, alg) {
            return Ok(key);
        }
        let unknown = || TokenError::UnknownKey(kid.unwrap_or("(none)").to_owned());
        if cache
            .fetched
            .is_some_and(|at| at.elapsed() < self.config.refetch_interval)
        {
            return Err(unknown());
        }
        cache.fetched = Some(Instant::now());
        cache.keys = self.fetch().await?;
        cache.find(kid, alg).ok_or_else(unknown)
    }

    async fn fetch(&self) -> Result<Vec<Jwk>, TokenError> {
        let unavailable =
            |e: reqwest::Error| TokenError::KeysUnavailable(format!("{}: {e}", self.config.jwks_url));
        let set: JwkSet = self
            .http
            .get(&self.config.jwks_url)
            .timeout(JWKS_FETCH_TIMEOUT)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(unavailable)?
            .bytes()
            .await
            .map_err(unavailable)
            .and_then(|body| {
                serde_json::from_slice(&body).map_err(|e| {
                    TokenError::KeysUnavailable(format!("{}: not a key set: {e}", self.config.jwks_url))
                })
            })?;
        Ok(set.keys)
    }
}

/// The id claim `name` of `claims` holds: a string the store can key.
fn claim(claims: &Map<String, Value>, name: &str) -> Result<String, TokenError> {
    let problem = |problem: &str| TokenError::Claim {
        claim: name.to_owned(),
        problem: problem.to_owned(),
    };
    let value = claims
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| problem("is missing or not a string"))?;
    if value.trim().is_empty() {
        return Err(problem("is empty"));
    }
    match crate::session::id_problem(value, Some(agent_worker_aws::dynamo::keys::MAX_ID_BYTES)) {
        Some(why) => Err(problem(&why.to_string())),
        None => Ok(value.to_owned()),
    }
}

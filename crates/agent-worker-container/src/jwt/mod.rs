//! People by their own tokens: a JWT (`Authorization: Bearer …`) verified against its issuer's
//! key set (JWKS), as an OIDC issuer such as a Cognito user pool signs them. The verification is
//! `jsonwebtoken`'s, on aws-lc-rs; this module chooses the key and says who the person is.
//!
//! - RS256 and ES256 only; `alg: none`, an HMAC algorithm or any other is refused.
//! - `iss` and `aud` must be the configured ones, `exp` must be present and not past, `nbf` not
//!   ahead, each with [`DEFAULT_LEEWAY`] for clocks that disagree.
//! - The key is the set's key with the token's `kid` (with no `kid`, the set's one key of the
//!   token's algorithm). The set is at [`JwtConfig::jwks_url`], or where the issuer's OIDC
//!   discovery document (`<issuer>/.well-known/openid-configuration`) says (its `jwks_uri`).
//! - Keys are kept at most [`JwtConfig::max_age`] ([`DEFAULT_MAX_AGE`], or the set's
//!   `Cache-Control: max-age` when shorter); a `kid` not held, or a held key whose signature
//!   fails (a new key under an old id), reads the set again at most once per
//!   [`DEFAULT_REFETCH_INTERVAL`], so a rotation is picked up and a flood of forged tokens is
//!   not a flood of fetches. One fetch at a time, beside the requests whose key is held
//!   (`jwt/keys.rs`); an issuer that cannot be read is [`TokenError::KeysUnavailable`]
//!   for every request that needs it, until it is read.
//! - The person is the claim [`JwtConfig::user_claim`] (`sub`); the account the claim
//!   [`AccountFrom::Claim`] names or a fixed one. Both must be ids the store can key.
//! - A refusal repeats at most [`MAX_ECHO_CHARS`] of the token's own text, control characters
//!   and quotes replaced.

mod keys;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use agent_worker_core::session::Owner;

pub use keys::MAX_DOCUMENT_BYTES;

/// How far clocks may disagree on `exp` and `nbf`.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(60);
/// The least time between two fetches of the key set for a `kid` it did not hold (or a held
/// key whose signature failed).
pub const DEFAULT_REFETCH_INTERVAL: Duration = Duration::from_secs(60);
/// The longest the keys are kept (`JWKS_MAX_AGE_SECONDS`).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(300);
/// After a fetch failed, how long the requests that need the issuer are answered at once that
/// its keys cannot be read, before it is read again.
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// How long one read of the issuer (its discovery document and its key set) may take.
pub const JWKS_FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The claim that names the person when none is configured.
pub const DEFAULT_USER_CLAIM: &str = "sub";
/// Where an issuer publishes its OIDC discovery document, below its URL.
pub const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";
/// Where the key set is, below the issuer's URL, for an issuer without a discovery document.
pub const DEFAULT_JWKS_PATH: &str = "/.well-known/jwks.json";
/// The most of a token's own text (its key id, its algorithm) a refusal repeats.
pub const MAX_ECHO_CHARS: usize = 32;

/// Where a person's account comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountFrom {
    /// The token's claim of this name (`custom:account`, say).
    Claim(String),
    /// The same account for everyone (a product with one account per deployment).
    Fixed(String),
}

/// What a token must be to be taken, and how the issuer's keys are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtConfig {
    /// The issuer (`iss`), such as `https://cognito-idp.<region>.amazonaws.com/<pool id>`.
    pub issuer: String,
    /// The audience (`aud`): the app client's id, for a Cognito ID token.
    pub audience: String,
    /// The key set's URL; without one, the `jwks_uri` of the issuer's discovery document
    /// ([`JwtConfig::discovery_url`]), or `<issuer>/.well-known/jwks.json` when it has none.
    pub jwks_url: Option<String>,
    /// The claim that names the person.
    pub user_claim: String,
    /// Where the person's account comes from.
    pub account: AccountFrom,
    /// How far clocks may disagree.
    pub leeway: Duration,
    /// The least time between two fetches of the key set for a key it did not hold.
    pub refetch_interval: Duration,
    /// The longest the keys are kept before they are read again; the key set's
    /// `Cache-Control: max-age` shortens it.
    pub max_age: Duration,
    /// After a fetch failed, how long before the issuer is read again (meanwhile the requests
    /// that need it are refused at once, as for an issuer that cannot be read).
    pub retry_interval: Duration,
    /// How long one read of the issuer (its discovery document and its key set) may take.
    pub fetch_timeout: Duration,
    /// Which of the issuer's tokens are the product's backend's, not a person's (none by
    /// default).
    pub backend: BackendTokens,
}

/// The issuer's tokens that stand for the product's backend (a client-credentials token): it
/// vouches for the ids a request names, as the API key does, and it alone reports jobs' events.
/// A token is the backend's when its `client_id` (or `azp`) is one of [`client_ids`] or its
/// scopes (`scope`, space-separated, or `scp`) hold [`scope`]; it is still checked for the
/// issuer, the audience and the time as any token is.
///
/// [`client_ids`]: Self::client_ids
/// [`scope`]: Self::scope
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendTokens {
    /// The backend's client ids (`JWT_BACKEND_CLIENT_IDS`, comma-separated).
    pub client_ids: Vec<String>,
    /// The scope a backend's token holds (`JWT_BACKEND_SCOPE`).
    pub scope: Option<String>,
}

impl BackendTokens {
    /// The backend client a token with `claims` stands for, if it stands for one.
    fn client_of(&self, claims: &Map<String, Value>) -> Option<String> {
        let text = |name: &str| claims.get(name).and_then(Value::as_str);
        let client = text("client_id").or_else(|| text("azp"));
        if let Some(client) = client.filter(|c| self.client_ids.iter().any(|id| id == c)) {
            return Some(client.to_owned());
        }
        let wanted = self.scope.as_deref()?;
        let in_scope = text("scope").is_some_and(|scopes| scopes.split(' ').any(|s| s == wanted))
            || match claims.get("scp") {
                Some(Value::String(scopes)) => scopes.split(' ').any(|s| s == wanted),
                Some(Value::Array(scopes)) => scopes.iter().any(|s| s.as_str() == Some(wanted)),
                _ => false,
            };
        in_scope.then(|| client.unwrap_or("the backend").to_owned())
    }
}

/// A token taken: whom it stands for, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// Whom it stands for.
    pub caller: Caller,
    /// When it stops being taken: its `exp` and the leeway (`None`: no `exp` that can be read).
    pub until: Option<SystemTime>,
}

/// Whom a verified token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A person: it acts for that person alone.
    Person(Owner),
    /// The product's backend ([`BackendTokens`]), by its client id.
    Backend(String),
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
    /// Tokens of `issuer` for `audience`, their keys at `jwks_url` (or where the issuer's
    /// discovery document says), the person from `sub`, the account from `account`.
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
        let jwks_url = jwks_url.filter(|url| !url.trim().is_empty());
        match &jwks_url {
            Some(url) if reqwest::Url::parse(url).is_err() => {
                return Err(problem("JWKS_URL", "is not a URL"));
            }
            None if reqwest::Url::parse(&issuer).is_err() => {
                return Err(problem(
                    "JWT_ISSUER",
                    "is not a URL, where its keys could be found (or set JWKS_URL)",
                ));
            }
            _ => {}
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
            max_age: DEFAULT_MAX_AGE,
            retry_interval: DEFAULT_RETRY_INTERVAL,
            fetch_timeout: JWKS_FETCH_TIMEOUT,
            backend: BackendTokens::default(),
        })
    }

    /// The issuer's OIDC discovery document: `<issuer>/.well-known/openid-configuration`.
    pub fn discovery_url(&self) -> String {
        format!("{}{DISCOVERY_PATH}", self.issuer.trim_end_matches('/'))
    }

    /// Where the keys of an issuer without a discovery document are:
    /// `<issuer>/.well-known/jwks.json`.
    pub fn default_jwks_url(&self) -> String {
        format!("{}{DEFAULT_JWKS_PATH}", self.issuer.trim_end_matches('/'))
    }
}

/// Why a token was not taken. Each is a 401, but [`TokenError::KeysUnavailable`], which is the
/// issuer's failure, not the token's (503). None repeats more than [`MAX_ECHO_CHARS`] of the
/// token's own text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a JWT, or one whose header cannot be read.
    #[error("the token cannot be read: {0}")]
    Malformed(String),
    /// An algorithm other than RS256 and ES256 (`none` among them): the algorithm, as
    /// [`echo`]ed.
    #[error("the token's algorithm {0} is not taken: RS256 or ES256 only")]
    Algorithm(String),
    /// No key of the issuer's has the token's `kid` (or fits its algorithm): the `kid`, as
    /// [`echo`]ed, or `(none)`.
    #[error("the token's key id {0} is not one of the issuer's")]
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
    /// The issuer's discovery document or key set could not be read: what was read, the HTTP
    /// client's or the decoder's error its source (in full, for the log; the client is told only
    /// that the token cannot be checked now).
    #[error("the issuer's keys cannot be read")]
    KeysUnavailable(#[source] agent_worker_core::Failure),
}

/// Verifies tokens as its [`JwtConfig`] says.
#[derive(Debug)]
pub struct JwtVerifier {
    keys: Arc<keys::Keys>,
}

impl JwtVerifier {
    /// A verifier fetching keys with `http`. Nothing is read before the first token comes.
    pub fn new(config: JwtConfig, http: reqwest::Client) -> Self {
        Self {
            keys: Arc::new(keys::Keys::new(config, http)),
        }
    }

    /// What it takes.
    pub fn config(&self) -> &JwtConfig {
        &self.keys.config
    }

    /// The person `token` stands for, if it is a token of the issuer's for the audience (a
    /// backend's token stands for no person: refused).
    pub async fn verify(&self, token: &str) -> Result<Owner, TokenError> {
        match self.verify_caller(token).await?.caller {
            Caller::Person(person) => Ok(person),
            Caller::Backend(_) => Err(TokenError::Claim {
                claim: self.config().user_claim.clone(),
                problem: "is not looked for: the token is the backend's, not a person's".to_owned(),
            }),
        }
    }

    /// Whom `token` stands for, if it is a token of the issuer's for the audience: the product's
    /// backend ([`BackendTokens`]) or a person; and until when it is taken.
    pub async fn verify_caller(&self, token: &str) -> Result<Taken, TokenError> {
        let header = header_of(token)?;
        let (kid, alg) = (header.kid.as_deref(), header.alg);
        let unknown = || TokenError::UnknownKey(kid.map_or_else(|| "(none)".to_owned(), echo));
        let key = self.keys.key(kid, alg, false).await?.ok_or_else(unknown)?;
        let claims = match self.decode(token, &key, alg) {
            // The issuer may have put a new key under the old id: read its keys again (no more
            // often than a key not held would) and try the key it has now.
            Err(e) if *e.kind() == ErrorKind::InvalidSignature => {
                match self.keys.key(kid, alg, true).await? {
                    Some(now) => self.decode(token, &now, alg),
                    None => Err(e),
                }
            }
            decoded => decoded,
        };
        // A backend's access token may carry no audience (a Cognito client-credentials token
        // names its client in `client_id` alone): taken only when that client is the backend's.
        let claims = match claims {
            Err(e) if matches!(e.kind(), ErrorKind::MissingRequiredClaim(claim) if claim == "aud") => {
                self.decode_backend_without_audience(token, &key, alg).ok_or(e)
            }
            decoded => decoded,
        }
        .map_err(|e| invalid(&e))?;
        Ok(Taken {
            caller: self.caller_of(&claims)?,
            until: self.taken_until(&claims),
        })
    }

    /// Until when verified `claims` are taken: their `exp` (seconds since the epoch, as a number
    /// or, as API Gateway's authorizer passes claims on, as text) and the leeway. `None` when
    /// they carry no `exp` this can read.
    pub fn taken_until(&self, claims: &Map<String, Value>) -> Option<SystemTime> {
        let exp = match claims.get("exp")? {
            Value::Number(n) => n
                .as_u64()
                .or_else(|| n.as_f64().map(|f| f.max(0.0).round() as u64))?,
            Value::String(text) => text.trim().parse().ok()?,
            _ => return None,
        };
        UNIX_EPOCH.checked_add(Duration::from_secs(exp).checked_add(self.config().leeway)?)
    }

    /// The claims of `token`, checked as [`decode`](Self::decode) checks them but for an
    /// audience it does not carry, when its `client_id` is one of the backend's.
    fn decode_backend_without_audience(
        &self,
        token: &str,
        key: &DecodingKey,
        alg: Algorithm,
    ) -> Option<Map<String, Value>> {
        let config = self.config();
        if config.backend.client_ids.is_empty() {
            return None;
        }
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[&config.issuer]);
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp", "iss"]);
        validation.leeway = config.leeway.as_secs();
        validation.validate_nbf = true;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation)
            .ok()?
            .claims;
        let client = claims.get("client_id").and_then(Value::as_str)?;
        (!claims.contains_key("aud") && config.backend.client_ids.iter().any(|id| id == client))
            .then_some(claims)
    }

    /// Whom verified `claims` stand for: the backend when [`BackendTokens`] says so, else the
    /// person they name ([`person_of`](Self::person_of)).
    pub fn caller_of(&self, claims: &Map<String, Value>) -> Result<Caller, TokenError> {
        match self.config().backend.client_of(claims) {
            Some(client) => Ok(Caller::Backend(client)),
            None => self.person_of(claims).map(Caller::Person),
        }
    }

    fn decode(
        &self,
        token: &str,
        key: &DecodingKey,
        alg: Algorithm,
    ) -> jsonwebtoken::errors::Result<Map<String, Value>> {
        let config = self.config();
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[&config.issuer]);
        validation.set_audience(&[&config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = config.leeway.as_secs();
        validation.validate_nbf = true;
        jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation).map(|data| data.claims)
    }

    /// The person verified `claims` name: the user claim, and the account claim (or the fixed
    /// account). For claims this verifier checked, or that a gateway in front of the API checked
    /// with the same issuer and audience.
    pub fn person_of(&self, claims: &Map<String, Value>) -> Result<Owner, TokenError> {
        let config = self.config();
        let user = claim(claims, &config.user_claim)?;
        let account = match &config.account {
            AccountFrom::Claim(name) => claim(claims, name)?,
            AccountFrom::Fixed(account) => account.clone(),
        };
        Ok(Owner::new(user, account))
    }
}

/// The header of `token`, its algorithm one that is taken. The algorithm is read first, from
/// the header as JSON, so that one not taken (`none` among them) is refused as such.
fn header_of(token: &str) -> Result<jsonwebtoken::Header, TokenError> {
    let malformed = |why: &str| TokenError::Malformed(why.to_owned());
    let mut parts = token.split('.');
    let encoded = parts.next().unwrap_or_default();
    if parts.count() != 2 {
        return Err(malformed("it is not a JWT (three parts separated by dots)"));
    }
    let header: Map<String, Value> = URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()
        .and_then(|json| serde_json::from_slice(&json).ok())
        .ok_or_else(|| malformed("its header is not a JSON object in base64url"))?;
    match header.get("alg") {
        Some(Value::String(alg)) if alg == "RS256" || alg == "ES256" => {}
        Some(Value::String(alg)) => return Err(TokenError::Algorithm(echo(alg))),
        _ => return Err(malformed("its header names no algorithm")),
    }
    jsonwebtoken::decode_header(token).map_err(|_| malformed("its header is not a JWT header"))
}

/// What a refusal says of a verification that failed, in its own words: the crate's may repeat
/// a claim's value whole.
fn invalid(error: &jsonwebtoken::errors::Error) -> TokenError {
    TokenError::Invalid(match error.kind() {
        ErrorKind::InvalidSignature => "its signature is not the issuer's key's".to_owned(),
        ErrorKind::ExpiredSignature => "it has expired (exp)".to_owned(),
        ErrorKind::ImmatureSignature => "it is not valid yet (nbf)".to_owned(),
        ErrorKind::InvalidIssuer => "it is another issuer's (iss)".to_owned(),
        ErrorKind::InvalidAudience => "it is for another audience (aud)".to_owned(),
        ErrorKind::MissingRequiredClaim(claim) => format!("it has no {} claim", echo(claim)),
        ErrorKind::InvalidClaimFormat(claim) => format!("its {} claim is not of its type", echo(claim)),
        _ => "its claims cannot be read".to_owned(),
    })
}

/// `text`, from a token, as a refusal repeats it: quoted, at most [`MAX_ECHO_CHARS`] characters
/// (`…` after), any but printable ASCII, and quotes and backslashes, as `?`.
pub fn echo(text: &str) -> String {
    let shown: String = text
        .chars()
        .take(MAX_ECHO_CHARS)
        .map(|c| match c {
            '"' | '\\' => '?',
            c if c.is_ascii_graphic() || c == ' ' => c,
            _ => '?',
        })
        .collect();
    let more = if text.chars().nth(MAX_ECHO_CHARS).is_some() {
        "…"
    } else {
        ""
    };
    format!("\"{shown}{more}\"")
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
    match agent_worker_core::session::id_problem(value, Some(agent_worker_aws::dynamo::keys::MAX_ID_BYTES)) {
        Some(why) => Err(problem(&why.to_string())),
        None => Ok(value.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_repeats_a_short_clean_prefix_of_the_token() {
        assert_eq!(echo("k-1"), "\"k-1\"");
        let long = echo(&"A".repeat(50_000));
        assert_eq!(long.chars().count(), MAX_ECHO_CHARS + 3, "{long}");
        assert!(long.ends_with("…\""));
        assert_eq!(echo("k\n\u{1b}[31m\"\\é"), "\"k??[31m???\"");
    }

    #[test]
    fn an_algorithm_not_taken_is_named_with_what_is() {
        let encode = |header: &str| format!("{}.e30.", URL_SAFE_NO_PAD.encode(header));
        let refused = header_of(&encode(r#"{"alg":"none"}"#)).unwrap_err();
        assert_eq!(refused, TokenError::Algorithm("\"none\"".to_owned()));
        assert_eq!(
            refused.to_string(),
            "the token's algorithm \"none\" is not taken: RS256 or ES256 only"
        );
        assert!(matches!(header_of("a.b"), Err(TokenError::Malformed(_))));
        assert!(matches!(
            header_of(&encode(r#"{"typ":"JWT"}"#)),
            Err(TokenError::Malformed(_))
        ));
        assert!(header_of(&encode(r#"{"alg":"ES256","kid":"k"}"#)).is_ok());
    }

    #[test]
    fn a_token_is_taken_until_its_exp_and_the_leeway_as_a_number_or_as_text() {
        let config = JwtConfig::new(
            "https://issuer.example",
            "app",
            None,
            AccountFrom::Fixed("acme".into()),
        )
        .unwrap();
        let verifier = JwtVerifier::new(config, reqwest::Client::new());
        let until = |exp: Value| {
            let claims = Map::from_iter([("exp".to_owned(), exp)]);
            verifier.taken_until(&claims)
        };
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000) + DEFAULT_LEEWAY;
        assert_eq!(until(Value::from(1_700_000_000_u64)), Some(at));
        assert_eq!(until(Value::from(1_699_999_999.6)), Some(at));
        // API Gateway's authorizer passes every claim on as text.
        assert_eq!(until(Value::from("1700000000")), Some(at));
        assert_eq!(until(Value::from("soon")), None);
        assert_eq!(verifier.taken_until(&Map::new()), None);
    }
}

//! The issuer's keys as the verifier holds them: read from the key set (the configured URL, or
//! the `jwks_uri` of the issuer's OIDC discovery document), kept no longer than their max age,
//! and read again for a key id the verifier does not hold or whose signature fails (at most once
//! per refetch interval).
//!
//! One read at a time, and none under a lock: the first request that needs the issuer starts a
//! fetch (a task of its own, so a request that goes away does not end it), and requests that need
//! it meanwhile wait on the same outcome. What is held is locked for moments, never across the
//! network, so a request whose key is held and fresh never waits on a fetch. A fetch that fails
//! is remembered for the retry interval: every request that needs the issuer meanwhile is told at
//! once that its keys cannot be read (503), none that its key is unknown.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{JwtConfig, TokenError};
use agent_worker_contract::ErrorChain;
use agent_worker_core::Failure;

/// The largest discovery document or key set read.
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

/// The issuer's keys, shared by the requests and the fetch that reads them.
#[derive(Debug)]
pub(super) struct Keys {
    pub(super) config: JwtConfig,
    http: reqwest::Client,
    state: Mutex<State>,
}

/// What is known of the issuer.
#[derive(Debug, Default)]
struct State {
    /// The keys last read.
    held: Option<KeySet>,
    /// When the last fetch started.
    last_fetch: Option<Instant>,
    /// The last fetch's failure, until a fetch succeeds.
    failure: Option<Failed>,
    /// The fetch under way: its outcome, once it has one.
    flight: Option<Flight>,
    /// The key set's URL, from the discovery document (without a configured one).
    discovered: Option<String>,
}

type Flight = watch::Receiver<Option<Outcome>>;
/// A fetch's outcome: the keys are held, or why they could not be read (what was read, the
/// HTTP client's or the decoder's error its source).
type Outcome = Result<(), Failure>;

/// A fetch that failed, and when.
#[derive(Debug, Clone)]
struct Failed {
    at: Instant,
    why: Failure,
}

#[derive(Debug)]
struct KeySet {
    keys: Vec<Key>,
    read_at: Instant,
    max_age: Duration,
}

/// A key of the set that can verify a token: its id, the algorithm it verifies.
struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .finish()
    }
}

impl Key {
    /// The key `jwk` is, if it verifies RS256 (RSA) or ES256 (P-256) signatures.
    fn of(jwk: &Jwk) -> Option<Self> {
        if jwk.common.public_key_use == Some(PublicKeyUse::Encryption) {
            return None;
        }
        let alg = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => Algorithm::RS256,
            AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => Algorithm::ES256,
            _ => return None,
        };
        Some(Self {
            kid: jwk.common.key_id.clone(),
            alg,
            key: DecodingKey::from_jwk(jwk).ok()?,
        })
    }
}

impl KeySet {
    /// The key for a token whose header says `kid` and `alg` (with no `kid`, the set's one key
    /// of the algorithm).
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
        let mut fitting = self.keys.iter().filter(|key| key.alg == alg);
        let key = match kid {
            Some(kid) => fitting.find(|key| key.kid.as_deref() == Some(kid)),
            None => {
                let only = fitting.next();
                only.filter(|_| fitting.next().is_none())
            }
        }?;
        Some(key.key.clone())
    }

    fn fresh(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.read_at) < self.max_age
    }
}

impl Keys {
    pub(super) fn new(config: JwtConfig, http: reqwest::Client) -> Self {
        Self {
            config,
            http,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The key for a token whose header says `kid` and `alg`: the one held while the keys are
    /// fresh; otherwise (or when the held one's signature `failed`) the one read again, when
    /// the issuer may be read now. `None`: the issuer has no such key, or was read too lately
    /// to be read again for it.
    pub(super) async fn key(
        self: &Arc<Self>,
        kid: Option<&str>,
        alg: Algorithm,
        failed: bool,
    ) -> Result<Option<DecodingKey>, TokenError> {
        let flight = {
            let mut state = self.state();
            let now = Instant::now();
            let fresh = state.held.as_ref().filter(|set| set.fresh(now));
            if !failed && let Some(key) = fresh.and_then(|set| set.find(kid, alg)) {
                return Ok(Some(key));
            }
            let fresh = fresh.is_some();
            match self.flight(&mut state, now, fresh)? {
                Some(flight) => flight,
                None => return Ok(None),
            }
        };
        wait(flight).await.map_err(TokenError::KeysUnavailable)?;
        Ok(self.state().held.as_ref().and_then(|set| set.find(kid, alg)))
    }

    /// The fetch to wait on: the one under way, or a new one; `None` when the keys held are
    /// fresh and were read within the refetch interval. Refused at once while the last fetch's
    /// failure is younger than the retry interval.
    fn flight(
        self: &Arc<Self>,
        state: &mut State,
        now: Instant,
        fresh: bool,
    ) -> Result<Option<Flight>, TokenError> {
        // A fetch whose task is gone (the runtime shut down) is no longer under way.
        if let Some(flight) = state
            .flight
            .as_ref()
            .filter(|flight| flight.has_changed().is_ok())
        {
            return Ok(Some(flight.clone()));
        }
        let since = |at: Instant| now.saturating_duration_since(at);
        match &state.failure {
            Some(failure) if since(failure.at) < self.config.retry_interval => {
                return Err(TokenError::KeysUnavailable(failure.why.clone()));
            }
            Some(_) => {}
            None if fresh
                && state
                    .last_fetch
                    .is_some_and(|at| since(at) < self.config.refetch_interval) =>
            {
                return Ok(None);
            }
            None => {}
        }
        Ok(Some(self.start(state, now)))
    }

    /// Starts a fetch, which leaves its outcome in the state and tells its waiters.
    fn start(self: &Arc<Self>, state: &mut State, now: Instant) -> Flight {
        let (done, flight) = watch::channel(None);
        state.flight = Some(flight.clone());
        state.last_fetch = Some(now);
        let keys = Arc::clone(self);
        tokio::spawn(async move {
            let read = keys.fetch().await;
            let outcome = keys.settle(read);
            done.send_replace(Some(outcome));
        });
        flight
    }

    fn settle(&self, read: Result<KeySet, Failure>) -> Outcome {
        let mut state = self.state();
        state.flight = None;
        match read {
            Ok(set) => {
                tracing::debug!(keys = set.keys.len(), max_age = ?set.max_age, "the issuer's keys were read");
                state.held = Some(set);
                state.failure = None;
                Ok(())
            }
            Err(why) => {
                tracing::error!(error = %ErrorChain(&why), "the issuer's keys cannot be read");
                state.failure = Some(Failed {
                    at: Instant::now(),
                    why: why.clone(),
                });
                // The document may name another key set by now.
                state.discovered = None;
                Err(why)
            }
        }
    }

    /// Reads the key set, within the fetch timeout.
    async fn fetch(&self) -> Result<KeySet, Failure> {
        let timeout = self.config.fetch_timeout;
        tokio::time::timeout(timeout, self.read())
            .await
            .unwrap_or_else(|_| {
                Err(Failure::new(format!(
                    "the issuer did not answer within {timeout:?}"
                )))
            })
    }

    async fn read(&self) -> Result<KeySet, Failure> {
        let url = match &self.config.jwks_url {
            Some(url) => url.clone(),
            None => {
                let known = self.state().discovered.clone();
                match known {
                    Some(url) => url,
                    None => {
                        let url = self.discover().await?;
                        self.state().discovered = Some(url.clone());
                        url
                    }
                }
            }
        };
        let Some((body, cache_max_age)) = self.get(&url).await? else {
            return Err(Failure::new(format!("{url}: 404 Not Found")));
        };
        #[derive(Deserialize)]
        struct RawSet {
            keys: Vec<serde_json::Value>,
        }
        let set: RawSet = serde_json::from_slice(&body)
            .map_err(|e| Failure::caused_by(format!("{url}: not a key set"), e))?;
        // A key of a kind this crate does not know is skipped, not the set.
        let keys = set
            .keys
            .into_iter()
            .filter_map(|jwk| serde_json::from_value::<Jwk>(jwk).ok())
            .filter_map(|jwk| Key::of(&jwk))
            .collect();
        let max_age = cache_max_age.map_or(self.config.max_age, |age| age.min(self.config.max_age));
        Ok(KeySet {
            keys,
            read_at: Instant::now(),
            max_age,
        })
    }

    /// The key set's URL, from the issuer's discovery document; the issuer's
    /// `/.well-known/jwks.json` when it has none.
    async fn discover(&self) -> Result<String, Failure> {
        let url = self.config.discovery_url();
        let Some((body, _)) = self.get(&url).await? else {
            return Ok(self.config.default_jwks_url());
        };
        #[derive(Deserialize)]
        struct Discovery {
            jwks_uri: String,
        }
        let document: Discovery = serde_json::from_slice(&body)
            .map_err(|e| Failure::caused_by(format!("{url}: not a discovery document naming jwks_uri"), e))?;
        reqwest::Url::parse(&document.jwks_uri)
            .map_err(|e| Failure::caused_by(format!("{url}: its jwks_uri is not a URL"), e))?;
        Ok(document.jwks_uri)
    }

    /// The body of `url` (at most [`MAX_DOCUMENT_BYTES`]) and its `Cache-Control: max-age`;
    /// `None` when it is not found (404).
    async fn get(&self, url: &str) -> Result<Option<(Vec<u8>, Option<Duration>)>, Failure> {
        // The URL is said once, here, not again in the HTTP client's words.
        let failed = |e: reqwest::Error| Failure::caused_by(format!("{url} cannot be read"), e.without_url());
        let response = self.http.get(url).send().await.map_err(failed)?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let mut response = response.error_for_status().map_err(failed)?;
        let max_age = cache_max_age(response.headers());
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(Failure::new(format!(
                    "{url}: longer than {MAX_DOCUMENT_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Some((body, max_age)))
    }
}

/// The outcome of `flight`, once it has one.
async fn wait(mut flight: Flight) -> Outcome {
    match flight.wait_for(Option::is_some).await {
        Ok(outcome) => outcome
            .clone()
            .unwrap_or_else(|| Err(Failure::new("the fetch of the issuer's keys has no outcome"))),
        Err(_) => Err(Failure::new(
            "the fetch of the issuer's keys ended without an outcome",
        )),
    }
}

/// The `max-age` a response's `Cache-Control` gives, if it gives one.
fn cache_max_age(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get_all(reqwest::header::CACHE_CONTROL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .find_map(|directive| {
            let (name, value) = directive.trim().split_once('=')?;
            if !name.trim().eq_ignore_ascii_case("max-age") {
                return None;
            }
            value.trim().trim_matches('"').parse::<u64>().ok()
        })
        .map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_max_age_is_read_from_cache_control() {
        let with = |value: &str| {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(reqwest::header::CACHE_CONTROL, value.parse().unwrap());
            cache_max_age(&headers)
        };
        assert_eq!(
            with("public, max-age=3600, must-revalidate"),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(with("MAX-AGE=\"30\""), Some(Duration::from_secs(30)));
        assert_eq!(with("no-cache"), None);
        assert_eq!(with("max-age=soon"), None);
        assert_eq!(cache_max_age(&reqwest::header::HeaderMap::new()), None);
    }
}

//! An OIDC issuer's stand-in: key pairs made in the test ([`SigningKey`]: RS256 or ES256, on
//! aws-lc-rs), tokens signed with them (the JWS compact form, built here, not by the crate the
//! verifier uses), and the public halves served as a JWKS on 127.0.0.1 ([`JwksStandIn`]), found
//! through an OIDC discovery document. While it runs its keys change (a rotation, a removal, a
//! new key under an old id) and it can misbehave (hang, answer garbage); it counts its fetches.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{KeyPair as RsaKeyPair, KeySize};
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _, RSA_PKCS1_SHA256};
use axum::routing::get;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

/// A key pair that signs tokens, with its id.
pub struct SigningKey {
    kid: String,
    pair: Pair,
}

enum Pair {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("alg", &self.alg())
            .finish()
    }
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

impl SigningKey {
    /// A new RSA key (2,048 bits) that signs RS256, as Cognito's do.
    pub fn rs256(kid: &str) -> Self {
        Self {
            kid: kid.to_owned(),
            pair: Pair::Rsa(RsaKeyPair::generate(KeySize::Rsa2048).expect("an RSA key")),
        }
    }

    /// A new P-256 key that signs ES256.
    pub fn es256(kid: &str) -> Self {
        Self {
            kid: kid.to_owned(),
            pair: Pair::Ec(EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).expect("an EC key")),
        }
    }

    /// Its id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The algorithm it signs: `RS256` or `ES256`.
    pub fn alg(&self) -> &'static str {
        match self.pair {
            Pair::Rsa(_) => "RS256",
            Pair::Ec(_) => "ES256",
        }
    }

    /// Its public half as a JWK.
    pub fn jwk(&self) -> Value {
        match &self.pair {
            Pair::Rsa(pair) => {
                let public = pair.public_key();
                json!({
                    "kty": "RSA", "kid": self.kid, "alg": "RS256", "use": "sig",
                    "n": b64(public.modulus().big_endian_without_leading_zero()),
                    "e": b64(public.exponent().big_endian_without_leading_zero()),
                })
            }
            Pair::Ec(pair) => {
                // The uncompressed point: 0x04, then x and y of 32 bytes each.
                let point = pair.public_key().as_ref();
                json!({
                    "kty": "EC", "kid": self.kid, "alg": "ES256", "use": "sig", "crv": "P-256",
                    "x": b64(&point[1..33]), "y": b64(&point[33..65]),
                })
            }
        }
    }

    /// A token of `claims`, its header naming this key.
    pub fn token(&self, claims: &Value) -> String {
        self.token_with_header(&json!({"alg": self.alg(), "typ": "JWT", "kid": self.kid}), claims)
    }

    /// A token of `claims` under `header` (which may lie about the algorithm or the key),
    /// signed with this key.
    pub fn token_with_header(&self, header: &Value, claims: &Value) -> String {
        let signing_input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let signature = match &self.pair {
            Pair::Rsa(pair) => {
                let mut signature = vec![0; pair.public_modulus_len()];
                pair.sign(&RSA_PKCS1_SHA256, &rng, signing_input.as_bytes(), &mut signature)
                    .expect("an RSA signature");
                signature
            }
            Pair::Ec(pair) => pair
                .sign(&rng, signing_input.as_bytes())
                .expect("an ECDSA signature")
                .as_ref()
                .to_vec(),
        };
        format!("{signing_input}.{}", b64(&signature))
    }
}

/// A token of `claims` with `alg: none` and no signature, which no verifier may take.
pub fn unsigned_token(claims: &Value) -> String {
    let header = json!({"alg": "none", "typ": "JWT"});
    format!(
        "{}.{}.",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

/// How the stand-in answers a request for its discovery document or its key set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssuerAnswer {
    /// As an issuer does: the document, the keys.
    Normally,
    /// Not at all, until it is told to answer otherwise (an issuer that hangs).
    Hang,
    /// `200` with a body that is not JSON (an issuer behind a broken proxy).
    Garbage,
}

/// Where the stand-in serves its key set: not the default `<issuer>/.well-known/jwks.json`, so
/// that a verifier given only the issuer finds it through discovery alone.
pub const JWKS_PATH: &str = "/oauth2/v1/keys";
/// Where the stand-in serves its OIDC discovery document, which names [`JWKS_PATH`].
pub const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";

#[derive(Debug)]
struct Issuer {
    base: String,
    keys: Mutex<Vec<Value>>,
    max_age: Mutex<Option<u64>>,
    answer: tokio::sync::watch::Sender<IssuerAnswer>,
    /// How many requests (discovery and keys) arrived, for a test to wait on.
    received: tokio::sync::watch::Sender<usize>,
    fetches: AtomicUsize,
    discoveries: AtomicUsize,
    held: AtomicUsize,
}

impl Issuer {
    /// Counts the request, holds it while the stand-in hangs, then says how to answer it.
    async fn arrive(&self, count: &AtomicUsize) -> IssuerAnswer {
        count.fetch_add(1, Ordering::SeqCst);
        self.held.fetch_add(1, Ordering::SeqCst);
        self.received.send_modify(|n| *n += 1);
        let mut answer = self.answer.subscribe();
        let answered = answer
            .wait_for(|answer| *answer != IssuerAnswer::Hang)
            .await
            .map(|answer| *answer)
            .unwrap_or(IssuerAnswer::Garbage);
        self.held.fetch_sub(1, Ordering::SeqCst);
        answered
    }

    fn garbage() -> axum::response::Response {
        use axum::response::IntoResponse as _;
        ([("content-type", "text/html")], "<html>502 Bad Gateway</html>").into_response()
    }

    async fn keys(self: Arc<Self>) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        if self.arrive(&self.fetches).await == IssuerAnswer::Garbage {
            return Self::garbage();
        }
        let keys = self.keys.lock().map(|keys| keys.clone()).unwrap_or_default();
        let mut response = axum::Json(json!({ "keys": keys })).into_response();
        if let Some(age) = self.max_age.lock().ok().and_then(|age| *age) {
            let value = format!("public, max-age={age}, must-revalidate");
            if let Ok(value) = axum::http::HeaderValue::from_str(&value) {
                response.headers_mut().insert("cache-control", value);
            }
        }
        response
    }

    async fn discovery(self: Arc<Self>) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        if self.arrive(&self.discoveries).await == IssuerAnswer::Garbage {
            return Self::garbage();
        }
        axum::Json(json!({
            "issuer": self.base,
            "jwks_uri": format!("{}{JWKS_PATH}", self.base),
            "authorization_endpoint": format!("{}/oauth2/v1/authorize", self.base),
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
        }))
        .into_response()
    }
}

/// An OIDC issuer on 127.0.0.1: its discovery document at [`DISCOVERY_PATH`], naming its key
/// set at [`JWKS_PATH`] (`/.well-known/jwks.json` is not served). While it runs a test may
/// change its keys (a rotation, a removal, a new key under an old id), have it send
/// `Cache-Control: max-age`, hang or answer garbage ([`IssuerAnswer`]), and count and wait on
/// the requests it receives.
#[derive(Debug)]
pub struct JwksStandIn {
    issuer: Arc<Issuer>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl JwksStandIn {
    /// Serves the public halves of `keys`.
    pub async fn start(keys: &[&SigningKey]) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let issuer = Arc::new(Issuer {
            base,
            keys: Mutex::new(keys.iter().map(|key| key.jwk()).collect()),
            max_age: Mutex::new(None),
            answer: tokio::sync::watch::Sender::new(IssuerAnswer::Normally),
            received: tokio::sync::watch::Sender::new(0),
            fetches: AtomicUsize::new(0),
            discoveries: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
        });
        let app = axum::Router::new()
            .route(
                JWKS_PATH,
                get({
                    let issuer = issuer.clone();
                    move || issuer.clone().keys()
                }),
            )
            .route(
                DISCOVERY_PATH,
                get({
                    let issuer = issuer.clone();
                    move || issuer.clone().discovery()
                }),
            );
        let stop = crate::serve_in_background(listener, app);
        Ok(Self { issuer, _stop: stop })
    }

    /// The issuer's URL, which the tokens name (`iss`).
    pub fn issuer(&self) -> &str {
        &self.issuer.base
    }

    /// The key set's URL ([`JWKS_PATH`]).
    pub fn jwks_url(&self) -> String {
        format!("{}{JWKS_PATH}", self.issuer.base)
    }

    /// Publishes `key` beside the others (a rotation).
    pub fn publish(&self, key: &SigningKey) {
        if let Ok(mut keys) = self.issuer.keys.lock() {
            keys.push(key.jwk());
        }
    }

    /// Publishes `keys` alone: the others are gone (a removal, or a new key under an old id).
    pub fn replace(&self, keys: &[&SigningKey]) {
        if let Ok(mut published) = self.issuer.keys.lock() {
            *published = keys.iter().map(|key| key.jwk()).collect();
        }
    }

    /// Sends `Cache-Control: max-age=<seconds>` with the key set (none with `None`).
    pub fn cache_for(&self, seconds: Option<u64>) {
        if let Ok(mut max_age) = self.issuer.max_age.lock() {
            *max_age = seconds;
        }
    }

    /// How it answers from now on; the requests it holds (while it hung) are answered so too.
    pub fn answer(&self, answer: IssuerAnswer) {
        self.issuer.answer.send_replace(answer);
    }

    /// How many times the key set was asked for (a held request among them).
    pub fn fetches(&self) -> usize {
        self.issuer.fetches.load(Ordering::SeqCst)
    }

    /// How many times the discovery document was asked for.
    pub fn discoveries(&self) -> usize {
        self.issuer.discoveries.load(Ordering::SeqCst)
    }

    /// How many requests it holds unanswered now (while it hangs).
    pub fn held(&self) -> usize {
        self.issuer.held.load(Ordering::SeqCst)
    }

    /// Returns once it has received `count` requests in all (discovery and keys), counting
    /// from its start: what a test waits on instead of a sleep. It does not return otherwise;
    /// bound it with a timeout.
    pub async fn received(&self, count: usize) {
        let mut received = self.issuer.received.subscribe();
        // The sender lives as long as `self`: the wait ends only by the count.
        let _ = received.wait_for(|received| *received >= count).await;
    }
}

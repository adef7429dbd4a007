//! An OIDC issuer's stand-in: key pairs made in the test ([`SigningKey`]: RS256 or ES256, on
//! aws-lc-rs), tokens signed with them (the JWS compact form, built here, not by the crate the
//! verifier uses), and the public halves served as a JWKS on 127.0.0.1 ([`JwksStandIn`]), which
//! counts its fetches and takes a new key while it runs (a rotation).

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

/// An issuer's key set, served at `/.well-known/jwks.json` on 127.0.0.1.
#[derive(Debug)]
pub struct JwksStandIn {
    base: String,
    keys: Arc<Mutex<Vec<Value>>>,
    fetches: Arc<AtomicUsize>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl JwksStandIn {
    /// Serves the public halves of `keys`.
    pub async fn start(keys: &[&SigningKey]) -> std::io::Result<Self> {
        let published = Arc::new(Mutex::new(keys.iter().map(|key| key.jwk()).collect::<Vec<_>>()));
        let fetches = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new().route(
            "/.well-known/jwks.json",
            get({
                let published = published.clone();
                let fetches = fetches.clone();
                move || async move {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    let keys = published.lock().map(|keys| keys.clone()).unwrap_or_default();
                    axum::Json(json!({ "keys": keys }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let stop = crate::serve_in_background(listener, app);
        Ok(Self {
            base,
            keys: published,
            fetches,
            _stop: stop,
        })
    }

    /// The issuer's URL, which the tokens name (`iss`).
    pub fn issuer(&self) -> &str {
        &self.base
    }

    /// The key set's URL.
    pub fn jwks_url(&self) -> String {
        format!("{}/.well-known/jwks.json", self.base)
    }

    /// Publishes `key` beside the others (a rotation).
    pub fn publish(&self, key: &SigningKey) {
        if let Ok(mut keys) = self.keys.lock() {
            keys.push(key.jwk());
        }
    }

    /// How many times the key set was fetched.
    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

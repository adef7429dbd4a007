//! The issuer's keys behind people's own tokens (`serve --auth jwt`): how long they are kept, how
//! a rotation is picked up, what an issuer that cannot be read is answered, and where the keys
//! are found. The issuer is the test kit's stand-in on 127.0.0.1 ([`JwksStandIn`]), which can
//! change its keys, hang, answer garbage and count what it is asked.
//!
//! The verifier's clock is tokio's: a test moves it past a max age or an interval with
//! [`skip`], not by waiting.

use crate::support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_worker::hosts::jwt::{AccountFrom, JwtConfig, JwtVerifier};
use agent_worker_testkit::{IssuerAnswer, JwksStandIn, SigningKey};
use serde_json::{Value, json};
use support::container::{Server, server_with_tokens};

const AUDIENCE: &str = "app-client-1";
/// How long a test waits for something that takes milliseconds before it fails.
const DEADLINE: Duration = Duration::from_secs(10);

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// A token of `issuer` for `user` signed by `key`, valid for an hour.
fn token(key: &SigningKey, issuer: &JwksStandIn, user: &str) -> String {
    key.token(&json!({
        "iss": issuer.issuer(), "aud": AUDIENCE, "sub": user, "custom:account": "acme",
        "iat": now(), "exp": now() + 3600,
    }))
}

/// A host taking `issuer`'s tokens, its key set at `jwks_url` (found through discovery with
/// `None`), its verifier tuned by `tune`.
async fn host(issuer: &JwksStandIn, jwks_url: Option<String>, tune: impl FnOnce(&mut JwtConfig)) -> Server {
    let mut config = JwtConfig::new(
        issuer.issuer(),
        AUDIENCE,
        jwks_url,
        AccountFrom::Claim("custom:account".into()),
    )
    .unwrap();
    tune(&mut config);
    server_with_tokens(JwtVerifier::new(config, reqwest::Client::new())).await
}

/// What `GET /conversations` with `token` is answered: the status, `Retry-After`, the body.
async fn list(server: &Server, token: &str) -> (u16, Option<String>, Value) {
    let response = reqwest::Client::new()
        .get(format!("{}/conversations", server.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = response.text().await.unwrap();
    (
        status,
        retry_after,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The status alone.
async fn status(server: &Server, token: &str) -> u16 {
    list(server, token).await.0
}

/// Moves tokio's clock `by` at once (the server and the verifier run on the test's runtime),
/// then lets it run on in real time.
async fn skip(by: Duration) {
    tokio::time::pause();
    tokio::time::advance(by).await;
    tokio::time::resume();
}

/// Past `JWKS_MAX_AGE_SECONDS`' default of 300.
const PAST_MAX_AGE: Duration = Duration::from_secs(301);
/// Past the least time between two fetches of the keys for a key the verifier does not hold
/// (60 s), within the keys' max age.
const PAST_REFETCH_INTERVAL: Duration = Duration::from_secs(61);

#[tokio::test]
async fn a_key_the_issuer_removed_is_refused_once_the_keys_are_past_their_max_age() {
    let old = SigningKey::rs256("k-old");
    let new = SigningKey::es256("k-new");
    let issuer = JwksStandIn::start(&[&old, &new]).await.unwrap();
    let server = host(&issuer, Some(issuer.jwks_url()), |_| {}).await;
    assert_eq!(status(&server, &token(&old, &issuer, "ada")).await, 200);
    assert_eq!(issuer.fetches(), 1);

    issuer.replace(&[&new]);
    // Within their max age the keys held are the issuer's.
    assert_eq!(status(&server, &token(&old, &issuer, "ada")).await, 200);
    assert_eq!(issuer.fetches(), 1, "the keys are cached");

    skip(PAST_MAX_AGE).await;
    let (status_old, _, answer) = list(&server, &token(&old, &issuer, "ada")).await;
    assert_eq!(
        status_old, 401,
        "a removed key is refused past the max age: {answer}"
    );
    assert_eq!(status(&server, &token(&new, &issuer, "bob")).await, 200);
    assert_eq!(issuer.fetches(), 2, "the keys are read again once");
}

#[tokio::test]
async fn the_key_sets_cache_control_max_age_is_kept_when_it_is_shorter() {
    let old = SigningKey::rs256("k-old");
    let new = SigningKey::es256("k-new");
    let issuer = JwksStandIn::start(&[&old, &new]).await.unwrap();
    issuer.cache_for(Some(30));
    let server = host(&issuer, Some(issuer.jwks_url()), |_| {}).await;
    assert_eq!(status(&server, &token(&old, &issuer, "ada")).await, 200);
    issuer.replace(&[&new]);
    skip(Duration::from_secs(31)).await;
    assert_eq!(status(&server, &token(&old, &issuer, "ada")).await, 401);
    assert_eq!(status(&server, &token(&new, &issuer, "ada")).await, 200);
    assert_eq!(issuer.fetches(), 2);

    // A longer one is not: the keys are kept no longer than the verifier's own max age.
    issuer.cache_for(Some(86_400));
    skip(Duration::from_secs(31)).await;
    assert_eq!(status(&server, &token(&new, &issuer, "ada")).await, 200);
    assert_eq!(issuer.fetches(), 3);
    issuer.replace(&[&old]);
    skip(PAST_MAX_AGE).await;
    assert_eq!(status(&server, &token(&new, &issuer, "ada")).await, 401);
    assert_eq!(issuer.fetches(), 4);
}

#[tokio::test]
async fn a_new_key_under_a_known_kid_is_fetched_once_and_taken() {
    let first = SigningKey::rs256("k-1");
    let issuer = JwksStandIn::start(&[&first]).await.unwrap();
    let server = host(&issuer, Some(issuer.jwks_url()), |_| {}).await;
    assert_eq!(status(&server, &token(&first, &issuer, "ada")).await, 200);

    // The issuer rotates under the same kid.
    let second = SigningKey::rs256("k-1");
    issuer.replace(&[&second]);
    skip(PAST_REFETCH_INTERVAL).await;
    let (status_new, _, answer) = list(&server, &token(&second, &issuer, "ada")).await;
    assert_eq!(status_new, 200, "the new key is read: {answer}");
    assert_eq!(issuer.fetches(), 2);
    assert_eq!(status(&server, &token(&second, &issuer, "bob")).await, 200);
    assert_eq!(
        status(&server, &token(&first, &issuer, "ada")).await,
        401,
        "the old key is gone"
    );

    // A forger's key under the kid reads the keys no more often than the interval allows.
    for _ in 0..3 {
        let forger = SigningKey::rs256("k-1");
        assert_eq!(status(&server, &token(&forger, &issuer, "ada")).await, 401);
    }
    assert_eq!(issuer.fetches(), 2);
}

#[tokio::test]
async fn a_fetch_for_a_forged_kid_holds_up_no_request_whose_key_is_known() {
    let key = SigningKey::es256("k-1");
    let issuer = JwksStandIn::start(&[&key]).await.unwrap();
    // No interval between fetches: the forged kid fetches at once (the probe's did once a minute).
    let server = host(&issuer, Some(issuer.jwks_url()), |config| {
        config.refetch_interval = Duration::ZERO;
    })
    .await;
    assert_eq!(status(&server, &token(&key, &issuer, "ada")).await, 200);

    issuer.answer(IssuerAnswer::Hang);
    let forger = SigningKey::rs256("k-forged");
    let forged = token(&forger, &issuer, "ada");
    let url = server.url.clone();
    let forged = tokio::spawn(async move {
        let response = reqwest::Client::new()
            .get(format!("{url}/conversations"))
            .bearer_auth(forged)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    });
    tokio::time::timeout(DEADLINE, issuer.received(2))
        .await
        .expect("the forged kid's fetch reaches the issuer");

    // The fetch hangs; requests whose key is known are answered beside it (well within the
    // fetch's timeout of 5 s).
    for user in ["ada", "bob", "cy"] {
        let known = tokio::time::timeout(
            Duration::from_secs(3),
            status(&server, &token(&key, &issuer, user)),
        )
        .await
        .expect("a request whose key is known waits on no fetch");
        assert_eq!(known, 200);
    }
    assert_eq!(issuer.held(), 1, "the forged kid's fetch is still pending");
    assert!(!forged.is_finished());

    issuer.answer(IssuerAnswer::Normally);
    let (status_forged, answer) = tokio::time::timeout(DEADLINE, forged).await.unwrap().unwrap();
    assert_eq!(status_forged, 401, "{answer}");
    assert!(answer.contains("not one of the issuer's"), "{answer}");
}

#[tokio::test]
async fn while_the_issuer_cannot_be_read_every_request_is_503_with_retry_after() {
    let key = SigningKey::rs256("k-1");
    let issuer = JwksStandIn::start(&[&key]).await.unwrap();
    issuer.answer(IssuerAnswer::Hang);
    let server = std::sync::Arc::new(host(&issuer, Some(issuer.jwks_url()), |_| {}).await);

    // A first request's fetch hangs; others come while it does.
    let ask = |user: &'static str| {
        let server = server.clone();
        let token = token(&key, &issuer, user);
        tokio::spawn(async move { list(&server, &token).await })
    };
    let mut asked = vec![ask("ada")];
    tokio::time::timeout(DEADLINE, issuer.received(1)).await.unwrap();
    asked.extend(["bob", "cy", "dee", "eve"].map(ask));
    // The issuer answers the fetch with garbage.
    issuer.answer(IssuerAnswer::Garbage);
    for asked in asked {
        let (status, retry_after, answer) = tokio::time::timeout(DEADLINE, asked).await.unwrap().unwrap();
        assert_eq!(status, 503, "{answer}");
        assert!(retry_after.is_some(), "{answer}");
    }
    // And later ones, while it answers garbage.
    for user in ["ada", "bob", "cy"] {
        let (status, retry_after, answer) = list(&server, &token(&key, &issuer, user)).await;
        assert_eq!((status, retry_after.is_some()), (503, true), "{answer}");
    }

    // Once it can be read, tokens are taken.
    issuer.answer(IssuerAnswer::Normally);
    skip(Duration::from_secs(2)).await;
    let (status, _, answer) = list(&server, &token(&key, &issuer, "ada")).await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn an_issuer_that_hangs_past_the_fetch_timeout_is_503_for_every_request_until_it_answers() {
    let key = SigningKey::es256("k-1");
    let issuer = JwksStandIn::start(&[&key]).await.unwrap();
    issuer.answer(IssuerAnswer::Hang);
    let server = host(&issuer, Some(issuer.jwks_url()), |config| {
        config.fetch_timeout = Duration::from_millis(200);
        config.retry_interval = Duration::from_secs(30);
    })
    .await;
    for user in ["ada", "bob", "cy"] {
        let (status, retry_after, answer) = list(&server, &token(&key, &issuer, user)).await;
        assert_eq!((status, retry_after.is_some()), (503, true), "{answer}");
    }
    assert_eq!(
        issuer.fetches(),
        1,
        "within the retry interval the failure is answered at once"
    );

    // Past the retry interval the issuer is read again, once.
    skip(Duration::from_secs(31)).await;
    issuer.answer(IssuerAnswer::Normally);
    assert_eq!(status(&server, &token(&key, &issuer, "ada")).await, 200);
    assert_eq!(issuer.fetches(), 2);
}

#[tokio::test]
async fn without_a_jwks_url_the_keys_are_found_through_oidc_discovery() {
    let key = SigningKey::rs256("k-1");
    let issuer = JwksStandIn::start(&[&key]).await.unwrap();
    // The stand-in serves its keys only where its discovery document says
    // (`/.well-known/jwks.json` is 404 there).
    let server = host(&issuer, None, |_| {}).await;
    assert_eq!(
        (issuer.discoveries(), issuer.fetches()),
        (0, 0),
        "nothing is read before a token comes"
    );
    let (status_first, _, answer) = list(&server, &token(&key, &issuer, "ada")).await;
    assert_eq!(status_first, 200, "{answer}");
    assert_eq!(status(&server, &token(&key, &issuer, "bob")).await, 200);
    assert_eq!((issuer.discoveries(), issuer.fetches()), (1, 1));

    // An issuer whose document or keys cannot be read is 503, as for keys named directly.
    issuer.answer(IssuerAnswer::Garbage);
    skip(PAST_MAX_AGE).await;
    for _ in 0..2 {
        let (status, retry_after, answer) = list(&server, &token(&key, &issuer, "ada")).await;
        assert_eq!((status, retry_after.is_some()), (503, true), "{answer}");
        skip(Duration::from_secs(2)).await;
    }
    issuer.answer(IssuerAnswer::Normally);
    assert_eq!(status(&server, &token(&key, &issuer, "ada")).await, 200);
    // Read first, then (its keys' URL failing) with each attempt: garbage once, then the document.
    assert_eq!(
        issuer.discoveries(),
        3,
        "the document is read again after its keys failed"
    );
}

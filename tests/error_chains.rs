//! Every error chain says each cause once: an error of each crate of the workspace keeps what
//! caused it as its source, its own message does not repeat the source's text, and
//! [`chain`](agent_worker::protocol::chain) prints the whole of it, each part once. The failures
//! underneath are real where they can be: an AWS SDK call and an HTTP request to a port nothing
//! listens on.

use agent_worker::session::HistoryStore as _;
use std::collections::BTreeSet;
use std::error::Error;
use std::time::Duration;

use agent_worker::Failure;
use agent_worker::hosts::agent_protocol::AgentProtocolClient;
use agent_worker::hosts::jwt::{AccountFrom, JwtConfig, JwtVerifier, TokenError};
use agent_worker::hosts::{AgentTurnPayload, TurnQueue};
use agent_worker::protocol::{AgentFailure, CollectError, chain};
use agent_worker::session::{DynamoConfig, DynamoStore, SessionId, StoreError};
use agent_worker::sinks::SinkError;

/// An address nothing listens on: a call there is refused at once.
const NOWHERE: &str = "http://127.0.0.1:1";

/// `error`'s chain, asserting that the message of each error in it (the error's own, and each
/// of its causes') appears in it exactly once.
fn each_cause_once(error: &(dyn Error + 'static)) -> String {
    let said = chain(error);
    let mut cause = Some(error);
    let mut causes = 0;
    while let Some(e) = cause {
        let text = e.to_string();
        assert!(!text.is_empty(), "an error in {said:?} says nothing");
        assert_eq!(
            said.matches(text.as_str()).count(),
            1,
            "{text:?} is not said once in {said:?}"
        );
        causes += 1;
        cause = e.source();
    }
    assert!(causes > 1, "{said:?} has no cause");
    said
}

/// The innermost cause of `error`.
fn root_cause<'a>(error: &'a (dyn Error + 'static)) -> &'a (dyn Error + 'static) {
    let mut error = error;
    while let Some(source) = error.source() {
        error = source;
    }
    error
}

fn dynamodb_nowhere() -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version_latest()
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "a", "b", None, None, "test",
        ))
        .endpoint_url(NOWHERE)
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

fn store_nowhere() -> DynamoStore {
    DynamoStore::new(dynamodb_nowhere(), DynamoConfig::new("sessions").unwrap())
}

/// `agent-worker-contract`: a turn that failed, collected.
#[test]
fn a_collected_failure_says_the_agents_words_once() {
    let error = CollectError::Failed(AgentFailure {
        details: "the quota is spent".into(),
        retryable: false,
        code: None,
    });
    let said = each_cause_once(&error);
    assert_eq!(said, "the agent failed: the quota is spent");
}

/// `agent-worker-core`: a store error over a failure over an I/O error, and a sink's.
#[test]
fn a_store_error_says_what_was_done_and_why_once() {
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
    let error = StoreError::Backend(Failure::caused_by("writing turn t-1", io));
    assert_eq!(error.to_string(), "the session store failed");
    let said = each_cause_once(&error);
    assert_eq!(
        said,
        "the session store failed: writing turn t-1: connection refused"
    );

    let sink = SinkError::caused_by("writing events 3 to 5", std::io::Error::other("disk full"));
    assert_eq!(each_cause_once(&sink), "writing events 3 to 5: disk full");
}

/// `agent-worker-aws`: the DynamoDB store, its call refused before it reached the service.
#[tokio::test]
async fn a_dynamodb_failure_says_the_sdks_words_once() {
    let error = store_nowhere()
        .load_history(&SessionId::new("s-1").unwrap())
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Backend(_)), "{error:?}");
    let said = each_cause_once(&error);
    assert!(said.starts_with("the session store failed: "), "{said}");
    let io = root_cause(&error);
    assert_eq!(said.matches(&io.to_string()).count(), 1, "{said}");
}

/// `agent-worker-testkit`: the audit, its scan refused.
#[tokio::test]
async fn an_audit_that_cannot_scan_says_why_once() {
    let error = agent_worker_testkit::session_audit::audit(&store_nowhere(), &[], &BTreeSet::new())
        .await
        .unwrap_err();
    let said = each_cause_once(&error);
    assert!(said.starts_with("the table cannot be scanned: "), "{said}");
}

/// `agent-worker`: the issuer's keys that cannot be fetched (the HTTP client's error kept), an
/// Agent Protocol call that cannot be made, and an SQS call that cannot be.
#[tokio::test]
async fn the_hosts_errors_say_each_cause_once() {
    let mut config = JwtConfig::new(
        NOWHERE,
        "app",
        Some(format!("{NOWHERE}/keys")),
        AccountFrom::Claim("account".into()),
    )
    .unwrap();
    config.fetch_timeout = Duration::from_secs(5);
    let verifier = JwtVerifier::new(config, reqwest::Client::new());
    // A header that names RS256 (`{"alg":"RS256"}`): the verifier goes for the issuer's keys.
    let error = verifier
        .verify("eyJhbGciOiJSUzI1NiJ9.e30.c2ln")
        .await
        .unwrap_err();
    assert!(matches!(error, TokenError::KeysUnavailable(_)), "{error:?}");
    let said = each_cause_once(&error);
    assert!(
        said.starts_with(&format!(
            "the issuer's keys cannot be read: {NOWHERE}/keys cannot be read: "
        )),
        "{said}"
    );
    assert_eq!(said.matches(NOWHERE).count(), 1, "the URL is said once: {said}");
    let mut cause: Option<&(dyn Error + 'static)> = Some(&error);
    let mut kept = false;
    while let Some(e) = cause {
        kept |= e.is::<reqwest::Error>();
        cause = e.source();
    }
    assert!(kept, "the HTTP client's error is kept: {error:?}");

    let client = AgentProtocolClient::new(NOWHERE).unwrap();
    let error = client.get_agent_task("t-1").await.unwrap_err();
    let said = each_cause_once(&error);
    assert!(said.starts_with("the request failed: "), "{said}");

    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version_latest()
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                "a", "b", None, None, "test",
            ))
            .endpoint_url(NOWHERE)
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
            .build(),
    );
    let queue = TurnQueue::new(sqs, format!("{NOWHERE}/000000000000/turns"));
    let turn = AgentTurnPayload::decode(
        r#"{"turnId": "t-1", "conversationId": "s-1", "userId": "u-1", "accountId": "a-1", "content": "hi"}"#,
    )
    .unwrap();
    let error = queue.send(&turn).await.unwrap_err();
    let said = each_cause_once(&error);
    assert!(
        said.starts_with("the turns queue did not take the turn: the AWS call failed: "),
        "{said}"
    );
}

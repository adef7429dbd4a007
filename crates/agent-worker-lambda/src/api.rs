//! The product's HTTP API on Lambda (feature `api`, the `api` binary): the container's router
//! served from Function URL and API Gateway (HTTP API) events by `lambda_http`; behind a Function
//! URL its answers are streamed, so a turn's events reach the client as they are written.
//!
//! What Lambda verified of a request (the claims of API Gateway's JWT authorizer, the caller
//! whose AWS signature the Function URL checked) is in the event's request context, which Lambda
//! writes and a caller cannot; [`run`] hands it to the router's one authentication as a
//! [`VerifiedCaller`] (`AUTH=apigw-jwt`, `AUTH=iam`).

use axum::Router;
use axum::extract::Request;
use lambda_http::RequestExt as _;
use lambda_http::request::RequestContext;
use serde_json::Value;

use agent_worker_container::AUTH_SETTINGS;
use agent_worker_container::access::VerifiedCaller;

/// The queue the `api` function sends each turn to.
pub const TURNS_QUEUE_URL: &str = "TURNS_QUEUE_URL";
/// How the `api` function answers ([`Responses`]): `streamed` (a Function URL, the default) or
/// `buffered` (behind API Gateway's HTTP API).
pub const API_RESPONSES: &str = "API_RESPONSES";

/// Of the worker's settings ([`WORKER_SETTINGS`](agent_worker_runtime::settings::WORKER_SETTINGS)), those the
/// `api` function reads: its store, the tools whose calls a conversation shows, and the file
/// area, and whether the workers push A2A updates (so its card says what they do, and it keeps
/// the webhooks they push to). It runs no turn, so it reads neither the model's settings and
/// keys, nor the tuning, the sinks, the approvals' key, the metrics or the traces: the worker
/// function's settings can be given to it whole, and it needs no grant to read the worker's
/// secrets.
pub const API_WORKER_SETTINGS: [&str; 8] = [
    "TABLE_NAME",
    "DYNAMODB_ATTEMPT_TIMEOUT_MS",
    "TOOLS",
    "FILES_BUCKET",
    "FILES_PREFIX",
    "FILES_DIR",
    "A2A_PUSH",
    "A2A_PUSH_LOOPBACK",
];

/// What `MODEL_ID` stands for in the `api` function: the worker's settings require one, and the
/// API calls none (its health check says `"model": null`).
pub const NO_MODEL: &str = "none";

/// Every name the `api` function reads from its environment: its own ([`TURNS_QUEUE_URL`],
/// [`API_RESPONSES`]), the configuration file's ([`CONFIG_ENV`](agent_worker_runtime::config::CONFIG_ENV)),
/// how people are known and the agent card ([`AUTH_SETTINGS`]), [`API_WORKER_SETTINGS`], and
/// for each of those a secret may hold, the setting naming its secret
/// ([`SECRET_SETTINGS`](agent_worker_runtime::secrets::SECRET_SETTINGS)).
pub fn api_settings() -> Vec<&'static str> {
    let names = [
        TURNS_QUEUE_URL,
        API_RESPONSES,
        agent_worker_runtime::config::CONFIG_ENV,
    ]
    .into_iter()
    .chain(AUTH_SETTINGS)
    .chain(API_WORKER_SETTINGS);
    let secrets = agent_worker_runtime::secrets::SECRET_SETTINGS
        .into_iter()
        .filter(|(name, _)| names.clone().any(|read| read == *name))
        .map(|(_, arn_name)| arn_name);
    names.clone().chain(secrets).collect()
}

/// How the function answers its invocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Responses {
    /// Streamed as they are written (a Function URL with `InvokeMode: RESPONSE_STREAM`): a
    /// turn's events arrive live (`tests/api_function_streaming.rs` sees the first arrive while
    /// the turn's model has not finished).
    #[default]
    Streamed,
    /// Whole, once written (API Gateway's HTTP API, which does not stream): for the
    /// request/response routes; a turn's event stream is followed through the Function URL.
    Buffered,
}

/// A [`Responses`] that is neither.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("is {0:?}; it is streamed or buffered")]
pub struct UnknownResponses(pub String);

impl std::str::FromStr for Responses {
    type Err = UnknownResponses;

    fn from_str(value: &str) -> Result<Self, UnknownResponses> {
        match value.trim() {
            "" | "streamed" => Ok(Self::Streamed),
            "buffered" => Ok(Self::Buffered),
            other => Err(UnknownResponses(other.to_owned())),
        }
    }
}

/// Serves `router` to the Lambda Runtime API, one request per invocation, each answer as
/// `responses` says.
pub async fn run(router: Router, responses: Responses) -> Result<(), lambda_runtime::Error> {
    let router = router.layer(axum::middleware::map_request(with_verified_caller));
    match responses {
        Responses::Streamed => lambda_http::run_with_streaming_response(router).await,
        Responses::Buffered => lambda_http::run(router).await,
    }
}

async fn with_verified_caller(mut request: Request) -> Request {
    // Whatever a caller sent, only what Lambda's request context says stands.
    request.extensions_mut().remove::<VerifiedCaller>();
    if let Some(verified) = verified_caller(&request) {
        request.extensions_mut().insert(verified);
    }
    request
}

/// What Lambda verified of `request`, from its event's request context: API Gateway's JWT
/// authorizer's claims, or the Function URL's IAM caller; `None` for a request no one verified.
pub fn verified_caller<B>(request: &axum::http::Request<B>) -> Option<VerifiedCaller> {
    let Some(RequestContext::ApiGatewayV2(context)) = request.request_context_ref() else {
        return None;
    };
    let authorizer = context.authorizer.as_ref()?;
    if let Some(jwt) = &authorizer.jwt {
        let claims = jwt
            .claims
            .iter()
            .map(|(name, value)| (name.clone(), Value::String(value.clone())))
            .collect();
        return Some(VerifiedCaller::Claims(claims));
    }
    let iam = authorizer.iam.as_ref()?;
    let caller = iam.user_arn.clone().or_else(|| iam.caller_id.clone())?;
    Some(VerifiedCaller::Iam { caller })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_reads_its_own_names_and_the_worker_s_it_uses() {
        let names = api_settings();
        for name in [
            "TURNS_QUEUE_URL",
            "AUTH",
            "JWKS_URL",
            "TABLE_NAME",
            "AGENT_WORKER_CONFIG",
        ] {
            assert!(names.contains(&name), "{name}");
        }
        // The API's key may come from a secret; no key of the worker's is read.
        assert!(names.contains(&"AGENT_WORKER_API_KEY_SECRET_ARN"));
        for name in [
            "MODEL_ID",
            "APPROVAL_SECRET_ARN",
            "ANTHROPIC_API_KEY_SECRET_ARN",
            "TURN_DEADLINE_MS",
        ] {
            assert!(!names.contains(&name), "{name}");
        }
        for name in API_WORKER_SETTINGS {
            assert!(
                agent_worker_runtime::settings::WORKER_SETTINGS.contains(&name),
                "{name} is a worker setting"
            );
        }
        // What the API reads of the worker's settings is enough to read them.
        let lookup = |name: &str| match name {
            "MODEL_ID" => Some(NO_MODEL.to_owned()),
            "TABLE_NAME" => Some("t".to_owned()),
            _ => None,
        };
        assert!(agent_worker_runtime::WorkerSettings::from_lookup(lookup).is_ok());
    }
}

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

use super::container::access::VerifiedCaller;

/// How the function answers its invocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Responses {
    /// Streamed as they are written (a Function URL with `InvokeMode: RESPONSE_STREAM`): a
    /// turn's events arrive live.
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

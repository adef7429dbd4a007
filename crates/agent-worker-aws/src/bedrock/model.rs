//! [`BedrockModel`]: the [`Model`] on Amazon Bedrock's ConverseStream API.

use std::collections::HashMap;
use std::fmt;

use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_bedrockruntime::Client;
use aws_sdk_bedrockruntime::client::customize::CustomizableOperation;
use aws_sdk_bedrockruntime::config::retry::RetryConfig;
use aws_sdk_bedrockruntime::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_bedrockruntime::operation::converse_stream::builders::ConverseStreamFluentBuilder;
use aws_sdk_bedrockruntime::operation::converse_stream::{
    ConverseStreamError, ConverseStreamOutput as ConverseStreamOutputs,
};
use aws_sdk_bedrockruntime::primitives::event_stream::EventReceiver;
use aws_sdk_bedrockruntime::types::error::ConverseStreamOutputError;
use aws_sdk_bedrockruntime::types::{
    self as bedrock, ContentBlockDelta, ContentBlockStart, ConverseStreamOutput, ReasoningContentBlockDelta,
};
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::event_stream::RawMessage;
use bytes::Bytes;
use futures_util::stream;

use agent_worker_core::engine::model::{
    Model, ModelError, ModelErrorKind, ModelEvent, ModelRequest, ModelStream, StopReason, TokenUsage,
};

use super::request_body;

/// A Bedrock model reached through `aws-sdk-bedrockruntime`'s ConverseStream.
///
/// The client is injected, so its endpoint, region and credentials are the caller's (a test
/// points it at the stand-in). Its own retries are switched off: the engine retries, and
/// announces every retry. Each request's body is written by [`request_body`](super::request_body)
/// with every JSON object's keys in sorted order, so the same request is the same bytes on every
/// worker and the prompt cache can match it.
///
/// ```no_run
/// # async fn demo() {
/// use agent_worker_aws::BedrockModel;
///
/// let sdk_config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
/// let client = aws_sdk_bedrockruntime::Client::new(&sdk_config);
/// let model = BedrockModel::new(client, "us.anthropic.claude-sonnet-4-6");
/// # }
/// ```
#[derive(Clone)]
pub struct BedrockModel {
    client: Client,
    model_id: String,
    prompt_caching: bool,
}

/// Whether Bedrock's prompt caching is known to work for `model_id`: Anthropic Claude and
/// Amazon Nova models (and inference profiles or ARNs naming them).
pub fn supports_prompt_caching(model_id: &str) -> bool {
    model_id.contains("anthropic.claude") || model_id.contains("amazon.nova")
}

impl fmt::Debug for BedrockModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BedrockModel")
            .field("model_id", &self.model_id)
            .field("prompt_caching", &self.prompt_caching)
            .finish_non_exhaustive()
    }
}

impl BedrockModel {
    /// A model `model_id` (a model id, inference profile id or ARN) on `client`, whose own
    /// retries are switched off. Prompt caching is on for the models that
    /// [support it](supports_prompt_caching).
    pub fn new(client: Client, model_id: impl Into<String>) -> Self {
        let config = client
            .config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .build();
        let model_id = model_id.into();
        Self {
            client: Client::from_conf(config),
            prompt_caching: supports_prompt_caching(&model_id),
            model_id,
        }
    }

    /// Turns prompt caching on or off: with it, each request carries a `cachePoint` after the
    /// system prompt (and tools) and one after the stored history
    /// ([`CachePlan`](agent_worker_core::engine::model::CachePlan)).
    #[must_use]
    pub fn with_prompt_caching(mut self, on: bool) -> Self {
        self.prompt_caching = on;
        self
    }
}

impl Model for BedrockModel {
    fn id(&self) -> &str {
        &self.model_id
    }

    fn pdf_document_limit(&self) -> Option<usize> {
        Some(MAX_DOCUMENT_BLOCK_BYTES)
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        let call = build_call(&self.client, &self.model_id, &request, self.prompt_caching);
        let state = match call {
            Ok(call) => State::Start(Box::new(call)),
            Err(error) => State::Failed(Some(error)),
        };
        Box::pin(stream::unfold(state, next_event))
    }
}

type Call = CustomizableOperation<ConverseStreamOutputs, ConverseStreamError, ConverseStreamFluentBuilder>;
type Receiver = EventReceiver<ConverseStreamOutput, ConverseStreamOutputError>;

enum State {
    Start(Box<Call>),
    Streaming(Box<Receiver>, Assembly),
    Failed(Option<ModelError>),
    Done,
}

/// Tool calls being assembled, by content block index.
#[derive(Default)]
struct Assembly {
    tools: HashMap<i32, (String, String, String)>,
}

async fn next_event(mut state: State) -> Option<(Result<ModelEvent, ModelError>, State)> {
    loop {
        state = match state {
            State::Done => return None,
            State::Failed(error) => return error.map(|e| (Err(e), State::Done)),
            State::Start(call) => match call.send().await {
                Ok(output) => State::Streaming(Box::new(output.stream), Assembly::default()),
                Err(error) => return Some((Err(classify_call_error(&error)), State::Done)),
            },
            State::Streaming(mut receiver, mut assembly) => match receiver.recv().await {
                Ok(Some(output)) => match translate(output, &mut assembly) {
                    Ok(Some(event)) => return Some((Ok(event), State::Streaming(receiver, assembly))),
                    Ok(None) => State::Streaming(receiver, assembly),
                    Err(error) => return Some((Err(error), State::Done)),
                },
                Ok(None) => return None,
                Err(error) => return Some((Err(classify_stream_error(&error)), State::Done)),
            },
        };
    }
}

/// One stream event as the engine's, if it is one; an error when the message stops with a tool
/// call still open (its input never closed): that call is named, never dropped.
fn translate(
    output: ConverseStreamOutput,
    assembly: &mut Assembly,
) -> Result<Option<ModelEvent>, ModelError> {
    if let ConverseStreamOutput::MessageStop(_) = &output
        && let Some((index, (id, name, _))) = assembly.tools.iter().min_by_key(|(index, _)| **index)
    {
        return Err(ModelError::new(
            ModelErrorKind::StreamInterrupted,
            format!(
                "the model's response stopped inside its call of `{name}` ({id}, block {index}): the call's input was never closed"
            ),
        ));
    }
    Ok(event_of(output, assembly))
}

fn event_of(output: ConverseStreamOutput, assembly: &mut Assembly) -> Option<ModelEvent> {
    match output {
        ConverseStreamOutput::ContentBlockStart(start) => {
            if let Some(ContentBlockStart::ToolUse(tool)) = start.start() {
                assembly.tools.insert(
                    start.content_block_index(),
                    (
                        tool.tool_use_id().to_owned(),
                        tool.name().to_owned(),
                        String::new(),
                    ),
                );
            }
            None
        }
        ConverseStreamOutput::ContentBlockDelta(delta) => match delta.delta()? {
            ContentBlockDelta::Text(text) if !text.is_empty() => Some(ModelEvent::TextDelta(text.clone())),
            ContentBlockDelta::ReasoningContent(ReasoningContentBlockDelta::Text(text))
                if !text.is_empty() =>
            {
                Some(ModelEvent::ReasoningDelta(text.clone()))
            }
            ContentBlockDelta::ReasoningContent(ReasoningContentBlockDelta::Signature(sig)) => {
                Some(ModelEvent::ReasoningSignature(sig.clone()))
            }
            ContentBlockDelta::ReasoningContent(ReasoningContentBlockDelta::RedactedContent(blob)) => {
                Some(ModelEvent::RedactedReasoning(blob.clone().into_inner()))
            }
            ContentBlockDelta::ToolUse(tool) => {
                if let Some(entry) = assembly.tools.get_mut(&delta.content_block_index()) {
                    entry.2.push_str(tool.input());
                }
                None
            }
            _ => None,
        },
        ConverseStreamOutput::ContentBlockStop(stop) => assembly
            .tools
            .remove(&stop.content_block_index())
            .map(|(id, name, input)| ModelEvent::ToolUse { id, name, input }),
        ConverseStreamOutput::MessageStop(stop) => Some(ModelEvent::Stop(stop_reason(stop.stop_reason()))),
        ConverseStreamOutput::Metadata(meta) => meta.usage().map(|usage| {
            ModelEvent::Usage(TokenUsage {
                input_tokens: u64::try_from(usage.input_tokens()).unwrap_or_default(),
                output_tokens: u64::try_from(usage.output_tokens()).unwrap_or_default(),
                cache_read_tokens: usage
                    .cache_read_input_tokens()
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or_default(),
                cache_write_tokens: usage
                    .cache_write_input_tokens()
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or_default(),
            })
        }),
        _ => None,
    }
}

fn stop_reason(reason: &bedrock::StopReason) -> StopReason {
    match reason {
        bedrock::StopReason::EndTurn => StopReason::EndTurn,
        bedrock::StopReason::ToolUse => StopReason::ToolUse,
        bedrock::StopReason::MaxTokens => StopReason::MaxTokens,
        bedrock::StopReason::StopSequence => StopReason::StopSequence,
        bedrock::StopReason::GuardrailIntervened => StopReason::GuardrailIntervened,
        bedrock::StopReason::ContentFiltered => StopReason::ContentFiltered,
        other => StopReason::Other(other.as_str().to_owned()),
    }
}

fn described<E: ProvideErrorMetadata>(err: &E, fallback: &str) -> String {
    match (err.code(), err.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        (None, Some(message)) => message.to_owned(),
        (None, None) => fallback.to_owned(),
    }
}

/// What a person is told when no AWS credentials could be loaded: the one thing to do, not each
/// attempt of the credential chain (the whole chain is logged at debug).
pub(crate) const NO_CREDENTIALS: &str = "no AWS credentials were found: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and \
                                  AWS_SECRET_ACCESS_KEY), or run `aws configure`";

/// Whether `error` came of credentials that could not be loaded (none configured, or the
/// instance metadata service out of reach): no retry can help, and the fix is the person's.
fn lacks_credentials(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<CredentialsError>() {
            return true;
        }
        next = error.source();
    }
    false
}

/// The failure for a call made without credentials, when that is what `error` is.
fn without_credentials(error: &(dyn std::error::Error + 'static)) -> Option<ModelError> {
    lacks_credentials(error).then(|| {
        tracing::debug!(error = %DisplayErrorContext(error), "no AWS credentials could be loaded");
        ModelError::new(ModelErrorKind::AccessDenied, NO_CREDENTIALS)
    })
}

fn classify_call_error(error: &SdkError<ConverseStreamError>) -> ModelError {
    use ConverseStreamError as E;
    if let Some(failure) = without_credentials(error) {
        return failure;
    }
    let kind = match error {
        SdkError::ServiceError(service) => match service.err() {
            E::ThrottlingException(_) => ModelErrorKind::Throttled,
            E::ModelNotReadyException(_) => ModelErrorKind::NotReady,
            E::ServiceUnavailableException(_) | E::InternalServerException(_) => ModelErrorKind::Unavailable,
            E::ModelTimeoutException(_) => ModelErrorKind::Timeout,
            E::ModelStreamErrorException(_) => ModelErrorKind::StreamInterrupted,
            E::ValidationException(_) | E::ModelErrorException(_) => ModelErrorKind::Rejected,
            E::AccessDeniedException(_) => ModelErrorKind::AccessDenied,
            E::ResourceNotFoundException(_) => ModelErrorKind::NotFound,
            _ => match service.raw().status().as_u16() {
                429 => ModelErrorKind::Throttled,
                500..=599 => ModelErrorKind::Unavailable,
                400 => ModelErrorKind::Rejected,
                _ => ModelErrorKind::Other,
            },
        },
        SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => ModelErrorKind::Unavailable,
        SdkError::TimeoutError(_) => ModelErrorKind::Timeout,
        _ => ModelErrorKind::Other,
    };
    let message = match error {
        SdkError::ServiceError(service) => described(service.err(), "the model call failed"),
        other => format!("the model call failed: {}", DisplayErrorContext(other)),
    };
    ModelError::new(kind, message)
}

fn classify_stream_error(error: &SdkError<ConverseStreamOutputError, RawMessage>) -> ModelError {
    use ConverseStreamOutputError as E;
    if let Some(failure) = without_credentials(error) {
        return failure;
    }
    let kind = match error {
        SdkError::ServiceError(service) => match service.err() {
            E::ThrottlingException(_) => ModelErrorKind::Throttled,
            E::ServiceUnavailableException(_) | E::InternalServerException(_) => ModelErrorKind::Unavailable,
            E::ModelStreamErrorException(_) => ModelErrorKind::StreamInterrupted,
            E::ValidationException(_) => ModelErrorKind::Rejected,
            _ => ModelErrorKind::StreamInterrupted,
        },
        SdkError::TimeoutError(_) => ModelErrorKind::Timeout,
        _ => ModelErrorKind::StreamInterrupted,
    };
    let message = match error {
        SdkError::ServiceError(service) => described(service.err(), "the model's stream failed"),
        other => format!("the model's stream failed: {}", DisplayErrorContext(other)),
    };
    ModelError::new(kind, message)
}

fn invalid(what: impl fmt::Display) -> ModelError {
    ModelError::new(
        ModelErrorKind::Other,
        format!("could not build the Bedrock request: {what}"),
    )
}

/// The largest document Converse takes in one block (4.5 MB).
const MAX_DOCUMENT_BLOCK_BYTES: usize = 4_500_000;

/// The call of `request` on `model_id`: an operation whose only input is the model id, sent with
/// the body [`request_body`](super::request_body) writes (set before the request is signed).
fn build_call(
    client: &Client,
    model_id: &str,
    request: &ModelRequest,
    caching: bool,
) -> Result<Call, ModelError> {
    let body = Bytes::from(request_body::write(request, caching).map_err(invalid)?);
    Ok(client
        .converse_stream()
        .model_id(model_id)
        .customize()
        .mutate_request(move |http| {
            http.headers_mut()
                .insert("content-length", body.len().to_string());
            *http.body_mut() = SdkBody::from(body.clone());
        }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_bedrockruntime::error::ConnectorError;

    #[test]
    fn a_call_without_credentials_says_what_to_do_and_is_not_retried() {
        let chain = CredentialsError::provider_error("failed to load IMDS session token: request forbidden");
        let error =
            SdkError::<ConverseStreamError>::dispatch_failure(ConnectorError::other(Box::new(chain), None));
        let failure = classify_call_error(&error);
        assert_eq!(failure.kind, ModelErrorKind::AccessDenied);
        assert_eq!(failure.message, NO_CREDENTIALS);
        assert!(!failure.message.contains("IMDS"), "{}", failure.message);
    }

    #[test]
    fn a_connection_refused_is_still_unavailable() {
        let error = SdkError::<ConverseStreamError>::dispatch_failure(ConnectorError::io(
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
        ));
        assert_eq!(classify_call_error(&error).kind, ModelErrorKind::Unavailable);
    }
}

//! [`AwsError`]: an AWS call that failed, the SDK's error kept as its source.

use std::error::Error;
use std::fmt;

use aws_sdk_sqs::error::{DisplayErrorContext, SdkError};
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// An AWS call that failed. Its text is short: the service's code and message when the service
/// answered (the raw response left out), else the chain of causes (a connection refused, a
/// timeout, no credentials). The SDK's error is its [`source`](Error::source), whole.
#[derive(Debug)]
pub struct AwsError {
    /// The service's code and message, when it answered.
    refusal: Option<(String, String)>,
    source: Box<dyn Error + Send + Sync>,
}

impl AwsError {
    /// The failure `error` of an SDK call.
    pub fn new<E, R>(error: SdkError<E, R>) -> Self
    where
        E: Error + ProvideErrorMetadata + Send + Sync + 'static,
        R: fmt::Debug + Send + Sync + 'static,
    {
        let refusal = error.as_service_error().map(|refused| {
            (
                refused.code().unwrap_or("an error").to_owned(),
                refused.message().unwrap_or("(no message)").to_owned(),
            )
        });
        Self {
            refusal,
            source: Box::new(error),
        }
    }

    /// The service's error code, when it answered (`ResourceNotFoundException`, say).
    pub fn code(&self) -> Option<&str> {
        self.refusal.as_ref().map(|(code, _)| code.as_str())
    }
}

impl fmt::Display for AwsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.refusal {
            Some((code, message)) => write!(f, "{code}: {message}"),
            None => write!(f, "{}", DisplayErrorContext(self.source.as_ref())),
        }
    }
}

impl Error for AwsError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(self.source.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::operation::send_message::SendMessageError;
    use aws_sdk_sqs::types::error::InvalidMessageContents;

    #[test]
    fn a_refusal_says_its_code_and_message_and_keeps_the_sdk_error() {
        let refused = SendMessageError::InvalidMessageContents(
            InvalidMessageContents::builder()
                .message("a character is not allowed")
                .meta(
                    aws_smithy_types::error::ErrorMetadata::builder()
                        .code("InvalidMessageContents")
                        .message("a character is not allowed")
                        .build(),
                )
                .build(),
        );
        let error = AwsError::new(SdkError::<_, ()>::service_error(refused, ()));
        assert_eq!(
            error.to_string(),
            "InvalidMessageContents: a character is not allowed"
        );
        assert_eq!(error.code(), Some("InvalidMessageContents"));
        assert!(
            error
                .source()
                .is_some_and(|s| s.is::<SdkError<SendMessageError, ()>>())
        );
    }

    #[test]
    fn a_call_that_never_reached_the_service_says_why() {
        let timeout = SdkError::<SendMessageError, ()>::timeout_error("no answer in 10 s");
        let error = AwsError::new(timeout);
        assert!(error.to_string().contains("no answer in 10 s"), "{error}");
        assert_eq!(error.code(), None);
    }
}

//! [`AwsError`]: an AWS call that failed, the SDK's error kept as its source.

use std::error::Error;
use std::fmt;

use aws_sdk_sqs::error::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// An AWS call that failed. Its text says only whether the service refused the call; the SDK's
/// error is its [`source`](Error::source), whole, and says the rest: the service's code and
/// message (the raw response left out), or why the call never reached it (a connection refused,
/// a timeout, no credentials). [`chain`](agent_worker_contract::chain) prints it all, each part once.
#[derive(Debug)]
pub struct AwsError {
    /// The service's code, when it answered.
    code: Option<String>,
    source: Box<dyn Error + Send + Sync>,
}

impl AwsError {
    /// The failure `error` of an SDK call.
    pub fn new<E, R>(error: SdkError<E, R>) -> Self
    where
        E: Error + ProvideErrorMetadata + Send + Sync + 'static,
        R: fmt::Debug + Send + Sync + 'static,
    {
        let code = error
            .as_service_error()
            .map(|refused| refused.code().unwrap_or_default().to_owned());
        Self {
            code,
            source: Box::new(error),
        }
    }

    /// The service's error code, when it answered (`ResourceNotFoundException`, say).
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref().filter(|code| !code.is_empty())
    }
}

impl fmt::Display for AwsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(_) => f.write_str("AWS refused the call"),
            None => f.write_str("the AWS call failed"),
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
            agent_worker_contract::chain(&error),
            "AWS refused the call: service error: InvalidMessageContents: a character is not allowed"
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
        let said = agent_worker_contract::chain(&error);
        assert_eq!(said.matches("no answer in 10 s").count(), 1, "{said}");
        assert!(said.starts_with("the AWS call failed: "), "{said}");
        assert_eq!(error.code(), None);
    }
}

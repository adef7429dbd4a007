//! [`store_error`]: a DynamoDB call's failure as the store's error, shared by every module of
//! the table.

use std::fmt;

use agent_worker_core::Failure;
use agent_worker_core::session::StoreError;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

/// Whether a call failed because its condition did not hold.
pub(crate) fn is_conditional_failure<E: ProvideErrorMetadata, R>(error: &SdkError<E, R>) -> bool {
    error.code() == Some("ConditionalCheckFailedException")
}

/// A DynamoDB call's failure as a [`StoreError`]: throttling named as such, otherwise the
/// service's code and message (the raw response left out), after `what` was being done. The SDK's
/// error is kept as the source.
pub(crate) fn store_error<E, R>(what: &str, error: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: fmt::Debug + Send + Sync + 'static,
{
    let code = error.code().unwrap_or_default().to_owned();
    let detail = format!(
        "{what}: {}",
        error
            .message()
            .map(str::to_owned)
            .unwrap_or_else(|| { aws_sdk_dynamodb::error::DisplayErrorContext(&error).to_string() })
    );
    if matches!(
        code.as_str(),
        "ThrottlingException" | "ProvisionedThroughputExceededException" | "RequestLimitExceeded"
    ) {
        StoreError::Throttled(Failure::caused_by(detail, error))
    } else if code.is_empty() {
        StoreError::Backend(Failure::caused_by(detail, error))
    } else {
        StoreError::Backend(Failure::caused_by(format!("{detail} ({code})"), error))
    }
}

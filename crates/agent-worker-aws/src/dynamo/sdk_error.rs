//! [`store_error`]: a DynamoDB call's failure as the store's error, shared by every module of
//! the table.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use agent_worker_core::Failure;
use agent_worker_core::session::StoreError;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::CancellationReason;

/// Whether a call failed because its condition did not hold.
pub(crate) fn is_conditional_failure<E: ProvideErrorMetadata, R>(error: &SdkError<E, R>) -> bool {
    error.code() == Some("ConditionalCheckFailedException")
}

/// Why each item of a cancelled transaction was refused, in the order the items were written;
/// empty when the transaction failed otherwise.
pub(crate) fn cancellation_reasons<R>(error: &SdkError<TransactWriteItemsError, R>) -> &[CancellationReason] {
    match error.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(canceled)) => {
            canceled.cancellation_reasons()
        }
        _ => &[],
    }
}

/// Whether a cancelled transaction's item was refused because its condition did not hold.
pub(crate) fn is_condition_reason(reason: Option<&CancellationReason>) -> bool {
    reason.and_then(CancellationReason::code) == Some("ConditionalCheckFailed")
}

/// How many times a single-item write is sent again while a transaction holds its item.
const CONFLICT_RETRIES: u32 = 4;
/// The pause before the first of those, doubled before each next.
const CONFLICT_BACKOFF: Duration = Duration::from_millis(25);

/// Sends a single-item write (`send` makes and sends it) until no transaction holds its item: a
/// write to an item that a transaction in flight touches is refused with
/// `TransactionConflictException`, which the SDK does not retry. The turn item is such an item
/// while its event log's write looks at the turn's signals, for a few milliseconds a second; a
/// stop or a command sent then waits them out instead of failing.
pub(crate) async fn past_transactions<T, E, R, F, Fut>(mut send: F) -> Result<T, SdkError<E, R>>
where
    E: ProvideErrorMetadata,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
{
    let mut pause = CONFLICT_BACKOFF;
    for _ in 0..CONFLICT_RETRIES {
        match send().await {
            Err(e) if e.code() == Some("TransactionConflictException") => {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            other => return other,
        }
    }
    send().await
}

/// A DynamoDB call's failure as a [`StoreError`]: throttling named as such, otherwise a
/// backend failure, saying `what` was being done. The SDK's error (the service's code and
/// message, or why the call never reached it) is kept as the source, its text not repeated.
pub(crate) fn store_error<E, R>(what: &str, error: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: fmt::Debug + Send + Sync + 'static,
{
    if matches!(
        error.code(),
        Some("ThrottlingException" | "ProvisionedThroughputExceededException" | "RequestLimitExceeded")
    ) {
        StoreError::Throttled(Failure::caused_by(what, error))
    } else {
        StoreError::Backend(Failure::caused_by(what, error))
    }
}

/// A DynamoDB request that the SDK's builder refused (a required field unset): a backend
/// failure, the builder's error its source.
pub(crate) fn build_error(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Backend(Failure::caused_by("a DynamoDB request cannot be built", e))
}

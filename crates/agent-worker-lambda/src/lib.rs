//! The Lambda functions: [`run`], the SQS-triggered function that runs turns (its batch
//! handler, [`TurnHandler::handle_batch`], is the runtime's: the queue poller feeds it too);
//! [`sqs_poller`], a queue polled as the event source mapping would; [`api`], the product's
//! HTTP API behind a Function URL.

#![forbid(unsafe_code)]

pub mod api;
pub mod sqs_poller;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use aws_lambda_events::event::sqs::SqsEvent;

pub use agent_worker_runtime::batch::{BatchError, usable_deadline};
pub use agent_worker_runtime::redrive::{RedriveBackoff, Requeue};
pub use agent_worker_runtime::runner::{
    DEFAULT_MIN_TURN_TIME, DEFAULT_STORE_MARGIN, Disposition, TurnHandler, TurnRun, disposition,
};

/// Runs the Lambda function: every invocation's batch goes through `handler`.
/// An invocation's deadline that cannot be real is logged once per instance.
pub async fn run(handler: TurnHandler) -> Result<(), lambda_runtime::Error> {
    let handler = Arc::new(handler);
    let told = Arc::new(AtomicBool::new(false));
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<SqsEvent>| {
            let handler = handler.clone();
            let told = told.clone();
            async move {
                let given = event.context.deadline;
                let deadline = usable_deadline(event.context.deadline(), SystemTime::now());
                if deadline.is_none() && !told.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        deadline_ms = given,
                        "the runtime's deadline cannot be real (past, or further than an invocation lasts; \
                         `cargo lambda watch` sends a constant): each turn keeps to its own turn_deadline"
                    );
                }
                handler
                    .handle_batch(event.payload, deadline)
                    .await
                    .map_err(|error| lambda_runtime::Diagnostic {
                        error_type: "BatchError".into(),
                        error_message: error.to_string(),
                    })
            }
        },
    ))
    .await
}

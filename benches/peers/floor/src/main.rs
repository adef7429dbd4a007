//! The floor of `make bench`'s part `sizes`: the least a Rust Lambda function that runs turns
//! pays before and for its first invocation. It starts the runtime's default tracing, loads the
//! AWS SDK configuration from the environment, builds the clients a turn uses (DynamoDB and
//! Bedrock Runtime), and answers each SQS batch with no failures, sending nothing. It runs on
//! tokio's current-thread runtime, as `bootstrap` does.
//!
//! The bench runs it under the same Runtime API stand-in and environment as `bootstrap`, so the
//! difference between the two is the work agent-worker adds to a start and to a turn.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let bedrock = aws_sdk_bedrockruntime::Client::new(&aws);
    lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| {
        // The clients live as long as the function, as a real one's do.
        let _clients = (&dynamodb, &bedrock);
        let records = event.payload.records.len();
        async move {
            lambda_runtime::tracing::debug!(records, "answered a batch");
            Ok::<_, Error>(SqsBatchResponse::default())
        }
    }))
    .await
}

//! DynamoDB requests counted per turn: an interceptor on the client ([`counted`]) adds each
//! request it sends to the counter of the turn whose task sent it ([`counting`]). A request sent
//! outside a counted turn (start-up, another host's call) counts toward nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};

tokio::task_local! {
    /// The requests of the turn running on this task.
    static TURN_REQUESTS: Arc<AtomicU64>;
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Counts each request the client sends, a retried attempt included, toward the running turn.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountRequests;

impl Intercept for CountRequests {
    fn name(&self) -> &'static str {
        "CountRequests"
    }

    fn read_before_transmit(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // Outside a counted turn there is no counter, and nothing to add to.
        let _ = TURN_REQUESTS.try_with(|requests| requests.fetch_add(1, Ordering::Relaxed));
        Ok(())
    }
}

/// A client like `plain` whose requests count toward the turn that sends them.
pub fn counted(plain: &aws_sdk_dynamodb::Client) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::from_conf(plain.config().to_builder().interceptor(CountRequests).build())
}

/// Runs `turn`, counting the requests its task sends through [`counted`] clients.
pub(crate) async fn counting<F: Future>(turn: F) -> (F::Output, u64) {
    let requests = Arc::new(AtomicU64::new(0));
    let output = TURN_REQUESTS.scope(requests.clone(), turn).await;
    (output, requests.load(Ordering::Relaxed))
}

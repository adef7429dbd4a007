//! [`Meter`]: counts a DynamoDB client's requests and bytes, the round trips it makes one after
//! another, and what came before a model client's first request: what a turn asks of the table,
//! for the benchmark and for the tests that hold the turn to its round trips.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
    FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};

use crate::fault_proxy::lock;

/// What the DynamoDB client sent and received.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Requests sent.
    pub requests: u64,
    /// Bytes sent.
    pub sent: u64,
    /// Bytes received.
    pub received: u64,
    /// Requests by operation (`GetItem`, `Query`, ...).
    pub operations: std::collections::BTreeMap<String, u64>,
    /// Requests in flight now.
    in_flight: u64,
    /// Round trips one after the other: how often requests began while none was in flight.
    pub rounds: u64,
    /// When the requests in flight began (the first of them), while any is.
    busy_since: Option<Instant>,
    /// Time with a request in flight.
    pub busy: Duration,
    /// When the measured span began ([`Meter::start`]).
    started: Option<Instant>,
    /// The first model request since the start: what came before it.
    pub before_model: Option<BeforeModel>,
}

/// What a turn did before its first model request.
#[derive(Debug, Clone, Copy, Default)]
pub struct BeforeModel {
    /// DynamoDB requests sent.
    pub requests: u64,
    /// Sequential DynamoDB round trips (requests sent together count once).
    pub rounds: u64,
    /// From the start to the model request.
    pub elapsed: Duration,
    /// Of which a DynamoDB request was in flight.
    pub dynamo: Duration,
}

/// Counts each DynamoDB request and its bytes both ways.
#[derive(Debug, Clone, Default)]
pub struct Meter(Arc<Mutex<Counts>>);

impl Meter {
    /// A client like `plain`, metered by this meter.
    pub fn client(&self, plain: &aws_sdk_dynamodb::Client) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::from_conf(plain.config().to_builder().interceptor(self.clone()).build())
    }

    /// A Bedrock client like `plain` that tells this meter when the model is first called.
    pub fn model_client(&self, plain: &aws_sdk_bedrockruntime::Client) -> aws_sdk_bedrockruntime::Client {
        aws_sdk_bedrockruntime::Client::from_conf(
            plain
                .config()
                .to_builder()
                .interceptor(ModelMark(self.clone()))
                .build(),
        )
    }

    /// What was counted since the last take; the next span starts now.
    pub fn take(&self) -> Counts {
        let mut counts = lock(&self.0);
        let taken = std::mem::take(&mut *counts);
        counts.started = Some(Instant::now());
        taken
    }
}

/// Marks the first model request after [`Meter::take`] in the meter.
#[derive(Debug, Clone)]
struct ModelMark(Meter);

impl Intercept for ModelMark {
    fn name(&self) -> &'static str {
        "ModelMark"
    }

    fn read_before_transmit(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let mut counts = lock(&(self.0).0);
        if counts.before_model.is_none() {
            let now = Instant::now();
            let dynamo = counts.busy + counts.busy_since.map_or(Duration::ZERO, |since| now - since);
            counts.before_model = Some(BeforeModel {
                requests: counts.requests,
                rounds: counts.rounds,
                elapsed: counts.started.map_or(Duration::ZERO, |started| now - started),
                dynamo,
            });
        }
        Ok(())
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Intercept for Meter {
    fn name(&self) -> &'static str {
        "Meter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request();
        let sent = request.body().bytes().map_or(0, <[u8]>::len) as u64;
        let operation = request
            .headers()
            .get("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or("?")
            .to_owned();
        let mut counts = lock(&self.0);
        counts.requests += 1;
        counts.sent += sent;
        *counts.operations.entry(operation).or_default() += 1;
        if counts.in_flight == 0 {
            counts.rounds += 1;
            counts.busy_since = Some(Instant::now());
        }
        counts.in_flight += 1;
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let received = context.response().body().bytes().map_or(0, <[u8]>::len) as u64;
        lock(&self.0).received += received;
        Ok(())
    }

    fn read_after_attempt(
        &self,
        _: &FinalizerInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let mut counts = lock(&self.0);
        counts.in_flight = counts.in_flight.saturating_sub(1);
        if counts.in_flight == 0
            && let Some(since) = counts.busy_since.take()
        {
            counts.busy += since.elapsed();
        }
        Ok(())
    }
}

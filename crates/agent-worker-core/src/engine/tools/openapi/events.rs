//! Jobs that end with an event: the product's event declarations, and waiters that watch for a
//! job's completion or failure.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Notify;

/// What an event declares it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A job ended well; its payload is the result.
    Completion,
    /// A job ended badly; its payload says why.
    Failure,
    /// Anything else (progress, notices).
    Other,
}

/// One declared event.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventDeclaration {
    /// What it is.
    pub kind: EventKind,
    /// The payload field that carries the job's id.
    pub correlation: String,
    /// For a completion: the failure event it is paired with.
    #[serde(default)]
    pub failure: Option<String>,
}

/// Why a reported event settles no job ([`EventDeclarations::job_of`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAJobEvent {
    /// No document declares it.
    #[error("{0:?} is not a declared event")]
    Undeclared(String),
    /// It is declared with the kind `other`.
    #[error("{0:?} ends no job (its kind is other)")]
    EndsNoJob(String),
    /// Its payload lacks the declared correlation field.
    #[error("the payload of {event:?} has no {field:?}, the job's id")]
    NoJobId {
        /// The event.
        event: String,
        /// The field that should hold the job's id.
        field: String,
    },
}

/// A product's event declarations, by event name: the authority on jobs' completions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct EventDeclarations(pub BTreeMap<String, EventDeclaration>);

impl EventDeclarations {
    /// The declaration of `event`.
    pub fn get(&self, event: &str) -> Option<&EventDeclaration> {
        self.0.get(event)
    }

    /// The job a reported `event` is about: the id its payload carries in the declared
    /// correlation field. Refused, saying why, for an undeclared event or a payload without it.
    pub fn job_of(&self, event: &str, payload: &Value) -> Result<String, NotAJobEvent> {
        let declaration = self
            .get(event)
            .ok_or_else(|| NotAJobEvent::Undeclared(event.to_owned()))?;
        if declaration.kind == EventKind::Other {
            return Err(NotAJobEvent::EndsNoJob(event.to_owned()));
        }
        match payload.get(&declaration.correlation) {
            Some(Value::String(id)) if !id.is_empty() => Ok(id.clone()),
            Some(Value::Number(id)) => Ok(id.to_string()),
            _ => Err(NotAJobEvent::NoJobId {
                event: event.to_owned(),
                field: declaration.correlation.clone(),
            }),
        }
    }

    /// These declarations and `other`'s together; an event declared twice keeps the first.
    pub fn merge(&mut self, other: &EventDeclarations) {
        for (name, declaration) in &other.0 {
            self.0.entry(name.clone()).or_insert_with(|| declaration.clone());
        }
    }
}

/// What one job is waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobWait {
    /// The completion event.
    pub completion: String,
    /// The failure event, if it has one.
    pub failure: Option<String>,
    /// The payload field holding the job's id.
    pub correlation: String,
    /// The job's id.
    pub id: String,
    /// How long to wait.
    pub timeout: Duration,
}

/// How a waited-for job came out.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// Its completion came, with this payload.
    Completed(Value),
    /// Its failure came, with this payload.
    Failed(Value),
    /// Neither came in time.
    TimedOut,
}

/// Watches a product's events for jobs to settle.
#[async_trait]
pub trait EventWaiter: Send + Sync + fmt::Debug {
    /// Waits for `job`'s completion or failure, at most its timeout.
    async fn wait(&self, job: &JobWait) -> Settled;
}

/// A waiter fed in process: whatever publishes the product's events calls
/// [`publish`](Self::publish). Events are kept, so one published before the wait began counts.
#[derive(Debug, Default)]
pub struct MemoryEventWaiter {
    seen: Mutex<Vec<(String, Value)>>,
    arrived: Notify,
}

impl MemoryEventWaiter {
    /// A waiter that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `event` happened with `payload`.
    pub fn publish(&self, event: impl Into<String>, payload: Value) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((event.into(), payload));
        self.arrived.notify_waiters();
    }

    fn settled(&self, job: &JobWait) -> Option<Settled> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.iter().find_map(|(event, payload)| {
            let ours = payload.get(&job.correlation).and_then(Value::as_str) == Some(job.id.as_str());
            if !ours {
                None
            } else if *event == job.completion {
                Some(Settled::Completed(payload.clone()))
            } else if Some(event) == job.failure.as_ref() {
                Some(Settled::Failed(payload.clone()))
            } else {
                None
            }
        })
    }
}

#[async_trait]
impl EventWaiter for MemoryEventWaiter {
    async fn wait(&self, job: &JobWait) -> Settled {
        let waiting = async {
            loop {
                // Register before looking, so an event published in between still wakes us.
                let arrived = self.arrived.notified();
                if let Some(settled) = self.settled(job) {
                    return settled;
                }
                arrived.await;
            }
        };
        tokio::time::timeout(job.timeout, waiting)
            .await
            .unwrap_or(Settled::TimedOut)
    }
}

/// A duration as `x-async-binding` writes it: milliseconds, or `500ms`, `30s`, `2m`, `1h`.
pub(super) fn parse_timeout(value: &Value) -> Result<Duration, String> {
    if let Some(ms) = value.as_u64() {
        return Ok(Duration::from_millis(ms));
    }
    let text = value
        .as_str()
        .ok_or_else(|| format!("timeout {value} is neither a number of milliseconds nor a duration like 2m"))?
        .trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("timeout {text:?} does not start with a number"))?;
    let ms = match unit {
        "ms" => number,
        "s" | "" => number * 1000,
        "m" => number * 60_000,
        "h" => number * 3_600_000,
        other => return Err(format!("timeout {text:?} has an unknown unit {other:?}")),
    };
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timeouts_read_as_written() {
        assert_eq!(parse_timeout(&json!("2m")).unwrap(), Duration::from_secs(120));
        assert_eq!(parse_timeout(&json!(1500)).unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_timeout(&json!("30s")).unwrap(), Duration::from_secs(30));
        assert!(parse_timeout(&json!("soon")).is_err());
        assert!(parse_timeout(&json!("3d")).is_err());
    }

    fn job(id: &str) -> JobWait {
        JobWait {
            completion: "report:ready".into(),
            failure: Some("report:failed".into()),
            correlation: "reportId".into(),
            id: id.into(),
            timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn a_waiter_hears_its_job_and_no_other() {
        let waiter = MemoryEventWaiter::new();
        waiter.publish("report:ready", json!({ "reportId": "other" }));
        waiter.publish(
            "report:failed",
            json!({ "reportId": "r2", "reason": "disk full" }),
        );
        assert_eq!(
            waiter.wait(&job("r2")).await,
            Settled::Failed(json!({ "reportId": "r2", "reason": "disk full" }))
        );
        let r1 = job("r1");
        let waiting = waiter.wait(&r1);
        let publish = async {
            tokio::task::yield_now().await;
            waiter.publish("report:ready", json!({ "reportId": "r1", "url": "u" }));
        };
        let (settled, ()) = tokio::join!(waiting, publish);
        assert_eq!(
            settled,
            Settled::Completed(json!({ "reportId": "r1", "url": "u" }))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_that_does_not_settle_times_out() {
        let waiter = MemoryEventWaiter::new();
        assert_eq!(waiter.wait(&job("never")).await, Settled::TimedOut);
    }
}

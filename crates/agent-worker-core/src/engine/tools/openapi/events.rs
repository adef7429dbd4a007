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

/// A job: the conversation whose call started it, and the id the product gave it. A product's
/// report names both, so that it settles that conversation's job and no other's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobKey {
    /// The conversation whose call started the job (the product hears it in
    /// [`CONVERSATION_HEADER`] with the call that starts it).
    pub conversation: crate::session::SessionId,
    /// The job's id, as the product's answer gave it.
    pub id: String,
}

/// The header a call that starts a job carries the conversation in, so that the product can
/// name it when it reports the job's event.
pub const CONVERSATION_HEADER: &str = "x-agent-conversation-id";

/// The most a reported event's payload may hold, as JSON, in bytes.
pub const MAX_JOB_PAYLOAD_BYTES: usize = 128 * 1024;

/// A report that settles no waiting job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no job {} of conversation {} is waiting for its event", .0.id, .0.conversation)]
pub struct NoSuchJob(pub JobKey);

/// What one job is waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobWait {
    /// The conversation whose call started it.
    pub conversation: crate::session::SessionId,
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

impl JobWait {
    /// The job waited for.
    pub fn key(&self) -> JobKey {
        JobKey {
            conversation: self.conversation.clone(),
            id: self.id.clone(),
        }
    }
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

/// A waiter fed in process: whatever hears the product's events calls
/// [`publish`](Self::publish). A job is known from the moment its call waits for it; an event
/// for a job no call waits for (yet) is refused, so that nothing reported before a job began
/// settles it later.
#[derive(Debug, Default)]
pub struct MemoryEventWaiter {
    jobs: Mutex<BTreeMap<JobKey, Vec<(String, Value)>>>,
    changed: Notify,
}

impl MemoryEventWaiter {
    /// A waiter that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `event` happened to `job`, with `payload`; refused when no call waits for
    /// that job of that conversation.
    pub fn publish(&self, job: &JobKey, event: impl Into<String>, payload: Value) -> Result<(), NoSuchJob> {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let events = jobs.get_mut(job).ok_or_else(|| NoSuchJob(job.clone()))?;
        events.push((event.into(), payload));
        drop(jobs);
        self.changed.notify_waiters();
        Ok(())
    }

    /// Waits until a call waits for `job` (for whoever reports its event in the same process).
    pub async fn until_waited_for(&self, job: &JobKey) {
        loop {
            let changed = self.changed.notified();
            if self
                .jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains_key(job)
            {
                return;
            }
            changed.await;
        }
    }

    fn settled(&self, job: &JobWait) -> Option<Settled> {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        jobs.get(&job.key())?.iter().find_map(|(event, payload)| {
            if *event == job.completion {
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
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(job.key(), Vec::new());
        self.changed.notify_waiters();
        let waiting = async {
            loop {
                // Register before looking, so an event published in between still wakes us.
                let changed = self.changed.notified();
                if let Some(settled) = self.settled(job) {
                    return settled;
                }
                changed.await;
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
            conversation: crate::session::test_ids::sid("conv-ada"),
            completion: "report:ready".into(),
            failure: Some("report:failed".into()),
            correlation: "reportId".into(),
            id: id.into(),
            timeout: Duration::from_secs(5),
        }
    }

    fn key(conversation: &str, id: &str) -> JobKey {
        JobKey {
            conversation: crate::session::test_ids::sid(conversation),
            id: id.into(),
        }
    }

    #[tokio::test]
    async fn a_waiter_hears_its_job_and_no_other() {
        let waiter = MemoryEventWaiter::new();
        let r2 = job("r2");
        let waiting = waiter.wait(&r2);
        let publish = async {
            waiter.until_waited_for(&r2.key()).await;
            // The same job id in another conversation is another job, which no one waits for.
            assert!(
                waiter
                    .publish(&key("conv-eve", "r2"), "report:ready", json!({}))
                    .is_err()
            );
            waiter
                .publish(
                    &r2.key(),
                    "report:failed",
                    json!({ "reportId": "r2", "reason": "disk full" }),
                )
                .unwrap();
        };
        let (settled, ()) = tokio::join!(waiting, publish);
        assert_eq!(
            settled,
            Settled::Failed(json!({ "reportId": "r2", "reason": "disk full" }))
        );
    }

    #[tokio::test]
    async fn an_event_reported_before_its_job_began_is_refused_and_settles_nothing() {
        let waiter = MemoryEventWaiter::new();
        let early = waiter.publish(
            &key("conv-ada", "r1"),
            "report:failed",
            json!({ "reportId": "r1" }),
        );
        assert_eq!(early, Err(NoSuchJob(key("conv-ada", "r1"))));
        let r1 = job("r1");
        let waiting = waiter.wait(&r1);
        let publish = async {
            waiter.until_waited_for(&r1.key()).await;
            waiter
                .publish(&r1.key(), "report:ready", json!({ "reportId": "r1", "url": "u" }))
                .unwrap();
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

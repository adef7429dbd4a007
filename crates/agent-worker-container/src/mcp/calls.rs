//! What this host's MCP door keeps between requests, in memory: the `ask` calls under way (for a
//! `notifications/cancelled` naming one) and the elicitations sent on an answer's stream (for the
//! client's answer, which comes in a request of its own).
//!
//! Both are the person's: a request finds only what the same person registered. Both are this
//! instance's: a cancellation or an answer that reaches another instance finds nothing (the
//! turn's stop, `POST /turns/{id}/stop`, works anywhere; an elicitation not answered here ends
//! its call with a result naming the approval, for `answer_approval` on any instance).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::oneshot;

use agent_worker_core::session::{Owner, SessionId, TurnId};

/// How long a call whose client went away is kept for its cancellation.
const CALL_KEPT_FOR: Duration = Duration::from_secs(3600);

/// A request of a person's, by the person and its JSON-RPC id (as JSON).
type RequestKey = (Owner, String);

fn key(person: &Owner, request: &Value) -> RequestKey {
    (person.clone(), request.to_string())
}

/// The `ask` calls under way on this host and the elicitations waiting for their answers.
#[derive(Debug, Default, Clone)]
pub(crate) struct Calls(Arc<Mutex<Kept>>);

#[derive(Debug, Default)]
struct Kept {
    /// The turn each call under way runs, and since when.
    calls: HashMap<RequestKey, Call>,
    /// Where each elicitation's answer goes.
    elicitations: HashMap<RequestKey, oneshot::Sender<Value>>,
}

/// What a call started, and when.
#[derive(Debug, Clone)]
struct Call {
    session: SessionId,
    turn_id: TurnId,
    at: Instant,
}

/// A call's place among [`Calls`]: given up once its answer is given ([`answered`]); a call
/// whose client went away first stays, for a cancellation on its way, for an hour.
///
/// [`answered`]: Registered::answered
pub(super) struct Registered {
    calls: Calls,
    key: RequestKey,
}

impl Registered {
    /// The call's answer was given: it can no longer be cancelled.
    pub(super) fn answered(self) {
        self.calls.kept().calls.remove(&self.key);
    }
}

/// An elicitation's place among [`Calls`], until its answer comes or the wait for it ends.
pub(super) struct Awaited {
    calls: Calls,
    key: RequestKey,
    answer: oneshot::Receiver<Value>,
}

impl Awaited {
    /// The client's answer (its JSON-RPC `result`, or `error`), or `None` when none came within
    /// `wait`.
    pub(super) async fn answer(mut self, wait: Duration) -> Option<Value> {
        let answer = tokio::time::timeout(wait, &mut self.answer).await;
        answer.ok().and_then(Result::ok)
    }
}

impl Drop for Awaited {
    fn drop(&mut self) {
        self.calls.kept().elicitations.remove(&self.key);
    }
}

impl Calls {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `person`'s call `request`, running `turn_id` of `session`.
    pub(super) fn register(
        &self,
        person: &Owner,
        request: &Value,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Registered {
        let key = key(person, request);
        let mut kept = self.kept();
        kept.calls.retain(|_, call| call.at.elapsed() < CALL_KEPT_FOR);
        let call = Call {
            session: session.clone(),
            turn_id: turn_id.clone(),
            at: Instant::now(),
        };
        kept.calls.insert(key.clone(), call);
        Registered {
            calls: self.clone(),
            key,
        }
    }

    /// The turn of `person`'s call `request`, while it is under way.
    pub(super) fn find(&self, person: &Owner, request: &Value) -> Option<(SessionId, TurnId)> {
        let kept = self.kept();
        let call = kept.calls.get(&key(person, request))?;
        Some((call.session.clone(), call.turn_id.clone()))
    }

    /// Waits for `person`'s answer to elicitation `request`.
    pub(super) fn await_answer(&self, person: &Owner, request: &Value) -> Awaited {
        let (give, answer) = oneshot::channel();
        let key = key(person, request);
        self.kept().elicitations.insert(key.clone(), give);
        Awaited {
            calls: self.clone(),
            key,
            answer,
        }
    }

    /// Gives `person`'s answer to elicitation `request` to the call waiting for it: whether one
    /// was.
    pub(super) fn answer(&self, person: &Owner, request: &Value, answer: Value) -> bool {
        let waiting = self.kept().elicitations.remove(&key(person, request));
        waiting.is_some_and(|give| give.send(answer).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn an_answer_reaches_the_persons_elicitation_only() {
        let calls = Calls::default();
        let (u, v) = (Owner::new("u", "a"), Owner::new("v", "a"));
        let waiting = calls.await_answer(&u, &json!("approval-1"));
        assert!(!calls.answer(&v, &json!("approval-1"), json!({"action": "accept"})));
        assert!(!calls.answer(&u, &json!("approval-2"), json!({"action": "accept"})));
        assert!(calls.answer(&u, &json!("approval-1"), json!({"action": "accept"})));
        let answer = waiting.answer(Duration::from_secs(5)).await;
        assert_eq!(answer, Some(json!({"action": "accept"})));
        // Answered once: a second answer finds no one waiting.
        assert!(!calls.answer(&u, &json!("approval-1"), json!({"action": "decline"})));
    }

    #[tokio::test(start_paused = true)]
    async fn an_elicitation_given_up_takes_no_answer() {
        let calls = Calls::default();
        let u = Owner::new("u", "a");
        let waiting = calls.await_answer(&u, &json!(7));
        assert_eq!(waiting.answer(Duration::from_secs(1)).await, None);
        assert!(!calls.answer(&u, &json!(7), json!({"action": "accept"})));
    }

    #[test]
    fn a_call_is_found_by_its_person_until_answered() {
        let calls = Calls::default();
        let (u, v) = (Owner::new("u", "a"), Owner::new("v", "a"));
        let (s, t) = (SessionId::new("s").unwrap(), TurnId::new("t").unwrap());
        let registered = calls.register(&u, &json!(1), &s, &t);
        assert_eq!(calls.find(&u, &json!(1)), Some((s, t)));
        assert_eq!(calls.find(&v, &json!(1)), None);
        registered.answered();
        assert_eq!(calls.find(&u, &json!(1)), None);
    }
}

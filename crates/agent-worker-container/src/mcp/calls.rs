//! What this host's MCP door keeps between requests, in memory: the `ask` calls under way (for a
//! `notifications/cancelled` naming one) and the elicitations sent on an answer's stream (for the
//! client's answer, which comes in a request of its own).
//!
//! Both are the person's: a request finds only what the same person registered (a call, by the
//! client's session too, when it has one). Both are this instance's: a cancellation or an answer
//! that reaches another instance finds nothing (the turn's stop, `POST /turns/{id}/stop`, works
//! anywhere; an elicitation not answered here ends its call with a result naming the approval,
//! for `answer_approval` on any instance). What is kept is bounded: at most [`MAX_KEPT`] calls,
//! the oldest given up first, and none whose request id is longer than [`MAX_ID_CHARS`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::oneshot;

use agent_worker_core::session::{Owner, SessionId, TurnId};

/// How long a call whose client went away is kept for its cancellation.
const CALL_KEPT_FOR: Duration = Duration::from_secs(3600);
/// The most calls kept at once.
pub(super) const MAX_KEPT: usize = 10_000;
/// The longest request id (as JSON) kept; a call with a longer one cannot be cancelled.
pub(super) const MAX_ID_CHARS: usize = 256;

/// A request of a person's, by the person, the client's session (when it has one) and its
/// JSON-RPC id (as JSON).
type RequestKey = (Owner, Option<String>, String);

fn key(person: &Owner, session: Option<&str>, request: &Value) -> Option<RequestKey> {
    let id = request.to_string();
    // Only a session this server gives (`elicits-` and a UUID) tells clients apart; any other
    // header a client sends is not one.
    let session = session.filter(|s| s.starts_with(super::ELICITING_SESSION) && s.len() <= MAX_SESSION_CHARS);
    (id.len() <= MAX_ID_CHARS).then(|| (person.clone(), session.map(str::to_owned), id))
}

/// The longest session id this server gives.
const MAX_SESSION_CHARS: usize = 64;

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
    key: Option<RequestKey>,
    turn_id: TurnId,
}

impl Registered {
    /// The call's answer was given: it can no longer be cancelled (a later call registered under
    /// the same key, for another turn, stays).
    pub(super) fn answered(self) {
        if let Some(key) = &self.key {
            let mut kept = self.calls.kept();
            if kept
                .calls
                .get(key)
                .is_some_and(|call| call.turn_id == self.turn_id)
            {
                kept.calls.remove(key);
            }
        }
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

    /// Registers the call `request` of `person`'s client (of MCP session `client`, when it has
    /// one), running `turn_id` of `session`.
    pub(super) fn register(
        &self,
        person: &Owner,
        client: Option<&str>,
        request: &Value,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Registered {
        let key = key(person, client, request);
        if let Some(key) = &key {
            let mut kept = self.kept();
            kept.calls.retain(|_, call| call.at.elapsed() < CALL_KEPT_FOR);
            if kept.calls.len() >= MAX_KEPT
                && let Some(oldest) = kept
                    .calls
                    .iter()
                    .min_by_key(|(_, call)| call.at)
                    .map(|(k, _)| k.clone())
            {
                kept.calls.remove(&oldest);
            }
            let call = Call {
                session: session.clone(),
                turn_id: turn_id.clone(),
                at: Instant::now(),
            };
            kept.calls.insert(key.clone(), call);
        }
        Registered {
            calls: self.clone(),
            key,
            turn_id: turn_id.clone(),
        }
    }

    /// The turn of the call `request` of `person`'s client `client`, while it is under way.
    pub(super) fn find(
        &self,
        person: &Owner,
        client: Option<&str>,
        request: &Value,
    ) -> Option<(SessionId, TurnId)> {
        let kept = self.kept();
        let call = kept.calls.get(&key(person, client, request)?)?;
        Some((call.session.clone(), call.turn_id.clone()))
    }

    /// Waits for `person`'s answer to elicitation `request` (an id this server made).
    pub(super) fn await_answer(&self, person: &Owner, request: &Value) -> Awaited {
        let (give, answer) = oneshot::channel();
        let key = (person.clone(), None, request.to_string());
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
        let waiting = self
            .kept()
            .elicitations
            .remove(&(person.clone(), None, request.to_string()));
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
        let (one, two) = (Some("elicits-1"), Some("elicits-2"));
        let registered = calls.register(&u, one, &json!(1), &s, &t);
        assert_eq!(calls.find(&u, one, &json!(1)), Some((s.clone(), t.clone())));
        assert_eq!(calls.find(&v, one, &json!(1)), None, "another person's");
        assert_eq!(calls.find(&u, two, &json!(1)), None, "another client's");
        assert_eq!(
            calls.find(&u, Some("made-up"), &json!(1)),
            None,
            "not a session this server gave"
        );
        registered.answered();
        assert_eq!(calls.find(&u, one, &json!(1)), None);
        // A call answered after another took its key leaves the other's registration.
        let first = calls.register(&u, None, &json!(2), &s, &t);
        let later = TurnId::new("t-later").unwrap();
        let _second = calls.register(&u, None, &json!(2), &s, &later);
        first.answered();
        assert_eq!(calls.find(&u, None, &json!(2)), Some((s.clone(), later)));
        // An id too long to keep is not registered, and so cannot be cancelled.
        let long = json!("x".repeat(MAX_ID_CHARS));
        let _kept = calls.register(&u, None, &long, &s, &t);
        assert_eq!(calls.find(&u, None, &long), None);
    }
}

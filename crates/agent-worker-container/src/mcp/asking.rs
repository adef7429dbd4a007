//! The turns MCP's tools run: `ask` starts one, `answer_approval` (or `ask` retried with the
//! client's answer) continues one that waits for the person's approval, and each call is
//! followed to its answer.
//!
//! An approval the turn asks comes back as the client takes it ([`Elicits`]): in the stateless
//! revision, to a client that declares elicitation, as an input-required result whose retry
//! carries the answer; in the handshake revisions, to a client that declared it (its session id
//! says so), as an `elicitation/create` request on the answer's stream, answered by a request of
//! its own; otherwise as a result naming the approval, for `answer_approval`. The next turn is
//! the chain's ([`crate::chain`]): started once, whoever answers, with the token the turn logged.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::calls::Registered;
use super::{result, tool_error};
use crate::access::checked_id;
use crate::chain::{self, approval_shown, approval_title, waiting_approval};
use crate::events::StreamPlace;
use crate::events::{Followed, Heard, follow_turn, stream_place};
use crate::extract::adapted_turn;
use crate::{ContainerHost, HostError, agentcore, turns};
use agent_worker_contract::{AgentEvent, ErrorChain};
use agent_worker_core::session::{Owner, SessionId, TurnId};
use agent_worker_runtime::AgentTurnPayload;
use futures_util::StreamExt as _;

/// The longest an elicitation on a stream is waited for before the call answers with the
/// approval named (the person may still answer it with `answer_approval`).
pub(super) const ELICITATION_WAIT: Duration = Duration::from_secs(600);

/// The key of the one input an approval's input-required result asks.
pub(super) const APPROVAL_INPUT: &str = "approval";

/// How the person's client takes an approval a turn asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Elicits {
    /// It does not: the answer names the approval, for `answer_approval`.
    No,
    /// The stateless revision's input-required result; the client retries with its answer.
    InputRequired,
    /// An `elicitation/create` request on the answer's stream (the handshake revisions).
    OnStream,
}

/// How one call is answered.
#[derive(Debug, Clone)]
pub(super) struct Asking {
    /// The call's JSON-RPC id.
    pub(super) request: Value,
    /// The client's progress token, when it asked for progress.
    pub(super) progress: Option<Value>,
    /// How it takes an approval.
    pub(super) elicits: Elicits,
    /// The client's MCP session (`Mcp-Session-Id`), when it has one.
    pub(super) client: Option<String>,
}

/// A call's turn, started: its conversation, its id, and its events as they are logged.
pub(super) struct Asked {
    session: SessionId,
    turn_id: TurnId,
    followed: std::pin::Pin<Box<dyn futures_util::Stream<Item = Followed> + Send>>,
    /// Its place among the calls under way, until it ends.
    registered: Registered,
}

/// Starts a turn of `person`'s conversation `conversation` (a new one when `None`), its events
/// followed.
pub(super) async fn start_ask(
    host: &ContainerHost,
    person: &Owner,
    asking: &Asking,
    conversation: Option<&str>,
    message: &str,
) -> Result<Asked, HostError> {
    let session: SessionId = match conversation {
        Some(id) => checked_id("conversationId", id.to_owned())?,
        None => checked_id("conversationId", uuid::Uuid::new_v4().to_string())?,
    };
    let turn_id = TurnId::random();
    let turn = AgentTurnPayload::new(turn_id.clone(), session.clone(), person, message.to_owned());
    let turn = adapted_turn(host, turn)?;
    let place = stream_place(host, person)?;
    turns::start(host, person, turn).await?;
    Ok(followed(host, person, asking, session, turn_id, place))
}

/// The call's turn, started: registered among the calls under way (so that a cancellation
/// finds it; a refused start registers nothing) and followed.
fn followed(
    host: &ContainerHost,
    person: &Owner,
    asking: &Asking,
    session: SessionId,
    turn_id: TurnId,
    place: StreamPlace,
) -> Asked {
    let client = asking.client.as_deref();
    let registered = host
        .inner
        .mcp_calls
        .register(person, client, &asking.request, &session, &turn_id);
    let followed = Box::pin(follow_turn(host, place, &session, &turn_id, None));
    Asked {
        session,
        turn_id,
        followed,
        registered,
    }
}

/// Continues `person`'s turn `turn` of `conversation`, which waits for their approval: their
/// decision as the chain's next turn ([`chain::answer_approval`]), followed.
pub(super) async fn continue_ask(
    host: &ContainerHost,
    person: &Owner,
    asking: &Asking,
    conversation: &str,
    turn: &str,
    approve: bool,
) -> Result<Asked, HostError> {
    let session: SessionId = checked_id("conversationId", conversation.to_owned())?;
    let place = stream_place(host, person)?;
    let turn_id = chain::answer_approval(host, person, &session, turn, approve).await?;
    Ok(followed(host, person, asking, session, turn_id, place))
}

/// Follows a call's turns to its answer (the `tools/call` result), sending the progress it
/// asked for, and the elicitations of a client that takes them on the stream, to `out`. `None`
/// when `out` was closed (the client went away: the turn goes on, its call kept for a
/// cancellation).
pub(super) async fn answer(
    host: &ContainerHost,
    person: &Owner,
    asking: &Asking,
    mut asked: Asked,
    out: Option<&mpsc::Sender<Value>>,
) -> Option<Value> {
    let mut told = 0u64;
    loop {
        let mut heard = Heard::default();
        while let Some(item) = asked.followed.next().await {
            match item {
                Followed::Logged(logged) => {
                    heard.take(&logged);
                    if let (Some(out), Some(token)) = (out, &asking.progress) {
                        told += 1;
                        let message = match &logged.event {
                            AgentEvent::Text { delta } => delta.clone(),
                            event => event.type_name().to_owned(),
                        };
                        let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                            "params": {"progressToken": token, "progress": told, "message": message}});
                        out.send(note).await.ok()?;
                    }
                }
                Followed::NotStarted => heard.take_not_started(),
            }
        }
        let Asked {
            session,
            turn_id,
            registered,
            ..
        } = asked;
        registered.answered();
        let waiting = waiting_approval(&heard).cloned();
        let (Some(approval), Elicits::OnStream, Some(out)) = (waiting, asking.elicits, out) else {
            return Some(result_of(heard, &session, &turn_id, asking.elicits));
        };
        let id = json!(format!("approval-{}", uuid::Uuid::new_v4()));
        let awaited = host.inner.mcp_calls.await_answer(person, &id);
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create",
            "params": elicitation(&approval)});
        out.send(request).await.ok()?;
        // The answer, unless the client goes away first (its turn has ended: nothing runs on).
        let decided = tokio::select! {
            decided = awaited.answer(ELICITATION_WAIT) => decided,
            () = out.closed() => return None,
        };
        let Some(approve) = decided.as_ref().and_then(decision) else {
            return Some(result_of(heard, &session, &turn_id, Elicits::No));
        };
        asked = match continue_ask(host, person, asking, session.as_str(), turn_id.as_str(), approve).await {
            Ok(next) => next,
            Err(e) => return Some(tool_error(&e)),
        };
    }
}

/// An answer to an elicitation: accepted approves, declined declines; dismissed (`cancel`), or
/// an error, decides nothing.
pub(super) fn decision(answer: &Value) -> Option<bool> {
    match answer.get("action").and_then(Value::as_str) {
        Some("accept") => Some(true),
        Some("decline") => Some(false),
        _ => None,
    }
}

/// The elicitation that asks the person's approval: its title and preview as the message, and
/// nothing to fill in (accepting approves).
fn elicitation(approval: &Value) -> Value {
    let mut message = format!("The agent asks your approval: {}.", approval_title(approval));
    if let Some(preview) = approval.get("preview").filter(|p| !p.is_null()) {
        message.push_str(&format!("\n\n{preview}"));
    }
    message.push_str("\n\nAccept to approve, decline to refuse.");
    json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": {}},
    })
}

/// What the stateless revision's retry of an `ask` carries: the turn it continues.
pub(super) fn request_state(session: &SessionId, turn_id: &TurnId) -> String {
    json!({"conversationId": session, "turnId": turn_id}).to_string()
}

/// The turn a retried `ask`'s `requestState` names: `(conversation, turn)`.
pub(super) fn state_of(state: &str) -> Option<(String, String)> {
    let state: Value = serde_json::from_str(state).ok()?;
    let text = |key: &str| state.get(key).and_then(Value::as_str).map(str::to_owned);
    Some((text("conversationId")?, text("turnId")?))
}

/// A call's result once its last turn has ended: `{conversationId, turnId, text, terminal}`, an
/// error unless it completed. A turn that waits for an approval asks it as the client takes it.
fn result_of(heard: Heard, session: &SessionId, turn_id: &TurnId, elicits: Elicits) -> Value {
    let waiting = waiting_approval(&heard).cloned();
    if let (Some(approval), Elicits::InputRequired) = (&waiting, elicits) {
        return json!({
            "resultType": "input_required",
            "inputRequests": {APPROVAL_INPUT: {"method": "elicitation/create", "params": elicitation(approval)}},
            "requestState": request_state(session, turn_id),
        });
    }
    let mut answer = agentcore::answer_of(heard, session, turn_id);
    // The conversation, by the name this door's tools give it.
    if let Some(fields) = answer.as_object_mut()
        && let Some(id) = fields.remove("sessionId")
    {
        fields.insert("conversationId".to_owned(), id);
    }
    if let Some(approval) = &waiting {
        answer["approval"] = approval_shown(approval);
        answer["next"] = json!(format!(
            "The agent waits for your approval: {}. Answer it with answer_approval (this conversationId and turnId, and decision \"approve\" or \"decline\").",
            approval_title(approval)
        ));
        return result(&answer, false);
    }
    let failed = !matches!(
        serde_json::from_value::<AgentEvent>(answer["terminal"].clone()),
        Ok(AgentEvent::Completed { .. })
    );
    result(&answer, failed)
}

/// A retried `ask` whose answer decided nothing: the approval still waits.
pub(super) fn not_answered(conversation: &str, turn: &str) -> Value {
    result(
        &json!({"conversationId": conversation, "turnId": turn,
            "next": "The approval was not answered; it still waits. Answer it with answer_approval (this conversationId and turnId, and decision \"approve\" or \"decline\")."}),
        false,
    )
}

/// Stops the turn of the person's call that `params.requestId` names, through the stop every
/// route records; another person's request, or one not under way here, is not found.
pub(super) async fn cancel(host: &ContainerHost, person: &Owner, client: Option<&str>, params: &Value) {
    let Some((session, turn_id)) = host.inner.mcp_calls.find(person, client, &params["requestId"]) else {
        return;
    };
    let stop = agent_worker_core::session::Stop::now(agent_worker_core::session::StopCause::UserStop);
    if let Err(e) = host.inner.store.request_stop(&session, &turn_id, stop).await {
        tracing::warn!(error = %ErrorChain(&e), %turn_id, "could not record an MCP cancellation's stop");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_state_names_its_turn_and_nothing_else_reads_as_one() {
        let (s, t) = (SessionId::new("c-1").unwrap(), TurnId::new("t~2").unwrap());
        assert_eq!(
            state_of(&request_state(&s, &t)),
            Some(("c-1".to_owned(), "t~2".to_owned()))
        );
        assert_eq!(state_of("c-1/t"), None);
        assert_eq!(state_of(r#"{"conversationId": "c-1"}"#), None);
    }

    #[test]
    fn only_an_accept_or_a_decline_decides() {
        assert_eq!(decision(&json!({"action": "accept"})), Some(true));
        assert_eq!(decision(&json!({"action": "decline"})), Some(false));
        assert_eq!(decision(&json!({"action": "cancel"})), None);
        assert_eq!(decision(&json!({"code": -1, "message": "no"})), None);
    }

    #[test]
    fn an_approval_asked_by_input_required_names_its_turn_and_never_its_token() {
        let mut heard = Heard::default();
        heard
            .approvals
            .push(json!({"type": "approval_required", "approvalId": "ap-1",
            "token": "secret", "tool": "pay", "preview": {"title": "Pay €12"}}));
        heard.terminal = Some(AgentEvent::Completed {
            data: Some(json!({"stopReason": "approval_required"})),
        });
        let (s, t) = (SessionId::new("c-1").unwrap(), TurnId::new("t").unwrap());
        let asked = result_of(heard, &s, &t, Elicits::InputRequired);
        assert_eq!(asked["resultType"], "input_required");
        let params = &asked["inputRequests"]["approval"]["params"];
        assert!(params["message"].as_str().unwrap().contains("Pay €12"), "{asked}");
        assert_eq!(state_of(asked["requestState"].as_str().unwrap()).unwrap().1, "t");
        assert!(!asked.to_string().contains("secret"), "{asked}");
    }
}

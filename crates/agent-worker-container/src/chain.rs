//! A turn that asked the person's approval, continued: one conversation's chain of turns, the
//! first the person's message, then one turn for each approval answered, named `<first>~<n>`
//! ([`chain_turn`]). A2A's tasks and MCP's `ask` continue a turn so.
//!
//! Any instance finds where a chain stands from the table alone ([`latest_turn`]), and an
//! approval is answered once: a second answer to the same question names the same turn, which
//! runs once. The approval's token never leaves the agent: the next turn takes it from the
//! `approval_required` event the turn logged ([`decided_turn`]), not from the person's client.

use axum::http::StatusCode;
use serde_json::Value;

use crate::access::{checked_id, theirs};
use crate::events::Heard;
use crate::extract::adapted_turn;
use crate::{ContainerHost, HostError, turns};
use agent_worker_contract::{AgentEvent, ApprovalDecision, ErrorChain};
use agent_worker_core::session::{Owner, SessionId, SessionStore, StoreError, TurnId};
use agent_worker_runtime::AgentTurnPayload;

pub(crate) use agent_worker_runtime::turn_chain::{CHAIN_JOIN, MAX_CHAIN, chain_place, chain_turn};

/// The chain's latest turn, and its place: the first turn, or the last one that answered one of
/// its approvals.
pub(crate) async fn latest_turn(
    store: &dyn SessionStore,
    session: &SessionId,
    first: &TurnId,
) -> Result<(TurnId, u32), StoreError> {
    let mut latest = (first.clone(), 0);
    for n in 1..=MAX_CHAIN {
        let Some(next) = chain_turn(first, n) else {
            break;
        };
        match store.turn(session, &next).await? {
            Some(_) => latest = (next, n),
            None => break,
        }
    }
    Ok(latest)
}

/// A person's decision as a client names it: `approve` (`true`) or `decline` (`false`).
pub(crate) fn decision_named(decision: Option<&str>) -> Option<bool> {
    match decision {
        Some("approve") => Some(true),
        Some("decline") => Some(false),
        _ => None,
    }
}

/// Why a chain cannot take one more turn.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChainEnd {
    /// It has answered all the approvals one chain may ask.
    #[error("it has answered all the {MAX_CHAIN} approvals one chain may ask")]
    Full,
    /// The approval asked names no id.
    #[error("the approval it asked names no approvalId")]
    NoApprovalId,
}

/// The chain's next turn after the one at `place`: the person's decision on `asked` (the
/// `approval_required` event that turn logged), approving with the token it holds, or declining.
fn decided_turn(
    person: &Owner,
    session: &SessionId,
    first: &TurnId,
    place: u32,
    asked: &Value,
    approve: bool,
) -> Result<AgentTurnPayload, ChainEnd> {
    let next = chain_turn(first, place + 1)
        .filter(|_| place < MAX_CHAIN)
        .ok_or(ChainEnd::Full)?;
    let text = |key: &str| asked.get(key).and_then(Value::as_str).map(str::to_owned);
    let approval_id = text("approvalId").ok_or(ChainEnd::NoApprovalId)?;
    let mut turn = AgentTurnPayload::new(next, session.clone(), person, "");
    turn.approval = Some(ApprovalDecision {
        token: text("token").filter(|_| approve),
        ..match approve {
            true => ApprovalDecision::approve(approval_id, ""),
            false => ApprovalDecision::decline(approval_id),
        }
    });
    Ok(turn)
}

/// The approval a turn that has ended waits for: its last `approval_required`, when its
/// terminal says it stopped for it.
pub(crate) fn waiting_approval(heard: &Heard) -> Option<&Value> {
    let Some(AgentEvent::Completed { data }) = &heard.terminal else {
        return None;
    };
    let reason = data
        .as_ref()
        .and_then(|d| d.get("stopReason"))
        .and_then(Value::as_str);
    (reason == Some("approval_required"))
        .then(|| heard.approvals.last())
        .flatten()
}

/// `person`'s decision on the approval turn `turn` of `session` waits for, as the chain's next
/// turn, started: that turn's id. The same answer a second time names the turn the first
/// started, started once. A conversation not the person's is not found (404); a turn that
/// waits for no approval, or one whose approval was answered and answered again since, takes
/// none (409); nothing written.
pub(crate) async fn answer_approval(
    host: &ContainerHost,
    person: &Owner,
    session: &SessionId,
    turn: &str,
    approve: bool,
) -> Result<TurnId, HostError> {
    theirs(host, person, session, false).await?;
    let (first, place) = chain_place(turn).unwrap_or((turn, 0));
    let first: TurnId = checked_id("turnId", first.to_owned())?;
    let (latest, latest_place) = latest_turn(host.store().as_ref(), session, &first)
        .await
        .map_err(|e| HostError::store("reading the turns of a conversation", &e))?;
    if latest_place == place + 1 {
        return Ok(latest);
    }
    if latest_place != place {
        return Err(conflict(format!(
            "turn {turn} is not the latest of its chain ({latest} is): its approval was answered"
        )));
    }
    let log = host
        .event_log()
        .ok_or_else(|| HostError::not_found("this host keeps no event log"))?;
    let events = log
        .read(session, &latest, None)
        .await
        .map_err(|e| HostError::new(StatusCode::INTERNAL_SERVER_ERROR, ErrorChain(&e).to_string()))?;
    let heard = Heard::of(&events);
    let asked =
        waiting_approval(&heard).ok_or_else(|| conflict(format!("turn {turn} waits for no approval")))?;
    let next = decided_turn(person, session, &first, place, asked, approve)
        .map_err(|e| conflict(format!("turn {turn}: {e}")))?;
    let next_id = next.turn_id.clone();
    turns::start(host, person, adapted_turn(host, next)?).await?;
    Ok(next_id)
}

fn conflict(message: String) -> HostError {
    HostError::new(StatusCode::CONFLICT, message)
}

pub(crate) use agent_worker_runtime::heard::{approval_shown, approval_title};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_chain_names_its_turns_from_the_first_and_they_read_back() {
        let first = TurnId::new("m-1").unwrap();
        assert_eq!(chain_turn(&first, 0), Some(first.clone()));
        let second = chain_turn(&first, 2).unwrap();
        assert_eq!(second.as_str(), "m-1~2");
        assert_eq!(chain_place(&second), Some(("m-1", 2)));
        for plain in ["m-1", "a~b", "~3", "m~0", "m~65"] {
            assert_eq!(chain_place(plain), None, "{plain}");
        }
    }

    #[test]
    fn a_decided_turn_carries_the_logged_token_only_when_it_approves() {
        let person = Owner::new("u", "a");
        let session = SessionId::new("s").unwrap();
        let first = TurnId::new("t").unwrap();
        let asked = json!({"approvalId": "ap-1", "token": "secret", "tool": "pay"});
        let yes = decided_turn(&person, &session, &first, 0, &asked, true).unwrap();
        assert_eq!(yes.turn_id.as_str(), "t~1");
        let decision = yes.approval.unwrap();
        assert_eq!(
            (decision.decision.as_str(), decision.token.as_deref()),
            ("approve", Some("secret"))
        );
        let no = decided_turn(&person, &session, &first, 3, &asked, false).unwrap();
        assert_eq!(no.turn_id.as_str(), "t~4");
        assert_eq!(no.approval.unwrap().token, None);
        assert!(matches!(
            decided_turn(&person, &session, &first, MAX_CHAIN, &asked, true),
            Err(ChainEnd::Full)
        ));
        assert!(!approval_shown(&asked).to_string().contains("secret"));
    }
}

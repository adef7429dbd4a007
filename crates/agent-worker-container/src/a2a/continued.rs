//! Continuing a task: an approval's `INPUT_REQUIRED` answered by the next message that names
//! the task (`taskId`), saying "approve" or "decline" (or a data part `{"decision": …}`).
//!
//! A task is a chain of turns of one conversation: the turn its first message ran, then one turn
//! for each approval answered, named `<first>~<n>` ([`chain_turn`]). So any instance finds the
//! task's latest turn from the table alone, and an approval is answered once: a second answer to
//! the same question names the same turn, which runs once.

use serde_json::Value;

use super::task::{self, Ids, TaskState};
use super::{Call, InMessage, RpcError, task_id};
use crate::chain;
use agent_worker_core::session::{SessionId, TurnId};
use agent_worker_runtime::a2a_push::PushConfig;

pub(super) use crate::chain::{CHAIN_JOIN, chain_place, chain_turn};

impl Call<'_> {
    /// The task's latest turn, and its place in the chain: the first turn, or the last one that
    /// answered one of its approvals.
    pub(super) async fn latest_turn(
        &self,
        session: &SessionId,
        first: &TurnId,
    ) -> Result<(TurnId, u32), RpcError> {
        chain::latest_turn(self.host.store().as_ref(), session, first)
            .await
            .map_err(|e| RpcError::internal(e.client_message()))
    }

    /// Continues task `task` with `message`: the person's decision on the approval it waits for,
    /// as the chain's next turn, started. Answers the task's ids, that turn, and the message as
    /// the task's history holds it. A task not waiting for an approval takes no message. `push`,
    /// a webhook the message gives the task (checked), is kept once the message is found to
    /// continue it, and taken back if the turn does not start.
    pub(super) async fn continue_task(
        &self,
        message: InMessage,
        task: &str,
        push: Option<PushConfig>,
    ) -> Result<(Ids, TurnId, Vec<Value>), RpcError> {
        let (session, first) = self.owned_task(task).await?;
        if message
            .context_id
            .as_deref()
            .is_some_and(|c| c != session.as_str())
        {
            return Err(RpcError::invalid_params(format!(
                "contextId is not the context of task {task}"
            )));
        }
        let (latest, _) = self.latest_turn(&session, &first).await?;
        let state = self.progress(&session, &latest).await?.state();
        if state != TaskState::InputRequired {
            return Err(RpcError::unsupported(format!(
                "task {task} is {}: it takes a message only while it waits for an approval (TASK_STATE_INPUT_REQUIRED); send a new message in its context instead",
                state.name()
            )));
        }
        let approve = decision(&message.parts)?;
        let added = self.keep_sent_push(push.as_ref(), &session, &first).await?;
        // The chain's next turn, as every door continues one (the approval read again, and its
        // token, from the log).
        let next = chain::answer_approval(self.host, self.person, &session, latest.as_str(), approve).await;
        if next.is_err() {
            self.unkeep_sent_push(added, &session, &first).await;
        }
        let next = next.map_err(|e| match e.status() {
            // Not waiting any more (answered meanwhile): as for a task in any other state.
            axum::http::StatusCode::CONFLICT if e.running_turn().is_none() => {
                RpcError::unsupported(format!("task {task}: {}", e.message()))
            }
            // A context whose other task runs, and every other refusal: as a message's.
            _ => RpcError::of_host(&e).in_context(&session),
        })?;
        let ids = Ids {
            task: task_id(&session, &first),
            context: session,
        };
        let history = vec![task::person_message(&message.message_id, message.parts, &ids)];
        Ok((ids, next, history))
    }
}

/// Whether a message's parts approve (`true`) or decline: a data part's `decision`
/// (`approve`/`decline`), else its text, one word of yes or no.
fn decision(parts: &[Value]) -> Result<bool, RpcError> {
    let said = parts
        .iter()
        .find_map(|p| p.pointer("/data/decision").and_then(Value::as_str))
        .or_else(|| parts.iter().find_map(|p| p.get("text").and_then(Value::as_str)))
        .map(|words| words.trim().trim_end_matches(['.', '!']).to_ascii_lowercase());
    match said.as_deref() {
        Some("approve" | "approved" | "yes" | "y" | "ok") => Ok(true),
        Some("decline" | "declined" | "no" | "n" | "deny" | "reject") => Ok(false),
        _ => Err(RpcError::invalid_params(
            "the task waits for an approval: answer \"approve\" or \"decline\" (text, or a data part {\"decision\": …})",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_decision_is_a_yes_or_a_no_and_anything_else_is_refused() {
        let text = |t: &str| vec![json!({"text": t})];
        assert!(decision(&text("Approve.")).unwrap());
        assert!(!decision(&text(" no ")).unwrap());
        assert!(decision(&[json!({"data": {"decision": "approve"}}), json!({"text": "no"})]).unwrap());
        assert!(decision(&text("maybe later")).is_err());
        assert!(decision(&[]).is_err());
    }
}

//! The invariants of a stored history, and the repair that restores them.
//!
//! A history the model is sent must hold:
//! 1. no empty message and no empty content block;
//! 2. roles that alternate, starting with the user;
//! 3. for every tool call, exactly one result, in the user message right after the call;
//!    no result without its call.
//!
//! Stores [`check`] what they are asked to write; the engine [`repair`]s what it reads, so that
//! older data, or a turn whose worker died mid-call, never breaks the next turn: a call without
//! a result gets an error result that says why.

use std::collections::HashSet;

use super::message::{ContentBlock, Message, Role};

/// The result given to a call that never finished.
pub const INTERRUPTED_CALL: &str =
    "this call did not finish: it was cancelled, timed out, or its worker stopped; its outcome is unknown";

/// The first message of a history that began with the model's words.
pub const RESUMED_CONVERSATION: &str = "(conversation resumed)";

/// A history that breaks an invariant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// Message `index` has no content.
    #[error("message {index} is empty")]
    EmptyMessage {
        /// Its position.
        index: usize,
    },
    /// Block `block` of message `index` is empty.
    #[error("content block {block} of message {index} is empty")]
    EmptyBlock {
        /// The message's position.
        index: usize,
        /// The block's position.
        block: usize,
    },
    /// Messages `index - 1` and `index` have the same role.
    #[error("messages {} and {index} have the same role", index - 1)]
    SameRole {
        /// The second message's position.
        index: usize,
    },
    /// The history starts with the model.
    #[error("the history starts with an assistant message")]
    StartsWithAssistant,
    /// A call has no result in the next message.
    #[error("tool call {id} in message {index} has no result in the message after it")]
    MissingResult {
        /// The message's position.
        index: usize,
        /// The call's id.
        id: String,
    },
    /// A result answers no call of the message before, or answers one twice.
    #[error(
        "tool result {id} in message {index} answers no call of the message before it, or answers it twice"
    )]
    OrphanResult {
        /// The message's position.
        index: usize,
        /// The result's call id.
        id: String,
    },
}

/// What [`repair`] changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Repairs {
    /// Empty blocks removed.
    pub dropped_blocks: usize,
    /// Empty messages removed.
    pub dropped_messages: usize,
    /// Adjacent same-role messages merged.
    pub merged: usize,
    /// Error results added for calls without one.
    pub added_results: usize,
    /// Results removed that answered no call, or answered one twice.
    pub removed_results: usize,
    /// Whether a user message was put first.
    pub prepended_user: bool,
}

impl Repairs {
    /// Whether anything was changed.
    pub fn any(&self) -> bool {
        *self != Self::default()
    }
}

/// Checks every invariant; `Ok` means the history can be sent as it is.
pub fn check(messages: &[Message]) -> Result<(), HistoryError> {
    let mut open: Vec<&str> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        if message.content.is_empty() {
            return Err(HistoryError::EmptyMessage { index });
        }
        if let Some(block) = message.content.iter().position(ContentBlock::is_empty) {
            return Err(HistoryError::EmptyBlock { index, block });
        }
        if index == 0 && message.role == Role::Assistant {
            return Err(HistoryError::StartsWithAssistant);
        }
        if index > 0 && messages[index - 1].role == message.role {
            return Err(HistoryError::SameRole { index });
        }
        let mut answered = HashSet::new();
        for block in &message.content {
            if let ContentBlock::ToolResult { tool_use_id, .. } = block {
                let expected = message.role == Role::User && open.contains(&tool_use_id.as_str());
                if !expected || !answered.insert(tool_use_id.as_str()) {
                    return Err(HistoryError::OrphanResult {
                        index,
                        id: tool_use_id.clone(),
                    });
                }
            }
        }
        if let Some(id) = open.iter().find(|id| !answered.contains(**id)) {
            return Err(HistoryError::MissingResult {
                index: index - 1,
                id: (*id).to_owned(),
            });
        }
        open = message.tool_use_ids().collect();
    }
    if let Some(id) = open.first() {
        return Err(HistoryError::MissingResult {
            index: messages.len() - 1,
            id: (*id).to_owned(),
        });
    }
    Ok(())
}

/// Restores every invariant, changing as little as it can, and says what it changed.
///
/// Empty blocks and messages go; adjacent same-role messages merge; a call without a result
/// gets an error result ([`INTERRUPTED_CALL`]); a result without its call goes; a history that
/// starts with the model gets a first user message ([`RESUMED_CONVERSATION`]).
pub fn repair(messages: Vec<Message>) -> (Vec<Message>, Repairs) {
    let mut repairs = Repairs::default();
    let tidied = tidy(messages, &mut repairs);
    let paired = pair_results(tidied, &mut repairs);
    // Pairing can empty a user message that held only stray results: tidy once more.
    let mut out = tidy(paired, &mut repairs);
    if out.first().is_some_and(|m| m.role == Role::Assistant) {
        out.insert(0, Message::user_text(RESUMED_CONVERSATION));
        repairs.prepended_user = true;
    }
    debug_assert!(check(&out).is_ok(), "repair left {:?}", check(&out));
    (out, repairs)
}

/// Drops empty blocks and messages, merges adjacent same-role messages.
fn tidy(messages: Vec<Message>, repairs: &mut Repairs) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    for mut message in messages {
        let before = message.content.len();
        message.content.retain(|b| !b.is_empty());
        repairs.dropped_blocks += before - message.content.len();
        if message.content.is_empty() {
            repairs.dropped_messages += 1;
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == message.role => {
                last.content.append(&mut message.content);
                last.stopped = message.stopped.or(last.stopped);
                repairs.merged += 1;
            }
            _ => out.push(message),
        }
    }
    out
}

/// Gives each call exactly one result in the next message, and drops results without a call.
fn pair_results(messages: Vec<Message>, repairs: &mut Repairs) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len() + 1);
    let mut open: Vec<String> = Vec::new();
    for mut message in messages {
        if !open.is_empty() && message.role == Role::Assistant {
            // The calls of the message before got no answer at all.
            out.push(Message::new(Role::User, Vec::new()));
        }
        if message.role == Role::User || !open.is_empty() {
            let last_user = if message.role == Role::User {
                &mut message
            } else {
                out.last_mut().unwrap_or(&mut message)
            };
            answer_exactly(last_user, &open, repairs);
        }
        open = message.tool_use_ids().map(str::to_owned).collect();
        out.push(message);
    }
    if !open.is_empty() {
        let mut answers = Message::new(Role::User, Vec::new());
        answer_exactly(&mut answers, &open, repairs);
        out.push(answers);
    }
    out
}

/// Makes `message`'s results exactly one per id of `calls`, results first and in call order.
fn answer_exactly(message: &mut Message, calls: &[String], repairs: &mut Repairs) {
    let mut results: Vec<Option<ContentBlock>> = vec![None; calls.len()];
    let mut rest = Vec::with_capacity(message.content.len());
    for block in message.content.drain(..) {
        match &block {
            ContentBlock::ToolResult { tool_use_id, .. } => match calls.iter().position(|c| c == tool_use_id)
            {
                Some(i) if results[i].is_none() => results[i] = Some(block),
                _ => repairs.removed_results += 1,
            },
            _ => rest.push(block),
        }
    }
    let mut content: Vec<ContentBlock> = results
        .into_iter()
        .zip(calls)
        .map(|(result, id)| {
            result.unwrap_or_else(|| {
                repairs.added_results += 1;
                ContentBlock::error_result(id.clone(), INTERRUPTED_CALL)
            })
        })
        .collect();
    content.append(&mut rest);
    message.content = content;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "t".into(),
            input: json!({}),
        }
    }

    fn result(id: &str) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: json!("ok"),
            is_error: false,
        }
    }

    fn user(blocks: Vec<ContentBlock>) -> Message {
        Message::new(Role::User, blocks)
    }

    fn assistant(blocks: Vec<ContentBlock>) -> Message {
        Message::new(Role::Assistant, blocks)
    }

    #[test]
    fn a_well_formed_history_is_left_alone() {
        let history = vec![
            Message::user_text("hi"),
            assistant(vec![ContentBlock::text("let me look"), call("a"), call("b")]),
            user(vec![result("a"), result("b")]),
            Message::assistant_text("done"),
        ];
        assert_eq!(check(&history), Ok(()));
        let (repaired, repairs) = repair(history.clone());
        assert_eq!(repaired, history);
        assert!(!repairs.any());
    }

    #[test]
    fn a_call_cut_off_at_the_end_gets_an_error_result() {
        let history = vec![Message::user_text("hi"), assistant(vec![call("a")])];
        assert_eq!(
            check(&history),
            Err(HistoryError::MissingResult {
                index: 1,
                id: "a".into()
            })
        );
        let (repaired, repairs) = repair(history);
        assert_eq!(check(&repaired), Ok(()));
        assert_eq!(repairs.added_results, 1);
        assert_eq!(
            repaired[2].content,
            vec![ContentBlock::error_result("a", INTERRUPTED_CALL)]
        );
    }

    #[test]
    fn missing_duplicate_and_stray_results_are_fixed_in_call_order() {
        let history = vec![
            user(vec![result("stray"), ContentBlock::text("hi")]),
            assistant(vec![call("a"), call("b")]),
            user(vec![
                result("b"),
                ContentBlock::text("and"),
                result("b"),
                result("zzz"),
            ]),
            assistant(vec![call("c")]),
            Message::assistant_text("no result for c before me"),
        ];
        let (repaired, repairs) = repair(history);
        assert_eq!(check(&repaired), Ok(()), "{repaired:#?}");
        assert_eq!(repairs.removed_results, 3);
        assert_eq!(repairs.added_results, 2);
        assert_eq!(
            repaired[2].content,
            vec![
                ContentBlock::error_result("a", INTERRUPTED_CALL),
                result("b"),
                ContentBlock::text("and")
            ]
        );
        // c's call and the text after it were merged into one assistant message, then answered.
        assert_eq!(repaired.len(), 5);
        assert_eq!(
            repaired[4].content,
            vec![ContentBlock::error_result("c", INTERRUPTED_CALL)]
        );
    }

    #[test]
    fn empty_blocks_and_messages_go_and_same_roles_merge() {
        let history = vec![
            Message::user_text("one"),
            user(vec![ContentBlock::text("  ")]),
            Message::user_text("two"),
            assistant(vec![ContentBlock::text(""), ContentBlock::text("answer")]),
            assistant(vec![]),
        ];
        let (repaired, repairs) = repair(history);
        assert_eq!(check(&repaired), Ok(()));
        assert_eq!(
            repaired,
            vec![
                user(vec![ContentBlock::text("one"), ContentBlock::text("two")]),
                Message::assistant_text("answer")
            ]
        );
        assert_eq!(repairs.dropped_blocks, 2);
        assert_eq!(repairs.dropped_messages, 2);
        assert_eq!(repairs.merged, 1);
    }

    #[test]
    fn a_history_that_starts_with_the_model_gets_a_user_message_first() {
        let (repaired, repairs) = repair(vec![Message::assistant_text("hello")]);
        assert!(repairs.prepended_user);
        assert_eq!(repaired[0], Message::user_text(RESUMED_CONVERSATION));
        assert_eq!(check(&repaired), Ok(()));
    }

    #[test]
    fn a_user_message_of_stray_results_alone_disappears() {
        let history = vec![
            Message::user_text("hi"),
            Message::assistant_text("a"),
            user(vec![result("x")]),
            Message::assistant_text("b"),
        ];
        let (repaired, _) = repair(history);
        assert_eq!(check(&repaired), Ok(()));
        assert_eq!(repaired.len(), 2);
        assert_eq!(repaired[1].text(), "ab");
    }

    #[test]
    fn check_names_each_broken_rule() {
        assert_eq!(
            check(&[user(vec![])]),
            Err(HistoryError::EmptyMessage { index: 0 })
        );
        assert_eq!(
            check(&[Message::user_text("a"), Message::user_text("b")]),
            Err(HistoryError::SameRole { index: 1 })
        );
        assert_eq!(
            check(&[Message::assistant_text("a")]),
            Err(HistoryError::StartsWithAssistant)
        );
        assert_eq!(
            check(&[
                Message::user_text("a"),
                Message::assistant_text("b"),
                user(vec![result("q")])
            ]),
            Err(HistoryError::OrphanResult {
                index: 2,
                id: "q".into()
            })
        );
    }
}

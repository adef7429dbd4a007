//! AG-UI's frontend tools: the tools a run's input brings (`RunAgentInput.tools`) are the
//! page's own.
//!
//! - They are offered to the model as the actions of one surface of the page (`context.oui`,
//!   surface [`SURFACE`]), so they keep the rules of the page's actions: the tool policy and its
//!   approvals, the wait for the page's answer, the withdrawal of a request no one answered.
//! - A call goes to the client as `TOOL_CALL_*` under the tool's own name, and the run ends
//!   (`RUN_FINISHED`, `success`, naming the call in `pendingToolCallIds`) while the turn waits.
//!   The call's id in AG-UI names its turn ([`FrontendCall`]), so its answer finds the turn on
//!   any instance.
//! - The client's next run carries the result as a `tool` message: it is recorded as the call's
//!   answer, and that run follows the same turn from where the last one ended.
//! - A result that comes after the turn stopped waiting (the UI action timeout) starts a turn of
//!   its own (the run's), which tells the model what the page answered.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::InputMessage;
use crate::joined_id;
use crate::{ContainerHost, HostError};
use agent_worker_aws::dynamo::LoggedEvent;
use agent_worker_contract::AgentEvent;
use agent_worker_contract::ErrorChain;
use agent_worker_core::engine::ui::oui::tool_name;
use agent_worker_core::session::{ActionAnswer, SessionId, TurnId};

/// The surface of the page the frontend tools are the actions of.
pub(super) const SURFACE: &str = "page";

/// A tool of the page, as AG-UI's `Tool` gives it.
#[derive(Debug, Deserialize)]
pub(super) struct FrontendTool {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
}

/// The page's tools: the model's name of each (`ui_page_<name>`) with the client's.
pub(super) type ToolNames = Arc<HashMap<String, String>>;

/// The surface snapshot (`context.oui`) that offers `tools`, with the names the model and the
/// client know each by; `None` when there are none. A tool without a name, one named twice, or
/// parameters that are not a JSON Schema of an object are refused, naming the field.
pub(super) fn surface(tools: &[FrontendTool]) -> Result<(Option<Value>, ToolNames), HostError> {
    let mut names = HashMap::new();
    let mut actions = Vec::new();
    for (at, tool) in tools.iter().enumerate() {
        if tool.name.trim().is_empty() {
            return Err(HostError::field(
                format!("tools[{at}].name"),
                "a tool needs a name",
            ));
        }
        let input = match &tool.parameters {
            None => json!({"type": "object"}),
            Some(Value::Object(schema)) if schema.get("type").is_none_or(|t| t == "object") => {
                let mut schema = schema.clone();
                schema.insert("type".into(), json!("object"));
                Value::Object(schema)
            }
            Some(_) => {
                return Err(HostError::field(
                    format!("tools[{at}].parameters"),
                    "parameters must be a JSON Schema of an object",
                ));
            }
        };
        let model_name = tool_name(SURFACE, &tool.name);
        if names.insert(model_name.clone(), tool.name.clone()).is_some() {
            return Err(HostError::field(
                format!("tools[{at}].name"),
                format!(
                    "{} names a tool the page already offers (as {model_name})",
                    tool.name
                ),
            ));
        }
        actions.push(json!({
            "id": tool.name,
            "title": tool.name,
            "description": tool.description,
            "input": input,
        }));
    }
    let snapshot = (!actions.is_empty()).then(
        || json!({ "surfaces": [{ "id": SURFACE, "title": "the application's page", "actions": actions }] }),
    );
    Ok((snapshot, Arc::new(names)))
}

/// A frontend call as AG-UI knows it: the turn that made it and the model's id of it, one id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FrontendCall {
    /// The turn that made it.
    pub(super) turn: TurnId,
    /// The model's id of the call.
    pub(super) call: String,
}

impl FrontendCall {
    /// Its id in AG-UI.
    pub(super) fn id(turn: &str, call: &str) -> String {
        joined_id::join(turn, call)
    }

    /// The call an AG-UI id names, if it names one.
    fn parse(id: &str) -> Option<Self> {
        let (turn, call) = joined_id::split(id)?;
        Some(Self {
            turn: TurnId::new(turn).ok()?,
            call: call.to_owned(),
        })
    }
}

/// The page's answer to one call: a `tool` message of the input.
#[derive(Debug)]
pub(super) struct PageAnswer {
    call: FrontendCall,
    answer: ActionAnswer,
}

/// The answers the input's last messages give (the `tool` messages after its last other one
/// that answer calls of the page's tools; the others are the client's copies of results the
/// agent sent), none when it ends with another; all must answer calls of one turn.
pub(super) fn trailing_answers(messages: &[InputMessage]) -> Result<Vec<PageAnswer>, HostError> {
    let first = messages
        .iter()
        .rposition(|m| m.role != "tool")
        .map_or(0, |at| at + 1);
    let mut answers: Vec<PageAnswer> = Vec::new();
    for (at, message) in messages.iter().enumerate().skip(first) {
        let field = format!("messages[{at}].toolCallId");
        let Some(call) = message.tool_call_id.as_deref().and_then(FrontendCall::parse) else {
            continue;
        };
        if answers.first().is_some_and(|a| a.call.turn != call.turn) {
            return Err(HostError::field(
                field,
                "the tool messages answer calls of different runs",
            ));
        }
        let answer = match &message.error {
            Some(error) => ActionAnswer::Done {
                result: json!(error),
                is_error: true,
            },
            None => ActionAnswer::Done {
                result: super::text_of(&message.content).into(),
                is_error: false,
            },
        };
        answers.push(PageAnswer { call, answer });
    }
    Ok(answers)
}

/// Where the page's answers go.
#[derive(Debug)]
pub(super) enum Answered {
    /// The turn waits for them: recorded; the run follows the turn from after `cursor` (where
    /// the run that asked ended), leaving out the answered calls' results the client has.
    Waiting {
        turn: TurnId,
        cursor: u64,
        calls: Vec<String>,
    },
    /// The turn stopped waiting for at least one: the person's words of a turn of its own.
    Late(String),
    /// None answers a call the page was asked: the messages are the client's copies of results
    /// the agent sent.
    Nothing,
}

/// Records `answers` for the calls of `session` they answer, when its turn still waits for
/// them. A call this conversation's turn never asked the page is refused by name.
pub(super) async fn answer(
    host: &ContainerHost,
    session: &SessionId,
    answers: Vec<PageAnswer>,
) -> Result<Answered, HostError> {
    let Some(turn) = answers.first().map(|a| a.call.turn.clone()) else {
        return Err(HostError::field("messages", "no answers"));
    };
    let store = host
        .ui_answers()
        .ok_or_else(|| HostError::not_found("this host takes no answers to the page's tools"))?;
    let log = host
        .event_log()
        .ok_or_else(|| HostError::not_found("this worker keeps no event log"))?;
    let events = log.read(session, &turn, None).await.map_err(|e| {
        tracing::error!(error = %ErrorChain(&e), "reading a turn's events failed");
        HostError::unavailable("the event log could not be read; try again")
    })?;
    let mut cursor = 0;
    let mut late = Vec::new();
    let mut asked_of_the_page = Vec::new();
    for answer in answers {
        let call = answer.call.call.as_str();
        let Some(asked) = events.iter().find(|e| ui_event(e, "ui_action_requested", call)) else {
            // A call the page was never asked, that ended here (denied, not run): the message
            // is the client's copy of the result it was sent.
            if events
                .iter()
                .any(|e| matches!(&e.event, AgentEvent::ToolEnded { id, .. } if id == call))
            {
                continue;
            }
            return Err(HostError::field(
                "messages",
                format!("no call {call} of this thread waits for the page's answer"),
            ));
        };
        cursor = cursor.max(asked.seq);
        if events.iter().any(|e| ui_event(e, "ui_action_withdrawn", call)) {
            let action = event_field(asked, "action").unwrap_or(call);
            late.push(format!("- {action} (call {call}): {}", said(&answer.answer)));
        }
        asked_of_the_page.push(answer);
    }
    let answers = asked_of_the_page;
    if answers.is_empty() {
        return Ok(Answered::Nothing);
    }
    if !late.is_empty() {
        return Ok(Answered::Late(format!(
            "The page answered after the turn that asked had stopped waiting for it:\n{}",
            late.join("\n")
        )));
    }
    for answer in &answers {
        store
            .record(session, &turn, &answer.call.call, &answer.answer)
            .await
            .map_err(|e| HostError::store("recording the page's answer", &e))?;
    }
    Ok(Answered::Waiting {
        turn,
        cursor,
        calls: answers.into_iter().map(|a| a.call.call).collect(),
    })
}

/// Whether `logged` is the engine's `kind` event for call `call`.
fn ui_event(logged: &LoggedEvent, kind: &str, call: &str) -> bool {
    event_field(logged, "type") == Some(kind) && event_field(logged, "callId") == Some(call)
}

fn event_field<'a>(logged: &'a LoggedEvent, name: &str) -> Option<&'a str> {
    match &logged.event {
        AgentEvent::Other(raw) => raw.get(name).and_then(Value::as_str),
        _ => None,
    }
}

/// What an answer says, as words.
fn said(answer: &ActionAnswer) -> String {
    match answer {
        ActionAnswer::Done { result, is_error } => {
            let text = result.as_str().map_or_else(|| result.to_string(), str::to_owned);
            if *is_error {
                format!("failed: {text}")
            } else {
                text
            }
        }
        ActionAnswer::Refused { reason } => format!("refused: {reason}"),
        ActionAnswer::Taken => "taken".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, parameters: Option<Value>) -> FrontendTool {
        FrontendTool {
            name: name.into(),
            description: Some("Changes the page.".into()),
            parameters,
        }
    }

    #[test]
    fn the_page_tools_are_one_surface_and_bad_ones_are_named() {
        let (snapshot, names) = surface(&[tool(
            "set_color",
            Some(json!({"properties": {"color": {"type": "string"}}})),
        )])
        .unwrap();
        let snapshot = snapshot.unwrap();
        assert_eq!(snapshot["surfaces"][0]["id"], SURFACE);
        assert_eq!(snapshot["surfaces"][0]["actions"][0]["input"]["type"], "object");
        assert_eq!(
            names.get("ui_page_set_color").map(String::as_str),
            Some("set_color")
        );
        assert_eq!(surface(&[]).unwrap().0, None);
        let bad = surface(&[tool("x", Some(json!({"type": "string"})))]).unwrap_err();
        assert_eq!(bad.field_at_fault(), Some("tools[0].parameters"));
        let twice = surface(&[tool("x", None), tool("x", None)]).unwrap_err();
        assert_eq!(twice.field_at_fault(), Some("tools[1].name"));
    }

    #[test]
    fn the_last_tool_messages_answer_calls_of_one_turn() {
        let message = |role: &str, call: Option<String>, content: &str| InputMessage {
            role: role.into(),
            content: json!(content),
            tool_call_id: call,
            error: None,
        };
        let first = FrontendCall::id("run-1", "c1");
        let messages = vec![
            message("user", None, "Make it blue"),
            message("tool", Some(first.clone()), "done"),
        ];
        let answers = trailing_answers(&messages).unwrap();
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0].call.call, "c1");
        assert_eq!(answers[0].call.turn.as_str(), "run-1");
        assert_eq!(
            answers[0].answer,
            ActionAnswer::Done {
                result: json!("done"),
                is_error: false
            }
        );
        // A person's message last: nothing to answer.
        let later = vec![messages[1].clone(), message("user", None, "Thanks")];
        assert!(trailing_answers(&later).unwrap().is_empty());
        let other = FrontendCall::id("run-2", "c2");
        let mixed = vec![messages[1].clone(), message("tool", Some(other), "x")];
        assert_eq!(
            trailing_answers(&mixed).unwrap_err().field_at_fault(),
            Some("messages[1].toolCallId")
        );
        // The client's copy of a result the agent sent: not an answer.
        let copy = vec![message("tool", Some("call-9".into()), "x")];
        assert!(trailing_answers(&copy).unwrap().is_empty());
    }
}

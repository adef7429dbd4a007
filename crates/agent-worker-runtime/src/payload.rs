//! [`AgentTurnPayload`]: one turn as a queue or an HTTP request carries it.
//!
//! Its JSON Schema is `schema/agent-turn-payload.schema.json`. The smallest valid body:
//!
//! ```
//! use agent_worker_runtime::AgentTurnPayload;
//!
//! let body = r#"{"turnId":"t-1","conversationId":"c-1","userId":"u-1","accountId":"a-1","content":"Hi"}"#;
//! let turn = AgentTurnPayload::decode(body).unwrap();
//! assert_eq!(turn.scope().session, "c-1");
//! assert_eq!(turn.prompt().text, "Hi");
//!
//! let err = AgentTurnPayload::decode(r#"{"turnId":"t-1","conversationId":"c-1","userId":"u-1","accountId":"a-1","content":"Hi","images":[{"mimeType":"image/png"}]}"#).unwrap_err();
//! assert_eq!(err.to_string(), "images[0].data: missing field `data`");
//! ```

use agent_worker_aws::dynamo::keys::MAX_ID_BYTES;
use agent_worker_core::session::{IdError, Owner, SessionId, TurnId, id_problem};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use agent_worker_contract::{
    ApprovalDecision, AttachmentRef, ImageRef, Prompt, Scope, SessionCommand, TurnOptions, UserToken,
};

/// One turn: who sent it, in which conversation, and what they said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AgentTurnPayload {
    /// The turn's id: a redelivery with the same id runs once.
    pub turn_id: TurnId,
    /// The conversation: the session the turn belongs to.
    pub conversation_id: SessionId,
    /// The person.
    pub user_id: String,
    /// The person's account.
    pub account_id: String,
    /// The person's words.
    pub content: String,
    /// Pictures sent with the words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageRef>,
    /// The page's context, passed to the agent as a scope extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Map<String, Value>>,
    /// References to files the person attached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<AttachmentRef>,
    /// The person's decision on a pending approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalDecision>,
    /// The turns this one supersedes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supersedes: Vec<TurnId>,
    /// Where a realtime server routes the turn's events: sent with every event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_room: Option<String>,
    /// The agent definition to run, when a host serves several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The person's own credential for the product's API: it reaches the turn's tools (sent as
    /// the header the configuration names) and nothing else; never logged, stored, put in an
    /// event or shown to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_token: Option<UserToken>,
    /// The JSON Schema the turn's typed result must match: the model gives its answer as such
    /// a value, and `completed.data.result` carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_schema: Option<Map<String, Value>>,
    /// The conversation this new one branches from: read only by the conversation's first turn,
    /// which then begins with the parent's history (the same person's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<SessionId>,
    /// Where in the parent's transcript the branch starts: turn ids of the parent, the first
    /// found wins; none found, the parent's present.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branch_hints: Vec<String>,
    /// Deliver `content` to the conversation's running turn instead of running it: `steer` or
    /// `follow_up` (when no turn runs, the message runs as this turn), or `abort` the running
    /// turn (when none runs, nothing happens). On a FIFO queue, send it in a message group of
    /// its own (not the conversation's, whose running turn holds it back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<PayloadCommand>,
}

/// What a payload's `command` asks of the conversation's running turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PayloadCommand {
    /// The content reaches the model at the running turn's next round boundary.
    Steer,
    /// The content runs once the running turn is otherwise done.
    FollowUp,
    /// The running turn stops.
    Abort,
}

impl AgentTurnPayload {
    /// The session command this payload carries, if any, with its content as the prompt.
    pub fn session_command(&self) -> Option<SessionCommand> {
        let prompt = self.content.clone();
        Some(match self.command? {
            PayloadCommand::Steer => SessionCommand::Steer { prompt },
            PayloadCommand::FollowUp => SessionCommand::FollowUp { prompt },
            PayloadCommand::Abort => SessionCommand::Abort,
        })
    }
}

/// A body that is not a turn; `path` names the field at fault (empty for the body itself).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct PayloadError {
    /// The field, as a path: `images[0].mimeType`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// An id any store of this crate can key: no control character (NUL included), and at most
/// [`MAX_ID_BYTES`] bytes.
fn check_id(path: &str, id: &str) -> Result<(), PayloadError> {
    match id_problem(id, Some(MAX_ID_BYTES)) {
        Some(problem) => Err(id_error(path, &problem)),
        None => Ok(()),
    }
}

/// Whether a typed id at `path` is no longer than [`MAX_ID_BYTES`] (its `fits`), named.
fn check_fits(path: &str, fits: Result<(), IdError>) -> Result<(), PayloadError> {
    fits.map_err(|problem| id_error(path, &problem))
}

fn id_error(path: &str, problem: &IdError) -> PayloadError {
    PayloadError {
        path: path.to_owned(),
        message: problem.to_string(),
    }
}

impl AgentTurnPayload {
    /// Decodes and checks a body, naming the field at fault.
    pub fn decode(body: &str) -> Result<Self, PayloadError> {
        // serde would also read a JSON array as the struct's fields in order: refuse it.
        if body.trim_start().starts_with('[') {
            return Err(PayloadError {
                path: String::new(),
                message: "the body must be a JSON object".into(),
            });
        }
        let deserializer = &mut serde_json::Deserializer::from_str(body);
        let payload: Self = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            let mut message = e.into_inner().to_string();
            // A missing field is reported at the object that lacks it: name the field instead.
            let missing = message
                .strip_prefix("missing field `")
                .and_then(|rest| rest.split('`').next())
                .map(str::to_owned);
            // serde_path_to_error says `?` where the body ends before a place can be named.
            let path = if path == "?" { ".".to_owned() } else { path };
            if path != "." || missing.is_some() {
                // The field names the place; serde's "at line 1 column 80" adds nothing to it.
                if let Some(at) = message.rfind(" at line ") {
                    message.truncate(at);
                }
            }
            PayloadError {
                path: match (missing, path.as_str()) {
                    (Some(field), ".") => field,
                    (Some(field), _) => format!("{path}.{field}"),
                    (None, ".") => String::new(),
                    (None, _) => path,
                },
                message,
            }
        })?;
        payload.checked()
    }

    /// A turn of `content` that `person` says in conversation `conversation_id`, with nothing
    /// else: the typed start of a turn a protocol adapter builds (add the rest by its fields,
    /// then [`checked`](Self::checked)).
    pub fn new(
        turn_id: TurnId,
        conversation_id: SessionId,
        person: &Owner,
        content: impl Into<String>,
    ) -> Self {
        Self {
            turn_id,
            conversation_id,
            user_id: person.user_id.clone(),
            account_id: person.account_id.clone(),
            content: content.into(),
            images: Vec::new(),
            context: None,
            attachments: Vec::new(),
            approval: None,
            supersedes: Vec::new(),
            socket_room: None,
            agent: None,
            user_token: None,
            result_schema: None,
            parent_session: None,
            branch_hints: Vec::new(),
            command: None,
        }
    }

    /// The turn, if every id in it can be keyed by this crate's stores: the checks a decoded
    /// body goes through, run once for any turn however it was built. The ids' types refuse
    /// what no store can key; the length is the stores' own limit, and the person's ids are
    /// checked as ids.
    pub fn checked(self) -> Result<Self, PayloadError> {
        let limit = Some(MAX_ID_BYTES);
        check_fits("turnId", self.turn_id.fits(limit))?;
        check_fits("conversationId", self.conversation_id.fits(limit))?;
        for (path, value) in [("userId", &self.user_id), ("accountId", &self.account_id)] {
            check_id(path, value)?;
        }
        for (i, id) in self.supersedes.iter().enumerate() {
            check_fits(&format!("supersedes[{i}]"), id.fits(limit))?;
        }
        if let Some(parent) = &self.parent_session {
            check_fits("parentSession", parent.fits(limit))?;
        }
        Ok(self)
    }

    /// The scope the agent is invoked with: the conversation as the session, and the turn id,
    /// user, account and context as extensions.
    pub fn scope(&self) -> Scope {
        let options = TurnOptions {
            turn_id: Some(self.turn_id.clone()),
            user_id: Some(self.user_id.clone()),
            account_id: Some(self.account_id.clone()),
            approval: self.approval.clone(),
            supersedes: self.supersedes.clone(),
            deadline_ms: None,
            continuable: false,
            agent: self.agent.clone(),
            parent_session: self.parent_session.clone(),
            // Hints mark a place in a parent's transcript: without a parent they mean nothing.
            branch_hints: match self.parent_session {
                Some(_) => self.branch_hints.clone(),
                None => Vec::new(),
            },
            result_schema: self.result_schema.clone().map(Value::Object),
            context: self.context.clone().map(Value::Object),
        };
        let scope = Scope::new(self.conversation_id.clone()).with_options(options);
        match &self.user_token {
            Some(token) => scope.with_user_token(token.clone()),
            None => scope,
        }
    }

    /// The prompt: the person's words and pictures.
    pub fn prompt(&self) -> Prompt {
        Prompt {
            text: self.content.clone(),
            images: self.images.clone(),
            attachments: self.attachments.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str =
        r#"{"turnId":"t-1","conversationId":"c-1","userId":"u-1","accountId":"a-1","content":"Hi"}"#;

    #[test]
    fn the_smallest_body_decodes() {
        let turn = AgentTurnPayload::decode(MINIMAL).unwrap();
        assert_eq!(turn.turn_id, "t-1");
        assert_eq!(turn.scope().turn_id().map(|t| t.as_str()), Some("t-1"));
        assert_eq!(turn.scope().options.user_id.as_deref(), Some("u-1"));
        assert_eq!(serde_json::to_string(&turn).unwrap(), MINIMAL);
    }

    #[test]
    fn the_decision_and_the_superseded_turns_reach_the_scope() {
        let body = r#"{"turnId":"t-2","conversationId":"c-1","userId":"u-1","accountId":"a-1","content":"",
            "approval":{"approvalId":"ap-1","decision":"approve","token":"tok"},"supersedes":["t-1"]}"#;
        let scope = AgentTurnPayload::decode(body).unwrap().scope();
        assert_eq!(
            scope.options.approval,
            Some(ApprovalDecision::approve("ap-1", "tok"))
        );
        assert_eq!(scope.supersedes(), ["t-1"]);
    }

    #[test]
    fn each_fault_is_named_by_its_field() {
        let cases = [
            ("not json", "expected ident at line 1 column 2"),
            ("[]", "the body must be a JSON object"),
            (
                "[\"t\",\"c\",\"u\",\"a\",\"x\",[],null,[],null,[],null]",
                "the body must be a JSON object",
            ),
            (
                "\"text\"",
                "invalid type: string \"text\", expected struct AgentTurnPayload",
            ),
            (
                r#"{"turnId":"t"}"#,
                "conversationId: missing field `conversationId`",
            ),
            (
                r#"{"turnId":7,"conversationId":"c","userId":"u","accountId":"a","content":"x"}"#,
                "turnId: invalid type: integer `7`, expected a string",
            ),
            (
                r#"{"turnId":" ","conversationId":"c","userId":"u","accountId":"a","content":"x"}"#,
                "turnId: must not be empty",
            ),
            (
                r#"{"turnId":"t","conversationId":"c","userId":"u","accountId":"a","content":"x","context":[1]}"#,
                "context: invalid type: sequence, expected a map",
            ),
        ];
        for (body, expected) in cases {
            let err = AgentTurnPayload::decode(body).unwrap_err().to_string();
            assert!(err.starts_with(expected), "{body}: {err}");
        }
        let too_long = format!(
            r#"{{"turnId":"{}","conversationId":"c","userId":"u","accountId":"a","content":"x"}}"#,
            "t".repeat(513)
        );
        let err = AgentTurnPayload::decode(&too_long).unwrap_err();
        assert_eq!(
            (err.path.as_str(), err.message.as_str()),
            ("turnId", "is 513 bytes, over the limit of 512")
        );
        let nul = r#"{"turnId":"t","conversationId":"c","userId":"u","accountId":"a","content":"x","supersedes":["a\u0000"]}"#;
        assert_eq!(AgentTurnPayload::decode(nul).unwrap_err().path, "supersedes[0]");
    }
}

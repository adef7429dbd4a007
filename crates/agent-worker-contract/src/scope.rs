//! [`Scope`] and [`Prompt`]: the two arguments of [`Agent::invoke`](super::Agent::invoke).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{ApprovalDecision, AttachmentRef, SessionId, TurnId};
use serde_json::{Map, Value};

/// Who and where a turn belongs to.
///
/// `session` anchors a conversation across invocations: every turn of one conversation uses the
/// same value. What the turn asks of the engine (its id, the person, an approval, the tab's
/// context, …) is typed, in [`options`](Self::options); every other field is an extension,
/// kept in [`extensions`](Self::extensions). Both are flat in the JSON, and survive a round trip.
///
/// ```
/// use agent_worker_contract::Scope;
///
/// let scope: Scope = serde_json::from_str(r#"{"session":"s1","turnId":"t-9","userId":"u"}"#).unwrap();
/// assert_eq!(scope.session, "s1");
/// assert_eq!(scope.turn_id().map(|t| t.as_str()), Some("t-9"));
/// assert_eq!(
///     serde_json::to_string(&scope).unwrap(),
///     r#"{"session":"s1","turnId":"t-9","userId":"u"}"#
/// );
/// ```
///
/// The ids are typed: a scope whose session or turn id no store could key cannot be made.
///
/// ```
/// use agent_worker_contract::Scope;
///
/// assert!(serde_json::from_str::<Scope>(r#"{"session":" "}"#).is_err());
/// assert!(serde_json::from_str::<Scope>(r#"{"session":"s1","turnId":"t\u0000"}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scope {
    /// The conversation anchor, owned by the caller.
    pub session: SessionId,
    /// What the turn asks of the engine, typed; checked where it entered (a payload, a request).
    #[serde(flatten)]
    pub options: TurnOptions,
    /// Extension fields, in the order they came: what other agents pass through.
    #[serde(flatten)]
    pub extensions: Map<String, Value>,
    /// The person's own credential for the product's API, for this turn's tools only: never
    /// serialized with the scope (so never stored or sent on), never shown by `Debug`.
    #[serde(skip)]
    pub user_token: Option<UserToken>,
}

/// A person's credential for the product's API (the payload's `userToken`), carried to the tools
/// of the turn it came with and nowhere else: `Debug` shows `UserToken(..)`, and a [`Scope`]
/// never serializes it (a payload does: that is how it reaches the worker). Tools read it with
/// [`expose`](Self::expose).
///
/// ```
/// use agent_worker_contract::UserToken;
///
/// let token = UserToken::new("secret-123");
/// assert_eq!(format!("{token:?}"), "UserToken(..)");
/// assert_eq!(token.expose(), "secret-123");
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct UserToken(String);

impl UserToken {
    /// A token of `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The token itself, to put in a request's header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for UserToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UserToken(..)")
    }
}

/// The extension key that carries a turn's id, when the caller has one.
pub const TURN_ID_KEY: &str = "turnId";
/// The extension key that names the person a turn is for.
pub const USER_ID_KEY: &str = "userId";
/// The extension key that carries the person's decision on a pending approval.
pub const APPROVAL_KEY: &str = "approval";
/// The extension key that lists the ids of the turns this one supersedes (a barge-in).
pub const SUPERSEDES_KEY: &str = "supersedes";
/// The extension key that carries the time by which the turn must have ended, in milliseconds
/// since the Unix epoch (a host's own limit, such as a Lambda invocation's deadline).
pub const DEADLINE_KEY: &str = "deadlineMs";
/// The extension that says the host can run a turn on past its deadline (`continuable`): when
/// the host's deadline ([`DEADLINE_KEY`]) comes before the turn's own, the engine writes down
/// where the turn is and ends this part of it with [`codes::TURN_CONTINUES`](crate::codes::TURN_CONTINUES),
/// and the host hands the turn back to its queue, to go on in its next run.
pub const CONTINUABLE_KEY: &str = "continuable";
/// The extension naming the person's account (`accountId`).
pub const ACCOUNT_ID_KEY: &str = "accountId";
/// The extension naming the agent definition a multi-agent runtime runs for the turn.
pub const AGENT_KEY: &str = "agent";
/// The extension naming the session a new session branches from (`parentSession`): read only
/// when the session does not exist yet, which then starts with the parent's history, once.
pub const PARENT_SESSION_KEY: &str = "parentSession";
/// The extension with opaque markers of where in the parent's transcript the branch starts
/// (`branchHints`, a list: the first found wins; none found, the parent's present).
pub const BRANCH_HINTS_KEY: &str = "branchHints";
/// The extension carrying the JSON Schema a turn's typed result must match: the model gives its
/// answer as a value of that schema, and `completed.data.result` carries it.
pub const RESULT_SCHEMA_KEY: &str = "resultSchema";

/// What a turn asks of the engine beside its conversation: each an extension of the scope's
/// JSON (named by the `*_KEY` constants), typed here once, where the turn enters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnOptions {
    /// The turn's id ([`TURN_ID_KEY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    /// The person it is for ([`USER_ID_KEY`]). Typed apart from the account: a scope may name
    /// a person without one (a policy by person applies to it), while the owner of a
    /// conversation is the pair, formed once where both are present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Their account ([`ACCOUNT_ID_KEY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// The person's decision on a pending approval ([`APPROVAL_KEY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalDecision>,
    /// The turns it supersedes, a barge-in ([`SUPERSEDES_KEY`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supersedes: Vec<TurnId>,
    /// When it must have ended, in milliseconds since the Unix epoch ([`DEADLINE_KEY`]).
    #[serde(default, rename = "deadlineMs", skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// Whether the host can run the turn on past its deadline ([`CONTINUABLE_KEY`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continuable: bool,
    /// The agent definition a multi-agent runtime runs for it ([`AGENT_KEY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The session a new one branches from ([`PARENT_SESSION_KEY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<SessionId>,
    /// Where in the parent's transcript the branch starts ([`BRANCH_HINTS_KEY`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branch_hints: Vec<String>,
    /// The JSON Schema its typed result must match ([`RESULT_SCHEMA_KEY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_schema: Option<Value>,
    /// The person's tab: its surfaces, knowledge, time zone and state ([`CONTEXT_KEY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
}

/// The extension key that carries the tab's context (`oui` surfaces, `uiKnowledge`, `timeZone`,
/// the page's state).
pub const CONTEXT_KEY: &str = "context";

impl TurnOptions {
    /// Sets the option `key` names from `value`, when `key` names one; gives them back
    /// otherwise. A value that is not of the option's type (an id no store could key
    /// included) sets nothing.
    fn set(&mut self, key: String, value: Value) -> Option<(String, Value)> {
        fn typed<T: serde::de::DeserializeOwned>(value: Value) -> Option<T> {
            serde_json::from_value(value).ok()
        }
        match key.as_str() {
            TURN_ID_KEY => self.turn_id = typed(value),
            USER_ID_KEY => self.user_id = typed(value),
            ACCOUNT_ID_KEY => self.account_id = typed(value),
            APPROVAL_KEY => self.approval = typed(value),
            SUPERSEDES_KEY => self.supersedes = typed(value).unwrap_or_default(),
            DEADLINE_KEY => self.deadline_ms = typed(value),
            CONTINUABLE_KEY => self.continuable = typed(value).unwrap_or_default(),
            AGENT_KEY => self.agent = typed(value),
            PARENT_SESSION_KEY => self.parent_session = typed(value),
            BRANCH_HINTS_KEY => self.branch_hints = typed(value).unwrap_or_default(),
            RESULT_SCHEMA_KEY => self.result_schema = Some(value),
            CONTEXT_KEY => self.context = Some(value),
            _ => return Some((key, value)),
        }
        None
    }
}

impl Scope {
    /// A scope for `session` with no options and no extensions.
    pub fn new(session: SessionId) -> Self {
        Self {
            session,
            options: TurnOptions::default(),
            extensions: Map::new(),
            user_token: None,
        }
    }

    /// This scope, asking `options` of the engine.
    #[must_use]
    pub fn with_options(mut self, options: TurnOptions) -> Self {
        self.options = options;
        self
    }

    /// This scope, carrying the person's token to the turn's tools.
    #[must_use]
    pub fn with_user_token(mut self, token: UserToken) -> Self {
        self.user_token = Some(token);
        self
    }

    /// Adds or replaces the extension `key`: one of the [`options`](Self::options) when it names
    /// one (`userId`, `approval`, …), else one of the [`extensions`](Self::extensions).
    #[must_use]
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        if let Some((key, value)) = self.options.set(key.into(), value.into()) {
            self.extensions.insert(key, value);
        }
        self
    }

    /// Sets the turn's id (the [`TURN_ID_KEY`] option).
    #[must_use]
    pub fn with_turn_id(mut self, turn_id: TurnId) -> Self {
        self.options.turn_id = Some(turn_id);
        self
    }

    /// The turn's id, when the caller gave one.
    pub fn turn_id(&self) -> Option<&TurnId> {
        self.options.turn_id.as_ref()
    }

    /// Sets the time by which the turn must have ended (the [`DEADLINE_KEY`] option).
    #[must_use]
    pub fn with_deadline(mut self, deadline: SystemTime) -> Self {
        let ms = deadline
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or_default();
        self.options.deadline_ms = Some(ms);
        self
    }

    /// The ids of the turns this one supersedes (the [`SUPERSEDES_KEY`] option).
    pub fn supersedes(&self) -> &[TurnId] {
        &self.options.supersedes
    }

    /// The time by which the turn must have ended, when the caller set one.
    pub fn deadline(&self) -> Option<SystemTime> {
        let ms = self.options.deadline_ms?;
        Some(UNIX_EPOCH + Duration::from_millis(ms))
    }
}

/// What the person said: text and, optionally, pictures.
///
/// ```
/// use agent_worker_contract::Prompt;
///
/// let prompt = Prompt::text("What time is it?");
/// assert_eq!(serde_json::to_string(&prompt).unwrap(), r#"{"text":"What time is it?"}"#);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    /// The person's words.
    pub text: String,
    /// Pictures sent with the words. Agents that do not support images ignore them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageRef>,
    /// Files the person attached, by reference; an agent with a file area reads them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<AttachmentRef>,
}

impl Prompt {
    /// A prompt of text alone.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            images: Vec::new(),
            attachments: Vec::new(),
        }
    }

    /// Adds a file the person attached.
    #[must_use]
    pub fn with_attachment(mut self, attachment: AttachmentRef) -> Self {
        self.attachments.push(attachment);
        self
    }

    /// Adds a picture.
    #[must_use]
    pub fn with_image(mut self, image: ImageRef) -> Self {
        self.images.push(image);
        self
    }
}

/// A picture carried inline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ImageRef {
    /// Its media type, such as `image/png`.
    #[serde(rename = "mimeType")]
    pub mime_type: String,
    /// Its bytes, base64-encoded.
    pub data: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_turns_options_are_typed_and_the_rest_passes_through() {
        let text = r#"{"session":"s1","turnId":"t-1","userId":"ana","accountId":"acme","supersedes":["t-0"],"deadlineMs":5,"context":{"timeZone":"Europe/Paris"},"source":"slack"}"#;
        let scope: Scope = serde_json::from_str(text).unwrap();
        assert_eq!(scope.options.user_id.as_deref(), Some("ana"));
        assert_eq!(scope.options.supersedes, ["t-0"]);
        assert_eq!(scope.deadline(), Some(UNIX_EPOCH + Duration::from_millis(5)));
        assert_eq!(scope.options.context, Some(json!({"timeZone": "Europe/Paris"})));
        assert_eq!(
            scope.extensions.len(),
            1,
            "only what is not an option: {:?}",
            scope.extensions
        );
        assert_eq!(scope.extensions["source"], "slack");
        let again: Value = serde_json::to_value(&scope).unwrap();
        assert_eq!(again, serde_json::from_str::<Value>(text).unwrap());
    }

    #[test]
    fn with_sets_an_option_by_its_key_and_anything_else_as_an_extension() {
        let scope = Scope::new(SessionId::new("s1").unwrap())
            .with(USER_ID_KEY, "ana")
            .with(APPROVAL_KEY, json!({"approvalId": "ap-1", "decision": "decline"}))
            .with("source", "slack");
        assert_eq!(scope.options.user_id.as_deref(), Some("ana"));
        assert_eq!(scope.options.approval, Some(ApprovalDecision::decline("ap-1")));
        assert_eq!(scope.extensions.keys().collect::<Vec<_>>(), ["source"]);
        // Each key once in the JSON.
        let text = serde_json::to_string(&scope).unwrap();
        assert_eq!(text.matches("userId").count(), 1, "{text}");
        // A value of the wrong type sets nothing, and is not kept as an extension either.
        let odd = Scope::new(SessionId::new("s1").unwrap())
            .with(USER_ID_KEY, 7)
            .with(TURN_ID_KEY, "t\u{0}")
            .with(SUPERSEDES_KEY, json!(["t-1", " "]))
            .with(APPROVAL_KEY, json!({"decision": "approve"}));
        assert_eq!(odd.options, TurnOptions::default());
        assert!(odd.extensions.is_empty());
    }
}

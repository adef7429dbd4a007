//! [`Scope`] and [`Prompt`]: the two arguments of [`Agent::invoke`](super::Agent::invoke).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::AttachmentRef;
use serde_json::{Map, Value};

/// Who and where a turn belongs to.
///
/// `session` anchors a conversation across invocations: every turn of one conversation uses the
/// same value. Every other field is an extension (identity, source, constraints, a turn id); it
/// is kept in [`extensions`](Self::extensions) and survives a round trip unchanged.
///
/// ```
/// use agent_worker_contract::Scope;
///
/// let scope: Scope = serde_json::from_str(r#"{"session":"s1","turnId":"t-9","userId":"u"}"#).unwrap();
/// assert_eq!(scope.session, "s1");
/// assert_eq!(scope.turn_id(), Some("t-9"));
/// assert_eq!(
///     serde_json::to_string(&scope).unwrap(),
///     r#"{"session":"s1","turnId":"t-9","userId":"u"}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scope {
    /// The conversation anchor, owned by the caller.
    pub session: String,
    /// Extension fields, in the order they came.
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

impl Scope {
    /// A scope for `session` with no extensions.
    pub fn new(session: impl Into<String>) -> Self {
        Self {
            session: session.into(),
            extensions: Map::new(),
            user_token: None,
        }
    }

    /// This scope, carrying the person's token to the turn's tools.
    #[must_use]
    pub fn with_user_token(mut self, token: UserToken) -> Self {
        self.user_token = Some(token);
        self
    }

    /// Adds or replaces the extension `key`.
    #[must_use]
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.extensions.insert(key.into(), value.into());
        self
    }

    /// Sets the turn's id (the [`TURN_ID_KEY`] extension).
    #[must_use]
    pub fn with_turn_id(self, turn_id: impl Into<String>) -> Self {
        self.with(TURN_ID_KEY, turn_id.into())
    }

    /// The turn's id, when the caller gave one.
    pub fn turn_id(&self) -> Option<&str> {
        self.extensions.get(TURN_ID_KEY).and_then(Value::as_str)
    }

    /// Sets the time by which the turn must have ended (the [`DEADLINE_KEY`] extension).
    #[must_use]
    pub fn with_deadline(self, deadline: SystemTime) -> Self {
        let ms = deadline
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or_default();
        self.with(DEADLINE_KEY, ms)
    }

    /// The ids of the turns this one supersedes (the [`SUPERSEDES_KEY`] extension).
    pub fn supersedes(&self) -> Vec<&str> {
        self.extensions
            .get(SUPERSEDES_KEY)
            .and_then(Value::as_array)
            .map(|ids| ids.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    /// The time by which the turn must have ended, when the caller set one.
    pub fn deadline(&self) -> Option<SystemTime> {
        let ms = self.extensions.get(DEADLINE_KEY)?.as_u64()?;
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
pub struct ImageRef {
    /// Its media type, such as `image/png`.
    #[serde(rename = "mimeType")]
    pub mime_type: String,
    /// Its bytes, base64-encoded.
    pub data: String,
}

//! The bodies the product's HTTP API answers with and reads, as typed values: each route builds
//! its answer from one of these, and the OpenAPI document ([`super::openapi`]) describes each from
//! its schema (`schemars`), so that the two cannot drift.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use agent_worker_contract::AttachmentRef;
use agent_worker_core::engine::attachments::PresignedUpload;
use agent_worker_core::session::{SessionId, StopCause, TurnId};

/// `POST /turns`, 202: the turn was accepted (it runs here, or the turns queue has it).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnAccepted {
    /// The turn: its events are at `GET /turns/{turnId}/events`.
    pub turn_id: TurnId,
    /// Its conversation.
    pub session: SessionId,
    /// `true` when the turn went to the turns queue (a worker runs it); absent when it runs here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued: Option<bool>,
    /// The queue's id of the message that holds the turn, when it went to the queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

/// `POST /turns/{turnId}/stop`, 202: the stop was recorded; the turn ends at its next boundary.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StopRecorded {
    /// The turn asked to stop.
    pub turn_id: TurnId,
    /// Why.
    pub stop: StopCause,
}

/// The body of `POST /turns/{turnId}/stop` (none at all is a `user_stop`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct StopBody {
    /// Why the turn stops: `user_stop` (the default) or `superseded`; another is refused (400
    /// naming `reason`).
    #[schemars(with = "Option<StopAsked>")]
    pub reason: Option<String>,
}

/// The reasons a caller may give a stop.
#[derive(Debug, Clone, Copy, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)] // Its schema only: `reason` is read as text, so that another is refused by name.
enum StopAsked {
    /// The person pressed stop.
    UserStop,
    /// The person's next message replaces the turn.
    Superseded,
}

/// `POST /turns/{turnId}/actions/{callId}`, 200.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ActionRecorded {
    /// Whether this answer was recorded: `false` when the call had its answer already (the
    /// first one stands).
    pub recorded: bool,
}

/// `POST /conversations/{id}/files?size=`, 201: the file's reference, and where the person's
/// client sends its bytes itself (an S3 file area).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PresignedFile {
    /// The file's reference, to attach to a turn once its bytes are sent.
    pub reference: AttachmentRef,
    /// Where and how to send its bytes.
    pub upload: PresignedUpload,
}

/// The body of `POST /jobs/events`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JobReport {
    /// The job's event: `progress`, `completed` or `failed`.
    pub event: String,
    /// The conversation whose job it is.
    pub conversation_id: String,
    /// What the event says (the job's id within it).
    pub payload: serde_json::Value,
}

/// `POST /jobs/events`, 202: the event was recorded for the job.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobReported {
    /// The job.
    pub job: String,
    /// The event recorded.
    pub event: String,
    /// Its conversation.
    pub conversation_id: SessionId,
}

/// What an account spent on a day, in US dollars.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountSpent {
    /// The account.
    pub account_id: String,
    /// Dollars spent.
    pub spent_usd: f64,
}

/// What a person spent on a day, in US dollars.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PersonSpent {
    /// The person.
    pub user_id: String,
    /// Dollars spent.
    pub spent_usd: f64,
}

/// What a conversation spent, all days, in US dollars.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConversationSpent {
    /// The conversation.
    pub conversation_id: SessionId,
    /// Dollars spent.
    pub spent_usd: f64,
}

/// `GET /usage`, 200: what was spent on a day.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Usage {
    /// The day, `YYYY-MM-DD` (UTC).
    pub day: String,
    /// The account's spending.
    pub account: AccountSpent,
    /// The person's, when the query names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub person: Option<PersonSpent>,
    /// The conversation's, when the query names one (all days).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationSpent>,
}

/// The body of `PUT /blocks`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BlockAsk {
    /// The account to block, or whose person to block.
    pub account_id: String,
    /// The person to block; without it, the whole account.
    pub user_id: Option<String>,
    /// Why, kept with the block.
    pub reason: Option<String>,
}

/// `PUT /blocks`, 200.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Blocked {
    /// What is blocked now: `account <id>` or `person <id>`.
    pub blocked: String,
}

/// `DELETE /blocks`, 200.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Lifted {
    /// What is no longer blocked.
    pub lifted: String,
}

/// `GET /health`, 200.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// `ok`, or `draining` once shutdown began (no new turns).
    pub status: String,
    /// Turns running here now.
    pub running_turns: usize,
    /// How many may run at once.
    pub capacity: usize,
    /// The model turns run on (`null` where a host runs none itself).
    pub model: Option<String>,
    /// Event streams open now.
    pub event_streams: usize,
    /// Turns whose logs are being read for those streams.
    pub event_readers: usize,
}

/// Every refusal and failure of the product's routes: what was wrong, and the field at fault.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// What was wrong, for a person.
    pub error: String,
    /// The field at fault (a body's, the query's, a path's or a header's), when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// With 409 for a conversation that runs another turn: that turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_turn_id: Option<String>,
}

/// `stream_ended` on a turn's event stream: the turn never started (its record is gone, or it
/// was never accepted), so no terminal will come; or the token the stream was opened with has
/// ended, and the stream with it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamEnded {
    /// The turn.
    pub turn_id: TurnId,
    /// `not_started` (the turn logged nothing in time), or `token_expired` (the token the
    /// stream was opened with has ended: open it again with a new one, from `Last-Event-ID`).
    pub reason: String,
}

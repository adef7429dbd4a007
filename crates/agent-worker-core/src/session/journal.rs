//! A turn's journal: what a turn had done when it last wrote down its steps, so that a turn
//! whose worker died (a Lambda timeout, an out-of-memory kill, a deploy) resumes where it stopped
//! instead of asking the model again and running every tool again.
//!
//! A turn writes a [`Checkpoint`] before a call that changes something starts (a call whose
//! tool is not a read), and a [`CallResult`] when such a call ends. Rounds of reads write
//! nothing: a read run twice is harmless, so a text turn and a read-only turn cost what they
//! always did. The turn that claims a turn again ([`OpenTurn::reclaimed`](super::OpenTurn))
//! reads the journal ([`TurnLedger::read_journal`](super::TurnLedger::read_journal)) and goes on
//! from it: the rounds of the checkpoint are not sent to the model again, a call with a result
//! keeps it, and a call that started and has none is the one uncertain step (see
//! [`idempotency_key`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::{ContentBlock, Message, SessionId, TurnId};

/// The version of the journal's form. A journal of another version is not read as this
/// turn's: the turn runs from its start, as a turn of a worker without journals did.
pub const JOURNAL_VERSION: u32 = 1;

/// What a turn had done when a call that changes something was about to start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// The journal's form ([`JOURNAL_VERSION`]).
    pub version: u32,
    /// The turn whose journal this is: a store never gives one turn another's.
    pub turn_id: TurnId,
    /// The turn's messages so far, the person's first (as they would be stored).
    pub messages: Vec<Message>,
    /// The model's answer whose calls run.
    pub step: OpenStep,
    /// The round of the open answer, when it has calls; with none, the round to run next.
    pub round: u32,
    /// The places of the commands sent to the turn that it had given the model.
    #[serde(default)]
    pub delivered: Vec<usize>,
    /// When the turn first started, in milliseconds since the Unix epoch: its own deadline
    /// counts from it, across every run of it (0: not known).
    #[serde(default)]
    pub started_at_ms: u64,
}

/// A model's answer whose calls were running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenStep {
    /// The answer: its text, reasoning and tool uses, as the model gave them.
    pub answer: Vec<ContentBlock>,
    /// Every call of the answer, in call order.
    pub calls: Vec<String>,
    /// The calls that change something, started right after this checkpoint.
    pub started: Vec<String>,
    /// The results the answer's calls had at the checkpoint (its reads, and calls that never
    /// ran, with why).
    pub results: Vec<CallResult>,
}

/// A call's result, as the model reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallResult {
    /// The call's id (the model's `toolUseId`).
    pub call_id: String,
    /// The result, or `{"error": …}`.
    pub content: Value,
    /// Whether it is an error.
    #[serde(default)]
    pub is_error: bool,
}

/// A turn's journal as a store reads it back: the last checkpoint and the results of its calls
/// recorded after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Journal {
    /// The last checkpoint.
    pub checkpoint: Checkpoint,
    /// The results recorded after it, of the calls it started (a store may give others; they
    /// are not read).
    pub results: Vec<CallResult>,
}

impl Journal {
    /// Whether `checkpoint` can be read as turn `turn_id`'s: its own, of this version.
    pub fn is_for(checkpoint: &Checkpoint, turn_id: &TurnId) -> bool {
        checkpoint.version == JOURNAL_VERSION && &checkpoint.turn_id == turn_id
    }
}

/// The idempotency key of call `call_id` of turn `turn_id` in `session`: the same on every run
/// of the turn (a reclaimed one included), different for every call. Tools send it where their
/// service takes one (OpenAPI tools as `Idempotency-Key`, MCP tools in `_meta`), so a call that
/// may have run before the worker died can run again and take effect once. 64 hexadecimal
/// digits: the ids themselves (which may say who the person is) never leave in it.
///
/// ```
/// use agent_worker_core::session::{SessionId, TurnId, idempotency_key};
///
/// let (s, t) = (SessionId::new("s1").unwrap(), TurnId::new("t1").unwrap());
/// let key = idempotency_key(&s, &t, "tooluse_1");
/// assert_eq!(key, idempotency_key(&s, &t, "tooluse_1"));
/// assert_ne!(key, idempotency_key(&s, &t, "tooluse_2"));
/// assert_eq!(key.len(), 64);
/// ```
pub fn idempotency_key(session: &SessionId, turn_id: &TurnId, call_id: &str) -> String {
    let mut hash = Sha256::new();
    // Each part's length first: no two triples of ids hash the same bytes.
    for part in [session.as_str(), turn_id.as_str(), call_id] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

//! Commands for a running turn, sent beside `invoke` by any process: steering, which the turn
//! takes at its next round boundary, and follow-ups, which it runs once it is otherwise done.
//!
//! A store keeps them on the turn's own record, in the order it accepted them, and only while the
//! turn runs and has not been stopped; the running turn reads them in the same read that looks
//! for its stop. A turn that completes says how many it has seen, and the store refuses to
//! complete it while there are more ([`StoreError::CommandsPending`](super::StoreError)): an
//! accepted command is never dropped by a turn that ended without reading it.

use serde::{Deserialize, Serialize};

use super::Stop;

/// A command for a running turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TurnCommand {
    /// Words for the model at the turn's next round boundary: after the current round's tool
    /// calls end, before the next model call.
    Steer {
        /// The person's words.
        text: String,
    },
    /// A message that runs in the same turn once it is otherwise done, in the order sent, one
    /// at a time.
    FollowUp {
        /// The person's words.
        text: String,
    },
}

impl TurnCommand {
    /// The person's words.
    pub fn text(&self) -> &str {
        match self {
            Self::Steer { text } | Self::FollowUp { text } => text,
        }
    }

    /// Its kind, as events and answers name it (`steer`, `follow_up`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Steer { .. } => "steer",
            Self::FollowUp { .. } => "follow_up",
        }
    }
}

/// What a running turn has been sent, in one read: its stop, and its commands in the order they
/// were accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnSignals {
    /// The stop asked of it, if any.
    pub stop: Option<Stop>,
    /// Every command accepted for it so far.
    pub commands: Vec<TurnCommand>,
}

/// What became of a command sent to a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandOutcome {
    /// Kept, at this place among the turn's commands.
    Accepted {
        /// Its place, from 0.
        position: usize,
    },
    /// The turn is not running (never started, ended, or stopped): nothing was kept.
    NotRunning,
    /// The turn's commands would pass [`MAX_QUEUED_COMMAND_BYTES`]: nothing was kept, and
    /// sending it again will not help until the turn has ended.
    Full,
}

/// The most bytes of text a turn's waiting commands may hold together: what one table item
/// keeps beside the turn's record with room to spare. A command past it is refused before it is
/// written, as a permanent refusal, never a store failure.
pub const MAX_QUEUED_COMMAND_BYTES: usize = 128 * 1024;

/// Whether a command of `adding` bytes fits beside commands of `held` bytes.
pub fn command_fits(held: usize, adding: usize) -> bool {
    held.saturating_add(adding) <= MAX_QUEUED_COMMAND_BYTES
}

//! [`TurnStopReason`]: why a completed turn ended before the model's own end, as its terminal's
//! `completed.data.stopReason` says it. Typed inside; a string only on the wire.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::session::StopCause;

/// Why a completed turn ended before the model's own end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TurnStopReason {
    /// The person stopped it.
    UserStop,
    /// The person's next message replaced it.
    Superseded,
    /// It reached its deadline.
    Deadline,
    /// Its account or person was blocked.
    Blocked,
    /// A call waits for the person's approval.
    ApprovalRequired,
    /// The model called a tool that ends the turn (`stopTools` carries the calls).
    StopTool,
    /// The answer reached the output limit.
    OutputLimit,
    /// The tool loop ran out of rounds.
    MaxRounds,
    /// The model asked for the same call (a tool and its arguments) more times than a turn
    /// may make it: a loop.
    RepeatedCall,
    /// A guardrail intervened.
    GuardrailIntervened,
    /// The content filter stopped the answer.
    ContentFiltered,
}

impl TurnStopReason {
    /// Its wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::UserStop => "user_stop",
            Self::Superseded => "superseded",
            Self::Deadline => "deadline",
            Self::Blocked => "blocked",
            Self::ApprovalRequired => "approval_required",
            Self::StopTool => "stop_tool",
            Self::OutputLimit => "output_limit",
            Self::MaxRounds => "max_rounds",
            Self::RepeatedCall => "repeated_call",
            Self::GuardrailIntervened => "guardrail_intervened",
            Self::ContentFiltered => "content_filtered",
        }
    }

    /// The reason a `completed` event's `data` gives, if it gives one this engine knows.
    pub fn of(data: Option<&Value>) -> Option<Self> {
        serde_json::from_value(data?.get("stopReason")?.clone()).ok()
    }

    /// Whether the turn was stopped from outside (the person, a newer message, the deadline),
    /// rather than ended by what the model did.
    pub const fn is_stop(self) -> bool {
        matches!(
            self,
            Self::UserStop | Self::Superseded | Self::Deadline | Self::Blocked
        )
    }
}

impl From<StopCause> for TurnStopReason {
    fn from(cause: StopCause) -> Self {
        match cause {
            StopCause::UserStop => Self::UserStop,
            StopCause::Superseded => Self::Superseded,
            StopCause::Deadline => Self::Deadline,
            StopCause::Blocked => Self::Blocked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_reason_reads_back_from_its_wire_name() {
        for reason in [
            TurnStopReason::UserStop,
            TurnStopReason::Superseded,
            TurnStopReason::Deadline,
            TurnStopReason::ApprovalRequired,
            TurnStopReason::StopTool,
            TurnStopReason::OutputLimit,
            TurnStopReason::MaxRounds,
            TurnStopReason::GuardrailIntervened,
            TurnStopReason::ContentFiltered,
        ] {
            let data = json!({ "stopReason": reason.as_str() });
            assert_eq!(TurnStopReason::of(Some(&data)), Some(reason));
        }
        assert_eq!(
            TurnStopReason::of(Some(&json!({"stopReason": "tea_break"}))),
            None
        );
        assert_eq!(TurnStopReason::of(None), None);
        assert!(TurnStopReason::from(StopCause::Deadline).is_stop());
        assert!(!TurnStopReason::ApprovalRequired.is_stop());
        assert_eq!(StopCause::UserStop.as_str(), TurnStopReason::UserStop.as_str());
    }
}

//! [`StdoutSink`]: one JSON line per event on stdout.

use std::io::Write as _;

use async_trait::async_trait;

use super::{Sink, SinkError, TurnRef, TurnSink};
use crate::protocol::AgentEvent;

/// Writes each event as `{"session":..,"turnId":..,"event":{..}}` on one line of stdout.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdoutSink;

#[derive(Debug)]
struct StdoutTurn {
    turn: TurnRef,
}

impl Sink for StdoutSink {
    fn open(&self, turn: &TurnRef) -> Box<dyn TurnSink> {
        Box::new(StdoutTurn { turn: turn.clone() })
    }
}

#[async_trait]
impl TurnSink for StdoutTurn {
    async fn event(&mut self, event: &AgentEvent) -> Result<(), SinkError> {
        let line = self.turn.envelope("session", event);
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").map_err(|e| SinkError::caused_by("stdout", e))
    }
}

//! The in-memory store's journals: each turn's last checkpoint and the results recorded after
//! it, written only while the turn runs.

use std::collections::HashMap;

use super::{
    CallResult, Checkpoint, Journal, MemoryStore, SessionData, SessionId, StoreError, TurnId, TurnStatus,
};

impl MemoryStore {
    /// [`TurnLedger::write_checkpoint`](crate::session::TurnLedger::write_checkpoint).
    pub(super) fn checkpoint(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        let mut sessions = self.lock()?;
        let data = running(&mut sessions, session, turn_id)?;
        data.journals
            .insert(turn_id.clone(), (checkpoint.clone(), Vec::new()));
        Ok(())
    }

    /// [`TurnLedger::record_result`](crate::session::TurnLedger::record_result).
    pub(super) fn result(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        result: &CallResult,
    ) -> Result<(), StoreError> {
        let mut sessions = self.lock()?;
        let data = running(&mut sessions, session, turn_id)?;
        match data.journals.get_mut(turn_id.as_str()) {
            Some((_, results)) => {
                results.push(result.clone());
                Ok(())
            }
            None => Err(StoreError::Backend("the turn wrote no checkpoint".into())),
        }
    }

    /// [`TurnLedger::read_journal`](crate::session::TurnLedger::read_journal).
    pub(super) fn journal(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<Option<Journal>, StoreError> {
        let sessions = self.lock()?;
        Ok(sessions
            .get(session.as_str())
            .and_then(|data| data.journals.get(turn_id.as_str()))
            .filter(|(checkpoint, _)| Journal::is_for(checkpoint, turn_id))
            .map(|(checkpoint, results)| Journal {
                checkpoint: checkpoint.clone(),
                results: results.clone(),
            }))
    }
}

impl MemoryStore {
    /// [`TurnLedger::hand_over_turn`](crate::session::TurnLedger::hand_over_turn): the turn's
    /// lease given up, the conversation's run kept.
    pub(super) fn hand_over(&self, session: &SessionId, turn_id: &TurnId) -> Result<(), StoreError> {
        if let Some(record) = self
            .lock()?
            .get_mut(session.as_str())
            .and_then(|data| data.turns.get_mut(turn_id.as_str()))
            .filter(|record| !record.status.is_done())
        {
            record.lease_until = std::time::SystemTime::UNIX_EPOCH;
        }
        Ok(())
    }
}

/// `session`'s data, while turn `turn_id` runs in it: a journal is written only then.
fn running<'a>(
    sessions: &'a mut HashMap<SessionId, SessionData>,
    session: &SessionId,
    turn_id: &TurnId,
) -> Result<&'a mut SessionData, StoreError> {
    sessions
        .get_mut(session.as_str())
        .filter(|data| {
            data.turns
                .get(turn_id.as_str())
                .is_some_and(|record| record.status == TurnStatus::Running)
        })
        .ok_or_else(|| StoreError::LostLease(format!("turn {turn_id} is not running")))
}

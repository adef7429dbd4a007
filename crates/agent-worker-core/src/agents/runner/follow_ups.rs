//! A person's message to a session whose turn is running becomes a follow-up of that turn
//! (not a `turn_in_progress` refusal): it is queued on the thread record, and the running turn
//! takes it when the person's side is next, in the order queued, one at a time, in the same
//! invocation. The running turn's saves keep what others queued meanwhile, so none is lost.

use crate::agents::thread::{
    QueuedMessage, SessionStatus, Side, ThreadMessage, ThreadRecord, ThreadStore, ThreadStoreError,
};
use crate::clock::now_ms;
use crate::engine::Emitter;
use crate::engine::EngineEvent;
use crate::session::TurnId;

/// How many times a save is tried again when other invocations queued follow-ups meanwhile.
const SAVE_TRIES: usize = 5;

/// Queues `text` (turn `turn_id`) on `record`, the session's running thread: once, whatever
/// redeliveries come. Its save expects the version read, so a thread that moved meanwhile is a
/// conflict for the caller to try again.
pub(super) async fn queue(
    threads: &dyn ThreadStore,
    mut record: ThreadRecord,
    turn_id: &TurnId,
    text: &str,
) -> Result<(), ThreadStoreError> {
    if record.follow_ups.iter().any(|q| q.turn_id == *turn_id) {
        return Ok(());
    }
    record.follow_ups.push(QueuedMessage {
        turn_id: turn_id.to_owned(),
        text: text.to_owned(),
    });
    threads.save(&record).await.map(|_| ())
}

/// When `speaker`'s side is next, takes the oldest follow-up as its message: said to the caller,
/// and marked handled so that a redelivery of its own message runs nothing.
pub(super) fn take_next(record: &mut ThreadRecord, speaker: Side, out: &Emitter) -> bool {
    if record.follow_ups.is_empty() {
        return false;
    }
    let next = record.follow_ups.remove(0);
    record
        .transcript
        .push(ThreadMessage::new(speaker, next.text.clone()));
    record.trim_transcript();
    record.next_side = speaker.other();
    record.handled(&next.turn_id);
    tracing::info!(turn = %next.turn_id, "a follow-up queued on the running turn reached the session");
    out.emit(
        EngineEvent::CommandDelivered {
            kind: "follow_up".into(),
            position: 0,
            text: next.text,
        }
        .into(),
    );
    true
}

/// Whether `stored` is still held by turn `turn_id`: only follow-ups were queued on it since.
fn still_ours(stored: &ThreadRecord, turn_id: &TurnId) -> bool {
    stored.running_turn.as_ref() == Some(turn_id) && stored.lease_until_ms > now_ms()
}

/// Adds to `record` the follow-ups of `stored` it does not know; whether there were any.
fn merge(record: &mut ThreadRecord, stored: ThreadRecord) -> bool {
    let mut added = false;
    for queued in stored.follow_ups {
        let known = record.follow_ups.iter().any(|q| q.turn_id == queued.turn_id)
            || record.handled_turns.contains(&queued.turn_id);
        if !known {
            record.follow_ups.push(queued);
            added = true;
        }
    }
    record.version = stored.version;
    added
}

/// Saves `record` for turn `turn_id`. On a conflict with a thread that is still this turn's, the
/// follow-ups queued meanwhile are added and the save tried again, unless `stop_when_added`:
/// then it stops there, unsaved, saying they came (`Ok(true)`).
async fn save_merging(
    threads: &dyn ThreadStore,
    record: &mut ThreadRecord,
    turn_id: &TurnId,
    stop_when_added: bool,
) -> Result<bool, ThreadStoreError> {
    for _ in 0..SAVE_TRIES {
        match threads.save(record).await {
            Ok(version) => {
                record.version = version;
                return Ok(false);
            }
            Err(ThreadStoreError::Conflict) => {
                let stored = threads.load(&record.session).await?;
                let Some(stored) = stored.filter(|s| still_ours(s, turn_id)) else {
                    return Err(ThreadStoreError::Conflict);
                };
                if merge(record, stored) && stop_when_added {
                    return Ok(true);
                }
            }
            Err(other) => return Err(other),
        }
    }
    Err(ThreadStoreError::Conflict)
}

/// Saves the running turn's `record` between its side turns, keeping what the person queued on
/// it meanwhile.
pub(super) async fn save_keeping(
    threads: &dyn ThreadStore,
    record: &mut ThreadRecord,
    turn_id: &TurnId,
) -> Result<(), ThreadStoreError> {
    save_merging(threads, record, turn_id, false).await.map(|_| ())
}

/// Saves the turn's last state, parked: unless follow-ups came meanwhile to a session that waits
/// for the person, which the turn then runs first (`Ok(true)`, nothing saved).
pub(super) async fn finish(
    threads: &dyn ThreadStore,
    record: &mut ThreadRecord,
    turn_id: &TurnId,
) -> Result<bool, ThreadStoreError> {
    let awaiting = record.status == SessionStatus::AwaitingHuman;
    save_merging(threads, record, turn_id, awaiting).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::thread::MemoryThreadStore;
    use crate::session::test_ids::{sid, tid};

    /// A session running turn `t1`, saved.
    async fn running(threads: &MemoryThreadStore) -> ThreadRecord {
        let mut record = ThreadRecord::new(sid("s"), "assistant", Side::B);
        record.running_turn = Some(tid("t1"));
        record.lease_until_ms = now_ms() + 60_000;
        record.version = threads.save(&record).await.unwrap();
        record
    }

    #[tokio::test]
    async fn a_follow_up_queued_as_the_turn_parks_stops_the_last_save_and_is_kept_in_between() {
        let threads = MemoryThreadStore::new();
        let mut record = running(&threads).await;
        let stored = threads.load(&sid("s")).await.unwrap().unwrap();
        queue(&threads, stored.clone(), &tid("t2"), "Are you there?")
            .await
            .unwrap();
        // Queued twice (a redelivery): kept once.
        let again = threads.load(&sid("s")).await.unwrap().unwrap();
        queue(&threads, again, &tid("t2"), "Are you there?")
            .await
            .unwrap();

        // The turn parks: its last save stops, and says the follow-up came.
        record.status = SessionStatus::AwaitingHuman;
        assert!(finish(&threads, &mut record, &tid("t1")).await.unwrap());
        assert_eq!(record.follow_ups.len(), 1);
        assert_eq!(
            threads.load(&sid("s")).await.unwrap().unwrap().status,
            SessionStatus::Running,
            "nothing saved"
        );

        // Between side turns, a save keeps what came and goes on.
        let stored = threads.load(&sid("s")).await.unwrap().unwrap();
        queue(&threads, stored, &tid("t3"), "And now?").await.unwrap();
        record.status = SessionStatus::Running;
        save_keeping(&threads, &mut record, &tid("t1")).await.unwrap();
        let kept: Vec<TurnId> = threads
            .load(&sid("s"))
            .await
            .unwrap()
            .unwrap()
            .follow_ups
            .into_iter()
            .map(|q| q.turn_id)
            .collect();
        assert_eq!(kept, ["t2", "t3"]);

        // A thread another turn took over is not this turn's to save.
        let mut other = threads.load(&sid("s")).await.unwrap().unwrap();
        other.running_turn = Some(tid("t9"));
        threads.save(&other).await.unwrap();
        assert!(matches!(
            save_keeping(&threads, &mut record, &tid("t1")).await,
            Err(ThreadStoreError::Conflict)
        ));
    }
}

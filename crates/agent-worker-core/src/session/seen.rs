//! Looks at a running turn's signals that a store takes as a side effect of its other writes.
//!
//! A running turn watches for its stop and commands by reading them ([`SignalStore::turn_signals`],
//! once a second while the model streams). A store whose writes for the turn can carry a look at
//! them at no extra request (the DynamoDB event log's, a condition on the turn's item in the same
//! transaction) tells the turn's watch of each look on a board ([`SignalBoards`]), so that the
//! watch reads only when no write has looked for it lately.
//!
//! [`SignalStore::turn_signals`]: super::SignalStore::turn_signals

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{SessionId, TurnId, TurnSignals};

/// One look at a turn's signals: when it was taken (when the request that took it was sent, so
/// never later than what it saw), and what it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalsSeen {
    /// When the look was sent.
    pub at: Instant,
    /// What it saw.
    pub signals: TurnSignals,
}

/// A running turn's side of its board: the latest look any writer took, and a wait for the next.
#[derive(Debug, Clone)]
pub struct SeenSignals(watch::Receiver<Option<SignalsSeen>>);

impl SeenSignals {
    /// The latest look, if one was taken.
    pub fn latest(&mut self) -> Option<SignalsSeen> {
        self.0.borrow_and_update().clone()
    }

    /// Waits until a look comes that is newer than the one [`latest`](Self::latest) last
    /// answered. Pends for ever once the store has forgotten the turn.
    pub async fn changed(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The turns watched in this process, each with its latest look and how often its watch reads.
/// A store keeps one and shares it between its clones; a board exists while its turn's watch
/// holds a [`SeenSignals`], so a writer looks only for turns someone watches.
#[derive(Debug, Clone, Default)]
pub struct SignalBoards(Arc<Mutex<HashMap<(SessionId, TurnId), Board>>>);

#[derive(Debug)]
struct Board {
    looks: watch::Sender<Option<SignalsSeen>>,
    /// How long after the last look the turn's watch reads.
    interval: Duration,
}

impl SignalBoards {
    /// The board of `turn_id` of `session`, made if it is new, for a watch that reads its
    /// signals `interval` after the last look. Boards no watch holds any more are dropped here.
    pub fn subscribe(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        interval: Duration,
    ) -> Option<SeenSignals> {
        let mut boards = self.0.lock().ok()?;
        boards.retain(|_, board| board.looks.receiver_count() > 0);
        let board = boards
            .entry((session.to_owned(), turn_id.to_owned()))
            .or_insert_with(|| Board {
                looks: watch::channel(None).0,
                interval,
            });
        Some(SeenSignals(board.looks.subscribe()))
    }

    /// Whether a writer for `turn_id`, whose next write may come `until_next` after this one,
    /// should look at its signals with this write: the turn is watched, no stop is known, and
    /// the watch would read before that next write. Answers the commands known so far (a look
    /// sees a change when there are more).
    pub fn look_due(&self, session: &SessionId, turn_id: &TurnId, until_next: Duration) -> Option<usize> {
        let boards = self.0.lock().ok()?;
        let board = boards.get(&(session.to_owned(), turn_id.to_owned()))?;
        if board.looks.receiver_count() == 0 {
            return None;
        }
        match &*board.looks.borrow() {
            None => Some(0),
            Some(seen) if seen.signals.stop.is_some() => None,
            Some(seen) if seen.at.elapsed() + until_next < board.interval => None,
            Some(seen) => Some(seen.signals.commands.len()),
        }
    }

    /// Records a look at `turn_id`'s signals that saw `signals`, when the turn is watched. An
    /// older look than the one kept is dropped.
    pub fn saw(&self, session: &SessionId, turn_id: &TurnId, seen: SignalsSeen) {
        self.update(session, turn_id, |kept| {
            if kept.as_ref().is_none_or(|kept| kept.at <= seen.at) {
                *kept = Some(seen);
                true
            } else {
                false
            }
        });
    }

    /// Records a look sent `at` that saw nothing new: no stop, and no more commands than known.
    pub fn saw_unchanged(&self, session: &SessionId, turn_id: &TurnId, at: Instant) {
        self.update(session, turn_id, |kept| match kept {
            Some(kept) if kept.at >= at => false,
            Some(kept) => {
                kept.at = at;
                true
            }
            None => {
                *kept = Some(SignalsSeen {
                    at,
                    signals: TurnSignals::default(),
                });
                true
            }
        });
    }

    fn update(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        change: impl FnOnce(&mut Option<SignalsSeen>) -> bool,
    ) {
        let Ok(boards) = self.0.lock() else {
            return;
        };
        if let Some(board) = boards.get(&(session.to_owned(), turn_id.to_owned())) {
            board.looks.send_if_modified(change);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::test_ids::{sid, tid};
    use crate::session::{Stop, StopCause, TurnCommand};

    const INTERVAL: Duration = Duration::from_secs(1);
    /// The writer's next write may come this long after one.
    const UNTIL_NEXT: Duration = Duration::from_millis(500);
    /// How long after a look the next one is due.
    const EVERY: Duration = Duration::from_millis(500);

    #[tokio::test(start_paused = true)]
    async fn a_look_is_due_only_for_a_watched_turn_and_once_an_interval() {
        let boards = SignalBoards::default();
        assert_eq!(
            boards.look_due(&sid("s"), &tid("t"), UNTIL_NEXT),
            None,
            "nobody watches t"
        );
        let mut watch = boards.subscribe(&sid("s"), &tid("t"), INTERVAL).expect("a board");
        assert_eq!(boards.look_due(&sid("s"), &tid("t"), UNTIL_NEXT), Some(0));

        boards.saw_unchanged(&sid("s"), &tid("t"), Instant::now());
        watch.changed().await;
        assert_eq!(
            watch.latest().map(|seen| seen.signals),
            Some(TurnSignals::default())
        );
        assert_eq!(
            boards.look_due(&sid("s"), &tid("t"), UNTIL_NEXT),
            None,
            "just looked"
        );

        tokio::time::advance(EVERY).await;
        let signals = TurnSignals {
            stop: None,
            commands: vec![TurnCommand::Steer {
                text: "shorter".into(),
            }],
        };
        boards.saw(
            &sid("s"),
            &tid("t"),
            SignalsSeen {
                at: Instant::now(),
                signals: signals.clone(),
            },
        );
        tokio::time::advance(EVERY).await;
        assert_eq!(
            boards.look_due(&sid("s"), &tid("t"), UNTIL_NEXT),
            Some(1),
            "one command known"
        );

        boards.saw(
            &sid("s"),
            &tid("t"),
            SignalsSeen {
                at: Instant::now(),
                signals: TurnSignals {
                    stop: Some(Stop::now(StopCause::UserStop)),
                    ..signals
                },
            },
        );
        tokio::time::advance(EVERY).await;
        assert_eq!(
            boards.look_due(&sid("s"), &tid("t"), UNTIL_NEXT),
            None,
            "a stop is known: nothing left to look for"
        );

        drop(watch);
        assert_eq!(
            boards.look_due(&sid("s"), &tid("t"), UNTIL_NEXT),
            None,
            "the watch is gone"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_older_look_never_replaces_a_newer_one() {
        let boards = SignalBoards::default();
        let mut watch = boards.subscribe(&sid("s"), &tid("t"), INTERVAL).expect("a board");
        let early = Instant::now();
        tokio::time::advance(EVERY).await;
        let stop = TurnSignals {
            stop: Some(Stop::now(StopCause::UserStop)),
            commands: Vec::new(),
        };
        boards.saw(
            &sid("s"),
            &tid("t"),
            SignalsSeen {
                at: Instant::now(),
                signals: stop.clone(),
            },
        );
        boards.saw_unchanged(&sid("s"), &tid("t"), early);
        boards.saw(
            &sid("s"),
            &tid("t"),
            SignalsSeen {
                at: early,
                signals: TurnSignals::default(),
            },
        );
        assert_eq!(watch.latest().map(|seen| seen.signals), Some(stop));
    }
}

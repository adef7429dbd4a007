//! The start rule of a batch's records: a record starts only with the store margin plus the
//! least turn time left before the batch's deadline; otherwise it goes back to the queue before
//! anything is claimed.

use std::time::{Duration, SystemTime};

use super::TurnHandler;

impl TurnHandler {
    /// When the records of a batch whose deadline is `deadline` may start, the batch starting
    /// `now`: with the store margin plus the least turn time left, the latter no more than half
    /// the batch's window.
    pub(crate) fn start_rule(&self, deadline: Option<SystemTime>, now: SystemTime) -> StartRule {
        let window = deadline.map_or(Duration::ZERO, |d| d.duration_since(now).unwrap_or_default());
        StartRule {
            deadline,
            needed: self.store_margin + self.min_turn_time.min(window / 2),
        }
    }
}

/// When a batch's records may start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StartRule {
    /// The batch's deadline, if it has one.
    pub(crate) deadline: Option<SystemTime>,
    /// The time a record needs left before `deadline` to start.
    pub(crate) needed: Duration,
}

impl StartRule {
    /// Why a record may not start at `now`, if it may not.
    pub(crate) fn refuses(&self, now: SystemTime) -> Option<String> {
        let left = self.deadline?.duration_since(now).unwrap_or_default();
        (left < self.needed).then(|| {
            format!(
                "not started: {} ms of the invocation were left and a turn needs {} ms; nothing was claimed",
                left.as_millis(),
                self.needed.as_millis()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_worker_core::sinks::Sinks;

    #[test]
    fn a_record_starts_only_with_the_margin_and_the_least_turn_time_left() {
        let handler = TurnHandler::new(
            agent_worker_contract::agent_fn(|_, _| futures_util::stream::empty()),
            Sinks::new(),
        )
        .store_margin(Duration::from_secs(10))
        .min_turn_time(Duration::from_secs(30));
        let now = SystemTime::now();
        let in_secs = |s| Some(now + Duration::from_secs(s));
        assert_eq!(handler.start_rule(None, now).refuses(now), None);
        // An invocation of 15 minutes: each record needs 40 s left.
        let rule = handler.start_rule(in_secs(900), now);
        assert_eq!(rule.needed, Duration::from_secs(40));
        assert_eq!(rule.refuses(now), None);
        let later = now + Duration::from_secs(861);
        let refused = rule.refuses(later).expect("refused");
        assert!(
            refused.contains("39000 ms of the invocation were left and a turn needs 40000 ms"),
            "{refused}"
        );
        // A window of 30 s (a poller on SQS's default visibility timeout): 10 + 15 s.
        let short = handler.start_rule(in_secs(30), now);
        assert_eq!(short.needed, Duration::from_secs(25));
        assert_eq!(short.refuses(now), None);
        // A window that leaves less than the margin twice over runs nothing.
        assert!(handler.start_rule(in_secs(12), now).refuses(now).is_some());
        let past = Some(SystemTime::UNIX_EPOCH);
        assert!(handler.start_rule(past, now).refuses(now).is_some());
    }
}

//! [`PendingEvents`]: a sink's events not sent yet, with consecutive deltas merged.

use std::collections::VecDeque;

use crate::protocol::AgentEvent;

/// Events a sink holds before it sends them, oldest first. A text delta that follows a text
/// delta is appended to it (a thinking delta to a thinking delta) while the merged text stays
/// under a size, so a streamed answer goes out as a few events, not one per token. Nothing is
/// reordered and no text is lost: a merged event reads as the deltas did, one after the other.
///
/// ```
/// use agent_worker_core::protocol::AgentEvent;
/// use agent_worker_core::sinks::PendingEvents;
///
/// let mut pending = PendingEvents::new(16);
/// for event in [AgentEvent::text("Hel"), AgentEvent::text("lo"), AgentEvent::completed()] {
///     pending.push(event);
/// }
/// assert_eq!(pending.pop_front(), Some(AgentEvent::text("Hello")));
/// assert_eq!(pending.pop_front(), Some(AgentEvent::completed()));
/// ```
#[derive(Debug, Clone)]
pub struct PendingEvents {
    events: VecDeque<AgentEvent>,
    max_text_bytes: usize,
}

impl PendingEvents {
    /// An empty queue whose merged deltas stop growing at `max_text_bytes`.
    pub fn new(max_text_bytes: usize) -> Self {
        Self {
            events: VecDeque::new(),
            max_text_bytes,
        }
    }

    /// Queues `event`, merged into the last one when both are deltas of one kind and the
    /// merged text stays within the size.
    pub fn push(&mut self, event: AgentEvent) {
        let room = self.max_text_bytes;
        match (self.events.back_mut(), event) {
            (Some(AgentEvent::Text { delta: last }), AgentEvent::Text { delta })
            | (Some(AgentEvent::Thinking { delta: last }), AgentEvent::Thinking { delta })
                if last.len() + delta.len() <= room =>
            {
                last.push_str(&delta);
            }
            (_, event) => self.events.push_back(event),
        }
    }

    /// Whether the newest event is a delta that more text may still join.
    pub fn ends_in_delta(&self) -> bool {
        matches!(
            self.events.back(),
            Some(AgentEvent::Text { .. } | AgentEvent::Thinking { .. })
        )
    }

    /// The oldest event, taken out.
    pub fn pop_front(&mut self) -> Option<AgentEvent> {
        self.events.pop_front()
    }

    /// The oldest `count` events, left in place.
    pub fn front(&self, count: usize) -> impl Iterator<Item = &AgentEvent> {
        self.events.iter().take(count)
    }

    /// Drops the oldest `count` events (those sent).
    pub fn discard(&mut self, count: usize) {
        self.events.drain(..count.min(self.events.len()));
    }

    /// How many events are queued.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(mut pending: PendingEvents) -> Vec<AgentEvent> {
        std::iter::from_fn(|| pending.pop_front()).collect()
    }

    #[test]
    fn deltas_of_one_kind_merge_and_other_events_keep_their_place() {
        let mut pending = PendingEvents::new(100);
        for event in [
            AgentEvent::thinking("a"),
            AgentEvent::thinking("b"),
            AgentEvent::text("c"),
            AgentEvent::text("d"),
            AgentEvent::completed(),
            AgentEvent::text("e"),
        ] {
            pending.push(event);
        }
        assert!(pending.ends_in_delta());
        assert_eq!(
            drain(pending),
            [
                AgentEvent::thinking("ab"),
                AgentEvent::text("cd"),
                AgentEvent::completed(),
                AgentEvent::text("e"),
            ]
        );
    }

    #[test]
    fn a_merged_delta_stops_at_the_size() {
        let mut pending = PendingEvents::new(4);
        for delta in ["ab", "cd", "e"] {
            pending.push(AgentEvent::text(delta));
        }
        assert_eq!(pending.len(), 2);
        assert_eq!(drain(pending), [AgentEvent::text("abcd"), AgentEvent::text("e")]);
    }

    #[test]
    fn discard_drops_the_oldest() {
        let mut pending = PendingEvents::new(4);
        pending.push(AgentEvent::text("a"));
        pending.push(AgentEvent::completed());
        assert_eq!(pending.front(1).collect::<Vec<_>>(), [&AgentEvent::text("a")]);
        pending.discard(1);
        assert!(!pending.ends_in_delta());
        assert_eq!(drain(pending), [AgentEvent::completed()]);
    }
}

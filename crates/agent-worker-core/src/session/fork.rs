//! Branching a session (the contract's `parentSession` and `branchHints`): a new session that
//! begins with its parent's history up to a branch point, then goes its own way. The parent is
//! never changed.

/// What [`HistoryStore::fork`](super::HistoryStore::fork) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkOutcome {
    /// The session now begins with the parent's first `upto` messages.
    Forked {
        /// How many of the parent's messages it begins with.
        upto: u64,
    },
    /// The session already holds messages: the parent is ignored.
    Exists,
    /// There is no such parent (or it was deleted).
    NoParent,
    /// The parent is another person's conversation: nothing was read or written.
    NotOwner,
}

/// Where a branch of a transcript starts: after the last message of the first of `hints` (turn
/// ids) that stored a message, in the order given; with none of them there, after the last
/// message. `turns` is the turn of each message, in order (`None` where it is not known).
pub fn branch_point(turns: &[Option<&str>], hints: &[String]) -> usize {
    hints
        .iter()
        .find_map(|hint| {
            turns
                .iter()
                .rposition(|turn| *turn == Some(hint.as_str()))
                .map(|last| last + 1)
        })
        .unwrap_or(turns.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_hint_found_wins_and_none_found_is_the_present() {
        let turns = [Some("t1"), Some("t1"), Some("t2"), Some("t2"), None];
        let hints = |h: &[&str]| h.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(branch_point(&turns, &hints(&["t1"])), 2);
        assert_eq!(branch_point(&turns, &hints(&["nope", "t2", "t1"])), 4);
        assert_eq!(branch_point(&turns, &hints(&["nope"])), 5);
        assert_eq!(branch_point(&turns, &[]), 5);
    }
}

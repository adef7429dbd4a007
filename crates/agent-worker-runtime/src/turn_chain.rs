//! The names of one conversation's chain of turns: the first the person's message, then one
//! turn for each approval answered, named `<first>~<n>`. A2A's tasks and MCP's `ask` continue a
//! turn so (the container's `chain`), and the worker that runs any turn of a chain pushes to the
//! task its first turn names ([`a2a_push`](crate::a2a_push)).

use agent_worker_core::session::TurnId;

/// The most turns one chain runs after its first: a turn asks at most this many approvals.
pub const MAX_CHAIN: u32 = 64;

/// What joins a chain's first turn and a later one's place in it (`<first>~<n>`): no turn a
/// caller names for a chain may hold it.
pub const CHAIN_JOIN: char = '~';

/// The `n`th turn of the chain whose first turn is `first` (`first` itself for 0).
pub fn chain_turn(first: &TurnId, n: u32) -> Option<TurnId> {
    if n == 0 {
        return Some(first.clone());
    }
    TurnId::new(format!("{first}{CHAIN_JOIN}{n}")).ok()
}

/// The first turn and the place of a turn of a chain (`None` for a first turn).
pub fn chain_place(turn: &str) -> Option<(&str, u32)> {
    let (first, n) = turn.rsplit_once(CHAIN_JOIN)?;
    let n: u32 = n.parse().ok().filter(|n| (1..=MAX_CHAIN).contains(n))?;
    (!first.is_empty()).then_some((first, n))
}

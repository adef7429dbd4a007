//! The boundaries of a turn a crash matrix kills its worker at (`durable_crashes`, through
//! the handler in process; `durable_poll_crashes`, through the processes).

/// Where the worker dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    /// Claimed, the model asked, nothing answered yet.
    AfterTheClaim,
    /// The model's first answer streaming.
    DuringTheStream,
    /// The model asked for the call, the journal written (its answer held back or lost), the
    /// call not run.
    BeforeTheCall,
    /// The call running (the tool, or the service it calls, holding it).
    DuringTheCall,
    /// The call ended, its result not written down (the write refused).
    BeforeItsResult,
    /// The call's result written down (with the event log's window after it), the model asked
    /// for its answer.
    AfterItsResult,
    /// The turn's commit landed, its answer held back or lost.
    DuringTheCommit,
}

/// Every boundary, in the turn's order.
pub const BOUNDARIES: [Boundary; 7] = [
    Boundary::AfterTheClaim,
    Boundary::DuringTheStream,
    Boundary::BeforeTheCall,
    Boundary::DuringTheCall,
    Boundary::BeforeItsResult,
    Boundary::AfterItsResult,
    Boundary::DuringTheCommit,
];

//! A turn's opening: everything a turn asks of its store before the model is first called (the
//! owner check, the claim, a stop asked while it waited, its history), asked at once so that a
//! store can answer in as few round trips as it can ([`TurnLedger::open_turn`](super::TurnLedger::open_turn)).

use super::{
    Claim, HistoryView, Lease, Owner, OwnerCheck, SessionId, SessionStore, Stop, StoreError, TurnId,
};
use crate::protocol::ErrorChain;

/// What a turn asks of the store before its first model call.
#[derive(Debug, Clone, Copy)]
pub struct TurnOpening<'a> {
    /// The session.
    pub session: &'a SessionId,
    /// The turn.
    pub turn_id: &'a TurnId,
    /// The person the turn is for: the conversation must be theirs (or no one's, and becomes
    /// theirs). `None` checks no owner.
    pub owner: Option<&'a Owner>,
    /// The lease the claim asks for.
    pub lease: Lease,
    /// Whether to read the history too. A turn that must first wait for others (the turns it
    /// supersedes) reads it later, with [`HistoryStore::load_view`](super::HistoryStore::load_view).
    pub read_history: bool,
}

/// What the store answered.
#[derive(Debug)]
pub enum Opened {
    /// The conversation is someone else's, or was deleted: nothing was claimed (a claim made
    /// alongside the check was given up).
    Refused(OwnerCheck),
    /// The turn was not claimed: it ran to its end before, or runs elsewhere ([`Claim::Done`] or
    /// [`Claim::Running`]).
    NotClaimed(Claim),
    /// Another turn of the conversation (named) runs now: nothing was claimed.
    Busy(TurnId),
    /// The turn is this worker's.
    Claimed(OpenTurn),
}

/// A claimed turn, and what was read with its claim.
#[derive(Debug)]
pub struct OpenTurn {
    /// Whether an earlier worker had claimed it and its lease ran out.
    pub reclaimed: bool,
    /// A stop asked of the turn before it was claimed.
    pub stop: Option<Stop>,
    /// The history, when it was asked for; a failure to read it leaves the claim held, for
    /// the caller to release.
    pub view: Option<Result<HistoryView, StoreError>>,
}

/// The opening one step after another: the owner check, the claim, a look for a stop, the
/// history. What [`TurnLedger::open_turn`](super::TurnLedger::open_turn) does unless a store does better.
pub async fn open_in_steps<S: SessionStore + ?Sized>(
    store: &S,
    opening: TurnOpening<'_>,
) -> Result<Opened, StoreError> {
    let TurnOpening {
        session,
        turn_id,
        owner,
        lease,
        read_history,
    } = opening;
    if let Some(owner) = owner {
        match store.claim_owner(session, Some(turn_id), owner).await? {
            OwnerCheck::Claimed | OwnerCheck::Same => {}
            refused => return Ok(Opened::Refused(refused)),
        }
    }
    if let Some(holder) = store.claim_run(session, turn_id, lease).await? {
        return Ok(Opened::Busy(holder));
    }
    let reclaimed = match store.claim_turn(session, turn_id, lease).await {
        Ok(Claim::Claimed { reclaimed }) => reclaimed,
        // A turn that will not run gives the conversation's run back.
        Ok(other) => {
            store.end_run(session, turn_id).await?;
            return Ok(Opened::NotClaimed(other));
        }
        Err(e) => {
            store.end_run(session, turn_id).await?;
            return Err(e);
        }
    };
    // Failing to look never fails the turn: it is taken as no stop, and the running turn's
    // watch looks again.
    let stop = store.stop_requested(session, turn_id).await.unwrap_or_else(|e| {
        tracing::warn!(error = %ErrorChain(&e), "could not look for a stop request; looking again later");
        None
    });
    let view = if read_history {
        Some(store.load_view(session).await)
    } else {
        None
    };
    Ok(Opened::Claimed(OpenTurn {
        reclaimed,
        stop,
        view,
    }))
}

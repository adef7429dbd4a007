//! A turn's opening on the table, in one round trip before the model is called: the claim of the
//! turn item, the owner check on the meta item and the history, together (each write returns the
//! item it wrote: the claim a stop asked while the turn waited, the owner check the session's
//! version, summary position and lineage; the history read brings the meta item it read first,
//! and is used when that is the owner check's: `read_ahead`). Otherwise (a conversation with a
//! summary or a branch, a commit in between) the history is read after, bounded by that version:
//! a second round trip.

use agent_worker_core::session::{SignalStore as _, TurnLedger as _};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use agent_worker_core::clock::now_ms;
use agent_worker_core::session::{
    Claim, Lease, OpenTurn, Opened, SessionId, Stop, StoreError, TurnId, TurnOpening, TurnRecord,
};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use super::DynamoStore;
use super::codec::{decode_stop, get_n, n, s, write_token};
use super::keys::{EXPIRES_AT, WRITE_TOKEN, turn_sk};
use super::lineage::{Segment, lineage_of};
use super::owner::MetaAnswer;
use super::sdk_error::{is_conditional_failure, store_error};
use agent_worker_core::protocol::ErrorChain;

/// What a session's meta item says a turn reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Meta {
    /// How many messages the session holds.
    pub(super) version: u64,
    /// How many of its first messages its summary stands for, when it has one.
    pub(super) summary_upto: Option<u64>,
    /// A branch's parents' parts.
    pub(super) lineage: Vec<Segment>,
}

impl Meta {
    /// Whether its history is its own messages from the first: no summary stands for the
    /// first ones, and no parent holds them.
    pub(super) fn reads_from_start(&self) -> bool {
        self.summary_upto.is_none() && self.lineage.is_empty()
    }

    /// What `item` says; an absent item is an empty session (so is a deleted one's tombstone).
    pub(super) fn of(item: Option<&HashMap<String, AttributeValue>>) -> Result<Self, StoreError> {
        let Some(item) = item else {
            return Ok(Self::default());
        };
        Ok(Self {
            version: get_n(item, "version").unwrap_or(0),
            summary_upto: get_n(item, "summaryUpto"),
            lineage: lineage_of(item)?,
        })
    }
}

/// Open turns may keep this many version guesses; past it they are all forgotten (a commit
/// without one reads the version, as it did before guesses).
const MAX_VERSION_HINTS: usize = 4096;

/// The version each open turn read with its claim, kept for its commit's first try: a commit
/// then writes without reading the version again. A wrong guess (another writer moved the
/// version) costs the one retry a moved version always took.
#[derive(Debug, Clone, Default)]
pub(super) struct VersionHints(Arc<Mutex<HashMap<(String, String), u64>>>);

impl VersionHints {
    fn remember(&self, session: &str, turn_id: &str, version: u64) {
        if let Ok(mut hints) = self.0.lock() {
            if hints.len() >= MAX_VERSION_HINTS {
                hints.clear();
            }
            hints.insert((session.to_owned(), turn_id.to_owned()), version);
        }
    }

    /// The guess for `turn_id`'s commit, taken: a second try reads the version.
    pub(super) fn take(&self, session: &str, turn_id: &str) -> Option<u64> {
        self.0
            .lock()
            .ok()?
            .remove(&(session.to_owned(), turn_id.to_owned()))
    }

    /// Forgets `turn_id`'s guess (the turn was given up).
    pub(super) fn forget(&self, session: &str, turn_id: &str) {
        let _ = self.take(session, turn_id);
    }
}

/// What a claim found, and the token it wrote.
pub(super) struct Claimed {
    pub(super) claim: Claim,
    /// A stop asked of the turn before the claim, when it is ours.
    pub(super) stop: Option<Stop>,
    token: String,
}

impl DynamoStore {
    /// The opening ([`TurnLedger::open_turn`]): the claim, the owner check (or, for a turn of
    /// no one, a read of the meta item) and the history read ahead sent together, then the
    /// history bounded by the owner check's version unless the read ahead holds it. A claim made
    /// beside a refused owner check is given up at once (and the read ahead dropped).
    pub(super) async fn open(&self, opening: TurnOpening<'_>) -> Result<Opened, StoreError> {
        let TurnOpening {
            session,
            turn_id,
            owner,
            lease,
            read_history,
        } = opening;
        // The conversation's run is taken in the same write as the owner check.
        let run_until = lease.ends_at_ms(now_ms());
        let meta = async {
            match owner {
                Some(owner) => {
                    super::owner::claim_reading(self, session, turn_id, owner, Some(run_until)).await
                }
                None => self.take_run(session, turn_id, run_until).await,
            }
        };
        // The history goes out with the claim, bringing its own bound (`read_ahead`); a claim
        // refused does not wait for it.
        let ahead = async {
            if read_history {
                self.read_ahead(session).await
            } else {
                None
            }
        };
        let writes = async { tokio::join!(self.claim(session, turn_id, lease), meta) };
        tokio::pin!(ahead, writes);
        let mut read = None;
        let (claimed, meta) = loop {
            tokio::select! {
                answered = &mut writes => break answered,
                done = &mut ahead, if read.is_none() => read = Some(done),
            }
        };
        let item = match meta {
            Ok(MetaAnswer::Written(_, item)) => item,
            Ok(MetaAnswer::Busy(running)) => {
                // A redelivery of a turn that ended, or runs elsewhere, is that; any other turn
                // waits for the one running.
                if let Ok(Claimed {
                    claim: claim @ (Claim::Done(_) | Claim::Running(_)),
                    ..
                }) = claimed
                {
                    return Ok(Opened::NotClaimed(claim));
                }
                if let Ok(claimed) = &claimed {
                    self.give_up(session, turn_id, claimed).await;
                }
                return Ok(Opened::Busy(running));
            }
            Ok(MetaAnswer::Refused(refused)) => {
                if let Ok(claimed) = &claimed {
                    self.give_up(session, turn_id, claimed).await;
                }
                return Ok(Opened::Refused(refused));
            }
            Err(e) => {
                if let Ok(claimed) = &claimed {
                    self.give_up(session, turn_id, claimed).await;
                }
                return Err(e);
            }
        };
        let (reclaimed, stop) = match claimed {
            Ok(Claimed {
                claim: Claim::Claimed { reclaimed },
                stop,
                ..
            }) => (reclaimed, stop),
            // A turn that will not run gives the run back.
            Ok(Claimed { claim, .. }) => {
                self.give_back_run(session, turn_id).await?;
                return Ok(Opened::NotClaimed(claim));
            }
            Err(e) => {
                if let Err(given) = self.give_back_run(session, turn_id).await {
                    tracing::warn!(error = %ErrorChain(&given), "could not give the conversation's run back");
                }
                return Err(e);
            }
        };
        let view = if read_history {
            let view = match Meta::of(item.as_ref()) {
                Ok(meta) => {
                    self.versions.remember(session, turn_id, meta.version);
                    self.note_history_shape(session, &meta);
                    let read = match read {
                        Some(read) => read,
                        None => ahead.await,
                    };
                    match read.and_then(|read| read.view_at(&meta)) {
                        Some(view) => Ok(view),
                        None => self.view_at(session, &meta).await,
                    }
                }
                Err(e) => Err(e),
            };
            Some(view)
        } else {
            None
        };
        Ok(Opened::Claimed(OpenTurn {
            reclaimed,
            stop,
            view,
        }))
    }

    /// Takes back a claim the opening will not use: a first claim's item is deleted (as if the
    /// turn had never come), a reclaimed turn is released.
    async fn give_up(&self, session: &SessionId, turn_id: &TurnId, claimed: &Claimed) {
        let given_up = match claimed.claim {
            Claim::Claimed { reclaimed: false } => self
                .client
                .delete_item()
                .table_name(&self.config.table)
                .set_key(Some(self.key(session, turn_sk(turn_id))))
                .condition_expression("#token = :token")
                .expression_attribute_names("#token", WRITE_TOKEN)
                .expression_attribute_values(":token", s(&claimed.token))
                .send()
                .await
                .map(|_| ())
                .or_else(|e| {
                    if is_conditional_failure(&e) {
                        Ok(())
                    } else {
                        Err(store_error("taking back the claim", e))
                    }
                }),
            Claim::Claimed { reclaimed: true } => self.release_turn(session, turn_id).await,
            _ => Ok(()),
        };
        if let Err(e) = given_up {
            tracing::warn!(error = %ErrorChain(&e), "could not take back a claim made beside a refused owner check");
        }
    }

    /// Claims the turn for `lease`, and says the stop asked of it before, if any: one
    /// conditional write that returns the item it wrote. Each claim writes a token of its own:
    /// when the SDK retries a claim whose answer was lost, the retry's condition fails, and the
    /// token tells that the turn is ours.
    pub(super) async fn claim(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        lease: Lease,
    ) -> Result<Claimed, StoreError> {
        let now = now_ms();
        let lease_until = lease.ends_at_ms(now);
        let token = write_token();
        // An update, not a put: a stop asked before the claim stays on the item.
        let claim = self
            .update_turn(session, turn_id)
            .update_expression(
                "SET #status = :running, leaseUntil = :lease, attempts = :one, #exp = :exp, #token = :token",
            )
            .condition_expression("attribute_not_exists(#status)")
            .expression_attribute_names("#exp", EXPIRES_AT)
            .expression_attribute_names("#token", WRITE_TOKEN)
            .expression_attribute_values(":token", s(&token))
            .expression_attribute_values(":running", s("running"))
            .expression_attribute_values(":lease", n(lease_until))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":exp", n(self.expires_at()))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match claim {
            Ok(out) => {
                self.journals.claimed(session, turn_id, &token);
                return Ok(Claimed {
                    claim: Claim::Claimed { reclaimed: false },
                    stop: out.attributes().and_then(decode_stop),
                    token,
                });
            }
            Err(e) if is_conditional_failure(&e) => {}
            Err(e) => return Err(store_error("claiming the turn", e)),
        }
        let claim = self
            .claim_again(session, turn_id, now, lease_until, &token)
            .await?;
        // Only a turn met before (a lost answer, a reclaim) looks for its stop on its own.
        let stop = match claim {
            Claim::Claimed { .. } => self.stop_requested(session, turn_id).await?,
            _ => None,
        };
        if let Claim::Claimed { .. } = claim {
            self.journals.claimed(session, turn_id, &token);
        }
        Ok(Claimed { claim, stop, token })
    }

    /// The claim of a turn whose item has a status: ours (the answer was lost), done, running
    /// elsewhere, or taken over once its earlier worker's lease ran out.
    async fn claim_again(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        now: u64,
        lease_until: u64,
        token: &str,
    ) -> Result<Claim, StoreError> {
        let Some((record, landed)) = self.read_turn_with_token(session, turn_id).await? else {
            return Err(StoreError::Backend(
                format!("turn {turn_id} exists and does not").into(),
            ));
        };
        if landed.as_deref() == Some(token) {
            tracing::info!("the claim landed and its answer was lost; the turn is ours");
            return Ok(Claim::Claimed { reclaimed: false });
        }
        if record.status.is_done() {
            return Ok(Claim::Done(record));
        }
        let old_lease = lease_ms(&record);
        if old_lease > now {
            return Ok(Claim::Running(record));
        }
        // The earlier worker's lease ran out: take the turn over, unless another worker just did.
        let reclaim = self
            .update_turn(session, turn_id)
            .update_expression("SET leaseUntil = :new, attempts = attempts + :one, #token = :token")
            .condition_expression("#status = :running AND leaseUntil = :old")
            .expression_attribute_names("#token", WRITE_TOKEN)
            .expression_attribute_values(":token", s(token))
            .expression_attribute_values(":new", n(lease_until))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":running", s("running"))
            .expression_attribute_values(":old", n(old_lease))
            .send()
            .await;
        match reclaim {
            Ok(_) => Ok(Claim::Claimed { reclaimed: true }),
            Err(e) if is_conditional_failure(&e) => {
                match self.read_turn_with_token(session, turn_id).await? {
                    Some((_, Some(landed))) if landed == token => Ok(Claim::Claimed { reclaimed: true }),
                    Some((record, _)) if record.status.is_done() => Ok(Claim::Done(record)),
                    Some((record, _)) => Ok(Claim::Running(record)),
                    None => Err(StoreError::Backend(
                        format!("turn {turn_id} vanished while being claimed").into(),
                    )),
                }
            }
            Err(e) => Err(store_error("reclaiming the turn", e)),
        }
    }
}

/// When `record`'s lease runs out, in epoch milliseconds.
fn lease_ms(record: &TurnRecord) -> u64 {
    record
        .lease_until
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

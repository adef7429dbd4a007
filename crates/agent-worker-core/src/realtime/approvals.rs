//! [`RealtimeApprovals`]: the realtime server's approval store (seed 004: "the worker stores it
//! in the realtime server's approval store"). Settling is the server's conditional move from
//! pending, so two turns racing with one token settle it once; the product's API withdraws a
//! replaced turn's card on the same route (`settle` with `expire`).
//!
//! | call | route |
//! | --- | --- |
//! | [`put_approval`](ApprovalStore::put_approval) | `POST /internal/approvals` with the approval's JSON; 409 when its id is taken |
//! | [`get_approval`](ApprovalStore::get_approval) | `GET /internal/approvals/{approvalId}`: `{"approval", "status"}`, 404 when there is none; one of another conversation is none |
//! | [`settle_approval`](ApprovalStore::settle_approval) | `POST /internal/approvals/{approvalId}/settle` with `{"outcome": "redeem" \| "decline" \| "expire"}`; 409 (or 404) when it was not pending |
//! | [`withdraw_turn_approvals`](ApprovalStore::withdraw_turn_approvals) | `GET /internal/approvals?turnId=T`, then each pending one of the conversation settled with `expire` |

use async_trait::async_trait;
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::{RealtimeServer, Request};
use crate::Failure;
use crate::session::{ApprovalStatus, ApprovalStore, PendingApproval, SessionId, StoreError, TurnId};

/// The realtime server's approval store.
#[derive(Debug, Clone)]
pub struct RealtimeApprovals {
    server: RealtimeServer,
}

impl RealtimeApprovals {
    pub(super) fn on(server: RealtimeServer) -> Self {
        Self { server }
    }
}

/// One approval as the server keeps it.
#[derive(Deserialize)]
struct Kept {
    approval: PendingApproval,
    status: ApprovalStatus,
}

/// A turn's approvals.
#[derive(Deserialize)]
struct TurnApprovals {
    approvals: Vec<Kept>,
}

/// The settle route's outcome for a move to `to`.
fn outcome(to: ApprovalStatus) -> Result<&'static str, StoreError> {
    match to {
        ApprovalStatus::Redeemed => Ok("redeem"),
        ApprovalStatus::Declined => Ok("decline"),
        ApprovalStatus::Expired => Ok("expire"),
        ApprovalStatus::Pending => Err(StoreError::Backend(Failure::from(
            "an approval is settled to redeemed, declined or expired, never to pending",
        ))),
    }
}

#[async_trait]
impl ApprovalStore for RealtimeApprovals {
    async fn put_approval(&self, approval: &PendingApproval) -> Result<(), StoreError> {
        let body = serde_json::to_value(approval)
            .map_err(|e| StoreError::Corrupt(Failure::caused_by("the approval does not encode", e)))?;
        let answer = self
            .server
            .ask(
                Method::POST,
                &["internal", "approvals"],
                Request {
                    body: Some(&body),
                    ..Request::doing("storing the approval")
                },
            )
            .await?;
        match answer.status {
            status if status.is_success() => Ok(()),
            StatusCode::CONFLICT => Err(StoreError::Backend(Failure::from(format!(
                "approval {} exists already",
                approval.id
            )))),
            _ => Err(answer.unexpected()),
        }
    }

    async fn get_approval(
        &self,
        session: &SessionId,
        id: &str,
    ) -> Result<Option<(PendingApproval, ApprovalStatus)>, StoreError> {
        let answer = self
            .server
            .ask(
                Method::GET,
                &["internal", "approvals", id],
                Request::doing("reading the approval"),
            )
            .await?;
        match answer.status {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => {
                let kept: Kept = answer.json()?;
                // An approval is its conversation's: another's is none of this one.
                Ok((kept.approval.session == *session).then_some((kept.approval, kept.status)))
            }
            _ => Err(answer.unexpected()),
        }
    }

    async fn settle_approval(
        &self,
        _session: &SessionId,
        id: &str,
        to: ApprovalStatus,
    ) -> Result<bool, StoreError> {
        let body = json!({ "outcome": outcome(to)? });
        let answer = self
            .server
            .ask(
                Method::POST,
                &["internal", "approvals", id, "settle"],
                Request {
                    body: Some(&body),
                    ..Request::doing("settling the approval")
                },
            )
            .await?;
        match answer.status {
            status if status.is_success() => Ok(true),
            StatusCode::CONFLICT | StatusCode::NOT_FOUND => Ok(false),
            _ => Err(answer.unexpected()),
        }
    }

    async fn withdraw_turn_approvals(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<usize, StoreError> {
        let answer = self
            .server
            .ask(
                Method::GET,
                &["internal", "approvals"],
                Request {
                    query: &[("turnId", turn_id)],
                    ..Request::doing("reading the turn's approvals")
                },
            )
            .await?;
        if !answer.status.is_success() {
            return Err(answer.unexpected());
        }
        let listed: TurnApprovals = answer.json()?;
        let mut withdrawn = 0;
        for kept in listed.approvals {
            let waiting = kept.status == ApprovalStatus::Pending
                && kept.approval.session == *session
                && kept.approval.turn_id == *turn_id;
            if waiting {
                withdrawn += usize::from(
                    self.settle_approval(session, &kept.approval.id, ApprovalStatus::Expired)
                        .await?,
                );
            }
        }
        Ok(withdrawn)
    }
}

//! The backend's view of spending and the kill switch (the product's backend credential only;
//! a person's own credential gets 403):
//!
//! - `GET /usage?accountId=A[&userId=U][&conversationId=C][&day=YYYY-MM-DD]`: what the ledgers
//!   hold (US dollars): the account's and the person's on the day (today, UTC, by default), and
//!   the conversation's.
//! - `PUT /blocks` with `{"accountId": "A", "userId"?: "U", "reason"?: "…"}`: blocks the account,
//!   or its person: their running turns stop and their new ones are refused, on every worker
//!   within seconds. `DELETE /blocks?accountId=A[&userId=U]` lifts it (404: there was none).
//!
//! 404 on a host whose turns are not kept in a table.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use agent_worker_aws::dynamo::DynamoStore;
use agent_worker_core::engine::spending::Ledger;
use agent_worker_core::session::{BlockTarget, SessionId};

use super::ContainerHost;
use super::access::{Authority, checked_id, checked_text};
use super::answers::{AccountSpent, BlockAsk, Blocked, ConversationSpent, Lifted, PersonSpent, Usage};
use super::error::HostError;
use super::extract::{JsonBody, Params};

/// `GET /usage`'s query.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct UsageQuery {
    /// The account.
    account_id: String,
    /// A person of it, whose spending the answer adds.
    user_id: Option<String>,
    /// A conversation, whose spending the answer adds.
    conversation_id: Option<String>,
    /// The day, `YYYY-MM-DD` (UTC); today by default.
    day: Option<String>,
}

/// `DELETE /blocks`'s query.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct LiftQuery {
    /// The account whose block is lifted, or whose person's.
    account_id: String,
    /// The person whose block is lifted; without it, the account's.
    user_id: Option<String>,
}

/// The table, for the backend alone.
fn backend_table<'a>(host: &'a ContainerHost, authority: &Authority) -> Result<&'a DynamoStore, HostError> {
    if authority.own_person().is_some() {
        return Err(HostError::new(
            StatusCode::FORBIDDEN,
            "only the product's backend reads spending and blocks; a person's credential does not",
        ));
    }
    host.table()
        .ok_or_else(|| HostError::not_found("this host keeps no table of spending and blocks"))
}

fn target(account_id: String, user_id: Option<String>) -> Result<BlockTarget, HostError> {
    let account = checked_text("accountId", account_id)?;
    Ok(match user_id {
        Some(user) => BlockTarget::Person {
            account: Some(account),
            user: checked_text("userId", user)?,
        },
        None => BlockTarget::Account(account),
    })
}

fn usd(micros: u64) -> f64 {
    micros as f64 / 1_000_000.0
}

/// `GET /usage`.
pub(super) async fn usage(
    State(host): State<ContainerHost>,
    authority: Authority,
    Params(query): Params<UsageQuery>,
) -> Result<Json<Usage>, HostError> {
    let table = backend_table(&host, &authority)?;
    let account = checked_text("accountId", query.account_id)?;
    let day = match query.day {
        Some(day) if chrono::NaiveDate::parse_from_str(&day, "%Y-%m-%d").is_ok() => day,
        Some(_) => return Err(HostError::field("day", "day is a date, YYYY-MM-DD")),
        None => agent_worker_core::engine::spending::today(),
    };
    let spent = |ledger: Ledger| async move {
        table
            .spent(&ledger)
            .await
            .map_err(|e| HostError::store("reading a ledger", &e))
    };
    let account_day = Ledger::AccountDay {
        account: account.clone(),
        day: day.clone(),
    };
    let mut answer = Usage {
        account: AccountSpent {
            spent_usd: usd(spent(account_day).await?),
            account_id: account.clone(),
        },
        day,
        person: None,
        conversation: None,
    };
    if let Some(user) = query.user_id {
        let user = checked_text("userId", user)?;
        let ledger = Ledger::PersonDay {
            account: Some(account.clone()),
            user: user.clone(),
            day: answer.day.clone(),
        };
        answer.person = Some(PersonSpent {
            spent_usd: usd(spent(ledger).await?),
            user_id: user,
        });
    }
    if let Some(conversation) = query.conversation_id {
        let conversation: SessionId = checked_id("conversationId", conversation)?;
        let ledger = Ledger::Conversation(conversation.clone());
        answer.conversation = Some(ConversationSpent {
            spent_usd: usd(spent(ledger).await?),
            conversation_id: conversation,
        });
    }
    Ok(Json(answer))
}

/// `PUT /blocks`.
pub(super) async fn block(
    State(host): State<ContainerHost>,
    authority: Authority,
    JsonBody(ask): JsonBody<BlockAsk>,
) -> Result<Json<Blocked>, HostError> {
    let table = backend_table(&host, &authority)?;
    let target = target(ask.account_id, ask.user_id)?;
    table
        .block(&target, ask.reason.as_deref())
        .await
        .map_err(|e| HostError::store("blocking", &e))?;
    Ok(Json(Blocked {
        blocked: target.describe(),
    }))
}

/// `DELETE /blocks`.
pub(super) async fn lift(
    State(host): State<ContainerHost>,
    authority: Authority,
    Params(query): Params<LiftQuery>,
) -> Result<Json<Lifted>, HostError> {
    let table = backend_table(&host, &authority)?;
    let target = target(query.account_id, query.user_id)?;
    match table.lift(&target).await {
        Ok(true) => Ok(Json(Lifted {
            lifted: target.describe(),
        })),
        Ok(false) => Err(HostError::not_found(format!(
            "{} is not blocked",
            target.describe()
        ))),
        Err(e) => Err(HostError::store("lifting a block", &e)),
    }
}

//! The budgets' ledgers in the table ([`SpendLedger`]): one item per ledger, `spent` in
//! micro-dollars. A reservation is one transaction that adds the amount to each ledger on the
//! condition that none then holds more than its budget, so two workers reserving the last of a
//! budget at once land one reservation; it marks each ledger with the reservation's id
//! (`r#<id>`, the amount), so that the same reservation sent again (the SDK retrying a write
//! whose answer was lost) finds its mark and counts once; a reservation cancelled because
//! another transaction held a ledger (`TransactionConflict`) is sent again a few times, apart.
//! A settlement adds what the call cost less what was reserved and removes the mark, ledger by
//! ledger, on the condition that the mark is there: a settlement lands once. A worker that dies between the two leaves the reservation counted
//! (more than was spent, never less) and its mark.
//!
//! | ledger | `pk` | `sk` |
//! | --- | --- | --- |
//! | a conversation's | `session#<id>` | `spend` |
//! | a person's day | `spend#person#<owner key>` | `<YYYY-MM-DD>` |
//! | an account's day | `spend#account#<account>` | `<YYYY-MM-DD>` |

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};

use agent_worker_core::engine::spending::{Charge, Ledger, SpendError, SpendLedger};
use agent_worker_core::session::conversations::owner_key;
use agent_worker_core::session::{Owner, StoreError};

use super::DynamoStore;
use super::codec::{get_n, n, s};
use super::keys::{EXPIRES_AT, PK, SK, session_pk};
use super::sdk_error::{
    build_error, cancellation_reasons, is_condition_reason, is_conditional_failure, past_transactions,
    store_error,
};

/// On a ledger's item: what it holds, in micro-dollars.
const SPENT: &str = "spent";
/// A day's ledger is kept this long after its day.
const DAY_KEPT_SECS: u64 = 3 * 24 * 60 * 60;

impl DynamoStore {
    fn ledger_key(&self, ledger: &Ledger) -> HashMap<String, AttributeValue> {
        let (pk, sk) = match ledger {
            Ledger::Turn { session, turn } => (session_pk(session), format!("spend#turn#{turn}")),
            Ledger::Conversation(session) => (session_pk(session), "spend".to_owned()),
            Ledger::PersonDay { account, user, day } => {
                let owner = Owner {
                    user_id: user.clone(),
                    account_id: account.clone().unwrap_or_default(),
                };
                (format!("spend#person#{}", owner_key(&owner)), day.clone())
            }
            Ledger::AccountDay { account, day } => (format!("spend#account#{account}"), day.clone()),
        };
        HashMap::from([(PK.to_owned(), s(pk)), (SK.to_owned(), s(sk))])
    }

    /// When a ledger's item goes: a conversation's with the conversation, a day's days after.
    fn ledger_expiry(&self, ledger: &Ledger) -> u64 {
        match ledger {
            Ledger::Turn { .. } | Ledger::Conversation(_) => self.expires_at(),
            Ledger::PersonDay { .. } | Ledger::AccountDay { .. } => {
                agent_worker_core::clock::now_ms() / 1000 + DAY_KEPT_SECS
            }
        }
    }
}

/// The attribute that marks reservation `id` on a ledger's item.
fn mark(id: &str) -> String {
    format!("r#{id}")
}

#[async_trait]
impl SpendLedger for DynamoStore {
    async fn reserve(&self, id: &str, charges: &[Charge], amount: u64) -> Result<(), SpendError> {
        let mut writes = Vec::with_capacity(charges.len());
        for (index, charge) in charges.iter().enumerate() {
            // What the ledger may hold before the reservation for it to hold at most its budget.
            let Some(room) = charge.limit.checked_sub(amount) else {
                return Err(SpendError::Over { index, spent: None });
            };
            let update = Update::builder()
                .table_name(self.table())
                .set_key(Some(self.ledger_key(&charge.ledger)))
                .update_expression(
                    "SET #spent = if_not_exists(#spent, :zero) + :amount, #expires = :expires, #mark = :amount",
                )
                .condition_expression("attribute_not_exists(#mark) AND (attribute_not_exists(#spent) OR #spent <= :room)")
                .expression_attribute_names("#spent", SPENT)
                .expression_attribute_names("#mark", mark(id))
                .expression_attribute_names("#expires", EXPIRES_AT)
                .expression_attribute_values(":zero", n(0))
                .expression_attribute_values(":amount", n(amount))
                .expression_attribute_values(":room", n(room))
                .expression_attribute_values(":expires", n(self.ledger_expiry(&charge.ledger)))
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                .build()
                .map_err(build_error)?;
            writes.push(TransactWriteItem::builder().update(update).build());
        }
        // Transactions on one ledger at once are cancelled (`TransactionConflict`), and the
        // SDK does not send them again: this does, a few times, apart.
        let mut pause = CONFLICT_BACKOFF;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let sent = self
                .client()
                .transact_write_items()
                .set_transact_items(Some(writes.clone()))
                .send()
                .await;
            let Err(e) = sent else {
                return Ok(());
            };
            let reasons = cancellation_reasons(&e);
            // The reservation had landed: this is it sent again.
            let marked = reasons
                .iter()
                .any(|r| r.item().is_some_and(|item| item.contains_key(&mark(id))));
            if marked {
                return Ok(());
            }
            if let Some(index) = reasons.iter().position(|r| is_condition_reason(Some(r))) {
                return Err(SpendError::Over {
                    index,
                    spent: reasons[index].item().and_then(|item| get_n(item, SPENT)),
                });
            }
            let conflict = reasons.iter().any(|r| r.code() == Some("TransactionConflict"));
            if !conflict || attempt >= CONFLICT_ATTEMPTS {
                return Err(store_error("reserving a model call's cost", e).into());
            }
            tokio::time::sleep(pause + jitter(pause)).await;
            pause *= 2;
        }
    }

    async fn settle(&self, id: &str, ledgers: &[Ledger], delta: i64) -> Result<(), StoreError> {
        // Each ledger on its own, waiting out the transactions that hold it; a ledger whose mark
        // is gone was settled already (this is the settlement sent again).
        for ledger in ledgers {
            let sent = past_transactions(|| {
                self.client()
                    .update_item()
                    .table_name(self.table())
                    .set_key(Some(self.ledger_key(ledger)))
                    .update_expression("ADD #spent :delta REMOVE #mark")
                    .condition_expression("attribute_exists(#mark)")
                    .expression_attribute_names("#spent", SPENT)
                    .expression_attribute_names("#mark", mark(id))
                    .expression_attribute_values(":delta", AttributeValue::N(delta.to_string()))
                    .send()
            })
            .await;
            match sent {
                Ok(_) => {}
                Err(e) if is_conditional_failure(&e) => {}
                Err(e) => return Err(store_error("settling a model call's cost", e)),
            }
        }
        Ok(())
    }
}

/// How many times a reservation is sent while other transactions hold its ledgers.
const CONFLICT_ATTEMPTS: u32 = 5;
/// The pause before the second, doubled before each next.
const CONFLICT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(20);

/// Up to `pause` more, so that workers that conflicted do not meet again.
fn jitter(pause: std::time::Duration) -> std::time::Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    pause.mul_f64(f64::from(nanos % 1000) / 1000.0)
}

impl DynamoStore {
    /// What `ledger` holds, in micro-dollars (0 for a ledger never written).
    pub async fn spent(&self, ledger: &Ledger) -> Result<u64, StoreError> {
        let item = self
            .client()
            .get_item()
            .table_name(self.table())
            .set_key(Some(self.ledger_key(ledger)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("reading a budget's ledger", e))?;
        Ok(item.item().and_then(|item| get_n(item, SPENT)).unwrap_or(0))
    }
}

//! The turn's side of spending ([`crate::engine::spending`]): before each model call, what it
//! may cost is reserved against the budgets; after it, what it cost is settled.

use crate::engine::model::{ModelRequest, TokenUsage};
use crate::engine::spending::{Charge, Ledger, Reservation, SpendError, dollars};
use crate::engine::{EngineInner, StepContext};
use crate::protocol::{ErrorChain, codes};

use super::Ending;
use super::state::TurnState;

/// The input tokens `request` is estimated to take: its messages, system prompt and tools, one
/// for four characters.
fn estimated_input(request: &ModelRequest) -> u64 {
    let system: usize = request.system.iter().map(String::len).sum();
    let tools: usize = request
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.input_schema.to_string().len())
        .sum();
    crate::engine::compaction::estimated_tokens(&request.messages) + ((system + tools) / 4) as u64
}

/// The ledgers a turn of `ctx` spends in, with their budgets, on `day`.
fn charges(engine: &EngineInner, ctx: &StepContext<'_>, day: &str) -> Vec<Charge> {
    let Some(spending) = &engine.spending else {
        return Vec::new();
    };
    let budgets = spending.budgets();
    let mut charges = Vec::new();
    // With a ledger, the turn's budget is kept in it too: a turn resumed or continued elsewhere
    // spends from what it had.
    if let (Some(limit), Some(_)) = (budgets.turn, &spending.ledger) {
        charges.push(Charge {
            ledger: Ledger::Turn {
                session: ctx.session.clone(),
                turn: ctx.turn_id.clone(),
            },
            limit,
        });
    }
    if let Some(limit) = budgets.conversation {
        charges.push(Charge {
            ledger: Ledger::Conversation(ctx.session.clone()),
            limit,
        });
    }
    if let (Some(limit), Some(user)) = (budgets.person_per_day, ctx.user_id) {
        charges.push(Charge {
            ledger: Ledger::PersonDay {
                account: ctx.account_id.map(str::to_owned),
                user: user.to_owned(),
                day: day.to_owned(),
            },
            limit,
        });
    }
    if let (Some(limit), Some(account)) = (budgets.account_per_day, ctx.account_id) {
        charges.push(Charge {
            ledger: Ledger::AccountDay {
                account: account.to_owned(),
                day: day.to_owned(),
            },
            limit,
        });
    }
    charges
}

fn over(budget: &str, limit: u64, spent: Option<u64>, amount: u64, refills: &str) -> Ending {
    let spent = spent.map_or_else(String::new, |spent| format!(" {} is spent, and", dollars(spent)));
    let details = format!(
        "{budget} of {} would be passed:{spent} the next model call may cost up to {}; {refills}",
        dollars(limit),
        dollars(amount)
    );
    tracing::warn!(%details, "a budget would be passed; the model is not called");
    Ending::Failed {
        details,
        retryable: false,
        code: codes::BUDGET_EXCEEDED,
    }
}

/// Reserves what the call of `request` may cost (its input estimated, its whole `max_tokens`
/// of output) against the turn's budget and the ledgers'; the turn's end when a budget would be
/// passed (the call is not made) or the ledgers could not be written.
pub(super) async fn reserve(
    engine: &EngineInner,
    ctx: &StepContext<'_>,
    turn: &TurnState,
    request: &ModelRequest,
) -> Result<Option<Reservation>, Ending> {
    let Some(spending) = &engine.spending else {
        return Ok(None);
    };
    let Some(price) = spending.prices.of(engine.model.id()) else {
        return Ok(None);
    };
    let most = TokenUsage {
        input_tokens: estimated_input(request),
        output_tokens: u64::from(request.max_tokens),
        ..TokenUsage::default()
    };
    let amount = price.cost(&most);
    // Without a ledger, the turn's budget is counted here, for this run of the turn.
    if let (Some(limit), None) = (spending.budgets().turn, &spending.ledger)
        && turn.spent.saturating_add(amount) > limit
    {
        let refills = "a new turn has its own";
        return Err(over(
            "the turn's budget",
            limit,
            Some(turn.spent),
            amount,
            refills,
        ));
    }
    let charges = charges(engine, ctx, &crate::engine::spending::today());
    let id = uuid::Uuid::new_v4().simple().to_string();
    let Some(ledger) = spending.ledger.as_ref().filter(|_| !charges.is_empty()) else {
        return Ok(Some(Reservation {
            id,
            amount,
            ledgers: Vec::new(),
        }));
    };
    match ledger.reserve(&id, &charges, amount).await {
        Ok(()) => Ok(Some(Reservation {
            id,
            amount,
            ledgers: charges.into_iter().map(|c| c.ledger).collect(),
        })),
        Err(SpendError::Over { index, spent }) => {
            let charge = &charges[index.min(charges.len() - 1)];
            let ledger = &charge.ledger;
            Err(over(
                &ledger.describe(),
                charge.limit,
                spent,
                amount,
                &ledger.refills(),
            ))
        }
        Err(SpendError::Store(e)) => {
            tracing::error!(error = %ErrorChain(&e), "could not reserve a model call's cost");
            // Its write may have landed with its answer lost: given back (nothing, unless it did).
            let ledgers: Vec<Ledger> = charges.into_iter().map(|c| c.ledger).collect();
            let back = -i64::try_from(amount).unwrap_or(i64::MAX);
            if let Err(e) = ledger.settle(&id, &ledgers, back).await {
                tracing::warn!(error = %ErrorChain(&e), "could not give back a reservation whose answer was lost");
            }
            Err(Ending::Failed {
                details: format!(
                    "the budgets' ledgers could not be written before the model call: {}",
                    e.client_message()
                ),
                retryable: true,
                code: codes::STORE_FAILED,
            })
        }
    }
}

/// Settles the turn's reservation (when one is outstanding) with what its call cost (and the
/// summaries compaction asked for before it, which reserve nothing of their own): the
/// usage it reported, or, for a call that answered and reported none (cut off by a stop, the
/// deadline or a broken stream: Bedrock reports usage at the end), the whole reservation, since
/// its input and some output were billed; a call that never answered (refused, throttled) costs
/// nothing. The turn counts it, and the ledgers are given back what was reserved beyond it. The
/// reservation is kept until its settlement is written, so that a settlement cut off is made
/// again (it lands once). A failure is logged: the ledgers then keep the reservation, more than
/// was spent, never less.
pub(super) async fn settle(engine: &EngineInner, turn: &mut TurnState) {
    let (Some(reserved), Some(spending)) = (turn.reserved.as_ref(), &engine.spending) else {
        turn.reserved = None;
        turn.unsettled = TokenUsage::default();
        return;
    };
    let usage = turn.usage;
    let price = spending.prices.of(engine.model.id());
    let call = match price {
        Some(price) if usage != TokenUsage::default() => price.cost(&usage),
        _ if turn.model_answered => reserved.amount,
        _ => 0,
    };
    // The summaries compaction asked for before the call are counted with it.
    let cost = call.saturating_add(price.map_or(0, |p| p.cost(&turn.unsettled)));
    if let Some(ledger) = spending.ledger.as_ref().filter(|_| !reserved.ledgers.is_empty()) {
        let delta =
            i64::try_from(cost).unwrap_or(i64::MAX) - i64::try_from(reserved.amount).unwrap_or(i64::MAX);
        if let Err(e) = ledger.settle(&reserved.id, &reserved.ledgers, delta).await {
            tracing::warn!(error = %ErrorChain(&e), "could not settle a model call's cost; its ledgers keep what was reserved");
        }
    }
    turn.reserved = None;
    turn.usage = TokenUsage::default();
    turn.unsettled = TokenUsage::default();
    turn.model_answered = false;
    turn.spent = turn.spent.saturating_add(cost);
}

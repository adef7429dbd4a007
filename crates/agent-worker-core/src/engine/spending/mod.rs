//! Spending that cannot run away: before each model call, what the call may cost (its input
//! estimated, plus its whole `max_tokens` of output) is reserved against the turn's, the
//! conversation's, the person's and the account's budgets, in one conditional write to the
//! ledgers ([`SpendLedger`]); after it, what it cost (its usage, at the model's [`Price`]) is
//! settled. A call that would pass a budget is not made: the turn ends `budget_exceeded`,
//! saying which budget and when it refills.
//!
//! Amounts are whole micro-dollars (a millionth of a US dollar): a price in dollars per million
//! tokens is the price of one token in micro-dollars.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::engine::model::TokenUsage;
use crate::session::{SessionId, StoreError};

/// When the prices of [`Prices::default`] were read (on-demand, us-east-1): check the Bedrock
/// price list before trusting a figure.
pub const PRICES_READ_ON: &str = "2026-12-01";

/// A model's price, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Price {
    /// Input tokens.
    pub input: f64,
    /// Output tokens, reasoning included.
    pub output: f64,
    /// Input tokens read from the prompt cache (a tenth of `input` when not given).
    #[serde(default)]
    pub cache_read: Option<f64>,
    /// Input tokens written to the prompt cache (`input` and a quarter when not given).
    #[serde(default)]
    pub cache_write: Option<f64>,
}

impl Price {
    /// What `usage` costs, in micro-dollars, rounded up.
    pub fn cost(&self, usage: &TokenUsage) -> u64 {
        let micros = usage.input_tokens as f64 * self.input
            + usage.output_tokens as f64 * self.output
            + usage.cache_read_tokens as f64 * self.cache_read.unwrap_or(self.input / 10.0)
            + usage.cache_write_tokens as f64 * self.cache_write.unwrap_or(self.input * 1.25);
        micros.max(0.0).ceil() as u64
    }
}

/// Prices by model: a model's is the one whose key is its id, or else the longest key its id
/// holds (`claude-sonnet-4` prices `us.anthropic.claude-sonnet-4-6`).
#[derive(Debug, Clone, PartialEq)]
pub struct Prices(BTreeMap<String, Price>);

impl Default for Prices {
    /// The models the project's demo and `eval` use, read on [`PRICES_READ_ON`].
    fn default() -> Self {
        let price = |input, output| Price {
            input,
            output,
            cache_read: None,
            cache_write: None,
        };
        Self(BTreeMap::from([
            ("claude-sonnet-4".to_owned(), price(3.0, 15.0)),
            ("claude-haiku-4".to_owned(), price(1.0, 5.0)),
            ("claude-opus-4".to_owned(), price(15.0, 75.0)),
            ("claude-opus-4-5".to_owned(), price(5.0, 25.0)),
            ("nova-pro".to_owned(), price(0.8, 3.2)),
            ("nova-lite".to_owned(), price(0.06, 0.24)),
        ]))
    }
}

impl Prices {
    /// The default prices, with `given` over them.
    pub fn with(given: impl IntoIterator<Item = (String, Price)>) -> Self {
        let mut prices = Self::default();
        prices.0.extend(given);
        prices
    }

    /// The price of model `model_id`, if one is known.
    pub fn of(&self, model_id: &str) -> Option<&Price> {
        self.0.get(model_id).or_else(|| {
            self.0
                .iter()
                .filter(|(part, _)| model_id.contains(part.as_str()))
                .max_by_key(|(part, _)| part.len())
                .map(|(_, price)| price)
        })
    }
}

/// The budgets, in micro-dollars; `None` is no budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budgets {
    /// What one turn may spend.
    pub turn: Option<u64>,
    /// What one conversation may spend, over all its turns.
    pub conversation: Option<u64>,
    /// What one person may spend in a day (UTC).
    pub person_per_day: Option<u64>,
    /// What one account may spend in a day (UTC).
    pub account_per_day: Option<u64>,
}

impl Budgets {
    /// Whether any budget is set.
    pub fn any(&self) -> bool {
        self.turn.is_some()
            || self.conversation.is_some()
            || self.person_per_day.is_some()
            || self.account_per_day.is_some()
    }

    /// These budgets, each where set, else `other`'s.
    #[must_use]
    pub fn over(self, other: Self) -> Self {
        Self {
            turn: self.turn.or(other.turn),
            conversation: self.conversation.or(other.conversation),
            person_per_day: self.person_per_day.or(other.person_per_day),
            account_per_day: self.account_per_day.or(other.account_per_day),
        }
    }

    /// Whether a budget is kept across turns, in a [`SpendLedger`].
    pub fn shared(&self) -> bool {
        self.conversation.is_some() || self.person_per_day.is_some() || self.account_per_day.is_some()
    }
}

/// Micro-dollars from US dollars (a budget as configured), rounded down; `None` for a negative
/// or not finite amount.
pub fn micros(usd: f64) -> Option<u64> {
    (usd.is_finite() && usd >= 0.0).then(|| (usd * 1_000_000.0).floor() as u64)
}

/// A ledger that spending is counted in across turns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Ledger {
    /// A turn's, across the invocations and workers that run it (a turn resumed after a crash,
    /// or continued in the next invocation, spends from what it had).
    Turn {
        /// The turn's conversation.
        session: SessionId,
        /// The turn.
        turn: crate::session::TurnId,
    },
    /// A conversation's, over its life.
    Conversation(SessionId),
    /// A person's (of an account, when the turn names one), in a day (`YYYY-MM-DD`, UTC).
    PersonDay {
        /// The account, if the turn names one.
        account: Option<String>,
        /// The person.
        user: String,
        /// The day.
        day: String,
    },
    /// An account's, in a day (`YYYY-MM-DD`, UTC).
    AccountDay {
        /// The account.
        account: String,
        /// The day.
        day: String,
    },
}

impl Ledger {
    /// What it is called in a refusal.
    pub fn describe(&self) -> String {
        match self {
            Self::Turn { .. } => "the turn's budget".to_owned(),
            Self::Conversation(_) => "the conversation's budget".to_owned(),
            Self::PersonDay { user, .. } => format!("{user}'s daily budget"),
            Self::AccountDay { account, .. } => format!("account {account}'s daily budget"),
        }
    }

    /// When what it holds starts again from nothing.
    pub fn refills(&self) -> String {
        match self {
            Self::Turn { .. } => "a new turn has its own".to_owned(),
            Self::Conversation(_) => "it does not refill; a new conversation has its own".to_owned(),
            Self::PersonDay { .. } | Self::AccountDay { .. } => "it refills at 00:00 UTC".to_owned(),
        }
    }
}

/// A reservation against one ledger: it lands only while the ledger holds at most `limit`
/// with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// The ledger.
    pub ledger: Ledger,
    /// Its budget, in micro-dollars.
    pub limit: u64,
}

/// Why a reservation did not land.
#[derive(Debug, thiserror::Error)]
pub enum SpendError {
    /// Charge `index` of the reservation would pass its budget; `spent` is what its ledger
    /// held, when the store said.
    #[error("the reservation would pass a budget")]
    Over {
        /// Which charge.
        index: usize,
        /// What its ledger held.
        spent: Option<u64>,
    },
    /// The ledgers could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where spending is counted across turns and workers.
#[async_trait]
pub trait SpendLedger: Send + Sync + std::fmt::Debug {
    /// Adds `amount` to every charge's ledger as reservation `id`, all or none: none when one
    /// of them would then hold more than its limit. Two workers reserving the last of a budget
    /// at once: one lands. The same reservation sent again (its answer lost) lands once.
    async fn reserve(&self, id: &str, charges: &[Charge], amount: u64) -> Result<(), SpendError>;

    /// Settles reservation `id`: adds `delta` (what the call cost less what was reserved for
    /// it) to each ledger. A reservation is settled once, however often this is sent.
    async fn settle(&self, id: &str, ledgers: &[Ledger], delta: i64) -> Result<(), StoreError>;
}

/// What a model call reserved against the ledgers, until it is settled: its id, its most, and
/// the ledgers it was reserved in.
#[derive(Debug)]
pub(crate) struct Reservation {
    pub(crate) id: String,
    pub(crate) amount: u64,
    pub(crate) ledgers: Vec<Ledger>,
}

/// What a deployment spends by: the prices, the budgets, and the ledger the budgets across
/// turns are kept in.
#[derive(Debug, Clone)]
pub struct Spending {
    pub(crate) prices: Prices,
    pub(crate) budgets: Budgets,
    pub(crate) ledger: Option<Arc<dyn SpendLedger>>,
}

/// Why spending cannot be set up.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SpendingError {
    /// A budget across turns, and no ledger to keep it in.
    #[error("budgets across turns (conversation, person, account) need a ledger to keep them in")]
    NoLedger,
    /// A money budget, and a model without a price.
    #[error("model {0} has no price, and a budget in money is set: give its price under `prices`")]
    NoPrice(String),
}

impl Spending {
    /// Spending by `prices` under `budgets`, kept in `ledger` (needed for any budget but the
    /// turn's).
    pub fn new(
        prices: Prices,
        budgets: Budgets,
        ledger: Option<Arc<dyn SpendLedger>>,
    ) -> Result<Self, SpendingError> {
        if budgets.shared() && ledger.is_none() {
            return Err(SpendingError::NoLedger);
        }
        Ok(Self {
            prices,
            budgets,
            ledger,
        })
    }

    /// Checks that `model_id` can be spent on: it has a price when a budget is set.
    pub fn check_model(&self, model_id: &str) -> Result<(), SpendingError> {
        if self.budgets.any() && self.prices.of(model_id).is_none() {
            return Err(SpendingError::NoPrice(model_id.to_owned()));
        }
        Ok(())
    }

    /// The budgets.
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }
}

/// Today's date (UTC), `YYYY-MM-DD`: the day a daily ledger counts.
pub fn today() -> String {
    let now = i64::try_from(crate::clock::now_ms()).unwrap_or(i64::MAX);
    chrono::DateTime::from_timestamp_millis(now)
        .map_or_else(String::new, |at| at.format("%Y-%m-%d").to_string())
}

/// Dollars from micro-dollars, as a refusal writes them.
pub(crate) fn dollars(micros: u64) -> String {
    format!("${:.2}", micros as f64 / 1_000_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_price_is_found_by_the_longest_part_of_the_id() {
        let prices = Prices::with([(
            "claude-sonnet-4-6".to_owned(),
            Price {
                input: 2.0,
                output: 10.0,
                cache_read: None,
                cache_write: None,
            },
        )]);
        assert_eq!(prices.of("us.anthropic.claude-sonnet-4-6").unwrap().input, 2.0);
        assert_eq!(prices.of("anthropic.claude-sonnet-4-5-v1:0").unwrap().input, 3.0);
        assert!(prices.of("mistral.large").is_none());
    }

    #[test]
    fn a_cost_is_in_micro_dollars_rounded_up() {
        let price = Prices::default().of("claude-sonnet-4-6").copied().unwrap();
        let usage = TokenUsage {
            input_tokens: 1000,
            output_tokens: 100,
            cache_read_tokens: 10_000,
            cache_write_tokens: 1,
        };
        // 3000 + 1500 + 3000 (a tenth of 3 a token) + 3.75, rounded up.
        assert_eq!(price.cost(&usage), 7504);
    }

    #[test]
    fn a_budget_across_turns_needs_a_ledger_and_a_priced_model() {
        let budgets = Budgets {
            conversation: Some(5_000_000),
            ..Budgets::default()
        };
        assert_eq!(
            Spending::new(Prices::default(), budgets, None).unwrap_err(),
            SpendingError::NoLedger
        );
        let turn_only = Budgets {
            turn: Some(500_000),
            ..Budgets::default()
        };
        let spending = Spending::new(Prices::default(), turn_only, None).unwrap();
        assert!(spending.check_model("us.anthropic.claude-sonnet-4-6").is_ok());
        assert_eq!(
            spending.check_model("mistral.large").unwrap_err().to_string(),
            "model mistral.large has no price, and a budget in money is set: give its price under `prices`"
        );
        assert_eq!(micros(0.5), Some(500_000));
        assert_eq!(micros(-1.0), None);
    }
}

//! What the configuration file says of spending: the models' prices (over the defaults) and the
//! budgets ([`agent_worker_core::engine::spending`]).
//!
//! ```yaml
//! prices:                                   # USD per million tokens
//!   anthropic.claude-sonnet-4-6: { input: 3, output: 15 }
//! budgets:
//!   turn: { usd: 0.50 }
//!   conversation: { usd: 5 }
//!   person: { usdPerDay: 20 }
//!   account: { usdPerDay: 500 }
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use agent_worker_core::engine::spending::{
    Budgets, Price, Prices, SpendLedger, Spending, SpendingError, micros,
};

impl super::Configured {
    /// What `model_id`'s calls are reserved against: `over`'s budgets over the file's, at the
    /// file's prices, kept in `ledger`; `None` without a budget. A budget across turns without a
    /// ledger, or a model without a price under a budget, is refused.
    pub fn spending(
        &self,
        over: Budgets,
        ledger: Option<std::sync::Arc<dyn SpendLedger>>,
        model_id: &str,
    ) -> Result<Option<Spending>, SpendingError> {
        let budgets = over.over(self.budgets);
        if !budgets.any() {
            return Ok(None);
        }
        let spending = Spending::new(self.prices.clone(), budgets, ledger)?;
        spending.check_model(model_id)?;
        Ok(Some(spending))
    }
}

/// The `budgets` section.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetsFile {
    /// What one turn may spend.
    pub turn: Option<Amount>,
    /// What one conversation may spend, over its turns.
    pub conversation: Option<Amount>,
    /// What one person may spend in a day (UTC).
    pub person: Option<Daily>,
    /// What one account may spend in a day (UTC).
    pub account: Option<Daily>,
}

/// An amount of US dollars.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Amount {
    /// The dollars.
    pub usd: f64,
}

/// An amount of US dollars a day.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Daily {
    /// The dollars a day.
    pub usd_per_day: f64,
}

impl BudgetsFile {
    /// The budgets, in micro-dollars; a negative or not finite amount is a problem, named.
    pub fn budgets(&self, problems: &mut Vec<String>) -> Budgets {
        let mut amount = |name: &str, usd: Option<f64>| {
            let usd = usd?;
            let amount = micros(usd);
            if amount.is_none() {
                problems.push(format!("budgets.{name}: {usd} is not an amount of US dollars"));
            }
            amount
        };
        Budgets {
            turn: amount("turn.usd", self.turn.map(|a| a.usd)),
            conversation: amount("conversation.usd", self.conversation.map(|a| a.usd)),
            person_per_day: amount("person.usdPerDay", self.person.map(|d| d.usd_per_day)),
            account_per_day: amount("account.usdPerDay", self.account.map(|d| d.usd_per_day)),
        }
    }
}

/// The default prices with `given` over them; a negative or not finite price is a problem.
pub(super) fn prices(given: &BTreeMap<String, Price>, problems: &mut Vec<String>) -> Prices {
    for (model, price) in given {
        let all = [
            Some(price.input),
            Some(price.output),
            price.cache_read,
            price.cache_write,
        ];
        if all.into_iter().flatten().any(|p| !p.is_finite() || p < 0.0) {
            problems.push(format!(
                "prices.{model}: a price is a number of US dollars, 0 or more"
            ));
        }
    }
    Prices::with(given.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sections_read_as_the_issue_writes_them() {
        let yaml = "turn: { usd: 0.50 }\nconversation: { usd: 5 }\nperson: { usdPerDay: 20 }\naccount: { usdPerDay: 500 }\n";
        let file: BudgetsFile = serde_yaml::from_str(yaml).unwrap();
        let mut problems = Vec::new();
        let budgets = file.budgets(&mut problems);
        assert!(problems.is_empty());
        assert_eq!(
            budgets,
            Budgets {
                turn: Some(500_000),
                conversation: Some(5_000_000),
                person_per_day: Some(20_000_000),
                account_per_day: Some(500_000_000),
            }
        );
        let negative: BudgetsFile = serde_yaml::from_str("turn: { usd: -1 }").unwrap();
        negative.budgets(&mut problems);
        assert_eq!(problems, ["budgets.turn.usd: -1 is not an amount of US dollars"]);
        assert!(
            serde_yaml::from_str::<BudgetsFile>("person: { usd: 20 }").is_err(),
            "a person's is a day's"
        );
    }
}

//! The budgets a deployment sets in its environment, each over the configuration file's
//! (`budgets`): `TURN_BUDGET_USD`, `CONVERSATION_BUDGET_USD`, `PERSON_DAILY_BUDGET_USD`,
//! `ACCOUNT_DAILY_BUDGET_USD`, in US dollars.

use agent_worker_core::engine::spending::{Budgets, micros};

use super::{SettingsError, error};

/// The budgets set in the environment (`None` where a setting is unset or empty).
pub(super) fn budget_settings(get: &impl Fn(&str) -> Option<String>) -> Result<Budgets, SettingsError> {
    let usd = |name: &str| match get(name).filter(|raw| !raw.trim().is_empty()) {
        None => Ok(None),
        Some(raw) => raw
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(micros)
            .map(Some)
            .ok_or_else(|| error(name, format!("{raw:?} is not an amount of US dollars"))),
    };
    Ok(Budgets {
        turn: usd("TURN_BUDGET_USD")?,
        conversation: usd("CONVERSATION_BUDGET_USD")?,
        person_per_day: usd("PERSON_DAILY_BUDGET_USD")?,
        account_per_day: usd("ACCOUNT_DAILY_BUDGET_USD")?,
    })
}

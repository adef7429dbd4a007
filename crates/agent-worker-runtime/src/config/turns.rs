//! The turn's policy by configuration (seed 004's `turnPolicy`, the AI SDK's `prepareStep`):
//!
//! ```yaml
//! turnPolicy:                      # who asks shapes the turn; the first rule that matches wins
//!   - when: { accountId: acme }    # accountId, userId, agent: each a pattern (`*`), all must match
//!     persona: You are Acme's assistant.      # or systemPrompt: "…" (or neither: the deployment's)
//!     tools: [current_time, "search_*"]       # the tools offered (or leave it out: all of them)
//!   - tools: [current_time]        # no `when`: every other turn (a default, so last)
//! prepareStep:                     # before each model call; the first rule that holds decides
//!   - after: "search_*"            # once the turn has called a tool the pattern names
//!     tools: [answer]              # the tools this step offers
//!   - round: 0                     # the turn's first model call
//!     force: current_time          # a tool the model must call
//! ```

use serde::Deserialize;

use agent_worker_core::engine::tools::name_matches;
use agent_worker_core::engine::{StepContext, TurnContext, TurnPlan, TurnPolicy};

/// A `turnPolicy` rule, as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TurnRule {
    /// Whom it is for (every turn when left out).
    #[serde(default)]
    pub when: TurnMatch,
    /// The assistant's identity for these turns; the worker's own rules follow it.
    pub persona: Option<String>,
    /// The whole system prompt for these turns, verbatim.
    pub system_prompt: Option<String>,
    /// The tools these turns are offered, by name or pattern (all when left out).
    pub tools: Option<Vec<String>>,
}

/// Whom a `turnPolicy` rule is for: each given pattern must match (`*` is any run of characters).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TurnMatch {
    /// The person's account.
    pub account_id: Option<String>,
    /// The person.
    pub user_id: Option<String>,
    /// The agent the turn asks for.
    pub agent: Option<String>,
}

impl TurnMatch {
    fn is_everyone(&self) -> bool {
        self == &Self::default()
    }

    fn matches(&self, turn: &TurnContext<'_>) -> bool {
        let holds = |pattern: &Option<String>, value: Option<&str>| match pattern {
            None => true,
            Some(pattern) => value.is_some_and(|value| name_matches(pattern, value)),
        };
        holds(&self.account_id, turn.account_id)
            && holds(&self.user_id, turn.user_id)
            && holds(&self.agent, turn.agent)
    }
}

/// A `prepareStep` rule, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StepRule {
    /// It holds once the turn has called a tool this pattern names.
    pub after: Option<String>,
    /// It holds at this model call of the turn (from 0).
    pub round: Option<u32>,
    /// The tools the step offers, by name or pattern.
    pub tools: Option<Vec<String>>,
    /// A tool the model must call in the step.
    pub force: Option<String>,
}

impl StepRule {
    fn holds(&self, step: &StepContext<'_>) -> bool {
        self.round.is_none_or(|round| round == step.round)
            && self
                .after
                .as_deref()
                .is_none_or(|pattern| step.called.iter().any(|name| name_matches(pattern, name)))
    }
}

/// The configuration's turn policy: its `turnPolicy` and `prepareStep` rules, checked.
#[derive(Debug, Clone, Default)]
pub struct ConfiguredTurns {
    turns: Vec<(TurnMatch, TurnPlan)>,
    steps: Vec<StepRule>,
}

impl ConfiguredTurns {
    /// The policy `turns` and `steps` give (`None` when both are empty), or every problem with
    /// them, each naming its rule.
    /// `additions` (the project's instructions, the skills' listing) go after each rule's prompt,
    /// as after the deployment's.
    pub fn new(
        turns: &[TurnRule],
        steps: &[StepRule],
        additions: Option<&str>,
    ) -> Result<Option<Self>, Vec<String>> {
        let mut problems = Vec::new();
        let mut plans = Vec::new();
        for (i, rule) in turns.iter().enumerate() {
            let at = format!("turnPolicy[{i}]");
            if let Some(first) = turns[..i].iter().position(|r| r.when.is_everyone()) {
                problems.push(format!(
                    "{at}: never reached: turnPolicy[{first}] has no `when` and matches every turn first"
                ));
            }
            let system_prompt = match (&rule.persona, &rule.system_prompt) {
                (Some(_), Some(_)) => {
                    problems.push(format!("{at}: persona, systemPrompt: give one, not both"));
                    None
                }
                (Some(persona), None) => Some(super::prompt::persona_prompt(persona)),
                (None, prompt) => prompt.clone(),
            };
            if system_prompt.as_deref().is_some_and(|p| p.trim().is_empty()) {
                problems.push(format!("{at}: the prompt is empty"));
            }
            let plan = TurnPlan {
                system_prompt: system_prompt.map(|prompt| match additions {
                    Some(more) => format!("{prompt}\n\n{more}"),
                    None => prompt,
                }),
                tools: rule.tools.clone(),
            };
            if plan.is_unchanged() {
                problems.push(format!("{at}: says nothing: give persona, systemPrompt or tools"));
            }
            plans.push((rule.when.clone(), plan));
        }
        for (i, rule) in steps.iter().enumerate() {
            if rule.tools.is_none() && rule.force.is_none() {
                problems.push(format!("prepareStep[{i}]: says nothing: give tools or force"));
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok((!plans.is_empty() || !steps.is_empty()).then(|| Self {
            turns: plans,
            steps: steps.to_vec(),
        }))
    }

    /// Whether every turn gets its prompt from a rule: each rule gives one and the last matches
    /// every turn (so the deployment's own is never used).
    pub fn prompts_every_turn(&self) -> bool {
        self.turns.last().is_some_and(|(when, _)| when.is_everyone())
            && self.turns.iter().all(|(_, plan)| plan.system_prompt.is_some())
    }
}

impl TurnPolicy for ConfiguredTurns {
    fn plan(&self, turn: &TurnContext<'_>) -> TurnPlan {
        self.turns
            .iter()
            .find(|(when, _)| when.matches(turn))
            .map(|(_, plan)| plan.clone())
            .unwrap_or_default()
    }

    fn active_tools(&self, step: &StepContext<'_>) -> Option<Vec<String>> {
        self.steps
            .iter()
            .find(|rule| rule.tools.is_some() && rule.holds(step))
            .and_then(|rule| rule.tools.clone())
    }

    fn force_tool(&self, step: &StepContext<'_>) -> Option<String> {
        self.steps
            .iter()
            .find(|rule| rule.force.is_some() && rule.holds(step))
            .and_then(|rule| rule.force.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(when: TurnMatch, persona: &str, tools: &[&str]) -> TurnRule {
        TurnRule {
            when,
            persona: Some(persona.into()),
            system_prompt: None,
            tools: Some(tools.iter().map(|t| (*t).to_owned()).collect()),
        }
    }

    #[test]
    fn rules_that_cannot_hold_or_say_nothing_are_named() {
        let everyone = rule(TurnMatch::default(), "Hi", &[]);
        let acme = rule(
            TurnMatch {
                account_id: Some("acme".into()),
                ..TurnMatch::default()
            },
            "Acme",
            &[],
        );
        let both = TurnRule {
            system_prompt: Some("x".into()),
            ..acme.clone()
        };
        let problems = ConfiguredTurns::new(
            &[acme, everyone, both, TurnRule::default()],
            &[StepRule::default()],
            None,
        )
        .unwrap_err();
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("turnPolicy[2]: never reached")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p == "turnPolicy[2]: persona, systemPrompt: give one, not both")
        );
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("turnPolicy[3]: says nothing"))
        );
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("prepareStep[0]: says nothing"))
        );
        assert!(ConfiguredTurns::new(&[], &[], None).unwrap().is_none());
    }

    #[test]
    fn a_rules_prompt_is_followed_by_the_configurations_additions() {
        let acme = rule(TurnMatch::default(), "Acme", &["add"]);
        let policy = ConfiguredTurns::new(&[acme], &[], Some("Skills: …"))
            .unwrap()
            .unwrap();
        let prompt = policy.turns[0].1.system_prompt.clone().unwrap();
        assert!(prompt.starts_with("Acme\n\n"), "{prompt}");
        assert!(prompt.ends_with("\n\nSkills: …"), "{prompt}");
    }
}

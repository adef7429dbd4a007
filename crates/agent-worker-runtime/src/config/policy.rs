//! [`ConfiguredPolicy`]: the tool policy a configuration declares, by tool name pattern and by
//! effect. A deny wins over everything; the engine's own rules (a transaction or a destructive
//! call needs approval) apply whatever it says.

use serde::Deserialize;

use super::ToolOrigin;
use agent_worker_core::engine::tools::{Effect, ToolClass};
use agent_worker_core::engine::{ToolDecision, ToolPolicy, ToolPolicyContext};

/// What a rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyDecision {
    /// The call never runs.
    Deny,
    /// The call runs only with the person's approval.
    Approve,
    /// The call may run (the engine's own rules still apply).
    Allow,
}

/// One rule: the calls it matches, and what it decides for them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyRule {
    /// A tool name pattern: `*` is any run of characters. Every tool when absent.
    pub tools: Option<String>,
    /// Only tools of this effect.
    pub effect: Option<Effect>,
    /// What it decides.
    pub decision: PolicyDecision,
    /// For a deny: what the model is told.
    pub reason: Option<String>,
}

impl PolicyRule {
    fn matches(&self, name: &str, effect: Effect) -> bool {
        self.tools
            .as_deref()
            .is_none_or(|pattern| agent_worker_core::engine::tools::name_matches(pattern, name))
            && self.effect.is_none_or(|e| e == effect)
    }
}

/// The rules of a configuration, and the tool classes it admits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfiguredPolicy {
    rules: Vec<PolicyRule>,
    admit: Vec<ToolClass>,
}

impl ConfiguredPolicy {
    /// A policy of `rules`, admitting `admit`; refused with every problem, each naming its rule.
    pub fn new(rules: Vec<PolicyRule>, admit: Vec<ToolClass>) -> Result<Self, Vec<String>> {
        let problems: Vec<String> = rules
            .iter()
            .enumerate()
            .filter_map(|(i, rule)| {
                if rule.tools.is_none() && rule.effect.is_none() {
                    Some(format!(
                        "policy[{i}]: give tools or effect (a rule for every call is not one)"
                    ))
                } else if rule.reason.is_some() && rule.decision != PolicyDecision::Deny {
                    Some(format!("policy[{i}].reason: only a deny has a reason"))
                } else {
                    None
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(Self { rules, admit })
        } else {
            Err(problems)
        }
    }

    /// This policy, admitting tools of `class` too.
    #[must_use]
    pub fn admitting(mut self, class: ToolClass) -> Self {
        if !self.admit.contains(&class) {
            self.admit.push(class);
        }
        self
    }

    /// What every rule matching a call of `name` (of `effect`) decides together: a deny wins,
    /// then an approval.
    pub fn decision(&self, name: &str, effect: Effect) -> ToolDecision {
        let matching = || self.rules.iter().filter(|r| r.matches(name, effect));
        if let Some(deny) = matching().find(|r| r.decision == PolicyDecision::Deny) {
            return ToolDecision::Deny(
                deny.reason
                    .clone()
                    .unwrap_or_else(|| format!("the configuration does not allow {name}")),
            );
        }
        if matching().any(|r| r.decision == PolicyDecision::Approve) {
            return ToolDecision::RequireApproval;
        }
        ToolDecision::Allow
    }

    /// How calls of the tool `origin` describes go, in words.
    pub(super) fn describe(&self, origin: &ToolOrigin) -> String {
        match self.decision(&origin.name, origin.effect) {
            ToolDecision::Deny(reason) => format!("denied ({reason})"),
            _ if origin.approval != "no" => origin.approval.clone(),
            ToolDecision::RequireApproval => "always (policy)".into(),
            ToolDecision::Allow => "no".into(),
        }
    }
}

impl ToolPolicy for ConfiguredPolicy {
    fn decide(&self, call: &ToolPolicyContext<'_>) -> ToolDecision {
        self.decision(&call.tool.name, call.tool.effect)
    }

    fn admits(&self, class: ToolClass) -> bool {
        class.offered_by_default() || self.admit.contains(&class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(tools: Option<&str>, effect: Option<Effect>, decision: PolicyDecision) -> PolicyRule {
        PolicyRule {
            tools: tools.map(str::to_owned),
            effect,
            decision,
            reason: None,
        }
    }

    #[test]
    fn a_deny_wins_then_an_approval() {
        let policy = ConfiguredPolicy::new(
            vec![
                rule(None, Some(Effect::Mutate), PolicyDecision::Approve),
                rule(Some("delete_*"), None, PolicyDecision::Deny),
                rule(Some("delete_*"), None, PolicyDecision::Allow),
            ],
            Vec::new(),
        )
        .unwrap();
        assert!(matches!(
            policy.decision("delete_ticket", Effect::Mutate),
            ToolDecision::Deny(_)
        ));
        assert_eq!(
            policy.decision("close_ticket", Effect::Mutate),
            ToolDecision::RequireApproval
        );
        assert_eq!(policy.decision("get_ticket", Effect::View), ToolDecision::Allow);
        assert!(!policy.admits(ToolClass::Attachment));
    }

    #[test]
    fn a_rule_for_every_call_or_a_reason_off_a_deny_is_refused() {
        let problems = ConfiguredPolicy::new(
            vec![
                rule(None, None, PolicyDecision::Deny),
                PolicyRule {
                    reason: Some("x".into()),
                    ..rule(Some("a"), None, PolicyDecision::Allow)
                },
            ],
            Vec::new(),
        )
        .unwrap_err();
        assert_eq!(problems.len(), 2);
        assert!(problems[0].starts_with("policy[0]"));
        assert!(problems[1].starts_with("policy[1].reason"));
    }
}

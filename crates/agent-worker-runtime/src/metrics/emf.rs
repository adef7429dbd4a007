//! One line of CloudWatch's embedded metric format: the values at the root, and under
//! `_aws.CloudWatchMetrics` the directives that say which root keys are metrics (with their
//! units) and which are dimensions.

use std::time::SystemTime;

use serde_json::{Map, Value, json};

use super::MetricsConfig;

/// A metric's unit, as CloudWatch names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unit {
    Count,
    Milliseconds,
    /// A figure with no unit CloudWatch names (US dollars).
    None,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Self::Count => "Count",
            Self::Milliseconds => "Milliseconds",
            Self::None => "None",
        }
    }
}

/// One EMF line being built.
#[derive(Debug)]
pub(super) struct EmfLine<'a> {
    config: &'a MetricsConfig,
    root: Map<String, Value>,
    directives: Vec<Value>,
}

impl<'a> EmfLine<'a> {
    /// A line of `config`'s namespace, with the service and the deployer's dimensions.
    pub(super) fn new(config: &'a MetricsConfig) -> Self {
        let mut root = Map::new();
        root.insert("service".into(), config.service.clone().into());
        for (name, value) in &config.dimensions {
            root.insert(name.clone(), value.clone().into());
        }
        Self {
            config,
            root,
            directives: Vec::new(),
        }
    }

    /// A value at the root that is neither a metric nor a dimension (a turn id, a reason).
    pub(super) fn property(&mut self, key: &str, value: impl Into<Value>) {
        self.root.insert(key.into(), value.into());
    }

    /// `metrics` (name, unit, value: a number or an array of them), each under the base set and
    /// under the base set with each of `extra`'s dimension lists; an empty list in `extra`
    /// stands for the base set alone. Every dimension named must have been given as a property.
    pub(super) fn metrics(&mut self, extra: &[&[&str]], metrics: &[(&str, Unit, Value)]) {
        let base: Vec<&str> = std::iter::once("service")
            .chain(self.config.dimensions.iter().map(|(name, _)| name.as_str()))
            .collect();
        let sets: Vec<Vec<&str>> = extra
            .iter()
            .map(|more| base.iter().chain(more.iter()).copied().collect())
            .collect();
        let names: Vec<Value> = metrics
            .iter()
            .map(|(name, unit, value)| {
                self.root.insert((*name).to_owned(), value.clone());
                json!({ "Name": name, "Unit": unit.as_str() })
            })
            .collect();
        self.directives.push(json!({
            "Namespace": self.config.namespace,
            "Dimensions": sets,
            "Metrics": names,
        }));
    }

    /// The line, stamped `at`.
    pub(super) fn finish(mut self, at: SystemTime) -> Value {
        let millis = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX));
        self.root.insert(
            "_aws".into(),
            json!({ "Timestamp": millis, "CloudWatchMetrics": self.directives }),
        );
        Value::Object(self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_its_metrics_and_dimensions_and_holds_their_values_at_the_root() {
        let config = MetricsConfig::new("Agents", "desk")
            .unwrap()
            .dimension("model", "m1")
            .unwrap();
        let mut line = EmfLine::new(&config);
        line.property("outcome", "completed");
        line.metrics(&[&[], &["outcome"]], &[("Turns", Unit::Count, 1.into())]);
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
        let line = line.finish(at);
        assert_eq!(
            line,
            json!({
                "service": "desk", "model": "m1", "outcome": "completed", "Turns": 1,
                "_aws": {"Timestamp": 1_700_000_000_123u64, "CloudWatchMetrics": [{
                    "Namespace": "Agents",
                    "Dimensions": [["service", "model"], ["service", "model", "outcome"]],
                    "Metrics": [{"Name": "Turns", "Unit": "Count"}],
                }]},
            })
        );
    }
}

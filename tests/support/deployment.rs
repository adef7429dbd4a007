//! template.yaml deployed: its intrinsic functions evaluated as CloudFormation would, for
//! tests/template_deployments.rs and tests/template_api.rs.

use serde_yaml::Value;

use super::template::{number, strings, template};

/// A deployment of the template, its intrinsic functions evaluated as CloudFormation would for
/// the given parameters (defaults elsewhere) in `region` of account 123456789012. Resources
/// read as `<Name>`; `AWS::NoValue` is `Null`.
pub struct Deployment {
    /// The template as read.
    pub template: Value,
    parameters: std::collections::HashMap<String, String>,
    region: String,
}

impl Deployment {
    pub fn new(region: &str, overrides: &[(&str, &str)]) -> Self {
        let template = template();
        let mut parameters: std::collections::HashMap<String, String> = template["Parameters"]
            .as_mapping()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                let default = match &v["Default"] {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => String::new(),
                };
                (k.as_str().unwrap().to_owned(), default)
            })
            .collect();
        for (name, value) in overrides {
            assert!(parameters.contains_key(*name), "no parameter {name}");
            parameters.insert((*name).to_owned(), (*value).to_owned());
        }
        Self {
            template,
            parameters,
            region: region.to_owned(),
        }
    }

    pub fn reference(&self, name: &str) -> Value {
        let text = match name {
            "AWS::Region" => self.region.clone(),
            "AWS::AccountId" => "123456789012".into(),
            "AWS::Partition" => "aws".into(),
            "AWS::StackName" => "stack".into(),
            "AWS::NoValue" => return Value::Null,
            other if self.template["Parameters"][other]["Type"].as_str() == Some("CommaDelimitedList") => {
                let list = self.parameters.get(other).cloned().unwrap_or_default();
                return Value::Sequence(
                    list.split(',')
                        .map(|item| Value::String(item.to_owned()))
                        .collect(),
                );
            }
            other => self
                .parameters
                .get(other)
                .cloned()
                .unwrap_or_else(|| format!("<{other}>")),
        };
        Value::String(text)
    }

    pub fn text(&self, value: &Value) -> String {
        match self.eval(value) {
            Value::String(s) => s,
            other => panic!("not text: {other:?}"),
        }
    }

    pub fn substitute(&self, pattern: &str, vars: &serde_yaml::Mapping) -> String {
        let mut out = String::new();
        let mut rest = pattern;
        while let Some(at) = rest.find("${") {
            out.push_str(&rest[..at]);
            let end = rest[at..].find('}').unwrap() + at;
            let name = &rest[at + 2..end];
            out.push_str(&match vars.get(name) {
                Some(v) => self.text(v),
                None if name.contains('.') && !name.starts_with("AWS::") => format!("<{name}>"),
                None => match self.reference(name) {
                    Value::String(s) => s,
                    other => panic!("${{{name}}} is {other:?}"),
                },
            });
            rest = &rest[end + 1..];
        }
        out + rest
    }

    pub fn condition(&self, name: &str) -> bool {
        self.truth(&self.template["Conditions"][name])
    }

    pub fn truth(&self, value: &Value) -> bool {
        let Value::Tagged(tagged) = value else {
            panic!("not a condition: {value:?}")
        };
        let args = tagged.value.as_sequence();
        match tagged.tag.to_string().as_str() {
            "!Equals" => {
                let args = args.unwrap();
                self.text(&args[0]) == self.text(&args[1])
            }
            "!Or" => args.unwrap().iter().any(|a| self.truth(a)),
            "!And" => args.unwrap().iter().all(|a| self.truth(a)),
            "!Not" => !self.truth(&args.unwrap()[0]),
            "!Condition" => self.condition(tagged.value.as_str().unwrap()),
            other => panic!("{other} is not a condition function"),
        }
    }

    pub fn eval(&self, value: &Value) -> Value {
        match value {
            Value::Mapping(map) => Value::Mapping(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.eval(v)))
                    .filter(|(_, v)| !v.is_null())
                    .collect(),
            ),
            Value::Sequence(items) => Value::Sequence(
                items
                    .iter()
                    .map(|i| self.eval(i))
                    .filter(|v| !v.is_null())
                    .collect(),
            ),
            Value::Tagged(tagged) => {
                let inner = &tagged.value;
                let args = || inner.as_sequence().unwrap();
                match tagged.tag.to_string().as_str() {
                    "!Ref" => self.reference(inner.as_str().unwrap()),
                    "!GetAtt" => Value::String(format!("<{}>", inner.as_str().unwrap())),
                    "!Sub" => Value::String(match inner {
                        Value::String(pattern) => self.substitute(pattern, &serde_yaml::Mapping::new()),
                        _ => self.substitute(args()[0].as_str().unwrap(), args()[1].as_mapping().unwrap()),
                    }),
                    "!If" => {
                        let branch = if self.condition(args()[0].as_str().unwrap()) {
                            1
                        } else {
                            2
                        };
                        self.eval(&args()[branch])
                    }
                    "!FindInMap" => {
                        let keys: Vec<String> = args().iter().map(|a| self.text(a)).collect();
                        self.eval(&self.template["Mappings"][&keys[0]][&keys[1]][&keys[2]])
                    }
                    "!Select" => {
                        let index = number(&args()[0]) as usize;
                        self.eval(&args()[1]).as_sequence().unwrap()[index].clone()
                    }
                    "!Join" => {
                        let items = self.eval(&args()[1]);
                        let items: Vec<String> = items
                            .as_sequence()
                            .unwrap()
                            .iter()
                            .map(|item| self.text(item))
                            .collect();
                        Value::String(items.join(&self.text(&args()[0])))
                    }
                    "!Split" => Value::Sequence(
                        self.text(&args()[1])
                            .split(&self.text(&args()[0]))
                            .map(|p| Value::String(p.to_owned()))
                            .collect(),
                    ),
                    other => panic!("{other} is not evaluated here"),
                }
            }
            other => other.clone(),
        }
    }

    /// Whether resource `name` is deployed (its `Condition` holds, or it has none).
    pub fn deploys(&self, name: &str) -> bool {
        match self.template["Resources"][name]["Condition"].as_str() {
            Some(condition) => self.condition(condition),
            None => !self.template["Resources"][name].is_null(),
        }
    }

    /// Resource `name`'s properties, evaluated.
    pub fn properties(&self, name: &str) -> Value {
        self.eval(&self.template["Resources"][name]["Properties"])
    }

    pub fn model_id(&self) -> String {
        self.text(&self.template["Resources"]["AgentWorkerFunction"]["Properties"]["Environment"]["Variables"]["MODEL_ID"])
    }

    /// The function's statements that name a bedrock action, evaluated.
    pub fn bedrock_statements(&self) -> Vec<Value> {
        let policy =
            &self.template["Resources"]["AgentWorkerFunction"]["Properties"]["Policies"][0]["Statement"];
        self.eval(policy)
            .as_sequence()
            .unwrap()
            .iter()
            .filter(|s| strings(&s["Action"]).iter().any(|a| a.starts_with("bedrock:")))
            .cloned()
            .collect()
    }
}

//! template.yaml: it passes cfn-lint and `sam validate --lint` (from the project's venv), and
//! holds the SQS settings those tools do not check.

use std::path::PathBuf;
use std::process::Command;

use serde_yaml::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn template() -> Value {
    let text = std::fs::read_to_string(root().join("template.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn tool(name: &str) -> PathBuf {
    let path = root().join(".venv").join("bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: `make venv` installs it",
        path.display()
    );
    path
}

fn run(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn cfn_lint_passes() {
    run(Command::new(tool("cfn-lint")).arg(root().join("template.yaml")));
}

#[test]
fn sam_validate_lint_passes() {
    run(Command::new(tool("sam"))
        .args(["validate", "--lint", "--template"])
        .arg(root().join("template.yaml"))
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("SAM_CLI_TELEMETRY", "0"));
}

fn number(value: &Value) -> u64 {
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a number: {value:?}"))
}

#[test]
fn the_queue_and_its_event_source_are_set_as_lambda_needs() {
    let t = template();
    let resources = &t["Resources"];
    let function = &resources["AgentWorkerFunction"];
    let props = &function["Properties"];
    assert_eq!(props["Runtime"].as_str(), Some("provided.al2023"));
    assert_eq!(props["Architectures"][0].as_str(), Some("arm64"));
    assert_eq!(
        function["Metadata"]["BuildMethod"].as_str(),
        Some("rust-cargolambda")
    );
    assert_eq!(props["LoggingConfig"]["LogFormat"].as_str(), Some("JSON"));

    let event = &props["Events"]["Turns"]["Properties"];
    let response_types: Vec<&str> = event["FunctionResponseTypes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        response_types,
        ["ReportBatchItemFailures"],
        "partial batch failures must be on"
    );
    assert!(
        !event["ScalingConfig"]["MaximumConcurrency"].is_null(),
        "MaximumConcurrency must be set"
    );
    assert!(
        number(&event["BatchSize"]) <= 10,
        "a FIFO queue takes batches of at most 10"
    );

    let queue = &resources["TurnsQueue"]["Properties"];
    assert_eq!(queue["FifoQueue"].as_bool(), Some(true));
    assert_eq!(number(&queue["RedrivePolicy"]["maxReceiveCount"]), 5);
    let max_timeout = number(&t["Parameters"]["FunctionTimeout"]["MaxValue"]);
    assert!(
        number(&queue["VisibilityTimeout"]) >= 6 * max_timeout,
        "the visibility timeout must be at least 6 times the function's timeout"
    );
    assert_eq!(
        resources["TurnsDeadLetterQueue"]["Properties"]["FifoQueue"].as_bool(),
        Some(true)
    );

    let table = &resources["SessionsTable"]["Properties"];
    assert_eq!(table["BillingMode"].as_str(), Some("PAY_PER_REQUEST"));
    assert_eq!(
        table["TimeToLiveSpecification"]["AttributeName"].as_str(),
        Some("expiresAt")
    );
    assert_eq!(table["TimeToLiveSpecification"]["Enabled"].as_bool(), Some(true));
}

#[test]
fn the_function_may_invoke_the_configured_model_and_nothing_else() {
    let t = template();
    let statements = t["Resources"]["AgentWorkerFunction"]["Properties"]["Policies"][0]["Statement"]
        .as_sequence()
        .unwrap()
        .clone();
    let bedrock: Vec<&Value> = statements
        .iter()
        .filter(|s| {
            s["Action"].as_sequence().is_some_and(|a| {
                a.iter()
                    .any(|a| a.as_str().is_some_and(|a| a.starts_with("bedrock:")))
            })
        })
        .collect();
    assert_eq!(bedrock.len(), 1);
    let actions: Vec<&str> = bedrock[0]["Action"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(actions, ["bedrock:InvokeModelWithResponseStream"]);
    for resource in bedrock[0]["Resource"].as_sequence().unwrap() {
        let text = serde_yaml::to_string(resource).unwrap();
        assert!(
            text.contains("${ModelId}") || text.contains("${FoundationModelId}"),
            "{text}"
        );
    }
    for statement in &statements {
        let text = serde_yaml::to_string(&statement["Resource"]).unwrap();
        assert!(
            !text.trim().ends_with("'*'") && text.trim() != "'*'",
            "no statement may grant every resource: {text}"
        );
    }
}

/// Every IAM statement anywhere in the template (both branches of an `!If` included).
fn statements(value: &Value, found: &mut Vec<Value>) {
    match value {
        Value::Mapping(map) => {
            if map.contains_key("Effect") {
                found.push(value.clone());
            }
            for (_, child) in map {
                statements(child, found);
            }
        }
        Value::Sequence(items) => items.iter().for_each(|i| statements(i, found)),
        Value::Tagged(tagged) => statements(&tagged.value, found),
        _ => {}
    }
}

/// The strings of an `Action` or `Resource`, with `!Sub` and `!GetAtt` read as their text.
fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Sequence(items) => items.iter().flat_map(strings).collect(),
        Value::Tagged(tagged) => match &tagged.value {
            Value::String(s) => vec![format!("{} {s}", tagged.tag)],
            other => strings(other),
        },
        _ => Vec::new(),
    }
}

#[test]
fn iam_is_least_privilege_no_wildcard_action_or_resource() {
    let mut found = Vec::new();
    statements(&template(), &mut found);
    assert!(
        found.len() >= 4,
        "the function's statements were found: {found:?}"
    );
    for statement in &found {
        let sid = statement["Sid"].as_str().unwrap_or("(no Sid)");
        assert!(
            statement.get("NotAction").is_none() && statement.get("NotResource").is_none(),
            "{sid}: NotAction/NotResource grant everything else"
        );
        let actions = strings(&statement["Action"]);
        assert!(!actions.is_empty(), "{sid}: no action");
        for action in &actions {
            assert!(!action.contains('*'), "{sid}: a wildcard action: {action}");
        }
        let resources = strings(&statement["Resource"]);
        assert!(!resources.is_empty(), "{sid}: no resource");
        for resource in &resources {
            // A `*` may only end a value the deployer names (`${FilesPrefix}*`: the objects under
            // the prefix; `${FoundationModelId}*`: that model's versions), or stand for the
            // region of a foundation model, which a cross-region inference profile routes to.
            for (at, _) in resource.match_indices('*') {
                let after_a_name = resource[..at].ends_with('}');
                let model_region = resource[..at].ends_with(":bedrock:")
                    && resource[at..].starts_with("*::foundation-model/${");
                assert!(
                    after_a_name || model_region,
                    "{sid}: a wildcard resource: {resource}"
                );
            }
        }
    }
}

#[test]
fn a_dead_lettered_turn_raises_an_alarm() {
    let t = template();
    let alarm = &t["Resources"]["TurnsDeadLetteredAlarm"]["Properties"];
    assert_eq!(alarm["Namespace"].as_str(), Some("AWS/SQS"));
    assert_eq!(
        alarm["MetricName"].as_str(),
        Some("ApproximateNumberOfMessagesVisible")
    );
    assert_eq!(alarm["ComparisonOperator"].as_str(), Some("GreaterThanThreshold"));
    assert_eq!(number(&alarm["Threshold"]), 0);
    let watched = serde_yaml::to_string(&alarm["Dimensions"]).unwrap();
    assert!(watched.contains("TurnsDeadLetterQueue.QueueName"), "{watched}");
}

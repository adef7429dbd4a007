//! template.yaml: it passes cfn-lint and `sam validate --lint` (from the project's venv), and
//! holds the SQS settings those tools do not check.

use crate::support;

use std::process::Command;

use serde_yaml::Value;
use support::template::*;

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
    assert_eq!(
        serde_yaml::to_string(&event["BatchSize"]).unwrap().trim(),
        "!Ref BatchSize"
    );
    let batch = &t["Parameters"]["BatchSize"];
    assert_eq!(
        number(&batch["Default"]),
        1,
        "each invocation takes one record unless the deployer says otherwise"
    );
    assert_eq!(number(&batch["MinValue"]), 1);
    assert!(
        number(&batch["MaxValue"]) <= 10,
        "a FIFO queue takes batches of at most 10"
    );

    let queue = &resources["TurnsQueue"]["Properties"];
    assert_eq!(queue["FifoQueue"].as_bool(), Some(true));
    assert_eq!(
        serde_yaml::to_string(&queue["RedrivePolicy"]["maxReceiveCount"])
            .unwrap()
            .trim(),
        "!Ref MaxReceiveCount"
    );
    assert!(number(&t["Parameters"]["MaxReceiveCount"]["Default"]) >= 5);
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
    let mut found = Vec::new();
    statements(&t["Resources"]["AgentWorkerFunction"], &mut found);
    let bedrock: Vec<&Value> = found
        .iter()
        .filter(|s| strings(&s["Action"]).iter().any(|a| a.starts_with("bedrock:")))
        .collect();
    assert_eq!(bedrock.len(), 2, "{bedrock:?}");
    for statement in &bedrock {
        assert_eq!(
            strings(&statement["Action"]),
            ["bedrock:InvokeModelWithResponseStream"]
        );
    }
    // The model itself: derived from the one ModelId parameter, whatever form it takes.
    let model = serde_yaml::to_string(&bedrock[0]["Resource"]).unwrap();
    for form in [
        "!Ref ModelId",
        "inference-profile/${Profile}",
        "foundation-model/${ModelId}",
    ] {
        assert!(model.contains(form), "{form} is missing from {model}");
    }
    // The foundation models behind a profile: only by way of that profile.
    assert_eq!(
        strings(&bedrock[1]["Resource"]),
        ["!Sub arn:${AWS::Partition}:bedrock:*::foundation-model/*"]
    );
    let through =
        serde_yaml::to_string(&bedrock[1]["Condition"]["StringEquals"]["bedrock:InferenceProfileArn"])
            .unwrap();
    assert!(
        through.contains("inference-profile/${Profile}") && through.contains("!Ref ModelId"),
        "{through}"
    );
    assert!(
        !t["Parameters"]
            .as_mapping()
            .unwrap()
            .contains_key("FoundationModelId")
    );
    for statement in &found {
        let text = serde_yaml::to_string(&statement["Resource"]).unwrap();
        assert!(
            !text.trim().ends_with("'*'") && text.trim() != "'*'",
            "no statement may grant every resource: {text}"
        );
    }
}

/// Every feature the README promises is a parameter that reaches the function: keys only as
/// Secrets Manager ARNs, never as plain values.
#[test]
fn every_feature_is_deployable_by_parameters() {
    let t = template();
    let variables = &t["Resources"]["AgentWorkerFunction"]["Properties"]["Environment"]["Variables"];
    for (variable, parameter) in [
        ("APPROVAL_SECRET_ARN", "ApprovalSecretArn"),
        ("EVENT_SINKS", "EventSinks"),
        ("EMIT_URL", "EmitUrl"),
        ("EMIT_API_KEY_SECRET_ARN", "EmitApiKeySecretArn"),
        ("DEFAULT_AGENT", "DefaultAgent"),
        ("FILES_PREFIX", "FilesPrefix"),
        ("ATTACHMENT_TOOLS", "AttachmentTools"),
        ("MODEL_PROVIDER", "ModelProvider"),
        ("ANTHROPIC_API_KEY_SECRET_ARN", "AnthropicApiKeySecretArn"),
        ("OPENAI_API_KEY_SECRET_ARN", "OpenAiApiKeySecretArn"),
        ("UI_ANSWERS", "UiAnswers"),
        ("APPROVAL_STORE", "ApprovalStore"),
        ("MAX_ROUNDS", "MaxRounds"),
        ("MAX_REPEAT_CALLS", "MaxRepeatCalls"),
        ("INLINE_LIMIT_BYTES", "InlineLimitBytes"),
        ("TURN_BUDGET_USD", "TurnBudgetUsd"),
        ("CONVERSATION_BUDGET_USD", "ConversationBudgetUsd"),
        ("PERSON_DAILY_BUDGET_USD", "PersonDailyBudgetUsd"),
        ("ACCOUNT_DAILY_BUDGET_USD", "AccountDailyBudgetUsd"),
        ("MAX_TOKENS", "MaxTokens"),
        ("TEMPERATURE", "Temperature"),
        ("TOOL_TIMEOUT_MS", "ToolTimeoutMs"),
        ("UI_ACTION_TIMEOUT_MS", "UiActionTimeoutMs"),
        ("RETRIES", "ModelRetries"),
    ] {
        assert!(!t["Parameters"][parameter].is_null(), "no parameter {parameter}");
        let value = serde_yaml::to_string(&variables[variable]).unwrap();
        assert_eq!(value.trim(), format!("!Ref {parameter}"), "{variable}");
    }
    let plain = serde_yaml::to_string(variables).unwrap();
    assert!(
        !plain.contains("APPROVAL_SECRET:") && !plain.contains("EMIT_API_KEY:"),
        "a key is never a plain variable: {plain}"
    );
    // Agent definitions: a layer sam build packages, unpacked into /opt.
    let layer = &t["Resources"]["AgentDefinitionsLayer"];
    assert_eq!(layer["Type"].as_str(), Some("AWS::Serverless::LayerVersion"));
    let folder = layer["Properties"]["ContentUri"].as_str().unwrap();
    assert!(
        root().join(folder).join("agents").is_dir(),
        "{folder} holds agents/"
    );
    assert!(
        serde_yaml::to_string(&variables["AGENTS_DIR"])
            .unwrap()
            .contains("/opt")
    );
    // A files bucket the stack may create, with the deployer's KMS key.
    let bucket = &t["Resources"]["FilesBucketResource"];
    assert_eq!(bucket["Condition"].as_str(), Some("CreateFiles"));
    assert!(
        serde_yaml::to_string(&bucket["Properties"]["BucketEncryption"])
            .unwrap()
            .contains("!Ref FilesKmsKeyArn")
    );
    // Its files expire after their conversation's items (the table's TTL) do.
    let rules = &bucket["Properties"]["LifecycleConfiguration"]["Rules"];
    let expiry = rules
        .as_sequence()
        .unwrap()
        .iter()
        .find(|r| r["Id"].as_str() == Some("ExpireWithTheirConversations"))
        .unwrap();
    let ttl_days = agent_worker::session::dynamo::DEFAULT_TTL.as_secs() / 86_400;
    assert!(
        expiry["ExpirationInDays"].as_u64().unwrap() > ttl_days,
        "files outlive their conversation's items ({ttl_days} days)"
    );
    assert_eq!(
        serde_yaml::to_string(&expiry["Prefix"]).unwrap().trim(),
        "!Ref FilesPrefix"
    );
    // Logs are kept as long as the deployer says.
    let logs = &t["Resources"]["AgentWorkerLogGroup"]["Properties"];
    assert_eq!(
        serde_yaml::to_string(&logs["RetentionInDays"]).unwrap().trim(),
        "!Ref LogRetentionInDays"
    );
    let function = &t["Resources"]["AgentWorkerFunction"]["Properties"];
    // The memory is the deployer's to set (the bill is wall time times memory).
    assert_eq!(
        serde_yaml::to_string(&function["MemorySize"]).unwrap().trim(),
        "!Ref FunctionMemorySize"
    );
    // Its default is chosen from the latest measure (`make bench` part `heavy`, in
    // benchmarks/results.json): the smallest size that holds the heaviest turn twice over. A
    // size is read as 10^6-byte megabytes here, the smaller reading of Lambda's "MB".
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("benchmarks/results.json")).unwrap())
            .unwrap();
    let heaviest_mib = results["heavy"]["peakRssMiB"].as_f64().unwrap();
    let holds_twice = |mb: u32| f64::from(mb) * 1e6 / f64::from(1u32 << 20) >= 2.0 * heaviest_mib;
    let chosen = [128, 256, 512, 1024, 2048]
        .into_iter()
        .find(|&mb| holds_twice(mb));
    assert_eq!(
        t["Parameters"]["FunctionMemorySize"]["Default"].as_u64(),
        chosen.map(u64::from),
        "the heaviest turn measured peaks at {heaviest_mib:.1} MiB"
    );
    assert_eq!(
        serde_yaml::to_string(&function["LoggingConfig"]["LogGroup"])
            .unwrap()
            .trim(),
        "!Ref AgentWorkerLogGroup"
    );
    let ignored = std::fs::read_to_string(root().join(".gitignore")).unwrap();
    assert!(
        ignored.lines().any(|l| l.trim() == "/.aws-sam"),
        ".aws-sam is ignored"
    );
}

#[test]
fn iam_is_least_privilege_no_wildcard_action_or_resource() {
    let mut found = Vec::new();
    statements(&template(), &mut found);
    assert!(
        found.len() >= 4,
        "the function's statements were found: {found:?}"
    );
    for statement in found.iter().filter(|s| s["Effect"].as_str() == Some("Allow")) {
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
            // the prefix), or stand for the foundation models a statement reaches only through
            // the configured inference profile (its `bedrock:InferenceProfileArn` condition).
            let through_the_profile =
                !statement["Condition"]["StringEquals"]["bedrock:InferenceProfileArn"].is_null();
            for (at, _) in resource.match_indices('*') {
                let after_a_name = resource[..at].ends_with('}');
                let behind_the_profile =
                    through_the_profile && resource.ends_with(":bedrock:*::foundation-model/*");
                assert!(
                    after_a_name || behind_the_profile,
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

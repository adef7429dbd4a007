//! template.yaml deployed, its intrinsic functions evaluated as CloudFormation would for given
//! parameters: what the function may invoke for each model, the files bucket and its key, keys off
//! Bedrock, a configuration in S3 or SSM, `sam build`'s layers, the owner index, and the dashboard's
//! metrics.

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use serde_yaml::Value;
use support::deployment::Deployment;
use support::template::*;

#[test]
fn the_model_and_what_the_function_may_invoke_come_from_one_parameter_in_each_form() {
    let profile_arn =
        |region: &str, id: &str| format!("arn:aws:bedrock:{region}:123456789012:inference-profile/{id}");
    // Empty: the region's geography.
    for (region, geo) in [
        ("us-west-2", "us"),
        ("eu-west-1", "eu"),
        ("ap-northeast-1", "apac"),
    ] {
        let deployment = Deployment::new(region, &[]);
        let id = format!("{geo}.anthropic.claude-sonnet-4-6");
        assert_eq!(deployment.model_id(), id);
        let statements = deployment.bedrock_statements();
        assert_eq!(statements.len(), 2);
        assert_eq!(strings(&statements[0]["Resource"]), [profile_arn(region, &id)]);
        assert_eq!(
            statements[1]["Condition"]["StringEquals"]["bedrock:InferenceProfileArn"].as_str(),
            Some(profile_arn(region, &id).as_str())
        );
    }
    // An inference profile id, a global one included.
    for id in [
        "eu.anthropic.claude-sonnet-4-6",
        "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
    ] {
        let deployment = Deployment::new("eu-central-1", &[("ModelId", id)]);
        assert_eq!(deployment.model_id(), id);
        let statements = deployment.bedrock_statements();
        assert_eq!(
            strings(&statements[0]["Resource"]),
            [profile_arn("eu-central-1", id)]
        );
        assert_eq!(statements.len(), 2);
    }
    // An application inference profile's ARN: itself, and its models only through it.
    let application = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3";
    let deployment = Deployment::new("us-east-1", &[("ModelId", application)]);
    assert_eq!(deployment.model_id(), application);
    let statements = deployment.bedrock_statements();
    assert_eq!(strings(&statements[0]["Resource"]), [application]);
    assert_eq!(
        statements[1]["Condition"]["StringEquals"]["bedrock:InferenceProfileArn"].as_str(),
        Some(application)
    );
    // A foundation model called directly: that model in the region, and nothing through a profile.
    let direct = "anthropic.claude-3-haiku-20240307-v1:0";
    let deployment = Deployment::new("us-east-1", &[("ModelId", direct)]);
    assert_eq!(deployment.model_id(), direct);
    let statements = deployment.bedrock_statements();
    assert_eq!(statements.len(), 1);
    assert_eq!(
        strings(&statements[0]["Resource"]),
        [format!("arn:aws:bedrock:us-east-1::foundation-model/{direct}")]
    );
}

#[test]
fn the_files_bucket_and_its_key_reach_the_function_and_its_policy() {
    let statements = |d: &Deployment| {
        let policy =
            &d.template["Resources"]["AgentWorkerFunction"]["Properties"]["Policies"][0]["Statement"];
        d.eval(policy).as_sequence().unwrap().clone()
    };
    let sids = |d: &Deployment| -> Vec<String> {
        statements(d)
            .iter()
            .filter_map(|s| s["Sid"].as_str().map(str::to_owned))
            .collect()
    };
    let bucket = |d: &Deployment| {
        d.text(&d.template["Resources"]["AgentWorkerFunction"]["Properties"]["Environment"]["Variables"]["FILES_BUCKET"])
    };
    let none = Deployment::new("us-east-1", &[]);
    assert_eq!(bucket(&none), "");
    assert!(
        !sids(&none)
            .iter()
            .any(|s| s.contains("Files") || s.contains("Attached"))
    );
    let created = Deployment::new(
        "us-east-1",
        &[
            ("CreateFilesBucket", "true"),
            ("FilesKmsKeyArn", "arn:aws:kms:us-east-1:123456789012:key/k"),
        ],
    );
    assert_eq!(bucket(&created), "<FilesBucketResource>");
    let read = statements(&created)
        .into_iter()
        .find(|s| s["Sid"].as_str() == Some("ReadAttachedFilesAndCountTheirTokens"))
        .unwrap();
    assert_eq!(
        strings(&read["Resource"]),
        ["arn:aws:s3:::<FilesBucketResource>/attachments/*"]
    );
    assert!(sids(&created).contains(&"UseTheFilesKey".to_owned()));
    let named = Deployment::new("us-east-1", &[("FilesBucket", "uploads")]);
    assert_eq!(bucket(&named), "uploads");
    assert!(!sids(&named).contains(&"UseTheFilesKey".to_owned()));
}

#[test]
fn off_bedrock_the_function_may_read_its_key_and_invoke_no_bedrock_model() {
    let key_reads = |d: &Deployment, sid: &str| -> Vec<Value> {
        d.eval(&d.template["Resources"]["AgentWorkerFunction"]["Properties"]["Policies"][0]["Statement"])
            .as_sequence()
            .unwrap()
            .iter()
            .filter(|s| s["Sid"].as_str() == Some(sid))
            .cloned()
            .collect()
    };
    let on_bedrock = Deployment::new("us-east-1", &[]);
    assert!(key_reads(&on_bedrock, "ReadTheAnthropicKey").is_empty());
    assert!(key_reads(&on_bedrock, "ReadTheOpenAiKey").is_empty());
    assert_eq!(
        on_bedrock.bedrock_statements().len(),
        2,
        "the profile and its models"
    );
    for (provider, key_parameter, sid, base_url_variable, model) in [
        (
            "anthropic",
            "AnthropicApiKeySecretArn",
            "ReadTheAnthropicKey",
            "ANTHROPIC_BASE_URL",
            "claude-sonnet-4-6",
        ),
        (
            "openai",
            "OpenAiApiKeySecretArn",
            "ReadTheOpenAiKey",
            "OPENAI_BASE_URL",
            "gpt-4.1-mini",
        ),
    ] {
        let arn = format!("arn:aws:secretsmanager:us-east-1:123456789012:secret:{provider}-key");
        let gateway = "https://llm.example.com/v1";
        let deployment = Deployment::new(
            "us-east-1",
            &[
                ("ModelProvider", provider),
                (key_parameter, &arn),
                ("ModelId", model),
                ("ModelBaseUrl", gateway),
            ],
        );
        let read = key_reads(&deployment, sid);
        assert_eq!(read.len(), 1, "{provider}");
        assert_eq!(strings(&read[0]["Action"]), ["secretsmanager:GetSecretValue"]);
        assert_eq!(strings(&read[0]["Resource"]), [arn.as_str()]);
        assert!(
            deployment.bedrock_statements().is_empty(),
            "{provider}: no Bedrock model may be invoked"
        );
        let variables = deployment.eval(
            &deployment.template["Resources"]["AgentWorkerFunction"]["Properties"]["Environment"]["Variables"],
        );
        assert_eq!(variables["MODEL_PROVIDER"], provider);
        assert_eq!(variables["MODEL_ID"], model);
        assert_eq!(variables[base_url_variable], gateway, "{provider}");
        let other = if provider == "openai" {
            "ANTHROPIC_BASE_URL"
        } else {
            "OPENAI_BASE_URL"
        };
        assert_eq!(
            variables[other], "",
            "{provider}: the other provider's URL is not set"
        );
    }
}

#[test]
fn a_configuration_in_s3_or_ssm_reaches_the_function_with_exactly_its_reads() {
    let function = |d: &Deployment| d.eval(&d.template["Resources"]["AgentWorkerFunction"]["Properties"]);
    let statement = |d: &Deployment, sid: &str| {
        function(d)["Policies"][0]["Statement"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|s| s["Sid"].as_str() == Some(sid))
            .cloned()
    };
    let variable = |d: &Deployment, name: &str| function(d)["Environment"]["Variables"][name].clone();
    let sids = [
        "ReadTheConfiguration",
        "ReadTheConfigurationParameter",
        "ReadWhatTheConfigurationNames",
    ];

    let none = Deployment::new("us-east-1", &[]);
    assert_eq!(variable(&none, "AGENT_WORKER_CONFIG"), "");
    // No prompt of its own: a deployment gives one (SystemPrompt) or its configuration does.
    assert_eq!(variable(&none, "SYSTEM_PROMPT"), "");
    let prompted = Deployment::new("us-east-1", &[("SystemPrompt", "You answer for Acme.")]);
    assert_eq!(variable(&prompted, "SYSTEM_PROMPT"), "You answer for Acme.");
    assert!(sids.iter().all(|sid| statement(&none, sid).is_none()));
    let bundled = Deployment::new("us-east-1", &[("AgentConfig", "bundled")]);
    assert_eq!(
        variable(&bundled, "AGENT_WORKER_CONFIG"),
        "/opt/config/agent-worker.yaml"
    );
    assert!(sids.iter().all(|sid| statement(&bundled, sid).is_none()));

    let in_s3 = Deployment::new(
        "eu-west-1",
        &[
            ("AgentConfig", "s3://desk-config/agent/agent-worker.yaml"),
            (
                "AgentConfigReads",
                "arn:aws:s3:::desk-config/agent/desk.openapi.json,arn:aws:secretsmanager:eu-west-1:123456789012:secret:desk-key",
            ),
        ],
    );
    assert_eq!(
        variable(&in_s3, "AGENT_WORKER_CONFIG"),
        "s3://desk-config/agent/agent-worker.yaml"
    );
    assert_eq!(
        variable(&in_s3, "SYSTEM_PROMPT"),
        "",
        "the configuration's persona stands"
    );
    let read = statement(&in_s3, "ReadTheConfiguration").unwrap();
    assert_eq!(strings(&read["Action"]), ["s3:GetObject"]);
    assert_eq!(
        strings(&read["Resource"]),
        ["arn:aws:s3:::desk-config/agent/agent-worker.yaml"]
    );
    assert!(statement(&in_s3, "ReadTheConfigurationParameter").is_none());
    let named = statement(&in_s3, "ReadWhatTheConfigurationNames").unwrap();
    assert_eq!(
        strings(&named["Resource"]),
        [
            "arn:aws:s3:::desk-config/agent/desk.openapi.json",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:desk-key"
        ]
    );

    let in_ssm = Deployment::new("eu-west-1", &[("AgentConfig", "ssm:/desk/agent-config")]);
    assert_eq!(variable(&in_ssm, "AGENT_WORKER_CONFIG"), "ssm:/desk/agent-config");
    let read = statement(&in_ssm, "ReadTheConfigurationParameter").unwrap();
    assert_eq!(strings(&read["Action"]), ["ssm:GetParameter"]);
    assert_eq!(
        strings(&read["Resource"]),
        ["arn:aws:ssm:eu-west-1:123456789012:parameter/desk/agent-config"]
    );
    assert!(statement(&in_ssm, "ReadTheConfiguration").is_none());
    assert!(statement(&in_ssm, "ReadWhatTheConfigurationNames").is_none());

    let template = template();
    let pattern = regex_lite::Regex::new(
        template["Parameters"]["AgentConfig"]["AllowedPattern"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    for (value, allowed) in [
        ("none", true),
        ("bundled", true),
        ("s3://bucket/key.yaml", true),
        ("ssm:/a/b", true),
        ("s3://bucket", false),
        ("ssm:name", false),
        ("/opt/x.yaml", false),
    ] {
        assert_eq!(pattern.is_match(value), allowed, "{value}");
    }
}

/// `sam build` packages the bundled agent definitions as the layer Lambda unpacks into /opt.
/// `sam build RESOURCE` with `parameter` set, into a build folder of its own.
fn sam_build(resource: &str, parameter: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!("{resource}-{}", std::process::id()));
    run(Command::new(tool("sam"))
        .args([
            "build",
            resource,
            "--parameter-overrides",
            parameter,
            "--build-dir",
        ])
        .arg(&out)
        .arg("--template")
        .arg(root().join("template.yaml"))
        .current_dir(root())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("SAM_CLI_TELEMETRY", "0"));
    out
}

#[test]
fn sam_build_packages_the_agent_definitions_layer() {
    let out = sam_build("AgentDefinitionsLayer", "AgentDefinitions=bundled");
    let layer = out.join("AgentDefinitionsLayer");
    for folder in ["agents", "prompts"] {
        let built: Vec<_> = std::fs::read_dir(layer.join(folder)).unwrap().collect();
        let source: Vec<_> = std::fs::read_dir(root().join("examples/agents").join(folder))
            .unwrap()
            .collect();
        assert_eq!(built.len(), source.len(), "{folder}");
        assert!(!built.is_empty());
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[tokio::test]
async fn the_owner_index_is_the_one_the_store_creates() {
    use agent_worker::session::{DynamoConfig, DynamoStore};
    let table = template()["Resources"]["SessionsTable"]["Properties"].clone();
    let declared = table["GlobalSecondaryIndexes"]
        .as_sequence()
        .expect("the table declares its index")
        .iter()
        .find(|i| i["IndexName"] == "byOwner")
        .expect("byOwner")
        .clone();
    let keys = |schema: &Value| -> Vec<(String, String)> {
        schema
            .as_sequence()
            .unwrap()
            .iter()
            .map(|k| {
                (
                    k["AttributeName"].as_str().unwrap().to_owned(),
                    k["KeyType"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let declared_keys = keys(&declared["KeySchema"]);
    let mut declared_projected: Vec<String> = declared["Projection"]["NonKeyAttributes"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    declared_projected.sort();

    // The same index, as `agent-worker setup` makes it (moto's DynamoDB).
    let name = format!("template-{}", uuid::Uuid::new_v4().simple());
    let client = agent_worker_testkit::moto().dynamodb();
    DynamoStore::new(client.clone(), DynamoConfig::new(&name).unwrap())
        .create_table()
        .await
        .unwrap();
    let described = client.describe_table().table_name(&name).send().await.unwrap();
    let index = described
        .table()
        .unwrap()
        .global_secondary_indexes()
        .iter()
        .find(|i| i.index_name() == Some("byOwner"))
        .expect("setup creates byOwner");
    let made_keys: Vec<(String, String)> = index
        .key_schema()
        .iter()
        .map(|k| (k.attribute_name().to_owned(), k.key_type().as_str().to_owned()))
        .collect();
    assert_eq!(made_keys, declared_keys);
    let mut made_projected = index.projection().unwrap().non_key_attributes().to_vec();
    made_projected.sort();
    assert_eq!(made_projected, declared_projected);

    // Whatever serves conversations may query it.
    let policy = &template()["Resources"]["ConversationsApiPolicy"]["Properties"]["PolicyDocument"];
    let text = serde_yaml::to_string(policy).unwrap();
    assert!(text.contains("/index/byOwner"), "{text}");
}

#[test]
fn sam_build_packages_the_configuration_layer_where_the_function_reads_it() {
    let out = sam_build("AgentConfigLayer", "AgentConfig=bundled");
    let built = out.join("AgentConfigLayer").join("config");
    for file in ["agent-worker.yaml", "desk.openapi.json"] {
        assert!(built.join(file).is_file(), "{file} is in the layer");
    }
    let _ = std::fs::remove_dir_all(&out);
    // The function is told where Lambda unpacks it.
    let variables = &template()["Resources"]["AgentWorkerFunction"]["Properties"]["Environment"]["Variables"];
    let config = serde_yaml::to_string(&variables["AGENT_WORKER_CONFIG"]).unwrap();
    assert!(config.contains("/opt/config/agent-worker.yaml"), "{config}");
}

/// The metric names the worker writes (`hosts::metrics`; `tests/metrics.rs` reads each back).
const WRITTEN_METRICS: [&str; 18] = [
    "Turns",
    "TurnCostUsd",
    "TurnDuration",
    "TimeToFirstToken",
    "QueueDelay",
    "ModelCalls",
    "ModelRetries",
    "ModelThrottles",
    "InputTokens",
    "OutputTokens",
    "CacheReadTokens",
    "CacheWriteTokens",
    "ToolCalls",
    "ToolDuration",
    "ApprovalsRequested",
    "ApprovalsRedeemed",
    "Compactions",
    "DynamoDBRequests",
];

#[test]
fn the_dashboard_and_the_metric_alarms_read_metrics_the_worker_writes() {
    let template = template();
    let resources = &template["Resources"];
    let env = &resources["AgentWorkerFunction"]["Properties"]["Environment"]["Variables"];
    assert!(env.get("POWERTOOLS_METRICS_NAMESPACE").is_some());
    assert!(env.get("POWERTOOLS_SERVICE_NAME").is_some());
    assert!(env.get("OTEL_EXPORTER_OTLP_ENDPOINT").is_some());
    assert!(
        env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .is_some()
    );

    // The body, with every ${...} of its !Sub filled in, is JSON.
    let Value::Tagged(sub) = &resources["AgentWorkerDashboard"]["Properties"]["DashboardBody"] else {
        panic!("the dashboard body is a !Sub");
    };
    let mut body = sub.value[0].as_str().unwrap().to_owned();
    while let Some(start) = body.find("${") {
        let end = start + body[start..].find('}').unwrap();
        let name = body[start + 2..end].to_owned();
        body.replace_range(start..=end, if name == "Ns" { "NS" } else { "x" });
    }
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    let widgets = body["widgets"].as_array().unwrap();
    assert!(widgets.len() >= 9, "{widgets:?}");
    let mut read = Vec::new();
    for widget in widgets {
        // A row whose namespace is "." (or "...") has the row before's.
        let mut namespace = String::new();
        for metric in widget["properties"]["metrics"].as_array().unwrap() {
            let parts = metric.as_array().unwrap();
            match parts[0].as_str() {
                Some(ns) => {
                    if !ns.starts_with('.') {
                        namespace = ns.to_owned();
                    }
                    if namespace == "NS"
                        && let Some(name) = parts.get(1).and_then(|p| p.as_str()).filter(|p| *p != ".")
                    {
                        read.push(name.to_owned());
                    }
                }
                None => {
                    let expression = parts[0]["expression"].as_str().unwrap();
                    let name = expression.split("MetricName=\"").nth(1).unwrap();
                    read.push(name.split('"').next().unwrap().to_owned());
                }
            }
        }
    }
    for alarm in [
        "TurnErrorRateAlarm",
        "ModelThrottleRateAlarm",
        "FirstTokenLatencyAlarm",
    ] {
        let properties = &resources[alarm]["Properties"];
        if let Some(name) = properties["MetricName"].as_str() {
            read.push(name.to_owned());
        }
        for metric in properties["Metrics"].as_sequence().into_iter().flatten() {
            if let Some(name) = metric["MetricStat"]["Metric"]["MetricName"].as_str() {
                read.push(name.to_owned());
            }
        }
    }
    for name in &read {
        assert!(WRITTEN_METRICS.contains(&name.as_str()), "{name} is not written");
    }
    for name in [
        "Turns",
        "TimeToFirstToken",
        "InputTokens",
        "ModelThrottles",
        "ToolCalls",
        "DynamoDBRequests",
        "TurnCostUsd",
    ] {
        assert!(
            read.iter().any(|r| r == name),
            "the dashboard or an alarm shows {name}"
        );
    }
}

#[test]
fn the_approval_key_is_read_from_secrets_manager_or_ssm_with_exactly_that_grant() {
    let statement = |d: &Deployment| {
        d.eval(&d.template["Resources"]["AgentWorkerFunction"]["Properties"])["Policies"][0]["Statement"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|s| s["Sid"].as_str() == Some("ReadTheApprovalKey"))
            .cloned()
    };
    assert!(
        statement(&Deployment::new("us-east-1", &[])).is_none(),
        "no key, no grant"
    );
    let secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:approvals-AbCdEf";
    let in_secrets = statement(&Deployment::new("us-east-1", &[("ApprovalSecretArn", secret)])).unwrap();
    assert_eq!(in_secrets["Action"][0], "secretsmanager:GetSecretValue");
    assert_eq!(in_secrets["Resource"], secret);
    let parameter = "arn:aws:ssm:us-east-1:123456789012:parameter/agent/approvals";
    let in_ssm = statement(&Deployment::new("us-east-1", &[("ApprovalSecretArn", parameter)])).unwrap();
    assert_eq!(in_ssm["Action"][0], "ssm:GetParameter");
    assert_eq!(in_ssm["Resource"], parameter);
}

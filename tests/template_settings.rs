//! Every setting a template function reads is a parameter: each name the `bootstrap` function
//! reads (`WORKER_SETTINGS`, `TRACE_SETTINGS`, the configuration file's, the ARN of each secret
//! among them) and each name the `api` functions read (`api_settings()`) is set in that
//! function's `Environment.Variables` from the deployment (a parameter, a resource, or a
//! condition on them), unless it is one of the few left out on purpose ([`UNSET`]) or a literal
//! that follows from the function itself ([`LITERALS`]), each with why. The variables that the
//! AWS SDK and the Lambda runtime read (`AWS_REGION`, `AWS_LAMBDA_*`, the log level of
//! `LoggingConfig`) are Lambda's, not settings.
//!
//! The tuning parameters keep the code's defaults when empty, and their descriptions name them.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use agent_worker::hosts::api::api_settings;
use agent_worker::hosts::config::CONFIG_ENV;
use agent_worker::hosts::secrets::SECRET_SETTINGS;
use agent_worker::hosts::settings::{TRACE_SETTINGS, WORKER_SETTINGS};
use serde_yaml::Value;
use support::template::{root, template};

/// Names a function reads that no function's environment sets, each with why.
const UNSET: [(&str, &str); 18] = [
    (
        "AGENT_CARD_SIGNING_KEY",
        "a key is never a plain variable: AGENT_CARD_SIGNING_KEY_SECRET_ARN (AgentCardSigningKeySecretArn)",
    ),
    (
        "APPROVAL_SECRET",
        "a key is never a plain variable: APPROVAL_SECRET_ARN (ApprovalSecretArn) names where it is kept",
    ),
    (
        "EMIT_API_KEY",
        "a key is never a plain variable: EMIT_API_KEY_SECRET_ARN (EmitApiKeySecretArn)",
    ),
    (
        "ANTHROPIC_API_KEY",
        "a key is never a plain variable: ANTHROPIC_API_KEY_SECRET_ARN (AnthropicApiKeySecretArn)",
    ),
    (
        "OPENAI_API_KEY",
        "a key is never a plain variable: OPENAI_API_KEY_SECRET_ARN (OpenAiApiKeySecretArn)",
    ),
    (
        "AGENT_WORKER_API_KEY",
        "a key is never a plain variable: AGENT_WORKER_API_KEY_SECRET_ARN (ApiKeySecretArn)",
    ),
    (
        "A2A_PUSH_LOOPBACK",
        "plain http to loopback is for local runs and tests: on Lambda it is refused, loopback \
         being the Runtime API's",
    ),
    (
        "FILES_DIR",
        "a local folder: on Lambda the files are in the bucket (FilesBucket or CreateFilesBucket)",
    ),
    (
        "ALLOWED_ORIGINS",
        "the Function URL's and the HTTP API's own CORS answer the origins of AllowedOrigins; \
         the function's would send its headers a second time",
    ),
    (
        "POWERTOOLS_METRICS_DISABLED",
        "an empty MetricsNamespace turns the metrics off",
    ),
    (
        "METRICS_DIMENSIONS",
        "the stack's alarms and dashboard read the metrics by service alone: with dimensions of \
         the deployer's they would be other metrics, which the alarms never see",
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT (OtlpEndpoint) says where the traces go",
    ),
    (
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "the exporter speaks http/json alone: there is nothing to choose",
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "the exporter speaks http/json alone: there is nothing to choose",
    ),
    ("OTEL_SDK_DISABLED", "an empty OtlpEndpoint turns the traces off"),
    (
        "OTEL_TRACES_EXPORTER",
        "an empty OtlpEndpoint turns the traces off",
    ),
    (
        "OTEL_EXPORTER_OTLP_HEADERS",
        "a collector's headers carry its credential, which would stand in plain in the function's \
         configuration: a collector beside the function (the ADOT layer's, localhost) needs none",
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "a collector's headers carry its credential (as OTEL_EXPORTER_OTLP_HEADERS)",
    ),
];

/// Names a function's environment sets to a literal, each with why that is no deployer's choice.
const LITERALS: [(&str, &str); 1] = [(
    "API_RESPONSES",
    "it follows from what is in front of the function: a Function URL streams (streamed), an \
     HTTP API does not (buffered)",
)];

/// The names the function built from `binary` reads.
fn names_read(binary: &str) -> BTreeSet<String> {
    match binary {
        "bootstrap" => {
            let settings: Vec<&str> = WORKER_SETTINGS
                .into_iter()
                .chain(TRACE_SETTINGS)
                .chain([CONFIG_ENV])
                .collect();
            let arns = SECRET_SETTINGS
                .into_iter()
                .filter(|(name, _)| settings.contains(name))
                .map(|(_, arn_name)| arn_name);
            settings.iter().copied().chain(arns).map(str::to_owned).collect()
        }
        "api" => api_settings().into_iter().map(str::to_owned).collect(),
        other => panic!("a function of binary {other}: say what it reads here"),
    }
}

/// The template's functions: name, binary, and their environment.
fn functions(t: &Value) -> Vec<(String, String, serde_yaml::Mapping)> {
    let resources = t["Resources"].as_mapping().unwrap();
    let found: Vec<_> = resources
        .iter()
        .filter(|(_, r)| r["Type"].as_str() == Some("AWS::Serverless::Function"))
        .map(|(name, r)| {
            (
                name.as_str().unwrap().to_owned(),
                r["Metadata"]["BuildProperties"]["Binary"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                r["Properties"]["Environment"]["Variables"]
                    .as_mapping()
                    .cloned()
                    .unwrap_or_default(),
            )
        })
        .collect();
    assert!(found.len() >= 3, "the worker and the API's functions: {found:?}");
    found
}

/// Every string inside `value`.
fn texts(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::String(s) => into.push(s.clone()),
        Value::Sequence(items) => items.iter().for_each(|i| texts(i, into)),
        Value::Mapping(map) => map.iter().for_each(|(k, v)| {
            texts(k, into);
            texts(v, into);
        }),
        Value::Tagged(tagged) => texts(&tagged.value, into),
        _ => {}
    }
}

/// Whether `value` comes from the deployment: an intrinsic function that names a parameter, a
/// resource, a condition or a pseudo parameter (`!Ref X`, `!GetAtt X.Arn`, `!Sub "${X}"`, `!If
/// [X, …]`); a plain scalar is a literal.
fn from_deployment(value: &Value, t: &Value) -> bool {
    let Value::Tagged(_) = value else {
        return false;
    };
    let known = |name: &str| {
        let name = name.split('.').next().unwrap_or(name);
        name.starts_with("AWS::")
            || ["Parameters", "Resources", "Conditions"]
                .iter()
                .any(|section| t[section].as_mapping().unwrap().contains_key(name))
    };
    let mut found = Vec::new();
    texts(value, &mut found);
    found.iter().any(|text| {
        known(text)
            || text
                .split("${")
                .skip(1)
                .any(|rest| rest.split('}').next().is_some_and(known))
    })
}

#[test]
fn every_name_a_function_reads_is_set_from_the_deployment() {
    let t = template();
    let unset: BTreeMap<&str, &str> = UNSET.into_iter().collect();
    let literals: BTreeMap<&str, &str> = LITERALS.into_iter().collect();
    let mut problems = Vec::new();
    let mut read_anywhere = BTreeSet::new();
    let mut set_anywhere = BTreeSet::new();
    for (function, binary, variables) in functions(&t) {
        let read = names_read(&binary);
        for name in &read {
            read_anywhere.insert(name.clone());
            match variables.get(name.as_str()) {
                Some(value) if from_deployment(value, &t) => {}
                Some(_) if literals.contains_key(name.as_str()) => {}
                Some(value) => problems.push(format!(
                    "{function}: {name} is the literal {value:?}; make it a parameter"
                )),
                None if unset.contains_key(name.as_str()) => {}
                None => problems.push(format!(
                    "{function}: {name} is read and not set; make it a parameter"
                )),
            }
        }
        for (name, _) in &variables {
            let name = name.as_str().unwrap();
            set_anywhere.insert(name.to_owned());
            if !read.contains(name) {
                problems.push(format!("{function}: {name} is set and not read"));
            }
        }
    }
    for name in unset.keys() {
        if !read_anywhere.contains(*name) || set_anywhere.contains(*name) {
            problems.push(format!("{name} is listed as read and left unset: it is not"));
        }
    }
    for name in literals.keys() {
        if !set_anywhere.contains(*name) {
            problems.push(format!("{name} is listed as a literal: no function sets it"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

fn ms(duration: Duration) -> String {
    duration.as_millis().to_string()
}

/// Each tuning parameter is empty by default, which keeps the code's default, and its
/// description names that default.
#[test]
fn each_tuning_parameter_keeps_the_default_its_description_names() {
    use agent_worker::engine::config::*;
    use agent_worker::hosts::{redrive, settings};
    let t = template();
    let tuning = [
        ("MaxRounds", "MAX_ROUNDS", DEFAULT_MAX_ROUNDS.to_string()),
        (
            "MaxRepeatCalls",
            "MAX_REPEAT_CALLS",
            DEFAULT_MAX_REPEAT_CALLS.to_string(),
        ),
        ("MaxTokens", "MAX_TOKENS", DEFAULT_MAX_TOKENS.to_string()),
        ("Temperature", "TEMPERATURE", DEFAULT_TEMPERATURE.to_string()),
        (
            "ForcedToolChoice",
            "FORCED_TOOL_CHOICE",
            DEFAULT_FORCED_TOOL_CHOICE.to_string(),
        ),
        ("ToolTimeoutMs", "TOOL_TIMEOUT_MS", ms(DEFAULT_TOOL_TIMEOUT)),
        (
            "UiActionTimeoutMs",
            "UI_ACTION_TIMEOUT_MS",
            ms(DEFAULT_UI_ACTION_TIMEOUT),
        ),
        ("TurnDeadlineMs", "TURN_DEADLINE_MS", ms(DEFAULT_TURN_DEADLINE)),
        ("ModelRetries", "RETRIES", DEFAULT_RETRIES.to_string()),
        (
            "ModelFirstChunkTimeoutMs",
            "MODEL_FIRST_CHUNK_TIMEOUT_MS",
            ms(DEFAULT_FIRST_CHUNK_TIMEOUT),
        ),
        (
            "ModelChunkTimeoutMs",
            "MODEL_CHUNK_TIMEOUT_MS",
            ms(DEFAULT_CHUNK_TIMEOUT),
        ),
        ("StopGraceMs", "STOP_GRACE_MS", ms(DEFAULT_STOP_GRACE)),
        (
            "TurnFileTokens",
            "TURN_FILE_TOKENS",
            DEFAULT_TURN_FILE_TOKENS.to_string(),
        ),
        (
            "ConversationFileTokens",
            "CONVERSATION_FILE_TOKENS",
            DEFAULT_CONVERSATION_FILE_TOKENS.to_string(),
        ),
        ("LeaseMarginMs", "LEASE_MARGIN_MS", ms(DEFAULT_LEASE_MARGIN)),
        (
            "StoreMarginMs",
            "STORE_MARGIN_MS",
            ms(settings::DEFAULT_STORE_MARGIN),
        ),
        (
            "MinTurnTimeMs",
            "MIN_TURN_TIME_MS",
            ms(settings::DEFAULT_MIN_TURN_TIME),
        ),
        (
            "RedriveDelayMs",
            "REDRIVE_DELAY_MS",
            ms(redrive::DEFAULT_REDRIVE_DELAY),
        ),
        (
            "RedriveMaxDelayMs",
            "REDRIVE_MAX_DELAY_MS",
            ms(redrive::DEFAULT_REDRIVE_MAX_DELAY),
        ),
        (
            "DynamoDbAttemptTimeoutMs",
            "DYNAMODB_ATTEMPT_TIMEOUT_MS",
            ms(settings::DEFAULT_STORE_ATTEMPT_TIMEOUT),
        ),
    ];
    let worker = &t["Resources"]["AgentWorkerFunction"]["Properties"]["Environment"]["Variables"];
    for (parameter, variable, default) in tuning {
        let p = &t["Parameters"][parameter];
        assert_eq!(p["Default"].as_str(), Some(""), "{parameter} keeps the default");
        let description = p["Description"].as_str().unwrap();
        let named = [format!("({default})"), format!("({default},")];
        assert!(
            named.iter().any(|n| description.contains(n.as_str())),
            "{parameter} names its default ({default}): {description}"
        );
        assert_eq!(
            serde_yaml::to_string(&worker[variable]).unwrap().trim(),
            format!("!Ref {parameter}"),
            "{variable}"
        );
    }
    // The API's own, with a default of its own.
    let max_age = &t["Parameters"]["JwksMaxAgeSeconds"]["Default"];
    assert_eq!(
        max_age.as_u64(),
        Some(agent_worker::hosts::jwt::DEFAULT_MAX_AGE.as_secs())
    );
    let name = t["Parameters"]["AgentName"]["Description"].as_str().unwrap();
    assert!(
        name.contains(agent_worker::hosts::container::DEFAULT_AGENT_NAME),
        "{name}"
    );
}

/// The deployer's page names every parameter, and the configuration's every setting.
#[test]
fn the_docs_name_every_parameter_and_every_setting() {
    let t = template();
    let deploy = std::fs::read_to_string(root().join("docs/deploy.md")).unwrap();
    let missing: Vec<&str> = t["Parameters"]
        .as_mapping()
        .unwrap()
        .keys()
        .filter_map(Value::as_str)
        .filter(|p| !deploy.contains(&format!("`{p}`")))
        .collect();
    assert!(missing.is_empty(), "docs/deploy.md does not name {missing:?}");
    let configuration = std::fs::read_to_string(root().join("docs/configuration.md")).unwrap();
    let missing: Vec<&str> = WORKER_SETTINGS
        .into_iter()
        .filter(|name| !configuration.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md does not name {missing:?}"
    );
}

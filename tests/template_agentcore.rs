//! deploy/agentcore.yaml: the `serve` image as an AWS::BedrockAgentCore::Runtime. It passes
//! cfn-lint (whose schema knows the resource), and the runtime is set as the container needs:
//! the person's token passed through to a container that verifies it (AUTH=jwt, the same issuer
//! and audience as the runtime's authorizer), or, with `Auth: iam`, no authorizer and the
//! container taking the user the runtime names; and the role reaching only the table and the
//! model.

use crate::support;

use std::process::Command;

use serde_yaml::Value;
use support::template::*;

fn agentcore() -> Value {
    let text = std::fs::read_to_string(root().join("deploy/agentcore.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

#[test]
fn cfn_lint_passes() {
    run(Command::new(tool("cfn-lint")).arg(root().join("deploy/agentcore.yaml")));
}

/// `value` when it is `!If [ByTokens, then, else]`: (then, else).
fn by_tokens(value: &Value) -> (&Value, &Value) {
    let Value::Tagged(tagged) = value else {
        panic!("not an !If: {value:?}")
    };
    assert_eq!(tagged.tag, "If");
    let branches = tagged.value.as_sequence().unwrap();
    assert_eq!(branches[0].as_str(), Some("ByTokens"));
    (&branches[1], &branches[2])
}

#[test]
fn the_runtime_passes_the_persons_token_to_a_container_that_checks_it() {
    let t = agentcore();
    let runtime = &t["Resources"]["Runtime"]["Properties"];
    assert_eq!(
        t["Resources"]["Runtime"]["Type"].as_str(),
        Some("AWS::BedrockAgentCore::Runtime")
    );
    let (headers, without) = by_tokens(&runtime["RequestHeaderConfiguration"]);
    assert_eq!(strings(&headers["RequestHeaderAllowlist"]), ["Authorization"]);
    assert!(format!("{without:?}").contains("AWS::NoValue"));
    // The container knows callers as the runtime does: AUTH is the template's Auth, jwt unless
    // told, which its Auth setting spells as `serve --auth` does.
    let env = &runtime["EnvironmentVariables"];
    assert!(
        format!("{:?}", env["AUTH"]).contains("\"Auth\""),
        "{:?}",
        env["AUTH"]
    );
    let auth = &t["Parameters"]["Auth"];
    assert_eq!(auth["Default"].as_str(), Some("jwt"));
    assert_eq!(strings(&auth["AllowedValues"]), ["jwt", "iam"]);
    assert!(format!("{:?}", env["AGENTCORE_ACCOUNT"]).contains("AgentCoreAccount"));
    let (authorizer, without) = by_tokens(&runtime["AuthorizerConfiguration"]);
    assert!(
        format!("{without:?}").contains("AWS::NoValue"),
        "iam: the runtime's SigV4"
    );
    let authorizer = &authorizer["CustomJWTAuthorizer"];
    assert!(format!("{:?}", authorizer["DiscoveryUrl"]).contains("JwtIssuer"));
    assert!(format!("{:?}", env["JWT_ISSUER"]).contains("JwtIssuer"));
    assert!(format!("{:?}", authorizer["AllowedAudience"]).contains("JwtAudience"));
    assert!(format!("{:?}", env["JWT_AUDIENCE"]).contains("JwtAudience"));
    assert_eq!(
        env["EVENT_SINKS"].as_str(),
        Some("dynamo"),
        "the turn's events reach /invocations through the log"
    );
    let mut found = Vec::new();
    statements(
        &t["Resources"]["RuntimeRole"]["Properties"]["Policies"],
        &mut found,
    );
    let actions: Vec<String> = found.iter().flat_map(|s| strings(&s["Action"])).collect();
    assert!(
        actions.iter().all(|a| !a.ends_with(":*")),
        "no wildcard action: {actions:?}"
    );
    assert!(actions.contains(&"bedrock:InvokeModelWithResponseStream".to_owned()));
}

/// The `docs/…` pages `deploy/agentcore.yaml` and the `Dockerfile` send their readers to.
fn pages_named_in(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    text.match_indices("docs/")
        .filter_map(|(at, _)| {
            let rest = &text[at..];
            let end = rest.find(".md")?;
            let page = &rest[..end + 3];
            page["docs/".len()..end]
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '-')
                .then(|| page.to_owned())
        })
        .collect()
}

#[test]
fn the_pages_the_template_and_the_dockerfile_name_exist() {
    for file in ["deploy/agentcore.yaml", "Dockerfile"] {
        let pages = pages_named_in(file);
        assert!(!pages.is_empty(), "{file} names no page");
        for page in pages {
            assert!(
                root().join(&page).is_file(),
                "{file} names {page}, which is not there"
            );
        }
    }
}

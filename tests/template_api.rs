//! template.yaml's HTTP API (`ApiAuth`): the `api` function behind a Function URL, deployed only
//! when asked for, told how people are known, and granted what its routes use and nothing of the
//! model's.

use crate::support;

use serde_yaml::Value;
use support::deployment::Deployment;
use support::template::strings;

const KEY_ARN: &str = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:api-key-AbCdEf";

fn variable(d: &Deployment, name: &str) -> Value {
    d.properties("ApiFunction")["Environment"]["Variables"][name].clone()
}

/// The API's statements (its managed policy, which its functions attach), evaluated.
fn api_statements(d: &Deployment) -> Vec<Value> {
    d.properties("ApiPolicy")["PolicyDocument"]["Statement"]
        .as_sequence()
        .cloned()
        .unwrap_or_default()
}

fn statement(d: &Deployment, sid: &str) -> Option<Value> {
    api_statements(d)
        .into_iter()
        .find(|s| s["Sid"].as_str() == Some(sid))
}

#[test]
fn no_api_is_deployed_unless_asked_for() {
    let default = Deployment::new("eu-west-1", &[]);
    assert!(!default.deploys("ApiFunction"));
    assert!(!default.deploys("ApiLogGroup"));
    assert!(!default.condition("HasApi"));
    assert_eq!(
        default.template["Outputs"]["ApiUrl"]["Condition"].as_str(),
        Some("HasApi")
    );
    assert!(default.deploys("AgentWorkerFunction"));
}

#[test]
fn with_an_api_key_the_function_reads_that_secret_and_sends_turns_to_the_queue() {
    let d = Deployment::new(
        "eu-west-1",
        &[("ApiAuth", "api-key"), ("ApiKeySecretArn", KEY_ARN)],
    );
    assert!(d.deploys("ApiFunction"));
    let function = d.properties("ApiFunction");
    assert_eq!(
        function["FunctionUrlConfig"]["AuthType"], "NONE",
        "the function knows people itself"
    );
    assert_eq!(function["FunctionUrlConfig"]["InvokeMode"], "RESPONSE_STREAM");
    assert!(
        function["FunctionUrlConfig"]["Cors"].is_null(),
        "no origin was named"
    );
    assert_eq!(
        d.template["Resources"]["ApiFunction"]["Metadata"]["BuildProperties"]["Binary"],
        "api"
    );

    assert_eq!(variable(&d, "AUTH"), "api-key");
    assert_eq!(variable(&d, "AGENT_WORKER_API_KEY_SECRET_ARN"), KEY_ARN);
    assert_eq!(variable(&d, "TURNS_QUEUE_URL"), "<TurnsQueue>");
    assert_eq!(variable(&d, "TABLE_NAME"), "<SessionsTable>");
    assert!(variable(&d, "MODEL_ID").is_null(), "the API runs no model");

    let key = statement(&d, "ReadTheApiKey").expect("the key's secret may be read");
    assert_eq!(strings(&key["Action"]), ["secretsmanager:GetSecretValue"]);
    assert_eq!(strings(&key["Resource"]), [KEY_ARN]);
    let send = statement(&d, "SendTurnsToTheQueue").unwrap();
    assert_eq!(strings(&send["Action"]), ["sqs:SendMessage"]);
    assert_eq!(strings(&send["Resource"]), ["<TurnsQueue.Arn>"]);

    // Nothing of the model's, nor of reading the queue.
    assert_eq!(strings(&function["Policies"]), ["<ApiPolicy>"], "its one policy");
    let actions: Vec<String> = api_statements(&d)
        .iter()
        .flat_map(|s| strings(&s["Action"]))
        .collect();
    assert!(!actions.iter().any(|a| a.starts_with("bedrock:")), "{actions:?}");
    assert!(
        !actions
            .iter()
            .any(|a| a == "sqs:ReceiveMessage" || a == "sqs:DeleteMessage"),
        "{actions:?}"
    );
}

#[test]
fn with_tokens_the_function_is_told_the_issuer_and_reads_no_key() {
    let d = Deployment::new(
        "eu-west-1",
        &[
            ("ApiAuth", "jwt"),
            (
                "JwtIssuer",
                "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_AbCdEf",
            ),
            ("JwtAudience", "app-client"),
            ("JwtAccountClaim", "custom:account"),
            (
                "AllowedOrigins",
                "https://app.example.com,https://admin.example.com",
            ),
        ],
    );
    assert_eq!(variable(&d, "AUTH"), "jwt");
    assert_eq!(
        variable(&d, "JWT_ISSUER"),
        "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_AbCdEf"
    );
    assert_eq!(variable(&d, "JWT_AUDIENCE"), "app-client");
    assert_eq!(variable(&d, "JWT_USER_CLAIM"), "sub");
    assert_eq!(variable(&d, "JWKS_MAX_AGE_SECONDS"), "300");
    assert_eq!(variable(&d, "JWT_ACCOUNT_CLAIM"), "custom:account");
    assert_eq!(variable(&d, "AGENT_WORKER_API_KEY_SECRET_ARN"), "");
    assert!(statement(&d, "ReadTheApiKey").is_none());

    let cors = &d.properties("ApiFunction")["FunctionUrlConfig"]["Cors"];
    assert_eq!(
        strings(&cors["AllowOrigins"]),
        ["https://app.example.com", "https://admin.example.com"]
    );
    let headers = strings(&cors["AllowHeaders"]);
    assert!(headers.iter().any(|h| h == "authorization"), "{headers:?}");
}

#[test]
fn the_api_may_attach_and_delete_a_conversations_files_under_the_prefix_alone() {
    let d = Deployment::new(
        "eu-west-1",
        &[
            ("ApiAuth", "api-key"),
            ("ApiKeySecretArn", KEY_ARN),
            ("FilesBucket", "desk-files"),
        ],
    );
    assert_eq!(variable(&d, "FILES_BUCKET"), "desk-files");
    let files = statement(&d, "AttachReadAndDeleteFiles").unwrap();
    assert_eq!(
        strings(&files["Resource"]),
        ["arn:aws:s3:::desk-files/attachments/*"]
    );
    let none = Deployment::new(
        "eu-west-1",
        &[("ApiAuth", "api-key"), ("ApiKeySecretArn", KEY_ARN)],
    );
    assert!(statement(&none, "AttachReadAndDeleteFiles").is_none());
}

#[test]
fn with_iam_the_function_url_takes_signed_requests_alone() {
    let d = Deployment::new("eu-west-1", &[("ApiAuth", "iam")]);
    assert!(d.deploys("ApiFunction"));
    assert_eq!(
        d.properties("ApiFunction")["FunctionUrlConfig"]["AuthType"],
        "AWS_IAM"
    );
    assert_eq!(variable(&d, "AUTH"), "iam");
    assert_eq!(variable(&d, "AGENT_WORKER_API_KEY_SECRET_ARN"), "");
    assert!(statement(&d, "ReadTheApiKey").is_none());
    assert!(!d.deploys("ApiUrlPublicPermission") && !d.deploys("ApiUrlInvokePermission"));

    // With a key, anyone reaches the function, which refuses whoever has none; SAM does not
    // add that permission when AuthType is an intrinsic, so the template does, both halves.
    let keyed = Deployment::new(
        "eu-west-1",
        &[("ApiAuth", "api-key"), ("ApiKeySecretArn", KEY_ARN)],
    );
    assert_eq!(
        keyed.properties("ApiFunction")["FunctionUrlConfig"]["AuthType"],
        "NONE"
    );
    let url = keyed.properties("ApiUrlPublicPermission");
    assert_eq!(
        (url["Action"].as_str(), url["FunctionUrlAuthType"].as_str()),
        (Some("lambda:InvokeFunctionUrl"), Some("NONE"))
    );
    let invoke = keyed.properties("ApiUrlInvokePermission");
    assert_eq!(invoke["Action"], "lambda:InvokeFunction");
    assert_eq!(
        invoke["InvokedViaFunctionUrl"], true,
        "invoked through the URL alone"
    );
    assert!(!Deployment::new("eu-west-1", &[]).deploys("ApiUrlPublicPermission"));
}

#[test]
fn behind_api_gateway_the_authorizer_checks_tokens_and_the_url_keeps_the_live_events() {
    let jwt = [
        (
            "JwtIssuer",
            "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_AbCdEf",
        ),
        ("JwtAudience", "app-client"),
        ("JwtAccount", "acme"),
    ];
    let mut gateway = jwt.to_vec();
    gateway.push(("ApiAuth", "apigw-jwt"));
    let d = Deployment::new("eu-west-1", &gateway);
    assert!(d.deploys("ProductApi") && d.deploys("ApiGatewayFunction"));
    assert!(
        d.deploys("ApiFunction"),
        "the live events stream from the Function URL"
    );

    let api = d.properties("ProductApi");
    let authorizer = &api["Auth"]["Authorizers"]["PersonToken"];
    assert_eq!(
        authorizer["JwtConfiguration"]["issuer"],
        "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_AbCdEf"
    );
    assert_eq!(
        strings(&authorizer["JwtConfiguration"]["audience"]),
        ["app-client"]
    );
    assert_eq!(api["Auth"]["DefaultAuthorizer"], "PersonToken");

    let function = d.properties("ApiGatewayFunction");
    let env = &function["Environment"]["Variables"];
    assert_eq!(env["API_RESPONSES"], "buffered", "an HTTP API does not stream");
    assert_eq!(env["AUTH"], "apigw-jwt");
    assert_eq!(env["JWT_ACCOUNT"], "acme");
    assert_eq!(strings(&function["Policies"]), ["<ApiPolicy>"]);
    assert_eq!(function["Events"]["Routes"]["Properties"]["Path"], "/{proxy+}");
    assert_eq!(
        function["Events"]["Health"]["Properties"]["Auth"]["Authorizer"],
        "NONE"
    );
    // The URL's function checks tokens itself, with the same settings.
    assert_eq!(variable(&d, "AUTH"), "apigw-jwt");
    assert_eq!(variable(&d, "JWT_AUDIENCE"), "app-client");

    let mut plain = jwt.to_vec();
    plain.push(("ApiAuth", "jwt"));
    let plain = Deployment::new("eu-west-1", &plain);
    assert!(!plain.deploys("ProductApi") && !plain.deploys("ApiGatewayFunction"));
}

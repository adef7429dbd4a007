//! The configuration's secrets and where it is kept: a signed assertion of the person that the API
//! checks with the key, a configuration kept in SSM or S3 with its documents, and a secret store that
//! never answers.

use crate::support;

use std::path::Path;
use std::time::SystemTime;

use agent_worker::hosts::config::{Configured, Loader};
use agent_worker_testkit::{DeskApi, moto, sid, tid};
use serde_json::json;
use support::config_files::*;

#[tokio::test]
async fn a_signed_assertion_of_the_person_reaches_the_api_and_checks_with_the_key() {
    use agent_worker::engine::tools::ToolContext;
    use agent_worker::hosts::config::{Loader, verify_assertion};
    use agent_worker::hosts::secrets::AwsSecrets;

    let desk = DeskApi::start().await.unwrap();
    let secrets = moto().secrets_manager();
    let name = format!("desk-assertion-{}", uuid::Uuid::new_v4().simple());
    let key = "a shared key of at least thirty-two bytes";
    secrets
        .create_secret()
        .name(&name)
        .secret_string(key)
        .send()
        .await
        .unwrap();
    let short = format!("{name}-short");
    secrets
        .create_secret()
        .name(&short)
        .secret_string("too short")
        .send()
        .await
        .unwrap();
    let folder = Folder::new();
    folder.write(
        "desk.openapi.json",
        &serde_json::to_string(&DeskApi::document()).unwrap(),
    );
    let config = |secret: &str| {
        format!(
            "openapi:\n  - document: desk.openapi.json\n    baseUrl: {}\n    actAs:\n      userIdHeader: x-desk-user\n      assertion: {{ header: x-agent-assertion, keySecret: {secret}, ttlSeconds: 60 }}\n    events: {{ \"report:ready\": {{ kind: completion, correlation: reportId }} }}\n",
            desk.url()
        )
    };
    let loader = Loader {
        secrets: Some(std::sync::Arc::new(AwsSecrets::from_clients(
            secrets.clone(),
            moto().ssm(),
        ))),
        ..Loader::default()
    };
    let path = folder.write("asserting.yaml", &config(&name));
    let list = list_tickets(&path, &loader).await;
    let ctx = ctx_of_ana("t-42");
    list.call(json!({}), ctx.clone()).await.unwrap();
    let sent = desk.calls()[0].assertion.clone().expect("the assertion was sent");
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = verify_assertion(key.as_bytes(), &sent, now).unwrap();
    assert_eq!(
        (claims.sub.as_str(), claims.acc.as_str(), claims.turn.as_str()),
        ("ana", "acme", "t-42")
    );
    assert!(claims.exp <= now + 60);
    assert!(verify_assertion(b"another key, also thirty-two bytes long", &sent, now).is_err());

    // A turn that names no account cannot be asserted: nothing is sent, and the model reads why.
    let anonymous = ToolContext {
        account_id: None,
        ..ctx
    };
    let refused = list.call(json!({}), anonymous).await.unwrap_err();
    assert!(
        refused.message.contains("cannot be asserted"),
        "{}",
        refused.message
    );
    assert_eq!(desk.calls().len(), 1);

    // A key too short, or one that cannot be read, stops the start-up naming it.
    let path = folder.write("short.yaml", &config(&short));
    let problems = Configured::load(&path, &loader).await.unwrap_err().problems;
    assert!(
        problems[0].contains("actAs: assertion.keySecret") && problems[0].contains("32"),
        "{problems:?}"
    );
    let path = folder.write("missing.yaml", &config("no-such-secret"));
    let problems = Configured::load(&path, &Loader::default())
        .await
        .unwrap_err()
        .problems;
    assert!(problems[0].contains("assertion.keySecret"), "{problems:?}");

    // The key may be an SSM parameter instead (a SecureString, read decrypted).
    let parameter = format!("/desk/{name}");
    let ssm_key = "another shared key, kept in SSM this time";
    moto()
        .ssm()
        .put_parameter()
        .name(&parameter)
        .value(ssm_key)
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .send()
        .await
        .unwrap();
    let path = folder.write("ssm.yaml", &config(&format!("ssm:{parameter}")));
    let list = list_tickets(&path, &loader).await;
    list.call(json!({}), ctx_of_ana("t-43")).await.unwrap();
    let sent = desk.calls().last().unwrap().assertion.clone().unwrap();
    let claims = verify_assertion(ssm_key.as_bytes(), &sent, now).unwrap();
    assert_eq!(claims.turn, "t-43");
    let path = folder.write("ssm-missing.yaml", &config("ssm:/desk/no-such-parameter"));
    let problems = Configured::load(&path, &loader).await.unwrap_err().problems;
    assert!(
        problems[0].contains("ssm:/desk/no-such-parameter") && problems[0].contains("ParameterNotFound"),
        "{problems:?}"
    );
}

/// The `listTickets` tool of the configuration at `path`.
async fn list_tickets(path: &Path, loader: &Loader) -> std::sync::Arc<dyn agent_worker::engine::Tool> {
    let configured = Configured::load(path, loader).await.unwrap();
    configured
        .tools
        .into_iter()
        .find(|t| t.spec().name == "listTickets")
        .unwrap()
}

fn ctx_of_ana(turn: &str) -> agent_worker::engine::tools::ToolContext {
    agent_worker::engine::tools::ToolContext {
        session: sid("s"),
        turn_id: tid(turn),
        call_id: "c".into(),
        user_id: Some("ana".into()),
        account_id: Some("acme".into()),
        user_token: None,
    }
}

#[tokio::test]
async fn a_configuration_kept_in_ssm_or_s3_loads_with_documents_from_s3_and_names_no_file() {
    use agent_worker::hosts::config::Remote;
    use agent_worker::hosts::secrets::AwsSecrets;

    let desk = DeskApi::start().await.unwrap();
    let (s3, ssm) = (moto().s3(), moto().ssm());
    let bucket = format!("config-{}", uuid::Uuid::new_v4().simple());
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let put = |key: &str, body: String| {
        s3.put_object()
            .bucket(&bucket)
            .key(key)
            .body(body.into_bytes().into())
            .send()
    };
    put("desk.openapi.json", DeskApi::document().to_string())
        .await
        .unwrap();
    let yaml = format!(
        "persona: You are the desk's assistant.\nopenapi:\n  - document: s3://{bucket}/desk.openapi.json\n    baseUrl: {}\n    actAs: {{ userIdHeader: x-desk-user }}\n    events: {{ \"report:ready\": {{ kind: completion, correlation: reportId }} }}\n",
        desk.url()
    );
    let parameter = format!("/agent/{bucket}");
    ssm.put_parameter()
        .name(&parameter)
        .value(&yaml)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .unwrap();
    put("agent-worker.yaml", yaml.clone()).await.unwrap();
    let loader = Loader {
        fetch: Some(std::sync::Arc::new(Remote::new(
            reqwest::Client::new(),
            Some(s3.clone()),
        ))),
        secrets: Some(std::sync::Arc::new(AwsSecrets::from_clients(
            moto().secrets_manager(),
            ssm.clone(),
        ))),
        ..Loader::default()
    };
    for location in [
        format!("ssm:{parameter}"),
        format!("s3://{bucket}/agent-worker.yaml"),
    ] {
        let configured = Configured::load(&location, &loader)
            .await
            .unwrap_or_else(|e| panic!("{location}: {e}"));
        let names: Vec<&str> = configured.origins.iter().map(|o| o.name.as_str()).collect();
        assert!(names.contains(&"listTickets"), "{location}: {names:?}");
        assert!(
            configured
                .system_prompt
                .unwrap()
                .starts_with("You are the desk's assistant.")
        );
        assert_eq!(
            configured.reads,
            [format!("arn:aws:s3:::{bucket}/desk.openapi.json")],
            "what the deployer grants"
        );
    }

    // One read from afar names no file beside it: there is none.
    let local = yaml.replace(&format!("s3://{bucket}/"), "") + "systemPromptFile: prompt.md\n";
    put("local.yaml", local).await.unwrap();
    let error = Configured::load(format!("s3://{bucket}/local.yaml"), &loader)
        .await
        .unwrap_err();
    assert_eq!(error.problems.len(), 2, "{error}");
    assert!(error.problems[0].starts_with("systemPromptFile:"), "{error}");
    assert!(
        error.problems[1].starts_with("openapi[0].document: desk.openapi.json is a file"),
        "{error}"
    );
    let missing = Configured::load("ssm:/agent/no-such-parameter", &loader)
        .await
        .unwrap_err();
    assert!(missing.to_string().contains("ParameterNotFound"), "{missing}");
}

#[tokio::test]
async fn a_secret_store_that_never_answers_fails_the_read_instead_of_holding_start_up() {
    use agent_worker::hosts::headers::SecretSource as _;
    use agent_worker::hosts::secrets::{AwsSecrets, secrets_manager_client, ssm_client};
    use aws_sdk_secretsmanager::config::{Credentials, Region, SharedCredentialsProvider};

    // A server that takes each connection and never says a word.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let aws = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(format!("http://{address}"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "silent", "silent", None, None, "test",
        )))
        .build();
    let wait = std::time::Duration::from_millis(300);
    let secrets = AwsSecrets::from_clients(secrets_manager_client(&aws, wait), ssm_client(&aws, wait));
    for id in ["desk-assertion-key", "ssm:/desk/key"] {
        let error = tokio::time::timeout(std::time::Duration::from_secs(20), secrets.secret(id))
            .await
            .expect("the read ended by its own timeout")
            .unwrap_err();
        // The AWS error says that the call failed; the SDK's, its source, why.
        let error = agent_worker::protocol::chain(&error);
        assert!(
            error.to_lowercase().contains("timeout") || error.contains("timed out"),
            "{id}: {error}"
        );
    }
    held.abort();
}

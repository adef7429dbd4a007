//! The Lambda function binary (`bootstrap`) end to end: a stand-in for the Lambda Runtime API
//! hands it an SQS batch, as Lambda does; it runs the turns on the Bedrock stand-in, keeps them
//! in moto's DynamoDB, and posts the partial batch response back.

use std::time::Duration;

use agent_worker::session::{DynamoConfig, DynamoStore, SessionStore};
use agent_worker::testing::{BedrockStandIn, LambdaRuntimeApi, Reply, moto};
use serde_json::{Value, json};

fn record(id: &str, body: &str) -> Value {
    json!({
        "messageId": id,
        "receiptHandle": format!("rh-{id}"),
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "MessageGroupId": "conv-1"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:turns.fifo",
        "awsRegion": "us-east-1"
    })
}

#[tokio::test]
async fn the_function_takes_a_batch_from_the_runtime_api_and_reports_what_failed() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("Hello from the function."));
    let table = format!("bootstrap-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();

    let mut api = LambdaRuntimeApi::start().await.unwrap();
    api.invoke(
        "req-1",
        json!({"Records": [
            record("m-good", r#"{"turnId":"t-1","conversationId":"conv-1","userId":"u","accountId":"a","content":"Hi"}"#),
            record("m-bad", r#"{"turnId":"t-2","conversationId":"conv-1""#),
        ]}),
    );
    let mut function = tokio::process::Command::new(env!("CARGO_BIN_EXE_bootstrap"))
        .env_clear()
        .envs(api.function_environment(&bedrock.endpoint_url(), moto().endpoint(), &table))
        .kill_on_drop(true)
        .spawn()
        .expect("the function starts");

    let answer = async {
        tokio::select! {
            answer = api.answer() => answer.expect("an answer"),
            status = function.wait() => panic!("the function exited: {status:?}"),
        }
    };
    let (what, response) = tokio::time::timeout(Duration::from_secs(60), answer)
        .await
        .expect("the function answered the invocation within a minute");
    assert_eq!(what, "req-1/response");
    assert_eq!(
        response,
        json!({"batchItemFailures": [{"itemIdentifier": "m-bad"}]})
    );
    let history = store.load_history("conv-1").await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].text(), "Hello from the function.");
    assert_eq!(bedrock.requests()[0].model_id, "us.anthropic.claude-sonnet-4-6");

    // The same instance serves the next invocation.
    bedrock.push(Reply::text("Again."));
    api.invoke(
        "req-2",
        json!({"Records": [record("m-3", r#"{"turnId":"t-3","conversationId":"conv-1","userId":"u","accountId":"a","content":"Once more"}"#)]}),
    );
    let (what, response) = tokio::time::timeout(Duration::from_secs(60), api.answer())
        .await
        .expect("the second answer within a minute")
        .expect("an answer");
    assert_eq!(
        (what.as_str(), response),
        ("req-2/response", json!({"batchItemFailures": []}))
    );
    assert_eq!(store.load_history("conv-1").await.unwrap().len(), 4);
    function.kill().await.unwrap();
}

/// The real function with DynamoDB behind the fault proxy: a commit that keeps failing is
/// reported in `batchItemFailures` (the queue redrives it); its redelivery is stored once. A
/// claim whose answer is lost, and a commit whose answer is lost, are not failures at all.
#[tokio::test]
async fn the_function_redrives_what_the_store_refused_and_stores_it_once_on_redelivery() {
    use agent_worker::testing::{Fallback, Fault, FaultProxy, Match, Rule};
    let bedrock = BedrockStandIn::bind("127.0.0.1:0".parse().unwrap(), Fallback::Echo)
        .await
        .unwrap();
    let proxy = FaultProxy::in_front_of(moto().endpoint()).await.unwrap();
    let table = format!("bootstrap-faults-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let mut api = LambdaRuntimeApi::start().await.unwrap();
    let mut function = tokio::process::Command::new(env!("CARGO_BIN_EXE_bootstrap"))
        .env_clear()
        .envs(api.function_environment(&bedrock.endpoint_url(), &proxy.endpoint_url(), &table))
        .env("DYNAMODB_ATTEMPT_TIMEOUT_MS", "1000")
        .kill_on_drop(true)
        .spawn()
        .expect("the function starts");
    let turn = |id: &str, session: &str| json!({"Records": [record(id, &json!({"turnId": id, "conversationId": session, "userId": "u", "accountId": "a", "content": "Hi"}).to_string())]});
    let mut invoke = async |request: &str, event: Value| {
        api.invoke(request, event);
        let answer = tokio::time::timeout(Duration::from_secs(60), api.answer())
            .await
            .expect("an answer within a minute")
            .expect("an answer");
        assert_eq!(answer.0, format!("{request}/response"));
        answer.1
    };

    // Three 500s on the commit outlast the SDK's three attempts: redriven.
    proxy.inject(Rule::new(Match::target("TransactWriteItems"), Fault::dynamo_internal()).times(3));
    let response = invoke("req-1", turn("t-1", "s-1")).await;
    assert_eq!(
        response,
        json!({"batchItemFailures": [{"itemIdentifier": "t-1"}]})
    );
    assert!(store.load_history("s-1").await.unwrap().is_empty());
    // The redelivery: the store has recovered; stored once.
    let response = invoke("req-2", turn("t-1", "s-1")).await;
    assert_eq!(response, json!({"batchItemFailures": []}));
    assert_eq!(store.load_history("s-1").await.unwrap().len(), 2);

    // Lost answers: the claim's, then the commit's (one reset, one stall past the timeout).
    proxy.inject(Rule::new(
        Match::target("UpdateItem").and(Match::body("attribute_not_exists(#status)")),
        Fault::LoseResponse,
    ));
    proxy.inject(Rule::new(
        Match::target("TransactWriteItems"),
        Fault::StallResponse,
    ));
    let response = invoke("req-3", turn("t-2", "s-2")).await;
    assert_eq!(response, json!({"batchItemFailures": []}));
    assert_eq!(proxy.injected().len(), 5, "{:?}", proxy.injected());
    assert_eq!(store.load_history("s-2").await.unwrap().len(), 2);
    function.kill().await.unwrap();
}

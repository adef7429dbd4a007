//! The `api` function under the Lambda Runtime API stand-in: asking it with a Function URL event
//! and reading its answer, streamed or buffered, as Lambda takes it.

use std::time::Duration;

use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::{LambdaRuntimeApi, ResponseMode, moto};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::Value;

/// The API key the tests' functions take.
pub const KEY: &str = "api-key-0123456789";

/// A new table on moto (its name and store) and a new FIFO turns queue (its URL): what an `api`
/// function and the worker that reads its queue share.
pub async fn table_and_queue() -> (String, DynamoStore, String) {
    let table = format!("api-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let queue = moto()
        .sqs()
        .create_queue()
        .queue_name(format!("api-turns-{}.fifo", uuid::Uuid::new_v4().simple()))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    (table, store, queue)
}

/// The function's answer to `event`: its status and its body, as streamed (its prelude apart)
/// or buffered as API Gateway takes it. A streamed answer says it is one
/// (`Lambda-Runtime-Function-Response-Mode: streaming`), a buffered one does not, and neither
/// reports an error in its trailers.
pub async fn ask(
    api: &mut LambdaRuntimeApi,
    function: &mut tokio::process::Child,
    id: &str,
    event: Value,
) -> (u64, String) {
    api.invoke(id, event);
    let answer = whole_answer(api, function, id).await;
    let status = answer["prelude"]["statusCode"]
        .as_u64()
        .or_else(|| answer["statusCode"].as_u64())
        .expect("an HTTP answer");
    (status, body_of(&answer))
}

/// The answer to invocation `id`, once whole: the next answer the function posts.
pub async fn whole_answer(
    api: &mut LambdaRuntimeApi,
    function: &mut tokio::process::Child,
    id: &str,
) -> Value {
    let answer = async {
        tokio::select! {
            answer = api.answer() => answer.expect("an answer"),
            status = function.wait() => panic!("the function exited: {status:?}"),
        }
    };
    let (what, answer) = tokio::time::timeout(Duration::from_secs(60), answer)
        .await
        .expect("the function answered within a minute");
    assert_eq!(what, format!("{id}/response"), "{answer}");
    assert_eq!(answer.get("error"), None, "no error trailer: {answer}");
    let posted = api.posted(id).expect("the answer was recorded");
    let mode = if answer.get("prelude").is_some() {
        ResponseMode::Streaming
    } else {
        ResponseMode::Buffered
    };
    assert_eq!(posted.mode, mode, "{answer}");
    answer
}

/// The HTTP body of a function's answer, decoded where API Gateway's form has it in base64.
pub fn body_of(answer: &Value) -> String {
    let body = answer["body"].as_str().unwrap_or_default();
    match answer["isBase64Encoded"].as_bool() {
        Some(true) => {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(body)
                .expect("base64");
            String::from_utf8(bytes).expect("UTF-8")
        }
        _ => body.to_owned(),
    }
}

/// `body` as JSON, or as a JSON string when it is not JSON.
pub fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or(Value::String(body.to_owned()))
}

/// How the function answered invocation `id`, once it has.
pub fn mode_of(api: &LambdaRuntimeApi, id: &str) -> ResponseMode {
    api.posted(id).expect("the function answered").mode
}

//! The Lambda function binary (`bootstrap`) end to end: a stand-in for the Lambda Runtime API
//! hands it an SQS batch, as Lambda does; it runs the turns on the Bedrock stand-in, keeps them
//! in moto's DynamoDB, and posts the partial batch response back.

use agent_worker::session::{HistoryStore as _, TurnLedger as _};
use agent_worker_testkit::{sid, tid};
use std::time::Duration;

use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker_testkit::{BedrockStandIn, LambdaRuntimeApi, Reply, moto};
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
    let history = store.load_history(&sid("conv-1")).await.unwrap();
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
    assert_eq!(store.load_history(&sid("conv-1")).await.unwrap().len(), 4);
    function.kill().await.unwrap();
}

/// The real function with DynamoDB behind the fault proxy: a commit that keeps failing is
/// reported in `batchItemFailures` (the queue redrives it); its redelivery is stored once. A
/// claim whose answer is lost, and a commit whose answer is lost, are not failures at all.
#[tokio::test]
async fn the_function_redrives_what_the_store_refused_and_stores_it_once_on_redelivery() {
    use agent_worker_testkit::{Fallback, Fault, FaultProxy, Match, Rule};
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
    // (The commit is the transaction that writes messages; the event log writes in transactions
    // too.)
    let commit = || Match::target("TransactWriteItems").and(Match::body("msg#"));
    proxy.inject(Rule::new(commit(), Fault::dynamo_internal()).times(3));
    let response = invoke("req-1", turn("t-1", "s-1")).await;
    assert_eq!(
        response,
        json!({"batchItemFailures": [{"itemIdentifier": "t-1"}]})
    );
    assert!(store.load_history(&sid("s-1")).await.unwrap().is_empty());
    // The redelivery: the store has recovered; stored once.
    let response = invoke("req-2", turn("t-1", "s-1")).await;
    assert_eq!(response, json!({"batchItemFailures": []}));
    assert_eq!(store.load_history(&sid("s-1")).await.unwrap().len(), 2);

    // Lost answers: the claim's, then the commit's (one reset, one stall past the timeout).
    proxy.inject(Rule::new(
        Match::target("UpdateItem").and(Match::body("attribute_not_exists(#status)")),
        Fault::LoseResponse,
    ));
    proxy.inject(Rule::new(commit(), Fault::StallResponse));
    let response = invoke("req-3", turn("t-2", "s-2")).await;
    assert_eq!(response, json!({"batchItemFailures": []}));
    assert_eq!(proxy.injected().len(), 5, "{:?}", proxy.injected());
    assert_eq!(store.load_history(&sid("s-2")).await.unwrap().len(), 2);
    function.kill().await.unwrap();
}

/// The function on `api`, the stand-in and moto (DynamoDB, SQS, Secrets Manager), with `extra`
/// settings on top; what it writes to stderr is kept.
pub(crate) fn start_function(
    api: &LambdaRuntimeApi,
    bedrock: &BedrockStandIn,
    table: &str,
    extra: &[(&str, &str)],
) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_bootstrap"))
        .env_clear()
        .envs(api.function_environment(&bedrock.endpoint_url(), moto().endpoint(), table))
        .envs(extra.iter().copied())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the function starts")
}

async fn answer_to(api: &mut LambdaRuntimeApi, request: &str) -> Value {
    let (what, response) = tokio::time::timeout(Duration::from_secs(60), api.answer())
        .await
        .expect("an answer within a minute")
        .expect("an answer");
    assert_eq!(what, format!("{request}/response"), "{response}");
    response
}

async fn new_table(prefix: &str) -> (String, DynamoStore) {
    let table = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    (table, store)
}

fn one_turn(message_id: &str, turn_id: &str, session: &str) -> Value {
    let body = json!({"turnId": turn_id, "conversationId": session, "userId": "u", "accountId": "a", "content": "Hi"});
    json!({"Records": [record(message_id, &body.to_string())]})
}

fn epoch_ms(at: std::time::SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// `cargo lambda watch` sends `Lambda-Runtime-Deadline-Ms: 600000`, a moment of 1970. Taken at
/// face value the turn would be stored as a deadline stop without a model call; the function
/// takes it for no deadline and runs the turn under its own `turn_deadline`.
#[tokio::test]
async fn the_emulators_constant_deadline_runs_the_turn_to_its_end() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("Ran in the emulator."));
    let (table, store) = new_table("emulator").await;
    let mut api = LambdaRuntimeApi::start().await.unwrap();
    let mut function = start_function(&api, &bedrock, &table, &[]);
    api.invoke_with_deadline("req-1", one_turn("m-1", "t-1", "conv-e"), 600_000);
    assert_eq!(
        answer_to(&mut api, "req-1").await,
        json!({"batchItemFailures": []})
    );
    assert_eq!(bedrock.requests().len(), 1, "the model was called");
    let history = store.load_history(&sid("conv-e")).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].text(), "Ran in the emulator.");
    let record = store
        .turn(&sid("conv-e"), &tid("t-1"))
        .await
        .unwrap()
        .expect("the turn is stored");
    assert!(
        !format!("{record:?}").contains("deadline"),
        "not a deadline stop: {record:?}"
    );
    function.kill().await.unwrap();
}

/// A record that would start with less than the store margin plus the least turn time left is
/// not started: it is reported for redrive, nothing is claimed or stored, the model is not
/// called; the next delivery, with time, runs it.
#[tokio::test]
async fn a_record_too_near_the_deadline_goes_back_unclaimed_and_the_next_delivery_runs_it() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("Now there was time."));
    let (table, store) = new_table("near").await;
    let mut api = LambdaRuntimeApi::start().await.unwrap();
    let mut function = start_function(&api, &bedrock, &table, &[]);
    // 12 s left: the 10 s store margin plus the least turn time (30 s, or half the window,
    // 6 s) is more than that.
    let near = epoch_ms(std::time::SystemTime::now() + Duration::from_secs(12));
    api.invoke_with_deadline("req-1", one_turn("m-1", "t-1", "conv-n"), near);
    assert_eq!(
        answer_to(&mut api, "req-1").await,
        json!({"batchItemFailures": [{"itemIdentifier": "m-1"}]})
    );
    assert!(bedrock.requests().is_empty(), "the model was not called");
    assert_eq!(
        store.turn(&sid("conv-n"), &tid("t-1")).await.unwrap(),
        None,
        "nothing was claimed"
    );
    assert!(store.load_history(&sid("conv-n")).await.unwrap().is_empty());

    api.invoke("req-2", one_turn("m-1", "t-1", "conv-n"));
    assert_eq!(
        answer_to(&mut api, "req-2").await,
        json!({"batchItemFailures": []})
    );
    let history = store.load_history(&sid("conv-n")).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].text(), "Now there was time.");
    function.kill().await.unwrap();
}

/// A redriven record comes back after its short backoff (here 1 s), not after the queue's
/// visibility timeout (an hour): the function changed its visibility on moto's SQS.
#[tokio::test]
async fn a_redriven_record_is_back_in_its_queue_after_its_backoff() {
    use agent_worker::hosts::sqs_poller::to_sqs_event;
    use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
    let bedrock = BedrockStandIn::start().await.unwrap();
    let (table, _store) = new_table("requeue").await;
    let sqs = moto().sqs();
    let url = sqs
        .create_queue()
        .queue_name(format!("requeue-{}", uuid::Uuid::new_v4().simple()))
        .attributes(QueueAttributeName::VisibilityTimeout, "3600")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = agent_worker_testkit::queue_arn(&sqs, &url).await;
    sqs.send_message()
        .queue_url(&url)
        .message_body(r#"{"turnId":"t-1","conversationId":"#)
        .send()
        .await
        .unwrap();
    let receive = || {
        sqs.receive_message()
            .queue_url(&url)
            .wait_time_seconds(20)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
    };
    let first = receive().await.unwrap().messages.unwrap_or_default();
    assert_eq!(first.len(), 1);
    let event = to_sqs_event(first, Some(&arn), Some("us-east-1"));
    let message_id = event.records[0].message_id.clone().unwrap();

    let mut api = LambdaRuntimeApi::start().await.unwrap();
    let mut function = start_function(&api, &bedrock, &table, &[("REDRIVE_DELAY_MS", "1000")]);
    api.invoke("req-1", serde_json::to_value(&event).unwrap());
    assert_eq!(
        answer_to(&mut api, "req-1").await,
        json!({"batchItemFailures": [{"itemIdentifier": message_id}]})
    );
    // Hidden for an hour without the change; a long poll sees it again at once with it.
    let again = receive().await.unwrap().messages.unwrap_or_default();
    assert_eq!(again.len(), 1, "the redriven record came back");
    assert_eq!(again[0].message_id.as_deref(), Some(message_id.as_str()));
    let count = again[0].attributes().unwrap()[&MessageSystemAttributeName::ApproximateReceiveCount].clone();
    assert_eq!(count, "2");
    function.kill().await.unwrap();
}

/// Keys named by `*_SECRET_ARN` are read from Secrets Manager (or SSM) at start-up: the HTTP
/// emit sink sends the secret's key; a secret that does not exist stops the function at
/// start-up, named.
#[tokio::test]
async fn keys_come_from_secrets_manager_or_ssm_at_start_up() {
    use std::sync::{Arc, Mutex};
    let keys: Arc<Mutex<Vec<String>>> = Arc::default();
    let app = axum::Router::new()
        .route(
            "/api/emit",
            axum::routing::post(
                |axum::extract::State(keys): axum::extract::State<Arc<Mutex<Vec<String>>>>,
                 headers: axum::http::HeaderMap| async move {
                    let key = headers["x-api-key"].to_str().unwrap_or_default().to_owned();
                    keys.lock().unwrap().push(key);
                    axum::http::StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(keys.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let emit_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let secret_arn = moto()
        .secrets_manager()
        .create_secret()
        .name(format!("emit-key-{}", uuid::Uuid::new_v4().simple()))
        .secret_string("key-from-secrets-manager")
        .send()
        .await
        .unwrap()
        .arn
        .unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(Reply::text("Sent."));
    let (table, _store) = new_table("secrets").await;
    let mut api = LambdaRuntimeApi::start().await.unwrap();
    let mut function = start_function(
        &api,
        &bedrock,
        &table,
        &[
            ("EVENT_SINKS", "http"),
            ("EMIT_URL", &emit_url),
            ("EMIT_API_KEY_SECRET_ARN", &secret_arn),
        ],
    );
    api.invoke("req-1", one_turn("m-1", "t-1", "conv-s"));
    assert_eq!(
        answer_to(&mut api, "req-1").await,
        json!({"batchItemFailures": []})
    );
    let sent = keys.lock().unwrap().clone();
    assert!(!sent.is_empty(), "events were emitted");
    assert!(sent.iter().all(|k| k == "key-from-secrets-manager"), "{sent:?}");
    function.kill().await.unwrap();

    // Or from an SSM parameter (a SecureString), named `ssm:<name>` or by its ARN.
    let parameter = format!("/agent-worker/emit-key-{}", uuid::Uuid::new_v4().simple());
    moto()
        .ssm()
        .put_parameter()
        .name(&parameter)
        .value("key-from-ssm")
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .send()
        .await
        .unwrap();
    keys.lock().unwrap().clear();
    bedrock.push(Reply::text("Sent again."));
    let mut api = LambdaRuntimeApi::start().await.unwrap();
    let ssm_id = format!("ssm:{parameter}");
    let mut function = start_function(
        &api,
        &bedrock,
        &table,
        &[
            ("EVENT_SINKS", "http"),
            ("EMIT_URL", &emit_url),
            ("EMIT_API_KEY_SECRET_ARN", &ssm_id),
        ],
    );
    api.invoke("req-2", one_turn("m-2", "t-2", "conv-s2"));
    assert_eq!(
        answer_to(&mut api, "req-2").await,
        json!({"batchItemFailures": []})
    );
    let sent = keys.lock().unwrap().clone();
    assert!(
        !sent.is_empty() && sent.iter().all(|k| k == "key-from-ssm"),
        "{sent:?}"
    );
    function.kill().await.unwrap();

    let missing = format!("{secret_arn}-gone");
    let api = LambdaRuntimeApi::start().await.unwrap();
    let function = start_function(
        &api,
        &bedrock,
        &table,
        &[
            ("EVENT_SINKS", "http"),
            ("EMIT_URL", &emit_url),
            ("EMIT_API_KEY_SECRET_ARN", &missing),
        ],
    );
    let exited = tokio::time::timeout(Duration::from_secs(60), function.wait_with_output())
        .await
        .expect("the function stopped at start-up")
        .unwrap();
    assert!(!exited.status.success());
    let said = String::from_utf8_lossy(&exited.stderr);
    assert!(
        said.contains("EMIT_API_KEY_SECRET_ARN") && said.contains("ResourceNotFoundException"),
        "{said}"
    );
}

/// A turn longer than its invocation, through the function itself: a 6 s invocation (Lambda's
/// 15 minutes, scaled down), a turn deadline of two minutes, and a note the desk takes 4.6 s to
/// add: past the hand-over (the invocation's last quarter), and more than a second before its
/// deadline, whatever moto's pace.
/// The function hands the turn over at the round boundary after the note, holds the record in
/// flight (reported, its visibility extended) and sends the queue (moto's FIFO queue) its
/// continuation; the next invocation, given that continuation, completes the turn and lets the
/// first record go. The desk added the note once, and heard of it once.
#[tokio::test]
async fn a_turn_longer_than_its_invocation_goes_on_in_the_functions_next_invocation() {
    use agent_worker_testkit::DeskApi;
    use aws_sdk_sqs::types::QueueAttributeName;

    let desk = DeskApi::start().await.unwrap();
    desk.delay_notes(Duration::from_millis(4600));
    let folder = crate::support::config_files::Folder::new();
    let config = crate::support::config_files::desk_config(&folder, &desk);
    let bedrock = BedrockStandIn::start().await.unwrap();
    bedrock.push(crate::support::desk_note_call());
    bedrock.push(Reply::text("I added the note."));
    let table = format!("bootstrap-long-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let sqs = moto().sqs();
    let (url, arn) = crate::support::lambda_batch::fifo_queue(&sqs, &table).await;
    let mut api = LambdaRuntimeApi::start().await.unwrap();
    let mut function = tokio::process::Command::new(env!("CARGO_BIN_EXE_bootstrap"))
        .env_clear()
        .envs(api.function_environment(&bedrock.endpoint_url(), moto().endpoint(), &table))
        .env("AGENT_WORKER_CONFIG", &config)
        .env("TURN_DEADLINE_MS", "120000")
        .env("STORE_MARGIN_MS", "200")
        .kill_on_drop(true)
        .spawn()
        .expect("the function starts");
    let body = json!({"turnId": "t1", "conversationId": "desk-1", "userId": "ana", "accountId": "acme",
        "userToken": DeskApi::token_of("ana"), "content": "Note on T-1 that I called the customer back."})
    .to_string();
    let next = async || crate::support::lambda_batch::next_message(&sqs, &url, &arn).await;
    let in_six_seconds = || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        u64::try_from(now.as_millis()).unwrap() + 6000
    };
    sqs.send_message()
        .queue_url(&url)
        .message_body(&body)
        .message_group_id("desk-1")
        .message_deduplication_id("t1")
        .send()
        .await
        .unwrap();

    let original = next().await;
    let original_id = original.records[0].message_id.clone().unwrap();
    api.invoke_with_deadline(
        "req-1",
        serde_json::to_value(&original).unwrap(),
        in_six_seconds(),
    );
    let first = answered(&mut api, &mut function, "req-1").await;
    assert_eq!(
        first,
        json!({"batchItemFailures": [{"itemIdentifier": original_id}]}),
        "the first record is held in flight"
    );
    let continuation = next().await;
    let record = &continuation.records[0];
    assert_eq!(record.body.as_deref(), Some(body.as_str()));
    assert_eq!(record.attributes["MessageGroupId"], "desk-1#continue");
    let receipt = record.receipt_handle.clone().unwrap();

    api.invoke_with_deadline(
        "req-2",
        serde_json::to_value(&continuation).unwrap(),
        in_six_seconds(),
    );
    let second = answered(&mut api, &mut function, "req-2").await;
    assert_eq!(second, json!({"batchItemFailures": []}));
    // Lambda deletes the continuation; the function let the first record go.
    sqs.delete_message()
        .queue_url(&url)
        .receipt_handle(receipt)
        .send()
        .await
        .unwrap();
    let left = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    assert_eq!(
        left.attributes().unwrap()[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "0",
        "nothing is held any more"
    );
    let record = store.turn(&sid("desk-1"), &tid("t1")).await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.attempts),
        (agent_worker::session::TurnStatus::Completed, 2)
    );
    assert_eq!(desk.notes().len(), 1);
    let posts = desk.calls().into_iter().filter(|c| c.method == "POST").count();
    assert_eq!(posts, 1, "the desk heard of the note once");
    assert_eq!(bedrock.requests().len(), 2);
    assert_eq!(store.load_history(&sid("desk-1")).await.unwrap().len(), 4);
    function.kill().await.unwrap();
}

/// The function's answer to invocation `request`, within 30 s; a function that exits first fails
/// the test.
async fn answered(api: &mut LambdaRuntimeApi, function: &mut tokio::process::Child, request: &str) -> Value {
    let answer = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::select! {
            answer = api.answer() => answer.expect("an answer"),
            status = function.wait() => panic!("the function exited: {status:?}"),
        }
    })
    .await
    .expect("the function answered within 30 s");
    assert_eq!(answer.0, format!("{request}/response"));
    answer.1
}

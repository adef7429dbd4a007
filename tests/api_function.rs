//! The `api` Lambda function end to end: a Lambda Runtime API stand-in hands it Function URL
//! events, as Lambda does; it answers each route of the product API with the same router as
//! `serve`, streamed (response streaming), sends turns to the queue (SQS on moto), and the worker
//! that reads the queue runs them; a turn's events then stream from the table.

use crate::support;
use agent_worker::session::{HistoryStore as _, OwnerStore as _, TurnLedger as _};

use agent_worker_testkit::{sid, tid};
use std::time::Duration;

use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::hosts::runner::TurnHandler;
use agent_worker::hosts::sqs_poller::{PollOptions, poll_queue};
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::{BedrockStandIn, LambdaRuntimeApi, Reply, ResponseMode, function_url_event, moto};
use serde_json::{Value, json};
use support::api_function::{KEY, ask, json_of, mode_of, table_and_queue};
use support::container::{changed, table as items_of};

#[tokio::test]
async fn the_api_function_serves_the_routes_from_function_url_events_and_queues_the_turns() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let (table, store, queue) = table_and_queue().await;
    let sqs = moto().sqs();

    let mut api = LambdaRuntimeApi::start().await.unwrap();
    let mut function = tokio::process::Command::new(env!("CARGO_BIN_EXE_api"))
        .env_clear()
        .envs(api.function_environment(&bedrock.endpoint_url(), moto().endpoint(), &table))
        .env("TURNS_QUEUE_URL", &queue)
        .env("AGENT_WORKER_API_KEY", KEY)
        // It runs no model: it needs no model id, and a model's settings are not read (this
        // secret does not exist, and would stop it at start).
        .env_remove("MODEL_ID")
        .env("MODEL_PROVIDER", "anthropic")
        .env(
            "ANTHROPIC_API_KEY_SECRET_ARN",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:gone",
        )
        .kill_on_drop(true)
        .spawn()
        .expect("the function starts");
    let with_key = [("x-api-key", KEY), ("content-type", "application/json")];

    // A turn goes to the queue, and nothing runs in the API function.
    let turn = json!({"turnId": "t-1", "conversationId": "conv-1", "userId": "ada", "accountId": "acme", "content": "Hi"});
    let event = function_url_event("POST", "/turns", &with_key, Some(&turn.to_string()));
    let (status, body) = ask(&mut api, &mut function, "req-1", event).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(json_of(&body)["queued"], true);
    assert!(bedrock.requests().is_empty());

    // The worker that reads the queue runs it.
    bedrock.push(Reply::text("Hello from the queue."));
    let engine = Engine::builder()
        .model(BedrockModel::new(
            bedrock.client(),
            "us.anthropic.claude-sonnet-4-6",
        ))
        .store(store.clone())
        .build()
        .unwrap();
    let worker = TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(store.clone())));
    let options = PollOptions {
        until_empty: true,
        wait: Duration::from_secs(1),
        ..PollOptions::default()
    };
    let stats = poll_queue(&sqs, &queue, &worker, &options, std::future::pending())
        .await
        .unwrap();
    assert_eq!((stats.received, stats.deleted), (1, 1));

    // Its events stream from the table, through the function, to the terminal.
    let path = "/turns/t-1/events?session=conv-1&userId=ada&accountId=acme";
    let (status, body) = ask(
        &mut api,
        &mut function,
        "req-2",
        function_url_event("GET", path, &with_key, None),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Hello from the queue."), "{body}");
    assert!(body.contains("\"type\":\"completed\""), "{body}");
    // Streamed to the Runtime API, as a server-sent event stream.
    let answered = api.posted("req-2").expect("the answer was recorded");
    assert_eq!(answered.mode, ResponseMode::Streaming);
    let prelude = answered.prelude().expect("a streamed HTTP answer's prelude");
    assert_eq!(
        prelude["headers"]["content-type"], "text/event-stream",
        "{prelude}"
    );

    // The person's conversations, and no one else's.
    let path = "/conversations?userId=ada&accountId=acme";
    let (status, body) = ask(
        &mut api,
        &mut function,
        "req-3",
        function_url_event("GET", path, &with_key, None),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["conversations"][0]["id"], "conv-1");
    let path = "/conversations/conv-1?userId=mallory&accountId=evil";
    let before = items_of(&store).await;
    let (status, body) = ask(
        &mut api,
        &mut function,
        "req-4",
        function_url_event("DELETE", path, &with_key, None),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(store.load_history(&sid("conv-1")).await.unwrap().len(), 2);
    assert_eq!(changed(&before, &items_of(&store).await), Vec::<String>::new());

    // Every other route of the product API answers through the function as `serve` answers.
    let ada = "userId=ada&accountId=acme";
    let abort = json!({"type": "abort"}).to_string();
    let taken = json!({"status": "taken"}).to_string();
    let job = json!({"jobId": "j-1", "event": "done"}).to_string();
    let routes: [(&str, String, Option<&str>, u64); 8] = [
        ("GET", format!("/conversations/conv-1?{ada}"), None, 200),
        ("GET", format!("/sessions/conv-1/state?{ada}"), None, 200),
        (
            "GET",
            format!("/sessions/conv-1/entries?{ada}&limit=10"),
            None,
            200,
        ),
        // The turn has ended: there is no run to steer, nor one to stop.
        (
            "POST",
            format!("/sessions/conv-1/commands?{ada}"),
            Some(&abort),
            409,
        ),
        ("POST", format!("/turns/t-1/stop?session=conv-1&{ada}"), None, 409),
        (
            "POST",
            format!("/turns/t-1/actions/tu_ui?session=conv-1&{ada}"),
            Some(&taken),
            200,
        ),
        // This configuration declares no job event.
        ("POST", "/jobs/events".to_owned(), Some(&job), 400),
        ("GET", "/no/such/route".to_owned(), None, 404),
    ];
    for (n, (method, path, body, expected)) in routes.into_iter().enumerate() {
        let event = function_url_event(method, &path, &with_key, body);
        let (status, answer) = ask(&mut api, &mut function, &format!("route-{n}"), event).await;
        assert_eq!(status, expected, "{method} {path}: {answer}");
        assert!(
            serde_json::from_str::<Value>(&answer).is_ok(),
            "{method} {path}: JSON, {answer}"
        );
    }
    let entries = format!("/sessions/conv-1/entries?{ada}");
    let (_, body) = ask(
        &mut api,
        &mut function,
        "req-entries",
        function_url_event("GET", &entries, &with_key, None),
    )
    .await;
    assert_eq!(
        json_of(&body)["entries"].as_array().map(Vec::len),
        Some(2),
        "{body}"
    );

    // A wrong key is refused; the health check needs none.
    let wrong = [("x-api-key", "not-the-key-at-all")];
    let (status, _) = ask(
        &mut api,
        &mut function,
        "req-5",
        function_url_event("GET", "/conversations?userId=ada&accountId=acme", &wrong, None),
    )
    .await;
    assert_eq!(status, 401);
    let (status, body) = ask(
        &mut api,
        &mut function,
        "req-6",
        function_url_event("GET", "/health", &[], None),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        json_of(&body)["model"],
        Value::Null,
        "the API runs no model: {body}"
    );
}

#[tokio::test]
async fn the_api_function_without_a_queue_stops_at_start_naming_it() {
    let api = LambdaRuntimeApi::start().await.unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_api"))
        .env_clear()
        .envs(api.function_environment("http://127.0.0.1:9", moto().endpoint(), "t"))
        .env("AGENT_WORKER_API_KEY", KEY)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), output)
        .await
        .expect("the function stopped at start-up")
        .unwrap();
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("TURNS_QUEUE_URL"), "{said}");
}

/// The function on a new table, with `auth` settings; the table's store and the runtime API.
async fn started(auth: &[(&str, &str)]) -> (LambdaRuntimeApi, tokio::process::Child, DynamoStore) {
    let table = format!("api-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let api = LambdaRuntimeApi::start().await.unwrap();
    let function = tokio::process::Command::new(env!("CARGO_BIN_EXE_api"))
        .env_clear()
        .envs(api.function_environment("http://127.0.0.1:9", moto().endpoint(), &table))
        .env("TURNS_QUEUE_URL", "http://127.0.0.1:9/000000000000/unused.fifo")
        .envs(auth.iter().copied())
        .kill_on_drop(true)
        .spawn()
        .expect("the function starts");
    (api, function, store)
}

/// `event` as Lambda hands it when `authorizer` (API Gateway's, or the Function URL's IAM
/// check) verified the request.
fn verified(mut event: Value, authorizer: Value) -> Value {
    event["requestContext"]["authorizer"] = authorizer;
    event
}

/// A conversation of `user`'s at `account`, one turn long.
async fn conversation_of(store: &DynamoStore, session: &str, user: &str, account: &str) {
    use agent_worker::session::{Lease, Message, Owner, TurnOutcome};
    let session = &sid(session);
    store
        .claim_owner(session, Some(&tid("t-0")), &Owner::new(user, account))
        .await
        .unwrap();
    store
        .claim_turn(session, &tid("t-0"), Lease(Duration::from_secs(60)))
        .await
        .unwrap();
    let messages = [Message::user_text("Hi"), Message::assistant_text("Hello.")];
    let outcome = TurnOutcome::Completed(None);
    store
        .complete_turn(session, &tid("t-0"), &messages, &outcome)
        .await
        .unwrap();
}

#[tokio::test]
async fn behind_api_gateways_jwt_authorizer_the_person_is_the_verified_claims_alone() {
    // Behind API Gateway's HTTP API, which takes answers whole.
    let (mut api, mut function, store) = started(&[
        ("API_RESPONSES", "buffered"),
        ("AUTH", "apigw-jwt"),
        ("JWT_ISSUER", "https://issuer.example"),
        ("JWT_AUDIENCE", "app"),
        ("JWKS_URL", "http://127.0.0.1:9/jwks.json"),
        ("JWT_ACCOUNT_CLAIM", "custom:account"),
    ])
    .await;
    conversation_of(&store, "conv-ada", "ada", "acme").await;
    conversation_of(&store, "conv-bob", "bob", "acme").await;
    let claims =
        |sub: &str| json!({"jwt": {"claims": {"sub": sub, "custom:account": "acme"}, "scopes": null}});

    let list = function_url_event("GET", "/conversations", &[], None);
    let (status, body) = ask(
        &mut api,
        &mut function,
        "req-1",
        verified(list.clone(), claims("ada")),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let ids: Vec<Value> = json_of(&body)["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].clone())
        .collect();
    assert_eq!(ids, [json!("conv-ada")]);
    assert_eq!(
        mode_of(&api, "req-1"),
        ResponseMode::Buffered,
        "API Gateway takes it whole"
    );

    // Another person's ids in the query change nothing: the claims say who asks.
    let before = items_of(&store).await;
    let path = "/conversations/conv-bob?userId=bob&accountId=acme";
    let delete = function_url_event("DELETE", path, &[], None);
    let (status, body) = ask(&mut api, &mut function, "req-2", verified(delete, claims("ada"))).await;
    assert!(status == 403 || status == 404, "{status} {body}");
    assert!(
        store.owner(&sid("conv-bob")).await.unwrap().is_some(),
        "bob's conversation stays"
    );

    // Claims the authorizer did not verify are none: a header is not a request context.
    let forged = function_url_event("GET", "/conversations", &[("x-claims", "sub=ada")], None);
    let (status, body) = ask(&mut api, &mut function, "req-3", forged).await;
    assert_eq!(status, 401, "{body}");
    // A token the function checks itself (the Function URL's event streams) is refused when
    // it is not the issuer's.
    let bearer = [("authorization", "Bearer not.a.token")];
    let (status, _) = ask(
        &mut api,
        &mut function,
        "req-4",
        function_url_event("GET", "/conversations", &bearer, None),
    )
    .await;
    assert_eq!(status, 401);
    // Verified claims without the account claim are refused, naming it.
    let partial = json!({"jwt": {"claims": {"sub": "ada"}}});
    let (status, body) = ask(&mut api, &mut function, "req-5", verified(list, partial)).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("custom:account"), "{body}");
    assert_eq!(
        changed(&before, &items_of(&store).await),
        Vec::<String>::new(),
        "no refusal wrote"
    );
}

#[tokio::test]
async fn behind_an_iam_function_url_a_signed_caller_vouches_for_the_ids_and_no_one_else_gets_in() {
    let (mut api, mut function, store) = started(&[("AUTH", "iam")]).await;
    conversation_of(&store, "conv-ada", "ada", "acme").await;
    let iam = json!({"iam": {
        "accessKey": "AKIA0000000000000000",
        "accountId": "123456789012",
        "callerId": "AROA0000000000000000:backend",
        "userArn": "arn:aws:sts::123456789012:assumed-role/backend/session",
        "userId": "AROA0000000000000000:backend"
    }});
    let path = "/conversations?userId=ada&accountId=acme";
    let list = function_url_event("GET", path, &[], None);
    let (status, body) = ask(&mut api, &mut function, "req-1", verified(list.clone(), iam)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        mode_of(&api, "req-1"),
        ResponseMode::Streaming,
        "a Function URL streams"
    );
    assert_eq!(json_of(&body)["conversations"][0]["id"], "conv-ada");

    let (status, body) = ask(&mut api, &mut function, "req-2", list).await;
    assert_eq!(status, 401, "an unsigned request: {body}");
    let with_a_key = function_url_event("GET", path, &[("x-api-key", KEY)], None);
    let (status, _) = ask(&mut api, &mut function, "req-3", with_a_key).await;
    assert_eq!(status, 401, "no key is taken in place of a signature");
}

/// A file too large for a Lambda request goes straight to the bucket: the function keeps its
/// reference and answers a URL signed for exactly its type and length; the person's client puts
/// the bytes there, and the next turn's file area reads them. A stranger gets no URL and leaves
/// nothing in the bucket.
#[tokio::test]
async fn a_large_file_is_put_straight_into_the_bucket_through_a_presigned_url() {
    use agent_worker::engine::attachments::{FileArea as _, LoadAs};
    use agent_worker::hosts::S3FileArea;

    let bucket = format!("api-files-{}", uuid::Uuid::new_v4().simple());
    let s3 = moto().s3();
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let (mut api, mut function, store) = started(&[
        ("AGENT_WORKER_API_KEY", KEY),
        ("FILES_BUCKET", &bucket),
        ("AWS_ENDPOINT_URL_S3", moto().endpoint()),
    ])
    .await;
    conversation_of(&store, "conv-1", "ada", "acme").await;
    let bytes: Vec<u8> = (0..7 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let headers = [("x-api-key", KEY), ("content-type", "application/pdf")];
    let path = format!(
        "/conversations/conv-1/files?userId=ada&accountId=acme&name=big.pdf&size={}",
        bytes.len()
    );
    let (status, body) = ask(
        &mut api,
        &mut function,
        "req-1",
        function_url_event("POST", &path, &headers, None),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let answer = json_of(&body);
    let reference = &answer["reference"];
    assert_eq!(reference["size"], bytes.len());
    assert_eq!(answer["upload"]["method"], "PUT");
    assert_eq!(answer["upload"]["expiresIn"], 900);
    let signed = &answer["upload"]["headers"];
    assert_eq!(signed["content-type"], "application/pdf", "{signed}");
    assert_eq!(signed["content-length"], bytes.len().to_string(), "{signed}");
    let url = answer["upload"]["url"].as_str().unwrap();
    assert!(
        url.contains("X-Amz-Signature=") && url.contains("X-Amz-Expires=900"),
        "{url}"
    );

    let mut put = reqwest::Client::new().put(answer["upload"]["url"].as_str().unwrap());
    for (name, value) in answer["upload"]["headers"].as_object().unwrap() {
        put = put.header(name, value.as_str().unwrap());
    }
    let sent = put.body(bytes.clone()).send().await.unwrap();
    assert!(sent.status().is_success(), "{}", sent.text().await.unwrap());

    let files = S3FileArea::new(s3.clone(), &bucket, "attachments/");
    let id = reference["id"].as_str().unwrap();
    assert_eq!(files.reference(id, "conv-1").await.unwrap().name, "big.pdf");
    let loaded = files.load(id, "conv-1", LoadAs::Document, None).await.unwrap();
    assert_eq!(loaded.len(), bytes.len());
    assert!(loaded == bytes, "the bytes put are the bytes read");

    // The person reads it back through a signed link; a stranger gets none.
    let read = format!("/conversations/conv-1/files/{id}");
    api.invoke(
        "req-read",
        function_url_event(
            "GET",
            &format!("{read}?userId=ada&accountId=acme"),
            &headers[..1],
            None,
        ),
    );
    let answer = support::api_function::whole_answer(&mut api, &mut function, "req-read").await;
    let prelude = if answer["prelude"].is_null() {
        &answer
    } else {
        &answer["prelude"]
    };
    assert_eq!(prelude["statusCode"], 303, "{answer}");
    let link = prelude["headers"]["location"].as_str().unwrap();
    assert!(
        link.contains("X-Amz-Signature=") && link.contains("X-Amz-Expires=300"),
        "{link}"
    );
    let got = reqwest::get(link).await.unwrap().bytes().await.unwrap();
    assert!(got == bytes, "the link gives the bytes whole");
    let (status, body) = ask(
        &mut api,
        &mut function,
        "req-stranger",
        function_url_event(
            "GET",
            &format!("{read}?userId=mallory&accountId=evil"),
            &headers[..1],
            None,
        ),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(!body.contains("X-Amz"), "{body}");

    let objects = || async {
        let listed = s3.list_objects_v2().bucket(&bucket).send().await.unwrap();
        listed
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    let before = objects().await;
    let items = items_of(&store).await;
    let path = "/conversations/conv-1/files?userId=mallory&accountId=evil&name=x.pdf&size=10";
    let (status, body) = ask(
        &mut api,
        &mut function,
        "req-2",
        function_url_event("POST", path, &headers, None),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(!body.contains("X-Amz"), "{body}");
    assert_eq!(objects().await, before);
    assert_eq!(changed(&items, &items_of(&store).await), Vec::<String>::new());
}

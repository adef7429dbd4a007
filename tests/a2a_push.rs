//! A2A push notifications. A deployment as it runs (`serve` sending each turn to the queue, a
//! worker (`poll`) running it, both processes on moto and the Bedrock stand-in) takes a task's
//! webhook from the official client (`a2a-sdk`), and the worker pushes the task's updates to it:
//! a webhook that parses each POST as the SDK's `StreamResponse`. The configs are created, got,
//! listed and deleted by the same client; what may not be kept (another person's task, a private
//! or plain-http address) is refused with nothing written. The sink itself, on moto, against
//! webhooks that fail, redirect and hang: retried, never followed, bounded, and dropped once they
//! keep failing.

use crate::crash_recovery::{poller_command, set_up};
use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use agent_worker::hosts::a2a_push::{A2aPushSink, ATTEMPTS, DROP_AFTER, PushDelivery, PushPolicy};
use agent_worker::protocol::AgentEvent;
use agent_worker::session::dynamo::PushConfigWrite;
use agent_worker::session::{DynamoConfig, DynamoStore};
use agent_worker::session::{TurnLedger as _, TurnStatus};
use agent_worker::sinks::{Sink as _, TurnRef};
use agent_worker_testkit::{A2aPushReceiver, BedrockStandIn, JwksStandIn, Reply, SigningKey, moto, sid, tid};
use serde_json::{Value, json};
use support::binaries::{announced, on_moto};
use support::container::{changed, table};

const AUDIENCE: &str = "a2a-push";

/// `serve` with its turns sent to a queue, and the worker that runs them.
struct Deployment {
    url: String,
    store: DynamoStore,
    bedrock: BedrockStandIn,
    key: SigningKey,
    issuer: JwksStandIn,
    _serve: tokio::process::Child,
    _worker: tokio::process::Child,
}

impl Deployment {
    async fn start() -> Self {
        let name = format!("a2a-push-{}", uuid::Uuid::new_v4().simple());
        let created = set_up(&name, &[]).await;
        let queue_url = created["queueUrl"].as_str().unwrap().to_owned();
        let bedrock = BedrockStandIn::start().await.unwrap();
        let key = SigningKey::rs256("k-push");
        let issuer = JwksStandIn::start(&[&key]).await.unwrap();
        let jwks = issuer.jwks_url();
        let args = [
            "serve",
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            "--auth",
            "jwt",
            "--jwt-issuer",
            issuer.issuer(),
            "--jwt-audience",
            AUDIENCE,
            "--jwks-url",
            &jwks,
            "--jwt-account",
            "agents",
            "--queue-url",
            &queue_url,
        ];
        let mut serve = on_moto(env!("CARGO_BIN_EXE_agent-worker"), &args, &name, &bedrock)
            .env("AWS_ENDPOINT_URL_SQS", moto().endpoint())
            .env("A2A_PUSH", "on")
            .env("A2A_PUSH_LOOPBACK", "true")
            .spawn()
            .expect("serve runs");
        let url = announced(&mut serve, "agent-worker serving turns on ").await;
        let worker = poller_command(&queue_url, &name, &bedrock)
            .env("A2A_PUSH", "on")
            .env("A2A_PUSH_LOOPBACK", "true")
            .spawn()
            .expect("the worker runs");
        Self {
            url,
            store: DynamoStore::new(moto().dynamodb(), DynamoConfig::new(&name).unwrap()),
            bedrock,
            key,
            issuer,
            _serve: serve,
            _worker: worker,
        }
    }

    fn token(&self, who: &str) -> String {
        support::a2a::person_token(&self.key, &self.issuer, AUDIENCE, who)
    }

    /// A JSON-RPC call of `method` as `who`.
    async fn rpc(&self, who: &str, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        reqwest::Client::new()
            .post(format!("{}/a2a", self.url))
            .bearer_auth(self.token(who))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// An HTTP+JSON call as `who`: its status and body.
    async fn rest(
        &self,
        who: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = reqwest::Client::new()
            .request(method, format!("{}/a2a{path}", self.url))
            .bearer_auth(self.token(who));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

/// The pushes `receiver` takes until one to `path` is a task's final `task`: every push it took,
/// within a minute (or the test fails).
async fn pushes_until_final(receiver: &mut A2aPushReceiver, path: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    let wait = async {
        loop {
            let push = receiver.next_push().await.unwrap();
            let done = push["path"] == path && push["body"].get("task").is_some();
            seen.push(push);
            if done {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .expect("the task's final push came within a minute");
    seen
}

#[tokio::test]
async fn a_tasks_updates_reach_its_webhook_from_the_worker_that_runs_its_turn() {
    let deployment = Deployment::start().await;
    let mut receiver = A2aPushReceiver::start().await.unwrap();
    deployment.bedrock.push(Reply::text("Shipped to you."));
    let hook = format!("{}/ok-first", receiver.url());
    let out = agent_worker_testkit::run_a2a_client(json!({
        "url": deployment.url, "token": deployment.token("agent-a"), "scenario": "push",
        "text": "Ship order O-1.", "contextId": "ctx-push",
        "push": {"url": hook, "token": "tok-1"},
        "push2": {"id": "second", "url": format!("{}/ok-second", receiver.url())},
    }))
    .await
    .unwrap();
    assert!(out.get("error").is_none(), "{}", out["error"]);
    assert_eq!(out["card"]["capabilities"]["pushNotifications"], true);
    let task_id = out["started"][0]["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(out["created"]["id"], "second");
    assert_eq!(out["gotConfig"]["url"], format!("{}/ok-second", receiver.url()));
    let listed = out["listed"]["configs"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let first = listed.iter().find(|c| c["url"] == hook.as_str()).unwrap();
    assert_eq!(
        (first["taskId"].as_str(), first["token"].as_str()),
        (Some(task_id.as_str()), Some("tok-1"))
    );
    let after = &out["listedAfterDelete"]["configs"];
    assert_eq!(after.as_array().map(Vec::len), Some(1), "{after}");

    // The worker (serve runs no turn: it sends them to the queue) pushed the task's updates.
    let pushes = pushes_until_final(&mut receiver, "/ok-first").await;
    let ours: Vec<&Value> = pushes.iter().filter(|p| p["path"] == "/ok-first").collect();
    for push in &ours {
        assert_eq!(push["parsed"], true, "the SDK parses every push: {push}");
        assert_eq!(push["token"], "tok-1", "{push}");
    }
    let working = &ours[0]["body"]["statusUpdate"];
    assert_eq!(working["taskId"], task_id.as_str(), "{working}");
    assert_eq!(working["contextId"], "ctx-push");
    assert_eq!(working["status"]["state"], "TASK_STATE_WORKING");
    let task = &ours.last().unwrap()["body"]["task"];
    assert_eq!(task["id"], task_id.as_str());
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "Shipped to you.");
}

#[tokio::test]
async fn a_push_config_that_may_not_be_kept_is_refused_and_nothing_is_written() {
    let deployment = Deployment::start().await;
    deployment.bedrock.push(Reply::text("Done."));
    let sent = deployment
        .rpc(
            "agent-a",
            "SendMessage",
            json!({"message": {"messageId": "m-1", "contextId": "ctx-own", "role": "ROLE_USER",
                "parts": [{"text": "Hello"}]}}),
        )
        .await;
    let task_id = sent["result"]["task"]["id"].as_str().expect("a task").to_owned();
    // The turn's commit may land after its answer: the table is looked at once it has.
    let committed = async {
        loop {
            let record = deployment.store.turn(&sid("ctx-own"), &tid("m-1")).await.unwrap();
            if record.is_some_and(|r| r.status == TurnStatus::Completed) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), committed)
        .await
        .expect("the turn committed");
    let before = table(&deployment.store).await;

    let create = |who: &'static str, url: &str| {
        let params = json!({"taskId": task_id, "id": "hook", "url": url});
        let deployment = &deployment;
        async move {
            deployment
                .rpc(who, "CreateTaskPushNotificationConfig", params)
                .await
        }
    };
    // Another person's task does not exist for them.
    let refused = create("agent-b", "https://hooks.example.com/a2a").await;
    assert_eq!(refused["error"]["code"], -32001, "{refused}");
    for (url, why) in [
        ("https://169.254.169.254/latest/meta-data/", "not a public"),
        ("https://10.0.0.7/hook", "not a public"),
        ("https://[fd00:ec2::254]/hook", "not a public"),
        ("http://hooks.example.com/a2a", "https"),
        ("https://user:pw@hooks.example.com/a2a", "credentials"),
        ("https://metadata.google.internal/", "not a public"),
    ] {
        let refused = create("agent-a", url).await;
        assert_eq!(refused["error"]["code"], -32602, "{url}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(why), "{url}: {message}");
    }
    // A message whose push config is refused starts no turn.
    let refused = deployment
        .rpc(
            "agent-a",
            "SendMessage",
            json!({"message": {"messageId": "m-2", "contextId": "ctx-own-2", "role": "ROLE_USER",
                "parts": [{"text": "Hello"}]},
                "configuration": {"taskPushNotificationConfig": {"url": "https://192.168.0.1/h"}}}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    // A message on the task (which waits for no approval) with a webhook: refused, nothing kept.
    let refused = deployment
        .rpc(
            "agent-a",
            "SendMessage",
            json!({"message": {"messageId": "m-3", "taskId": task_id, "role": "ROLE_USER",
                "parts": [{"text": "approve"}]},
                "configuration": {"taskPushNotificationConfig": {"url": "https://hooks.example.com/a2a"}}}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32004, "{refused}");
    // A later turn of the task's chain names no task.
    let (session_part, _) = task_id.split_once('.').unwrap();
    let chained = json!({"taskId": format!("{session_part}.m-1~1"), "url": "https://hooks.example.com/a2a"});
    let refused = deployment
        .rpc("agent-a", "CreateTaskPushNotificationConfig", chained)
        .await;
    assert_eq!(refused["error"]["code"], -32001, "{refused}");
    assert_eq!(
        changed(&before, &table(&deployment.store).await),
        Vec::<String>::new()
    );

    // Over HTTP+JSON, the owner keeps, reads and deletes one; another person reads nothing.
    let path = format!("/tasks/{task_id}/pushNotificationConfigs");
    let config = json!({"id": "rest-hook", "url": "https://hooks.example.com/a2a"});
    let (status, kept) = deployment
        .rest("agent-a", reqwest::Method::POST, &path, Some(config))
        .await;
    assert_eq!(
        (status, kept["taskId"].as_str()),
        (200, Some(task_id.as_str())),
        "{kept}"
    );
    let one = format!("{path}/rest-hook");
    let (status, got) = deployment.rest("agent-a", reqwest::Method::GET, &one, None).await;
    assert_eq!(
        (status, got["url"].as_str()),
        (200, Some("https://hooks.example.com/a2a"))
    );
    for (who, method, want) in [
        ("agent-b", reqwest::Method::GET, 404),
        ("agent-b", reqwest::Method::DELETE, 404),
        ("agent-a", reqwest::Method::DELETE, 200),
    ] {
        let (status, body) = deployment.rest(who, method.clone(), &one, None).await;
        assert_eq!(status, want, "{who} {method}: {body}");
    }
    let (_, listed) = deployment
        .rest("agent-a", reqwest::Method::GET, &path, None)
        .await;
    assert_eq!(listed["configs"], json!([]), "{listed}");
    assert_eq!(
        changed(&before, &table(&deployment.store).await),
        Vec::<String>::new()
    );
}

/// The sink on moto: a task whose configs name webhooks that fail, redirect and take a call, run
/// for three turns of its chain (two updates each).
#[tokio::test]
async fn a_webhook_that_keeps_failing_is_retried_then_dropped_and_a_redirect_is_never_followed() {
    let store = DynamoStore::new(
        moto().dynamodb(),
        DynamoConfig::new(format!("a2a-pushes-{}", uuid::Uuid::new_v4().simple())).unwrap(),
    );
    store.create_table().await.unwrap();
    let mut receiver = A2aPushReceiver::start().await.unwrap();
    let (session, first) = (sid("ctx-1"), tid("t1"));
    for path in ["fail", "redirect", "ok"] {
        let config = json!({"id": path, "taskId": "x", "url": format!("{}/{path}", receiver.url())});
        store
            .put_push_config(
                &session,
                &first,
                path,
                &config.to_string(),
                10,
                PushConfigWrite::Replace,
            )
            .await
            .unwrap();
    }
    let delivery = PushDelivery::new(PushPolicy { loopback: true })
        .unwrap()
        .first_retry(Duration::from_millis(1));
    let sink = A2aPushSink::new(store.clone(), delivery.clone());
    for turn in ["t1", "t1~1", "t1~2"] {
        let mut pushes = sink.open(&TurnRef::new(session.clone(), tid(turn)));
        pushes
            .event(&AgentEvent::Text { delta: "Hi".into() })
            .await
            .unwrap();
        pushes.event(&AgentEvent::completed()).await.unwrap();
        pushes.close().await.unwrap();
    }
    // A push to a path of its own after them: every push before it was told before it.
    let end = json!({"id": "end", "url": format!("{}/ok-end", receiver.url())});
    delivery
        .push(
            &serde_json::from_value(end).unwrap(),
            &json!({"statusUpdate": {}}),
        )
        .await
        .unwrap();
    let mut by_path: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let told = async {
        loop {
            let push = receiver.next_push().await.unwrap();
            let path = push["path"].as_str().unwrap().to_owned();
            if path == "/ok-end" {
                break;
            }
            by_path.entry(path).or_default().push(push);
        }
    };
    tokio::time::timeout(Duration::from_secs(60), told)
        .await
        .expect("the pushes came");
    let count = |path: &str| by_path.get(path).map_or(0, Vec::len);
    let drop_after = usize::try_from(DROP_AFTER).unwrap();
    let attempts = usize::try_from(ATTEMPTS).unwrap();
    // Six updates: the one that answers takes each once; a 500 is tried again, a redirect not
    // (and never followed); each is dropped after DROP_AFTER updates failed.
    assert_eq!(count("/ok"), 6, "{by_path:#?}");
    assert_eq!(count("/fail"), drop_after * attempts);
    assert_eq!(count("/redirect"), drop_after);
    let task_ids: Vec<&str> = by_path["/ok"]
        .iter()
        .map(|p| {
            p["body"]["task"]["id"]
                .as_str()
                .or(p["body"]["statusUpdate"]["taskId"].as_str())
                .unwrap()
        })
        .collect();
    assert!(
        task_ids.iter().all(|id| *id == task_ids[0]),
        "every turn of the chain pushes as its task: {task_ids:?}"
    );
    let left: Vec<String> = store
        .push_configs(&session, &first)
        .await
        .unwrap()
        .into_iter()
        .map(|c| format!("{}:{}", c.id, c.failures))
        .collect();
    assert_eq!(left, vec!["ok:0"]);
}

#[tokio::test]
async fn a_webhook_that_hangs_holds_the_turn_no_longer_than_its_tries_and_its_budget() {
    let store = DynamoStore::new(
        moto().dynamodb(),
        DynamoConfig::new(format!("a2a-hang-{}", uuid::Uuid::new_v4().simple())).unwrap(),
    );
    store.create_table().await.unwrap();
    let mut receiver = A2aPushReceiver::start().await.unwrap();
    let (session, first) = (sid("ctx-1"), tid("t1"));
    let config = json!({"id": "hang", "url": format!("{}/hang", receiver.url())});
    store
        .put_push_config(
            &session,
            &first,
            "hang",
            &config.to_string(),
            10,
            PushConfigWrite::Replace,
        )
        .await
        .unwrap();
    let delivery = PushDelivery::new(PushPolicy { loopback: true })
        .unwrap()
        .first_retry(Duration::from_millis(1))
        .attempt_timeout(Duration::from_millis(300));
    let sink = A2aPushSink::new(store.clone(), delivery);
    let mut pushes = sink.open(&TurnRef::new(session.clone(), first.clone()));
    pushes.event(&AgentEvent::completed()).await.unwrap();
    // The turn's end waits for its pushes: each try given up at its timeout.
    pushes.close().await.unwrap();
    let stored = store.push_configs(&session, &first).await.unwrap();
    assert_eq!(stored[0].failures, 2, "both updates failed, each after its tries");
    for _ in 0..2 * ATTEMPTS {
        let push = tokio::time::timeout(Duration::from_secs(30), receiver.next_push())
            .await
            .expect("a try reached the webhook")
            .unwrap();
        assert_eq!(push["path"], "/hang");
    }

    // A try that outlasts the turn's wait for its pushes is cut off there: the turn ends within
    // the test's guard, far under the try's own timeout.
    let patient = PushDelivery::new(PushPolicy { loopback: true })
        .unwrap()
        .attempt_timeout(Duration::from_secs(600));
    let sink = A2aPushSink::new(store.clone(), patient).budget(Duration::from_millis(200));
    let mut pushes = sink.open(&TurnRef::new(session.clone(), tid("t1~1")));
    pushes.event(&AgentEvent::completed()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), pushes.close())
        .await
        .expect("the turn's end waited no longer than its budget")
        .unwrap();
}

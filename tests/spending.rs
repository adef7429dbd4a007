//! Spending that cannot run away (issue 56): a model in a loop is stopped. Through the handler
//! the Lambda function runs, on moto's DynamoDB, the model being the Bedrock stand-in.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_worker::engine::tools::{Tool, ToolError, ToolSpec, tool_fn};
use agent_worker::engine::{BedrockModel, Engine, EngineConfig};
use agent_worker::hosts::AgentTurnPayload;
use agent_worker::hosts::lambda::TurnHandler;
use agent_worker::protocol::AgentEvent;
use agent_worker::session::{DynamoConfig, DynamoStore, HistoryStore as _, TurnLedger as _, TurnStatus};
use agent_worker::sinks::{DynamoEventLog, Sinks};
use agent_worker_testkit::session_audit::audit;
use agent_worker_testkit::{BedrockStandIn, Reply, moto, sid, tid};
use serde_json::{Value, json};

async fn store() -> DynamoStore {
    let table = format!("spending-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(table).unwrap());
    store.create_table().await.unwrap();
    store
}

fn payload(turn: &str, text: &str) -> AgentTurnPayload {
    let body = json!({"turnId": turn, "conversationId": "loop-1", "userId": "ana", "accountId": "acme", "content": text});
    AgentTurnPayload::decode(&body.to_string()).unwrap()
}

/// A model that asks for the same lookup again and again: the call runs five times (the
/// default `max_repeat_calls`), the sixth ask is answered "not run" and ends the turn, completed
/// with `stopReason: "repeated_call"` and a line for the person; the history is whole, and the
/// model reads the line on the next turn. A lookup with other arguments is not counted.
#[tokio::test]
async fn a_model_asking_for_the_same_call_again_and_again_is_stopped_after_the_fifth() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = store().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let lookup = tool_fn(
        ToolSpec::new("lookup", "Looks an order up.", json!({"type": "object"})),
        move |_args: Value, _| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<Value, ToolError>(json!({"status": "pending"}))
            }
        },
    );
    let engine = Engine::builder()
        .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
        .store(store.clone())
        .tools(vec![Arc::new(lookup) as Arc<dyn Tool>])
        .config(EngineConfig {
            max_rounds: 20,
            ..support::config()
        })
        .build()
        .unwrap();
    let handler = TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(store.clone())));
    // Another order first (not the same call), then the same one, over and over.
    bedrock.push(Reply::tool_call("c0", "lookup", r#"{"order":"O-0"}"#));
    for i in 1..=6 {
        // The same arguments, written in another order each time.
        let args = if i % 2 == 0 {
            r#"{"order":"O-1","fresh":true}"#
        } else {
            r#"{"fresh":true,"order":"O-1"}"#
        };
        bedrock.push(Reply::tool_call(&format!("c{i}"), "lookup", args));
    }

    let run = handler
        .run_turn_to_end(&payload("t1", "Is O-1 shipped yet?"), None)
        .await;
    assert_eq!(
        run.terminal,
        Some(AgentEvent::completed_with(json!({"stopReason": "repeated_call"})))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 6, "O-0 once, O-1 five times");
    assert_eq!(bedrock.requests().len(), 7, "no model call after the sixth ask");
    assert_eq!(bedrock.pending_replies(), 0);
    let record = store.turn(&sid("loop-1"), &tid("t1")).await.unwrap().unwrap();
    assert_eq!(record.status, TurnStatus::Completed);
    let history = store.load_history(&sid("loop-1")).await.unwrap();
    let checked = audit(
        &store,
        &[("loop-1".to_owned(), "t1".to_owned())],
        &Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(checked.violations, Vec::<String>::new());
    let last_result = history[history.len() - 2].content[0].clone();
    let result = serde_json::to_string(&last_result).unwrap();
    assert!(result.contains("already called 5 times"), "{result}");
    let told = history.last().unwrap().text();
    assert!(told.contains("looked like a loop"), "{told}");

    // The next turn: the model reads why the last one stopped.
    bedrock.push(Reply::text("It is still pending; I will not look again."));
    let run = handler
        .run_turn_to_end(&payload("t2", "Why did you stop?"), None)
        .await;
    assert_eq!(run.terminal, Some(AgentEvent::completed()));
    let request = bedrock.requests().last().unwrap().body["messages"].to_string();
    assert!(request.contains("looked like a loop"), "{request}");
}

mod budgets {
    use super::*;
    use agent_worker::engine::spending::{Budgets, Ledger, Prices, SpendLedger, Spending};
    use agent_worker::protocol::codes;
    use agent_worker_testkit::StreamScript;
    use agent_worker_testkit::fault_proxy::{Fault, FaultProxy, Match, Rule};
    use agent_worker_testkit::moto::dynamodb_client;

    /// A reply whose stream waits, its text sent, until the stand-in releases it.
    fn held() -> Reply {
        StreamScript::new()
            .text("Here it is.", 1)
            .hold()
            .stop("end_turn")
            .usage(12, 8)
            .into_reply()
    }

    /// What `Reply::text`'s usage (12 in, 8 out) costs on the default price of the model.
    const TEXT_COST: u64 = 12 * 3 + 8 * 15;

    /// A worker on `store` under `budgets`: each model call reserves about 15,000 micro-dollars
    /// (its 1,000 output tokens at $15 a million, and its input).
    fn worker(bedrock: &BedrockStandIn, store: &DynamoStore, budgets: Budgets) -> TurnHandler {
        let ledger: Arc<dyn SpendLedger> = Arc::new(store.clone());
        let engine = Engine::builder()
            .model(BedrockModel::new(bedrock.client(), support::MODEL_ID))
            .store(store.clone())
            .config(EngineConfig {
                max_tokens: 1000,
                ..support::config()
            })
            .spending(Spending::new(Prices::default(), budgets, Some(ledger)).unwrap())
            .build()
            .unwrap();
        TurnHandler::new(engine, Sinks::new().with(DynamoEventLog::new(store.clone())))
    }

    fn turn_of(conversation: &str, turn: &str) -> AgentTurnPayload {
        let body = json!({"turnId": turn, "conversationId": conversation, "userId": "ana", "accountId": "acme", "content": "What is due today?"});
        AgentTurnPayload::decode(&body.to_string()).unwrap()
    }

    fn ana_today() -> Ledger {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let day = chrono::DateTime::from_timestamp(now.as_secs() as i64, 0)
            .unwrap()
            .format("%Y-%m-%d")
            .to_string();
        Ledger::PersonDay {
            account: Some("acme".into()),
            user: "ana".into(),
            day,
        }
    }

    /// Two workers run two of one person's turns at once, with room in her daily budget for one
    /// call: one call is reserved and made, the other turn ends `budget_exceeded` before its
    /// model call (the stand-in heard one request), not redriven, saying which budget and when
    /// it refills. The ledger then holds what the one call cost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_turns_racing_for_the_last_of_a_budget_make_one_model_call() {
        let bedrock = BedrockStandIn::start().await.unwrap();
        let store = store().await;
        let budgets = Budgets {
            person_per_day: Some(25_000),
            ..Budgets::default()
        };
        let other = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(store.table()).unwrap());
        let (first, second) = (
            Arc::new(worker(&bedrock, &store, budgets)),
            Arc::new(worker(&bedrock, &other, budgets)),
        );
        bedrock.push(held());
        let mut a = tokio::spawn(async move { first.run_turn_to_end(&turn_of("c-a", "t1"), None).await });
        let mut b = tokio::spawn(async move { second.run_turn_to_end(&turn_of("c-b", "t1"), None).await });
        bedrock.holding(1).await;
        // The other turn ends while the first one's call is held.
        let (refused, winner) = tokio::select! {
            run = &mut a => (run.unwrap(), b),
            run = &mut b => (run.unwrap(), a),
        };
        let Some(AgentEvent::Failed {
            details,
            retryable,
            code,
        }) = refused.terminal
        else {
            panic!("not refused: {:?}", refused.terminal)
        };
        assert_eq!(code.as_deref(), Some(codes::BUDGET_EXCEEDED));
        assert!(!retryable, "not redriven");
        assert!(details.contains("ana's daily budget of $0.03"), "{details}");
        assert!(details.contains("refills at 00:00 UTC"), "{details}");
        assert_eq!(bedrock.requests().len(), 1, "one model call was made");
        bedrock.release();
        assert_eq!(winner.await.unwrap().terminal, Some(AgentEvent::completed()));
        assert_eq!(store.spent(&ana_today()).await.unwrap(), TEXT_COST);
    }

    /// Twenty workers, each with its own client, run twenty of one person's turns at once, with
    /// room in her daily budget for three calls: exactly three are reserved and made, seventeen
    /// turns end `budget_exceeded` before their model call, and the ledger holds what the three
    /// cost. No budget is passed by workers racing for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn twenty_workers_racing_for_a_budget_of_three_calls_make_three() {
        let bedrock = BedrockStandIn::start().await.unwrap();
        let store = store().await;
        let budgets = Budgets {
            person_per_day: Some(50_000),
            ..Budgets::default()
        };
        for _ in 0..3 {
            bedrock.push(held());
        }
        let runs: Vec<_> = (0..20)
            .map(|i| {
                let own = DynamoStore::new(moto().dynamodb(), DynamoConfig::new(store.table()).unwrap());
                let worker = worker(&bedrock, &own, budgets);
                tokio::spawn(async move {
                    worker
                        .run_turn_to_end(&turn_of(&format!("c-{i}"), "t1"), None)
                        .await
                })
            })
            .collect();
        // Three calls were reserved and are held at the stand-in, so those three turns cannot
        // end: the first seventeen to end are the others, each refused before its call.
        bedrock.holding(3).await;
        let mut pending = runs;
        let mut refused = 0;
        while pending.len() > 3 {
            let (run, _, rest) = futures_util::future::select_all(pending).await;
            pending = rest;
            match run.unwrap().terminal {
                Some(AgentEvent::Failed { code, .. }) if code.as_deref() == Some(codes::BUDGET_EXCEEDED) => {
                    refused += 1
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(bedrock.requests().len(), 3, "three model calls were made");
        for _ in 0..3 {
            bedrock.release();
        }
        let mut completed = 0;
        for run in pending {
            if let Some(AgentEvent::Completed { .. }) = run.await.unwrap().terminal {
                completed += 1;
            }
        }
        assert_eq!((completed, refused), (3, 17));
        assert_eq!(bedrock.requests().len(), 3, "three model calls were made");
        assert_eq!(store.spent(&ana_today()).await.unwrap(), 3 * TEXT_COST);
    }

    /// A turn stopped while its model call streams (its usage, which Bedrock sends at the end,
    /// not come) settles the call at its whole reservation: billed input is never counted as
    /// nothing. The reservation's mark is gone: it is settled, not left outstanding.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_cut_off_by_a_stop_is_settled_at_its_reservation() {
        use agent_worker::session::{SignalStore as _, Stop, StopCause};
        let bedrock = BedrockStandIn::start().await.unwrap();
        let store = store().await;
        let budgets = Budgets {
            conversation: Some(1_000_000),
            ..Budgets::default()
        };
        let handler = Arc::new(worker(&bedrock, &store, budgets));
        bedrock.push(StreamScript::new().open_text("Let me").hold().into_reply());
        let running = handler.clone();
        let turn = tokio::spawn(async move { running.run_turn_to_end(&turn_of("c-s", "t1"), None).await });
        bedrock.holding(1).await;
        let conversation = Ledger::Conversation(sid("c-s"));
        let reserved = store.spent(&conversation).await.unwrap();
        assert!(reserved > 10_000, "the call's most is reserved: {reserved}");
        store
            .request_stop(&sid("c-s"), &tid("t1"), Stop::now(StopCause::UserStop))
            .await
            .unwrap();
        let stopped = turn.await.unwrap();
        assert_eq!(
            stopped.terminal,
            Some(AgentEvent::completed_with(json!({"stopReason": "user_stop"})))
        );
        assert_eq!(
            store.spent(&conversation).await.unwrap(),
            reserved,
            "counted at its reservation"
        );
        let item = moto()
            .dynamodb()
            .get_item()
            .table_name(store.table())
            .key(
                "pk",
                aws_sdk_dynamodb::types::AttributeValue::S("session#c-s".into()),
            )
            .key("sk", aws_sdk_dynamodb::types::AttributeValue::S("spend".into()))
            .send()
            .await
            .unwrap();
        let marks: Vec<&String> = item
            .item()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with("r#"))
            .collect();
        assert!(marks.is_empty(), "settled, no reservation outstanding: {marks:?}");
    }

    /// A settlement whose answer was lost (the write landed, the SDK sends it again) is counted
    /// once; a conversation's budget is kept across its turns, and a turn that would pass it is
    /// refused before its model call, saying so, its ledger untouched.
    #[tokio::test]
    async fn a_ledger_counts_a_lost_answer_once_and_keeps_a_conversation_within_its_budget() {
        let bedrock = BedrockStandIn::start().await.unwrap();
        let plain = store().await;
        let proxy = FaultProxy::in_front_of(moto().endpoint()).await.unwrap();
        let store = DynamoStore::new(
            dynamodb_client(&proxy.endpoint_url()),
            DynamoConfig::new(plain.table()).unwrap(),
        );
        let budgets = Budgets {
            conversation: Some(16_000),
            ..Budgets::default()
        };
        let handler = worker(&bedrock, &store, budgets);
        let settlement = Match::target("UpdateItem").and(Match::body("ADD #spent"));
        proxy.inject(Rule::new(settlement, Fault::LoseResponse).times(1));
        // 1,000 tokens in and 500 out: $0.0105.
        let costly = StreamScript::new()
            .text("Two invoices.", 1)
            .stop("end_turn")
            .usage(1000, 500)
            .into_reply();
        bedrock.push(costly);
        let run = handler.run_turn_to_end(&turn_of("c-1", "t1"), None).await;
        assert_eq!(run.terminal, Some(AgentEvent::completed()));
        assert_eq!(proxy.injected().len(), 1, "the settlement's answer was lost once");
        let conversation = Ledger::Conversation(sid("c-1"));
        assert_eq!(plain.spent(&conversation).await.unwrap(), 10_500, "counted once");

        // The next call may cost about $0.015 more: past the conversation's $0.016.
        let refused = handler.run_turn_to_end(&turn_of("c-1", "t2"), None).await;
        let Some(AgentEvent::Failed { details, code, .. }) = refused.terminal else {
            panic!("not refused: {:?}", refused.terminal)
        };
        assert_eq!(code.as_deref(), Some(codes::BUDGET_EXCEEDED));
        assert!(
            details.contains("the conversation's budget of $0.02"),
            "{details}"
        );
        assert!(details.contains("$0.01 is spent"), "{details}");
        assert!(details.contains("does not refill"), "{details}");
        assert_eq!(bedrock.requests().len(), 1, "no model call for the refused turn");
        assert_eq!(plain.spent(&conversation).await.unwrap(), 10_500, "untouched");
        // Another conversation of hers has its own.
        bedrock.push(Reply::text("None."));
        let other = handler.run_turn_to_end(&turn_of("c-2", "t1"), None).await;
        assert_eq!(other.terminal, Some(AgentEvent::completed()));
    }

    /// With a ledger, a turn's budget is kept in it: a turn run again (resumed after a crash,
    /// continued in the next invocation) spends from what it had spent. Here its ledger holds
    /// $0.014 of its $0.02 already, so its next call (up to about $0.015) is not made.
    #[tokio::test]
    async fn a_turns_budget_is_kept_across_its_runs_in_the_ledger() {
        let bedrock = BedrockStandIn::start().await.unwrap();
        let store = store().await;
        let budgets = Budgets {
            turn: Some(20_000),
            ..Budgets::default()
        };
        let handler = worker(&bedrock, &store, budgets);
        let earlier_run = Ledger::Turn {
            session: sid("c-t"),
            turn: tid("t1"),
        };
        let charge = agent_worker::engine::spending::Charge {
            ledger: earlier_run.clone(),
            limit: 20_000,
        };
        store.reserve("earlier-run", &[charge], 14_000).await.unwrap();
        let refused = handler.run_turn_to_end(&turn_of("c-t", "t1"), None).await;
        let Some(AgentEvent::Failed { details, code, .. }) = refused.terminal else {
            panic!("not refused: {:?}", refused.terminal)
        };
        assert_eq!(code.as_deref(), Some(codes::BUDGET_EXCEEDED));
        assert!(details.contains("the turn's budget of $0.02"), "{details}");
        assert!(details.contains("$0.01 is spent"), "{details}");
        assert!(bedrock.requests().is_empty(), "no model call");
        assert_eq!(store.spent(&earlier_run).await.unwrap(), 14_000, "untouched");
        // Another turn has its own, and what it spends is kept in its ledger.
        bedrock.push(Reply::text("Nothing is due."));
        let other = handler.run_turn_to_end(&turn_of("c-t", "t2"), None).await;
        assert_eq!(other.terminal, Some(AgentEvent::completed()));
        let its_own = Ledger::Turn {
            session: sid("c-t"),
            turn: tid("t2"),
        };
        assert_eq!(store.spent(&its_own).await.unwrap(), TEXT_COST);
        // Its usage event says what it cost.
        let logged = DynamoEventLog::new(store.clone())
            .read("c-t", "t2", None)
            .await
            .unwrap();
        let costs: Vec<Option<f64>> = logged
            .iter()
            .filter_map(|l| match &l.event {
                AgentEvent::Usage { cost_usd, .. } => Some(*cost_usd),
                _ => None,
            })
            .collect();
        assert_eq!(costs, vec![Some(TEXT_COST as f64 / 1_000_000.0)]);
    }
}

/// Through the Lambda function (`bootstrap` under the Runtime API stand-in), budgets from its
/// settings: a model without a price under a budget stops the start, named; and a conversation's
/// budget smaller than one call's most ends the turn `budget_exceeded` before any model call,
/// not redriven.
#[cfg(feature = "s3")]
#[tokio::test]
async fn the_functions_budgets_come_from_its_settings() {
    use agent_worker_testkit::LambdaRuntimeApi;
    use std::time::Duration;

    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = store().await;
    let api = LambdaRuntimeApi::start().await.unwrap();
    let function = |api: &LambdaRuntimeApi, extra: &[(&str, &str)]| {
        crate::bootstrap::start_function(api, &bedrock, store.table(), extra)
    };
    let unpriced = function(
        &api,
        &[("MODEL_ID", "mistral.large-2407-v1:0"), ("TURN_BUDGET_USD", "1")],
    );
    let exited = tokio::time::timeout(Duration::from_secs(60), unpriced.wait_with_output())
        .await
        .expect("the function stopped at start-up")
        .unwrap();
    assert!(!exited.status.success());
    let said = String::from_utf8_lossy(&exited.stderr);
    assert!(
        said.contains("MODEL_ID") && said.contains("mistral.large-2407-v1:0 has no price"),
        "{said}"
    );

    let mut api = LambdaRuntimeApi::start().await.unwrap();
    let body = json!({"turnId": "t1", "conversationId": "c-1", "userId": "ana", "accountId": "acme", "content": "Hi"});
    let record = json!({
        "messageId": "m-1", "receiptHandle": "rh-1", "body": body.to_string(),
        "attributes": {"ApproximateReceiveCount": "1", "MessageGroupId": "c-1"},
        "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:turns.fifo", "awsRegion": "us-east-1"
    });
    api.invoke("req-1", json!({"Records": [record]}));
    let mut running = function(
        &api,
        &[("CONVERSATION_BUDGET_USD", "0.001"), ("MAX_TOKENS", "1000")],
    );
    let (what, answer) = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::select! {
            answer = api.answer() => answer.expect("an answer"),
            status = running.wait() => panic!("the function exited: {status:?}"),
        }
    })
    .await
    .expect("the function answered within a minute");
    assert_eq!(what, "req-1/response");
    assert_eq!(answer, json!({"batchItemFailures": []}), "not redriven");
    assert!(bedrock.requests().is_empty(), "no model call was made");
    let record = store.turn(&sid("c-1"), &tid("t1")).await.unwrap().unwrap();
    assert_eq!(record.status, TurnStatus::Failed);
    let outcome = serde_json::to_string(&record.outcome).unwrap();
    assert!(
        outcome.contains("budget_exceeded") && outcome.contains("conversation's budget"),
        "{outcome}"
    );
    running.kill().await.unwrap();
}

/// `invoke` spends by the configuration's budgets, kept in the table's ledgers, as the
/// function does: a conversation's budget smaller than one call's most refuses the turn before
/// its model call; without a table, a budget across turns is a usage mistake, named.
#[tokio::test]
async fn invoke_spends_by_the_configurations_budgets() {
    let moto = agent_worker_testkit::moto();
    let table = format!("cli-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(moto.dynamodb(), DynamoConfig::new(&table).unwrap());
    store.create_table().await.unwrap();
    let bedrock = BedrockStandIn::start().await.unwrap();
    let config = std::env::temp_dir().join(format!("budgets-{}.yaml", uuid::Uuid::new_v4().simple()));
    std::fs::write(
        &config,
        "systemPrompt: You help.\nbudgets:\n  conversation: { usd: 0.001 }\n",
    )
    .unwrap();
    let invoke = |with_table: bool| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-worker"));
        command
            .args(["invoke", "--session", "s1", "--text", "Hi", "--config"])
            .arg(&config)
            .args(["--endpoint-url", &bedrock.endpoint_url(), "--region", "us-east-1"])
            .env("AWS_ENDPOINT_URL_DYNAMODB", moto.endpoint())
            .env("AWS_ACCESS_KEY_ID", "anything")
            .env("AWS_SECRET_ACCESS_KEY", "anything")
            .env("AWS_EC2_METADATA_DISABLED", "true");
        if with_table {
            command.args(["--table", &table]);
        }
        command
    };
    let output = invoke(true).output().await.unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        printed.contains("budget_exceeded"),
        "{printed}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(printed.contains("the conversation's budget"), "{printed}");
    assert!(bedrock.requests().is_empty(), "no model call");
    let output = invoke(false).output().await.unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(said.contains("--table"), "{said}");
}

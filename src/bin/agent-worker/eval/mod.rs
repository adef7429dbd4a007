//! `agent-worker eval` (`make eval-live`): a small live evaluation on Bedrock (your credentials,
//! `MODEL_ID`, `AWS_REGION`): a tool turn, a typed result, an approval asked and given (the call
//! runs once), a stopped turn, a conversation long enough to be summarized that still
//! remembers what was said before the summary; then the seed's operating rules (`rules`): a
//! failed tool's result is not invented, a file's text is data and not instructions, a spoken
//! message that may be misheard is asked about. Each scenario prints one JSON line (passed or
//! why not, its tokens, its cost where the model's price is known), then a summary; the exit
//! code is 1 when one failed. The turns run on an in-memory store (and the rules' file area in a
//! temporary folder, removed after): nothing to set up, nothing left behind. Without
//! credentials it refuses, saying so, and sends nothing.

mod rules;

use agent_worker::session::SignalStore as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_worker::engine::tools::{Effect, Tool, ToolSpec, examples, tool_fn};
use agent_worker::engine::{ApprovalSigner, BedrockModel, Engine, EngineConfig};
use agent_worker::protocol::{AgentEvent, ApprovalDecision, Prompt, Scope, TurnOptions, chain};
use agent_worker::session::{MemoryStore, SessionId, Stop, StopCause, TurnId};
use agent_worker::{Agent as _, Failure};
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::failure::CliError;

#[derive(Debug, clap::Args)]
pub(crate) struct EvalArgs {
    #[command(flatten)]
    live: crate::record::LiveArgs,
}

/// One scenario's outcome.
struct Outcome {
    name: &'static str,
    failure: Option<String>,
    input_tokens: u64,
    output_tokens: u64,
}

/// `agent-worker eval`.
pub(crate) async fn eval(args: EvalArgs) -> Result<ExitCode, CliError> {
    let shared = crate::aws_config(args.live.region.as_deref()).await?;
    crate::record::require_credentials(&shared, "eval").await?;
    let paid = Arc::new(AtomicUsize::new(0));
    let store = MemoryStore::new();
    let signer = ApprovalSigner::new(uuid::Uuid::new_v4().as_bytes().repeat(2))
        .map_err(|e| CliError::from(format!("the approval key: {e}")))?;
    let model = BedrockModel::new(
        crate::bedrock_client(&shared, args.live.endpoint_url.as_deref()),
        &args.live.model_id,
    );
    let rules = rules::Rules::new(model.clone(), store.clone())?;
    let engine = Engine::builder()
        .model(model)
        .store(store.clone())
        .approvals(store.clone(), signer)
        .system_prompt("You are a careful assistant. Use a tool when the person asks for it.")
        .tools(vec![time_tool()?, pay_tool(paid.clone())])
        // A short conversation is summarized soon, so the long one below is not long to run.
        .config(EngineConfig {
            compact_after_messages: 4,
            ..EngineConfig::default()
        })
        .build()
        .map_err(|e| CliError::from(chain(&e)))?;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let mut outcomes = vec![
        tool_turn(&engine, &run).await,
        typed_result(&engine, &run).await,
        approval(&engine, &run, &paid).await,
        stopped(&engine, &store, &run).await,
        remembered(&engine, &run).await,
    ];
    outcomes.extend(rules.run(&run).await);
    // The engine's prices (`engine::spending`): check the Bedrock price list before trusting a
    // figure.
    let prices = agent_worker::engine::spending::Prices::default();
    let price = prices.of(&args.live.model_id);
    let cost = |input: u64, output: u64| {
        let usage = agent_worker::engine::model::TokenUsage {
            input_tokens: input,
            output_tokens: output,
            ..Default::default()
        };
        price.map(|price| price.cost(&usage) as f64 / 1_000_000.0)
    };
    let (mut failed, mut input, mut output) = (0, 0, 0);
    for outcome in &outcomes {
        failed += usize::from(outcome.failure.is_some());
        input += outcome.input_tokens;
        output += outcome.output_tokens;
        println!(
            "{}",
            json!({
                "scenario": outcome.name,
                "passed": outcome.failure.is_none(),
                "why": outcome.failure,
                "inputTokens": outcome.input_tokens,
                "outputTokens": outcome.output_tokens,
                "costUsd": cost(outcome.input_tokens, outcome.output_tokens),
            })
        );
    }
    println!(
        "{}",
        json!({
            "model": args.live.model_id,
            "passed": outcomes.len() - failed,
            "failed": failed,
            "inputTokens": input,
            "outputTokens": output,
            "costUsd": cost(input, output),
        })
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn time_tool() -> Result<Arc<dyn Tool>, CliError> {
    examples::by_name("current_time").ok_or_else(|| CliError::from("no current_time example tool"))
}

/// A payment the person must approve; it counts its runs.
fn pay_tool(paid: Arc<AtomicUsize>) -> Arc<dyn Tool> {
    let spec = ToolSpec::new(
        "pay_invoice",
        "Pays an invoice by its number.",
        json!({"type": "object", "properties": {"invoice": {"type": "string"}}, "required": ["invoice"]}),
    )
    .effect(Effect::Transaction)
    .title("Pay an invoice");
    Arc::new(tool_fn(spec, move |_: Value, _| {
        let paid = paid.clone();
        async move {
            paid.fetch_add(1, Ordering::SeqCst);
            Ok(json!({ "receipt": "R-1" }))
        }
    }))
}

async fn turn(engine: &Engine, scope: Scope, text: &str) -> Vec<AgentEvent> {
    engine.invoke(scope, Prompt::text(text)).collect().await
}

/// The outcome of a scenario from its events and what failed, if anything.
fn outcome(name: &'static str, events: &[AgentEvent], failure: Option<String>) -> Outcome {
    let (mut input_tokens, mut output_tokens) = (0, 0);
    for event in events {
        if let AgentEvent::Usage {
            input_tokens: i,
            output_tokens: o,
            ..
        } = event
        {
            input_tokens += i;
            output_tokens += o;
        }
    }
    Outcome {
        name,
        failure,
        input_tokens,
        output_tokens,
    }
}

/// The id `text` names, or case `name` failed saying why (a run names its ids from a UUID, so
/// they are ids).
fn eval_id<T: std::str::FromStr<Err = agent_worker::session::IdError>>(
    name: &'static str,
    text: String,
) -> Result<T, Outcome> {
    text.parse()
        .map_err(|e| outcome(name, &[], Some(format!("{text:?} is not an id: {e}"))))
}

/// What the turn's terminal says: its data, or why it failed.
fn completed(events: &[AgentEvent]) -> Result<Value, String> {
    match events.last() {
        Some(AgentEvent::Completed { data }) => Ok(data.clone().unwrap_or(Value::Null)),
        Some(AgentEvent::Failed { details, .. }) => Err(format!("the turn failed: {details}")),
        _ => Err("the turn did not end".into()),
    }
}

async fn tool_turn(engine: &Engine, run: &str) -> Outcome {
    let session = match eval_id("tool call", format!("eval-{run}-tool")) {
        Ok(session) => session,
        Err(failed) => return failed,
    };
    let scope = Scope::new(session);
    let events = turn(
        engine,
        scope,
        "What is the time in UTC now? Use the current_time tool.",
    )
    .await;
    let called = events
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolStarted { name, .. } if name == "current_time"));
    let failure = match completed(&events) {
        Err(why) => Some(why),
        Ok(_) if !called => Some("the model did not call current_time".into()),
        Ok(_) => None,
    };
    outcome("tool turn", &events, failure)
}

async fn typed_result(engine: &Engine, run: &str) -> Outcome {
    let options = TurnOptions {
        result_schema: Some(json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        })),
        ..TurnOptions::default()
    };
    let session = match eval_id("typed result", format!("eval-{run}-typed")) {
        Ok(session) => session,
        Err(failed) => return failed,
    };
    let scope = Scope::new(session).with_options(options);
    let events = turn(engine, scope, "Which city is the Eiffel Tower in?").await;
    let failure = match completed(&events) {
        Err(why) => Some(why),
        Ok(data) if data["result"]["city"].is_string() => None,
        Ok(data) => Some(format!("no typed result with a city: {data}")),
    };
    outcome("typed result", &events, failure)
}

async fn approval(engine: &Engine, run: &str, paid: &AtomicUsize) -> Outcome {
    let session: SessionId = match eval_id("approval", format!("eval-{run}-approval")) {
        Ok(session) => session,
        Err(failed) => return failed,
    };
    let asked = turn(
        engine,
        Scope::new(session.clone()),
        "Pay invoice INV-7 with the pay_invoice tool.",
    )
    .await;
    let card = asked.iter().find_map(|e| match e {
        AgentEvent::Other(raw) if raw["type"] == "approval_required" => Some(raw.clone()),
        _ => None,
    });
    let Some(card) = card else {
        return outcome("approval", &asked, Some("no approval was asked".into()));
    };
    if paid.load(Ordering::SeqCst) != 0 {
        return outcome(
            "approval",
            &asked,
            Some("the call ran before the approval".into()),
        );
    }
    let options = TurnOptions {
        approval: Some(ApprovalDecision::approve(
            card["approvalId"].as_str().unwrap_or_default(),
            card["token"].as_str().unwrap_or_default(),
        )),
        ..TurnOptions::default()
    };
    let given = turn(engine, Scope::new(session).with_options(options), "Approved.").await;
    let mut events = asked;
    events.extend(given.iter().cloned());
    let failure = match completed(&given) {
        Err(why) => Some(why),
        Ok(_) if paid.load(Ordering::SeqCst) != 1 => Some(format!(
            "the approved call ran {} times",
            paid.load(Ordering::SeqCst)
        )),
        Ok(_) => None,
    };
    outcome("approval", &events, failure)
}

async fn remembered(engine: &Engine, run: &str) -> Outcome {
    let session: SessionId = match eval_id("long conversation", format!("eval-{run}-long")) {
        Ok(session) => session,
        Err(failed) => return failed,
    };
    let said = [
        "Remember this: my favourite colour is teal. Just say OK.",
        "Say OK again, nothing more.",
        "And once more: OK.",
        "What is my favourite colour? One word.",
    ];
    let mut events = Vec::new();
    let mut last = Vec::new();
    for words in said {
        last = turn(engine, Scope::new(session.clone()), words).await;
        if let Err(why) = completed(&last) {
            events.extend(last);
            return outcome("long conversation", &events, Some(why));
        }
        events.extend(last.iter().cloned());
    }
    let summarized = events
        .iter()
        .any(|e| matches!(e, AgentEvent::Other(raw) if raw["type"] == "compacted"));
    let answer = agent_worker::protocol::text_of(&last);
    let failure = if !summarized {
        Some("the conversation was never summarized".to_owned())
    } else if !answer.to_lowercase().contains("teal") {
        Some(format!("after the summary the colour was forgotten: {answer:?}"))
    } else {
        None
    };
    outcome("long conversation", &events, failure)
}

async fn stopped(engine: &Engine, store: &MemoryStore, run: &str) -> Outcome {
    let ids = eval_id("stopped turn", format!("eval-{run}-stop"))
        .and_then(|session| Ok((session, eval_id("stopped turn", format!("eval-{run}-stop-1"))?)));
    let (session, turn_id): (SessionId, TurnId) = match ids {
        Ok(ids) => ids,
        Err(failed) => return failed,
    };
    let scope = Scope::new(session.clone()).with_turn_id(turn_id.clone());
    let mut stream = engine.invoke(
        scope,
        Prompt::text("Write a 400-word story about a lighthouse keeper."),
    );
    let mut events = Vec::new();
    let mut asked = false;
    while let Some(event) = stream.next().await {
        if !asked && matches!(event, AgentEvent::Text { .. }) {
            asked = true;
            let stop = store
                .request_stop(&session, &turn_id, Stop::now(StopCause::UserStop))
                .await
                .map(|_| ())
                .map_err(|e| Failure::caused_by("asking the turn to stop", e).to_string());
            if let Err(why) = stop {
                return outcome("stopped turn", &events, Some(why));
            }
        }
        events.push(event);
    }
    let failure = match completed(&events) {
        Err(why) => Some(why),
        Ok(data) if data["stopReason"] == "user_stop" => None,
        Ok(data) => Some(format!("the turn was not stopped: {data}")),
    };
    outcome("stopped turn", &events, failure)
}

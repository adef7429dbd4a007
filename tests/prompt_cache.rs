//! Prompt caching through the real Bedrock client and the stand-in's prompt cache: where the
//! checkpoints go, that the cached prefix stays byte for byte the same from turn to turn, and
//! that cache tokens are reported in usage.

use crate::support;

use agent_worker::engine::{BedrockModel, Engine};
use agent_worker::protocol::{Agent, AgentEvent, Prompt, Scope};
use agent_worker::session::MemoryStore;
use agent_worker_testkit::{BedrockStandIn, Reply, tid};
use futures_util::StreamExt;
use serde_json::{Value, json};

fn engine(store: &MemoryStore, model: BedrockModel) -> Engine {
    Engine::builder()
        .model(model)
        .store(store.clone())
        .system_prompt("You are a test assistant. ".repeat(20))
        .tools(support::example_tools(&["current_time"]))
        .config(support::config())
        .build()
        .unwrap()
}

async fn turn(engine: &Engine, id: &str, text: &str) -> Vec<AgentEvent> {
    engine
        .invoke(
            Scope::new("cached".parse().unwrap()).with_turn_id(tid(id)),
            Prompt::text(text),
        )
        .collect()
        .await
}

/// Where `cachePoint` blocks sit: `system[i]`, `tools[i]`, `messages[m][b]`.
fn checkpoints(body: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let empty = Vec::new();
    for (i, block) in body["system"].as_array().unwrap_or(&empty).iter().enumerate() {
        if block.get("cachePoint").is_some() {
            found.push(format!("system[{i}]"));
        }
    }
    for (i, tool) in body["toolConfig"]["tools"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .enumerate()
    {
        if tool.get("cachePoint").is_some() {
            found.push(format!("tools[{i}]"));
        }
    }
    for (m, message) in body["messages"].as_array().unwrap_or(&empty).iter().enumerate() {
        for (b, block) in message["content"].as_array().unwrap_or(&empty).iter().enumerate() {
            if block.get("cachePoint").is_some() {
                found.push(format!("messages[{m}][{b}]"));
            }
        }
    }
    found
}

#[tokio::test]
async fn checkpoints_follow_the_system_prompt_and_the_stored_history_and_the_prefix_is_read_back() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let engine = engine(&store, BedrockModel::new(bedrock.client(), support::MODEL_ID));

    bedrock.push(Reply::tool_call("c1", "current_time", "{}"));
    bedrock.push(Reply::text("It is noon."));
    turn(&engine, "t1", "What time is it?").await;
    bedrock.push(Reply::text("Still noon."));
    turn(&engine, "t2", "And now?").await;
    bedrock.push(Reply::text("Yes."));
    let third = turn(&engine, "t3", "Sure?").await;

    let requests = bedrock.requests();
    assert_eq!(requests.len(), 4);
    // The first turn has no history: only the system prompt (with the tools before it) is marked.
    assert_eq!(checkpoints(&requests[0].body), ["system[1]"]);
    assert_eq!(checkpoints(&requests[1].body), ["system[1]"]);
    // Later turns mark the end of the stored history: 4 messages, then 6.
    assert_eq!(checkpoints(&requests[2].body), ["system[1]", "messages[3][1]"]);
    assert_eq!(checkpoints(&requests[3].body), ["system[1]", "messages[5][1]"]);

    // The first request writes the system prefix; every later one reads it.
    let cache: Vec<_> = requests.iter().map(|r| r.prompt_cache).collect();
    assert_eq!(cache[0].read_tokens, 0);
    assert!(cache[0].write_tokens > 0);
    // The SDK writes tool schemas from a `HashMap`, in a new order each request; the model's
    // interceptor sorts them, so the second step's prefix is the same bytes as the first's.
    assert_eq!(cache[1].read_tokens, cache[0].write_tokens);
    // Turn 3 reads all that turn 2 cached: its history prefix came back byte for byte.
    assert_eq!(
        cache[3].read_tokens,
        cache[2].read_tokens + cache[2].write_tokens,
        "{cache:?}"
    );
    assert!(cache[3].write_tokens > 0);

    // Usage reports what the cache did.
    assert!(
        third.contains(&AgentEvent::Usage {
            input_tokens: 12,
            output_tokens: 8,
            cache_read_tokens: cache[3].read_tokens,
            cache_write_tokens: cache[3].write_tokens,
            cost_usd: None,
        }),
        "{third:?}"
    );
    let wire = serde_json::to_value(
        third
            .iter()
            .find(|e| matches!(e, AgentEvent::Usage { .. }))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(wire["cacheReadInputTokens"], json!(cache[3].read_tokens));
}

#[tokio::test]
async fn models_that_do_not_cache_and_caching_turned_off_get_no_checkpoints() {
    let bedrock = BedrockStandIn::start().await.unwrap();
    let store = MemoryStore::new();
    let llama = engine(
        &store,
        BedrockModel::new(bedrock.client(), "meta.llama3-3-70b-instruct-v1:0"),
    );
    bedrock.push(Reply::text("Hi."));
    turn(&llama, "t1", "Hello").await;
    let off = engine(
        &store,
        BedrockModel::new(bedrock.client(), support::MODEL_ID).with_prompt_caching(false),
    );
    bedrock.push(Reply::text("Hi again."));
    turn(&off, "t2", "Hello again").await;
    let requests = bedrock.requests();
    assert_eq!(requests.len(), 2, "each engine called the model once");
    for request in requests {
        assert!(checkpoints(&request.body).is_empty(), "{}", request.body);
        assert_eq!(request.prompt_cache, Default::default());
    }
}

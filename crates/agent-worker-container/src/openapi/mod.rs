//! The host's OpenAPI 3.1 document, made from the route table ([`Route`]) and the schemas of the
//! types the routes read and answer (`schemars`, derived beside each type), served at
//! `GET /openapi.json` and kept in the repository (`docs/openapi.json`, which a test compares;
//! `agent-worker openapi` prints it).
//!
//! Every route of the router is in it, the product's API in full (bodies, queries, answers and
//! their statuses) and the protocols' doors as what they are (their bodies are their
//! specifications': A2A, AG-UI, MCP, AgentCore Runtime). Bodies a route reads are described as
//! they are read (serde's deserialize side), answers as they are written; a type whose two sides
//! differ is named twice, its read side with `Input` after its name.

use std::collections::BTreeSet;

use schemars::generate::SchemaSettings;
use schemars::{Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

mod operations;

use super::answers::StreamEnded;
use super::routes::{Door, Route};
use agent_worker_contract::AgentEvent;
use operations::{Answer, Body, Content};

/// The description of one path parameter, by its name.
fn path_param(name: &str) -> Value {
    let description = match name {
        "turn_id" => "The turn.",
        "call_id" => "The UI action's call.",
        "id" => "The conversation.",
        "file" => "The file's id.",
        "target" => "The A2A task (with `:cancel` or `:subscribe` after it on POST).",
        "config" => "The webhook's id.",
        _ => "",
    };
    json!({ "name": name, "in": "path", "required": true, "description": description, "schema": { "type": "string" } })
}

/// The query parameters of an object schema: one a property.
fn query_params(schema: &Schema) -> Vec<Value> {
    let resolved = schema.as_value();
    let required: Vec<&str> = resolved
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = resolved.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let mut property = property.clone();
            let description = property
                .as_object_mut()
                .and_then(|p| p.remove("description"))
                .unwrap_or(Value::Null);
            json!({
                "name": name,
                "in": "query",
                "required": required.contains(&name.as_str()),
                "description": description,
                "schema": property,
            })
        })
        .collect()
}

/// How a route reads a field of the query types it names.
enum Read {
    /// It does not read it.
    Not,
    /// It needs it.
    Needed,
    /// As the type says.
    AsDeclared,
}

/// How `route` reads query field `name`: the person's `session` names the conversation on a
/// turn's routes alone (the others have it in their path), and needs it there; a conversation
/// page's `cursor` is the list's, its `before` one conversation's.
fn read_as(route: Route, name: &str) -> Read {
    match name {
        "session" if route.path().starts_with("/turns/{turn_id}") => Read::Needed,
        "session" => Read::Not,
        "cursor" if route == Route::GetConversation => Read::Not,
        "before" if route == Route::ListConversations => Read::Not,
        _ => Read::AsDeclared,
    }
}

fn content(media: &str, schema: Value) -> Value {
    json!({ media: { "schema": schema } })
}

/// One operation, its schemas added to `outs` (answers) and `ins` (bodies and queries).
fn declaration(route: Route, outs: &mut SchemaGenerator, ins: &mut SchemaGenerator) -> Value {
    let operation = route.operation();
    let mut parameters: Vec<Value> = route.path_params().map(path_param).collect();
    // A query's type is spelled out in its parameters, one a field: inline, never a component.
    let mut inline = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .for_deserialize()
        .into_generator();
    for query in &operation.query {
        for mut parameter in query_params(&query(&mut inline)) {
            match read_as(route, parameter["name"].as_str().unwrap_or_default()) {
                Read::Not => continue,
                Read::Needed => parameter["required"] = json!(true),
                Read::AsDeclared => {}
            }
            parameters.push(parameter);
        }
    }
    if route == Route::TurnEvents {
        parameters.push(json!({
            "name": "Last-Event-ID", "in": "header", "required": false,
            "description": "Resume after this event's position (an event's SSE `id`).",
            "schema": { "type": "integer", "minimum": 0 },
        }));
        for (name, description) in [
            (
                "consoleToken",
                "The console's token, for a client that cannot send headers (`EventSource`): on this route alone.",
            ),
            (
                "accessToken",
                "A person's own token, for a client that cannot send headers (`EventSource`): on this route alone.",
            ),
        ] {
            parameters.push(json!({
                "name": name, "in": "query", "required": false, "description": description,
                "schema": { "type": "string" },
            }));
        }
    }
    let mut responses = Map::new();
    for Answer(status, description, body) in operation.answers {
        let mut response = json!({ "description": description });
        let content = match body {
            Content::Json(of) => Some(content("application/json", of(outs).to_value())),
            Content::Events => {
                let event = outs.subschema_for::<AgentEvent>().to_value();
                let ended = outs.subschema_for::<StreamEnded>().to_value();
                Some(json!({ "text/event-stream": {
                    "schema": { "type": "string", "description": "Server-Sent Events: each event's `event` is its type, its `data` an AgentEvent (`stream_ended`: a StreamEnded), its `id` its position." },
                    "x-event-data": { "anyOf": [event, ended] },
                } }))
            }
            Content::Bytes => Some(content("*/*", json!({ "type": "string", "format": "binary" }))),
            Content::Text(media) => Some(content(media, json!({ "type": "string" }))),
            Content::Protocol(media) => Some(Value::Object(
                media
                    .iter()
                    .map(|media| ((*media).to_owned(), json!({ "schema": {} })))
                    .collect(),
            )),
            Content::None => None,
        };
        if let Some(content) = content {
            response["content"] = content;
        }
        responses.insert(status.into(), response);
    }
    let mut declared = json!({
        "operationId": operation.id,
        "summary": operation.summary,
        "tags": [route.door().tag()],
        "responses": responses,
    });
    if !parameters.is_empty() {
        declared["parameters"] = Value::Array(parameters);
    }
    let request = match operation.body {
        Body::None => None,
        Body::Json { of, optional } => Some((content("application/json", of(ins).to_value()), !optional)),
        Body::Bytes => Some((
            content("*/*", json!({ "type": "string", "format": "binary" })),
            false,
        )),
        Body::Protocol(media) => Some((content(media, json!({})), true)),
    };
    if let Some((content, required)) = request {
        declared["requestBody"] = json!({ "required": required, "content": content });
    }
    if route.is_open() {
        declared["security"] = json!([]);
    }
    declared
}

fn generator(serialize: bool) -> SchemaGenerator {
    let settings = SchemaSettings::draft2020_12().with(|s| s.definitions_path = "/components/schemas".into());
    let settings = if serialize {
        settings.for_serialize()
    } else {
        settings.for_deserialize()
    };
    settings.into_generator()
}

/// Where the document keeps its schemas.
const SCHEMAS: &str = "#/components/schemas/";

/// Whether `value` refers to schema `name` anywhere in it.
fn refers_to(value: &Value, name: &str) -> bool {
    match value {
        Value::Object(object) => object.iter().any(|(key, value)| {
            (key == "$ref" && value.as_str().and_then(|r| r.strip_prefix(SCHEMAS)) == Some(name))
                || refers_to(value, name)
        }),
        Value::Array(items) => items.iter().any(|item| refers_to(item, name)),
        _ => false,
    }
}

/// Points every reference in `value` to a schema of `renamed` at its `Input` name.
fn to_inputs(value: &mut Value, renamed: &BTreeSet<String>) {
    match value {
        Value::Object(object) => {
            for (key, value) in object.iter_mut() {
                match value {
                    Value::String(reference) if key == "$ref" => {
                        if reference
                            .strip_prefix(SCHEMAS)
                            .is_some_and(|name| renamed.contains(name))
                        {
                            reference.push_str("Input");
                        }
                    }
                    other => to_inputs(other, renamed),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| to_inputs(item, renamed)),
        _ => {}
    }
}

/// The schemas of both sides in one map: a read side that differs from the written one (by its
/// own text, or by a schema it refers to that differs) is named `<name>Input`, and the
/// references of the read side (the operations' parameters and bodies) follow.
fn merged(outs: Map<String, Value>, ins: Map<String, Value>, paths: &mut Value) -> Map<String, Value> {
    let mut renamed: BTreeSet<String> = ins
        .iter()
        .filter(|(name, schema)| outs.get(*name).is_some_and(|written| written != *schema))
        .map(|(name, _)| name.clone())
        .collect();
    loop {
        let more: Vec<String> = ins
            .iter()
            .filter(|(name, schema)| {
                outs.contains_key(*name)
                    && !renamed.contains(*name)
                    && renamed.iter().any(|other| refers_to(schema, other))
            })
            .map(|(name, _)| name.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        renamed.extend(more);
    }
    let mut schemas = outs;
    for (name, mut schema) in ins {
        to_inputs(&mut schema, &renamed);
        if renamed.contains(&name) {
            schemas.insert(format!("{name}Input"), schema);
        } else {
            schemas.entry(name).or_insert(schema);
        }
    }
    for item in paths
        .as_object_mut()
        .into_iter()
        .flat_map(|paths| paths.values_mut())
    {
        for operation in item
            .as_object_mut()
            .into_iter()
            .flat_map(|item| item.values_mut())
        {
            for key in ["parameters", "requestBody"] {
                if let Some(part) = operation.get_mut(key) {
                    to_inputs(part, &renamed);
                }
            }
        }
    }
    schemas
}

/// The document.
pub fn document() -> Value {
    let mut outs = generator(true);
    let mut ins = generator(false);
    let mut paths = Map::new();
    for &route in Route::ALL {
        let declared = declaration(route, &mut outs, &mut ins);
        let item = paths
            .entry(route.path())
            .or_insert_with(|| Value::Object(Map::new()));
        item[route.method().as_str()] = declared;
    }
    let mut paths = Value::Object(paths);
    let schemas = merged(
        outs.take_definitions(true),
        ins.take_definitions(true),
        &mut paths,
    );
    let tags: Vec<Value> = [
        Door::Api,
        Door::Console,
        Door::A2a,
        Door::Agui,
        Door::Mcp,
        Door::AgentCore,
    ]
    .into_iter()
    .map(|door| json!({ "name": door.tag() }))
    .collect();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "agent-worker",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The HTTP API of agent-worker's host (`serve`, the API function): turns, their events, stops, conversations, files, UI answers, jobs, spending; and the doors of A2A, AG-UI, MCP and AgentCore Runtime on the same router. Every route but the open ones (`security: []`) takes the product's backend key (`x-api-key`, naming the person in the query), a person's own token (`Authorization: Bearer`), or the console's token.",
        },
        "tags": tags,
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "apiKey": { "type": "apiKey", "in": "header", "name": "x-api-key", "description": "The product's backend key: the query's userId and accountId name the person." },
                "bearer": { "type": "http", "scheme": "bearer", "bearerFormat": "JWT", "description": "A person's own token (AUTH=jwt)." },
                "consoleToken": { "type": "apiKey", "in": "header", "name": "x-console-token", "description": "The console's token: its own person." },
            },
        },
        "security": [{ "apiKey": [] }, { "bearer": [] }, { "consoleToken": [] }],
    })
}

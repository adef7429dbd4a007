//! Load time: one OpenAPI operation, with its `x-agent` declaration, made into a tool (its input
//! schema, its bindings, its effect), every problem noted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::engine::tools::{Effect, ToolSpec};

use super::call::{Binding, OperationTool, Place};
use super::events::{EventDeclarations, EventKind};
use super::{Check, DEFAULT_JOB_TIMEOUT, OpenApiOptions, X_AGENT_KEYS, events, schema};

pub(super) struct OperationContext<'a> {
    pub(super) document: &'a Value,
    pub(super) schemes: &'a BTreeSet<&'a str>,
    pub(super) path: &'a str,
    pub(super) item: &'a Value,
    pub(super) method: &'a str,
    pub(super) operation: &'a Value,
    pub(super) options: &'a Arc<OpenApiOptions>,
}

/// The effect as written: a name, or `{ kind, timeoutMs }`.
pub(super) fn read_effect(
    value: Option<&Value>,
    check: &mut Check<'_>,
) -> Option<(Effect, Option<Duration>)> {
    let Some(value) = value else {
        check.refuse("x-agent has no effect");
        return None;
    };
    let (name, timeout) = match value {
        Value::String(name) => (name.as_str(), None),
        Value::Object(object) => {
            let name = object
                .get("kind")
                .or_else(|| object.get("type"))
                .and_then(Value::as_str);
            let Some(name) = name else {
                check.refuse("the effect's object form needs a `kind`");
                return None;
            };
            (
                name,
                object
                    .get("timeoutMs")
                    .and_then(Value::as_u64)
                    .map(Duration::from_millis),
            )
        }
        other => {
            check.refuse(format!("effect {other} is neither a name nor an object"));
            return None;
        }
    };
    let effect = match name {
        "view" => Effect::View,
        "file" => Effect::File,
        "mutate" => Effect::Mutate,
        "job" => Effect::Job,
        "transaction" => Effect::Transaction,
        "selection" | "navigate" | "open" | "edit" => {
            check.refuse(format!("effect `{name}` is a page's effect, not an API's"));
            return None;
        }
        other => {
            check.refuse(format!("unknown effect `{other}`"));
            return None;
        }
    };
    Some((effect, timeout))
}

pub(super) fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The operation's parameters: the path item's, overridden by the operation's own.
pub(super) fn parameters(context: &OperationContext<'_>, check: &mut Check<'_>) -> Vec<Value> {
    let mut by_key: Vec<((String, String), Value)> = Vec::new();
    for list in [
        context.item.get("parameters"),
        context.operation.get("parameters"),
    ] {
        for parameter in list.and_then(Value::as_array).into_iter().flatten() {
            let parameter = match schema::resolve(parameter, context.document) {
                Ok(parameter) => parameter,
                Err(e) => {
                    check.refuse(e);
                    continue;
                }
            };
            let key = (
                parameter["name"].as_str().unwrap_or_default().to_owned(),
                parameter["in"].as_str().unwrap_or_default().to_owned(),
            );
            by_key.retain(|(k, _)| k != &key);
            by_key.push((key, parameter));
        }
    }
    by_key.into_iter().map(|(_, p)| p).collect()
}

pub(super) fn build(
    context: &OperationContext<'_>,
    x_agent: &Value,
    check: &mut Check<'_>,
) -> Option<OperationTool> {
    let before = check.problems.len();
    let Some(x_agent) = x_agent.as_object() else {
        check.refuse("x-agent must be an object");
        return None;
    };
    for key in x_agent.keys().filter(|k| !X_AGENT_KEYS.contains(&k.as_str())) {
        check.refuse(format!("unknown x-agent key `{key}`"));
    }
    let name = context.operation.get("operationId").and_then(Value::as_str);
    match name {
        None => check.refuse("no operationId"),
        Some(name) if !valid_name(name) => check.refuse(format!(
            "operationId {name:?} is not a tool name (1 to 64 of A-Z a-z 0-9 _ -)"
        )),
        Some(_) => {}
    }
    let flag = |key: &str| x_agent.get(key).and_then(Value::as_bool).unwrap_or(false);
    let (expose, pa, destructive) = (flag("expose"), flag("pa"), flag("destructive"));
    // Whether the API takes `Idempotency-Key` on the operation: unless it says not, yes.
    let idempotent = match x_agent.get("idempotent") {
        None => true,
        Some(Value::Bool(idempotent)) => *idempotent,
        Some(_) => {
            check.refuse("idempotent must be true or false");
            true
        }
    };
    let effect = read_effect(x_agent.get("effect"), check);
    if let Some((effect, _)) = effect {
        if pa && effect != Effect::View {
            check.refuse("pa is allowed only on a read (effect view)");
        }
        if destructive && effect == Effect::View {
            check.refuse("destructive on a read");
        }
        if effect == Effect::View && matches!(context.method, "put" | "patch" | "delete") {
            check.refuse(format!(
                "a read (effect view) on {}",
                context.method.to_uppercase()
            ));
        }
    }
    match context
        .operation
        .get("security")
        .or_else(|| context.document.get("security"))
    {
        None => check.refuse("no security requirement (use [] for a public operation)"),
        Some(requirements) => {
            for requirement in requirements.as_array().into_iter().flatten() {
                for scheme in requirement.as_object().into_iter().flatten().map(|(k, _)| k) {
                    if !context.schemes.contains(scheme.as_str()) {
                        check.refuse(format!("security scheme `{scheme}` is not declared"));
                    }
                }
            }
        }
    }

    let mut properties = Map::new();
    let mut required: Vec<Value> = Vec::new();
    let mut places = BTreeMap::new();
    let mut required_headers = Vec::new();
    let mut path_params = BTreeSet::new();
    for parameter in parameters(context, check) {
        let name = parameter["name"].as_str().unwrap_or_default().to_owned();
        let is_required = parameter["required"].as_bool().unwrap_or(false);
        let place = match parameter["in"].as_str() {
            Some("path") => {
                path_params.insert(name.clone());
                Place::Path
            }
            Some("query") => Place::Query,
            Some("header") => {
                if is_required {
                    required_headers.push(name);
                }
                continue;
            }
            other => {
                check.refuse(format!("parameter `{name}` in {other:?} is not supported"));
                continue;
            }
        };
        let mut schema =
            match schema::resolve(parameter.get("schema").unwrap_or(&json!({})), context.document) {
                Ok(schema) => schema,
                Err(e) => {
                    check.refuse(e);
                    continue;
                }
            };
        if let (Some(description), Some(object)) = (parameter.get("description"), schema.as_object_mut()) {
            object.entry("description").or_insert_with(|| description.clone());
        }
        if is_required || place == Place::Path {
            required.push(Value::String(name.clone()));
        }
        properties.insert(name.clone(), schema);
        places.insert(name, place);
    }
    let template: BTreeSet<String> = context
        .path
        .split('/')
        .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(str::to_owned)
        .collect();
    if template != path_params {
        check.refuse(format!(
            "the path template's parameters {template:?} and the declared path parameters {path_params:?} disagree"
        ));
    }
    if let Some(body) = context.operation.get("requestBody") {
        match schema::resolve(body, context.document) {
            Err(e) => check.refuse(e),
            Ok(body) => add_body(
                &body,
                context.document,
                &mut properties,
                &mut required,
                &mut places,
                check,
            ),
        }
    }
    let binding = context
        .operation
        .get("x-async-binding")
        .and_then(|b| read_binding(b, effect, context.options.events.as_ref(), check));
    if check.problems.len() > before {
        return None;
    }
    let (effect, _) = effect?;
    let name = name?.to_owned();
    let summary = context.operation.get("summary").and_then(Value::as_str);
    let consequence = x_agent.get("consequence").and_then(Value::as_str);
    let description = [
        summary,
        context.operation.get("description").and_then(Value::as_str),
        consequence,
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join("\n\n");
    let input_schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    let mut spec = ToolSpec::new(&name, description, input_schema)
        .effect(effect)
        .destructive(destructive)
        .idempotent(idempotent);
    if let Some(summary) = summary {
        spec = spec.title(summary);
    }
    if let Some(consequence) = consequence {
        spec = spec.consequence(consequence);
    }
    let method = reqwest::Method::from_bytes(context.method.to_uppercase().as_bytes()).ok()?;
    Some(OperationTool {
        spec,
        expose,
        pa,
        method,
        path: context.path.to_owned(),
        places,
        required_headers,
        binding,
        options: context.options.clone(),
    })
}

/// Adds the JSON body to the input: a closed object's fields beside the parameters, any other
/// body as `body`.
pub(super) fn add_body(
    body: &Value,
    document: &Value,
    properties: &mut Map<String, Value>,
    required: &mut Vec<Value>,
    places: &mut BTreeMap<String, Place>,
    check: &mut Check<'_>,
) {
    let content = body.get("content").and_then(Value::as_object);
    let json_schema = content.into_iter().flatten().find_map(|(media, value)| {
        let json = media == "application/json" || media.ends_with("+json");
        json.then(|| value.get("schema").cloned().unwrap_or_else(|| json!({})))
    });
    let Some(schema) = json_schema else {
        check.refuse("the request body is not JSON (application/json)");
        return;
    };
    let schema = match schema::resolve(&schema, document) {
        Ok(schema) => schema,
        Err(e) => {
            check.refuse(e);
            return;
        }
    };
    let body_required = body.get("required").and_then(Value::as_bool).unwrap_or(false);
    let closed = schema.get("type") == Some(&json!("object"))
        && schema.get("additionalProperties") == Some(&Value::Bool(false))
        && schema.get("properties").is_some_and(Value::is_object);
    if !closed {
        properties.insert("body".into(), schema);
        places.insert("body".into(), Place::Body);
        if body_required {
            required.push("body".into());
        }
        return;
    }
    for (name, field) in schema["properties"].as_object().into_iter().flatten() {
        if properties.contains_key(name) {
            check.refuse(format!("body field `{name}` has the name of a parameter"));
            continue;
        }
        properties.insert(name.clone(), field.clone());
        places.insert(name.clone(), Place::BodyField);
    }
    required.extend(schema["required"].as_array().into_iter().flatten().cloned());
}

pub(super) fn read_binding(
    binding: &Value,
    effect: Option<(Effect, Option<Duration>)>,
    events: Option<&EventDeclarations>,
    check: &mut Check<'_>,
) -> Option<Binding> {
    let Some(events) = events else {
        check.refuse("x-async-binding, but no event declarations were given");
        return None;
    };
    if let Some((effect, _)) = effect
        && !matches!(effect, Effect::Job | Effect::Transaction)
    {
        check.refuse("x-async-binding on an operation whose effect is not job or transaction");
    }
    let Some(event) = binding.get("event").and_then(Value::as_str) else {
        check.refuse("x-async-binding names no event");
        return None;
    };
    let declared = match events.get(event) {
        Some(declared) if declared.kind == EventKind::Completion => declared,
        Some(_) => {
            check.refuse(format!("event `{event}` is declared, but not as a completion"));
            return None;
        }
        None => {
            check.refuse(format!("event `{event}` is not declared"));
            return None;
        }
    };
    let text = |key: &str| binding.get(key).and_then(Value::as_str).map(str::to_owned);
    let correlation = text("correlation").unwrap_or_else(|| declared.correlation.clone());
    let timeout = match binding.get("timeout") {
        Some(value) => match events::parse_timeout(value) {
            Ok(timeout) => timeout,
            Err(e) => {
                check.refuse(e);
                return None;
            }
        },
        None => effect.and_then(|(_, t)| t).unwrap_or(DEFAULT_JOB_TIMEOUT),
    };
    Some(Binding {
        completion: event.to_owned(),
        failure: text("failure").or_else(|| declared.failure.clone()),
        id_field: text("idField").unwrap_or_else(|| correlation.clone()),
        correlation,
        timeout,
    })
}

//! Tools from a product's own OpenAPI 3 document: [`load_openapi_tools`].
//!
//! An operation opts in with `x-agent`:
//!
//! | key | meaning |
//! | --- | --- |
//! | `expose: true` | the operation is a tool; without it, it is not offered |
//! | `effect` | `view` (a read), `file`, `mutate`, `job` or `transaction`, or `{ kind, timeoutMs }`; a page's effects (`selection`, `navigate`, `open`, `edit`) are refused |
//! | `destructive: true` | on a write: it removes or replaces something the person made |
//! | `consequence` | a sentence saying what happens: in the description and an approval's preview |
//! | `pa: true` | the product's own assistant may call it; only on a read |
//!
//! A tool is named by the `operationId` and described by the summary, the description and the
//! consequence. Its input is the path and query parameters and the JSON body: `$ref`s inlined,
//! `nullable` read as a union with null, `readOnly` fields left out; a closed object body's
//! fields sit beside the parameters, any other body is `body`; undeclared properties are refused,
//! and every call is checked against that schema before it is sent. Header parameters are never
//! input: the required `act_as` callback supplies the headers that make the API treat the call as
//! the person, and a call that leaves out a required header fails without being sent. A refusal
//! from the API is the tool's error, with its status and body, for the model to read.
//!
//! `effect` and `destructive` feed approvals: a transaction runs only with the person's approval
//! of that exact call; where there is no way to ask (no approval store), it answers
//! `APPROVAL_REQUIRED` and sends nothing.
//!
//! An operation that starts a job names the completion event it ends with in `x-async-binding`
//! (`event`, and optionally `timeout`, `failure`, `correlation`, `idField`), checked against the
//! event declarations passed in. With a waiter, the tool waits for the job: `status: complete`
//! with the result, a failure fails the call, and a job not settled in time answers `status:
//! dispatched`. Without a waiter it answers the dispatch.
//!
//! Everything wrong with a document is reported at once, each problem naming its operation.

mod events;
mod schema;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

pub use events::{
    EventDeclaration, EventDeclarations, EventKind, EventWaiter, JobWait, MemoryEventWaiter, Settled,
};

use super::{Effect, Tool, ToolContext, ToolError, ToolSpec};

/// How long a job is waited for when neither its binding nor its effect says.
pub const DEFAULT_JOB_TIMEOUT: Duration = Duration::from_secs(60);

const X_AGENT_KEYS: [&str; 5] = ["expose", "effect", "destructive", "consequence", "pa"];
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "patch", "head", "options", "trace",
];

/// Which operations become tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Audience {
    /// Every exposed operation.
    #[default]
    Agents,
    /// Only exposed operations flagged `pa: true` (the product's own assistant).
    Pa,
}

/// Who a call acts for, as `act_as` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActAsContext {
    /// The person the turn runs for.
    pub user_id: Option<String>,
    /// Their account.
    pub account_id: Option<String>,
    /// The session.
    pub session: String,
    /// The tool being called.
    pub tool: String,
}

/// Gives the headers that make the API treat a call as the person.
pub type ActAs = Arc<dyn Fn(&ActAsContext) -> Result<Vec<(String, String)>, String> + Send + Sync>;

/// How to load a document's tools.
#[derive(Clone)]
pub struct OpenApiOptions {
    base_url: String,
    audience: Audience,
    act_as: ActAs,
    http: reqwest::Client,
    events: Option<EventDeclarations>,
    waiter: Option<Arc<dyn EventWaiter>>,
}

impl fmt::Debug for OpenApiOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenApiOptions")
            .field("base_url", &self.base_url)
            .field("audience", &self.audience)
            .field("events", &self.events.as_ref().map(|e| e.0.len()))
            .finish_non_exhaustive()
    }
}

impl OpenApiOptions {
    /// Calls go to `base_url`, with the headers `act_as` gives for the person (required: there is
    /// no default identity).
    pub fn new(
        base_url: impl Into<String>,
        act_as: impl Fn(&ActAsContext) -> Result<Vec<(String, String)>, String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            base_url: base_url.into(),
            audience: Audience::Agents,
            act_as: Arc::new(act_as),
            http: reqwest::Client::new(),
            events: None,
            waiter: None,
        }
    }

    /// Which operations become tools.
    #[must_use]
    pub fn audience(mut self, audience: Audience) -> Self {
        self.audience = audience;
        self
    }

    /// The product's event declarations, for `x-async-binding`.
    #[must_use]
    pub fn events(mut self, events: EventDeclarations) -> Self {
        self.events = Some(events);
        self
    }

    /// What waits for jobs to settle.
    #[must_use]
    pub fn waiter(mut self, waiter: Arc<dyn EventWaiter>) -> Self {
        self.waiter = Some(waiter);
        self
    }

    /// The HTTP client calls go out on (timeouts, proxies, TLS of your own).
    #[must_use]
    pub fn http(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }
}

/// One thing wrong with a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The operation: its operationId, or `METHOD /path` when it has none.
    pub operation: String,
    /// What is wrong.
    pub reason: String,
}

/// A document whose tools cannot be loaded; every problem is listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct OpenApiError {
    /// The problems, in document order.
    pub problems: Vec<Problem>,
}

impl fmt::Display for OpenApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the OpenAPI document has {} problem(s):", self.problems.len())?;
        for problem in &self.problems {
            write!(f, "\n- {}: {}", problem.operation, problem.reason)?;
        }
        Ok(())
    }
}

/// The tools of `document`'s exposed operations, or every problem with them.
pub fn load_openapi_tools(
    document: &Value,
    options: OpenApiOptions,
) -> Result<Vec<Arc<dyn Tool>>, OpenApiError> {
    let mut problems = Vec::new();
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let schemes: BTreeSet<&str> = document
        .pointer("/components/securitySchemes")
        .and_then(Value::as_object)
        .map(|s| s.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let options = Arc::new(options);
    for (path, item) in document
        .get("paths")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        for method in METHODS {
            let Some(operation) = item.get(method) else {
                continue;
            };
            let Some(x_agent) = operation.get("x-agent") else {
                continue;
            };
            let label = operation
                .get("operationId")
                .and_then(Value::as_str)
                .map_or_else(|| format!("{} {path}", method.to_uppercase()), str::to_owned);
            let mut check = Check {
                label: &label,
                problems: &mut problems,
            };
            let context = OperationContext {
                document,
                schemes: &schemes,
                path,
                item,
                method,
                operation,
                options: &options,
            };
            if let Some(tool) = build(&context, x_agent, &mut check) {
                let wanted = match options.audience {
                    Audience::Agents => true,
                    Audience::Pa => tool.pa,
                };
                if tool.expose && wanted {
                    tools.push(Arc::new(tool));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(tools)
    } else {
        Err(OpenApiError { problems })
    }
}

struct Check<'a> {
    label: &'a str,
    problems: &'a mut Vec<Problem>,
}

impl Check<'_> {
    fn refuse(&mut self, reason: impl Into<String>) {
        self.problems.push(Problem {
            operation: self.label.to_owned(),
            reason: reason.into(),
        });
    }
}

struct OperationContext<'a> {
    document: &'a Value,
    schemes: &'a BTreeSet<&'a str>,
    path: &'a str,
    item: &'a Value,
    method: &'a str,
    operation: &'a Value,
    options: &'a Arc<OpenApiOptions>,
}

/// Where an input property goes in the request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Path,
    Query,
    /// A field of a closed object body.
    BodyField,
    /// The whole body.
    Body,
}

/// A job the operation starts, and how to wait for it.
#[derive(Debug, Clone)]
struct Binding {
    completion: String,
    failure: Option<String>,
    correlation: String,
    id_field: String,
    timeout: Duration,
}

/// A tool made from one operation.
struct OperationTool {
    spec: ToolSpec,
    expose: bool,
    pa: bool,
    method: reqwest::Method,
    path: String,
    places: BTreeMap<String, Place>,
    required_headers: Vec<String>,
    binding: Option<Binding>,
    options: Arc<OpenApiOptions>,
}

impl fmt::Debug for OperationTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperationTool")
            .field("name", &self.spec.name)
            .field("method", &self.method)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The effect as written: a name, or `{ kind, timeoutMs }`.
fn read_effect(value: Option<&Value>, check: &mut Check<'_>) -> Option<(Effect, Option<Duration>)> {
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

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The operation's parameters: the path item's, overridden by the operation's own.
fn parameters(context: &OperationContext<'_>, check: &mut Check<'_>) -> Vec<Value> {
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

fn build(context: &OperationContext<'_>, x_agent: &Value, check: &mut Check<'_>) -> Option<OperationTool> {
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
        .destructive(destructive);
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
fn add_body(
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

fn read_binding(
    binding: &Value,
    effect: Option<(Effect, Option<Duration>)>,
    events: Option<&EventDeclarations>,
    check: &mut Check<'_>,
) -> Option<Binding> {
    let Some(events) = events else {
        check.refuse("x-async-binding, but no event declarations were given");
        return None;
    };
    if let Some((effect, _)) = effect {
        if !matches!(effect, Effect::Job | Effect::Transaction) {
            check.refuse("x-async-binding on an operation whose effect is not job or transaction");
        }
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

/// Percent-encodes a path segment.
fn encode_segment(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl OperationTool {
    /// The request for `input`, with `headers`.
    fn request(
        &self,
        input: &Value,
        headers: &[(String, String)],
    ) -> Result<reqwest::RequestBuilder, ToolError> {
        let mut path = self.path.clone();
        let mut query = Vec::new();
        let mut fields = Map::new();
        let mut body = None;
        for (name, value) in input.as_object().into_iter().flatten() {
            match self.places.get(name) {
                Some(Place::Path) => {
                    path = path.replace(&format!("{{{name}}}"), &encode_segment(&plain(value)))
                }
                Some(Place::Query) => match value {
                    Value::Array(items) => query.extend(items.iter().map(|v| (name.clone(), plain(v)))),
                    Value::Null => {}
                    other => query.push((name.clone(), plain(other))),
                },
                Some(Place::BodyField) => {
                    fields.insert(name.clone(), value.clone());
                }
                Some(Place::Body) => body = Some(value.clone()),
                None => {
                    return Err(ToolError::new(format!(
                        "`{name}` is not an input of {}",
                        self.spec.name
                    )));
                }
            }
        }
        if !fields.is_empty() || self.places.values().any(|p| *p == Place::BodyField) {
            body = Some(Value::Object(fields));
        }
        let base = self.options.base_url.trim_end_matches('/');
        let mut url = reqwest::Url::parse(&format!("{base}{path}"))
            .map_err(|e| ToolError::new(format!("cannot make the URL of {}: {e}", self.spec.name)))?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let mut request = self.options.http.request(self.method.clone(), url);
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Some(body) = body {
            let bytes = serde_json::to_vec(&body).map_err(|e| ToolError::new(e.to_string()))?;
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(bytes);
        }
        Ok(request)
    }

    async fn settle(&self, binding: &Binding, answer: Value) -> Result<Value, ToolError> {
        let id = match answer.get(&binding.id_field) {
            Some(Value::String(id)) => id.clone(),
            Some(Value::Number(id)) => id.to_string(),
            _ => {
                return Err(ToolError {
                    message: format!(
                        "the job started, but the answer has no id in `{}`",
                        binding.id_field
                    ),
                    details: Some(answer),
                });
            }
        };
        let Some(waiter) = &self.options.waiter else {
            return Ok(json!({ "status": "dispatched", "id": id, "response": answer }));
        };
        let job = JobWait {
            completion: binding.completion.clone(),
            failure: binding.failure.clone(),
            correlation: binding.correlation.clone(),
            id: id.clone(),
            timeout: binding.timeout,
        };
        match waiter.wait(&job).await {
            Settled::Completed(result) => Ok(json!({ "status": "complete", "id": id, "result": result })),
            Settled::Failed(payload) => Err(ToolError {
                message: format!(
                    "job {id} failed: {}",
                    payload
                        .get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("no reason given")
                ),
                details: Some(payload),
            }),
            Settled::TimedOut => Ok(json!({
                "status": "dispatched",
                "id": id,
                "reason": format!("the job had not settled after {} s; it goes on", binding.timeout.as_secs()),
            })),
        }
    }
}

#[async_trait]
impl Tool for OperationTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let headers = (self.options.act_as)(&ActAsContext {
            user_id: ctx.user_id.clone(),
            account_id: ctx.account_id.clone(),
            session: ctx.session.clone(),
            tool: self.spec.name.clone(),
        })
        .map_err(|e| ToolError::new(format!("cannot act as the person: {e}; nothing was sent")))?;
        for header in &self.required_headers {
            if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case(header)) {
                return Err(ToolError::new(format!(
                    "{} requires header `{header}`, which act_as did not give; nothing was sent",
                    self.spec.name
                )));
            }
        }
        let response = self
            .request(&input, &headers)?
            .send()
            .await
            .map_err(|e| ToolError::new(format!("{} could not reach the API: {e}", self.spec.name)))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| ToolError::new(format!("{}: the answer could not be read: {e}", self.spec.name)))?;
        let answer = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if !status.is_success() {
            return Err(ToolError {
                message: format!("{} was refused: {status}", self.spec.name),
                details: Some(json!({ "status": status.as_u16(), "body": answer })),
            });
        }
        match &self.binding {
            Some(binding) => self.settle(binding, answer).await,
            None => Ok(answer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> OpenApiOptions {
        OpenApiOptions::new("http://127.0.0.1:9", |_| Ok(vec![("x-user".into(), "u".into())]))
    }

    fn doc(paths: Value) -> Value {
        json!({
            "openapi": "3.0.3",
            "security": [{ "actAs": [] }],
            "components": { "securitySchemes": { "actAs": { "type": "apiKey", "in": "header", "name": "x-user" } } },
            "paths": paths,
        })
    }

    fn problems(document: Value) -> Vec<String> {
        match load_openapi_tools(&document, options()) {
            Ok(tools) => panic!("expected problems, got {} tools", tools.len()),
            Err(e) => e
                .problems
                .iter()
                .map(|p| format!("{}: {}", p.operation, p.reason))
                .collect(),
        }
    }

    #[test]
    fn every_problem_of_a_document_is_reported_with_its_operation() {
        let found = problems(doc(json!({
            "/a": {
                "get": { "operationId": "readA", "x-agent": { "expose": true } },
                "put": { "operationId": "putA", "x-agent": { "expose": true, "effect": "view" } },
                "post": { "operationId": "postA", "x-agent": { "expose": true, "effect": "mutate", "pa": true, "colour": 1 } },
                "delete": { "x-agent": { "expose": true, "effect": "mutate" } }
            },
            "/b/{id}": {
                "get": { "operationId": "getB", "x-agent": { "expose": true, "effect": "view", "destructive": true },
                         "security": [{ "nobody": [] }] },
                "post": { "operationId": "bad name!", "x-agent": { "expose": true, "effect": "navigate" },
                          "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "string" } }],
                          "requestBody": { "content": { "text/plain": { "schema": { "type": "string" } } } } }
            }
        })));
        let expected = [
            "readA: x-agent has no effect",
            "putA: a read (effect view) on PUT",
            "postA: unknown x-agent key `colour`",
            "postA: pa is allowed only on a read (effect view)",
            "DELETE /a: no operationId",
            "getB: destructive on a read",
            "getB: security scheme `nobody` is not declared",
            "getB: the path template's parameters {\"id\"} and the declared path parameters {} disagree",
            "bad name!: operationId \"bad name!\" is not a tool name (1 to 64 of A-Z a-z 0-9 _ -)",
            "bad name!: effect `navigate` is a page's effect, not an API's",
            "bad name!: the request body is not JSON (application/json)",
        ];
        assert_eq!(found, expected);
    }

    #[test]
    fn no_security_and_bad_refs_and_bindings_are_refused() {
        let mut document = doc(json!({
            "/c": { "post": {
                "operationId": "postC",
                "x-agent": { "expose": true, "effect": "mutate" },
                "security": null,
                "requestBody": { "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Loop" } } } },
                "x-async-binding": { "event": "c:done" }
            } }
        }));
        document["components"]["schemas"] = json!({ "Loop": { "type": "object", "properties": { "me": { "$ref": "#/components/schemas/Loop" } } } });
        document.as_object_mut().unwrap().remove("security");
        document["paths"]["/c"]["post"]
            .as_object_mut()
            .unwrap()
            .remove("security");
        let found = problems(document);
        assert_eq!(
            found,
            [
                "postC: no security requirement (use [] for a public operation)",
                "postC: self-referencing `$ref` \"#/components/schemas/Loop\"",
                "postC: x-async-binding, but no event declarations were given",
            ]
        );
    }

    #[test]
    fn an_operation_becomes_a_tool_with_its_input_schema() {
        let document = doc(json!({
            "/tickets/{ticketId}/refunds": {
                "parameters": [{ "name": "ticketId", "in": "path", "required": true, "schema": { "type": "string" } }],
                "post": {
                    "operationId": "refundTicket",
                    "summary": "Refund a ticket.",
                    "x-agent": { "expose": true, "effect": "transaction", "consequence": "The customer gets their money back." },
                    "parameters": [
                        { "name": "x-request-id", "in": "header", "required": true, "schema": { "type": "string" } },
                        { "name": "notify", "in": "query", "schema": { "type": "boolean" } }
                    ],
                    "requestBody": { "required": true, "content": { "application/json": { "schema": {
                        "type": "object", "additionalProperties": false,
                        "properties": { "amount": { "type": "integer" }, "id": { "type": "string", "readOnly": true },
                                        "note": { "type": "string", "nullable": true } },
                        "required": ["amount", "id"]
                    } } } }
                }
            },
            "/tickets": { "get": { "operationId": "listTickets", "x-agent": { "expose": true, "effect": "view", "pa": true },
                                   "security": [] } },
            "/hidden": { "get": { "operationId": "hidden", "x-agent": { "effect": "view" } } }
        }));
        let tools = load_openapi_tools(&document, options()).unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.spec().name.as_str()).collect();
        assert_eq!(
            names,
            ["refundTicket", "listTickets"],
            "an operation without expose is no tool"
        );
        let refund = tools[0].spec();
        assert_eq!(refund.effect, Effect::Transaction);
        assert_eq!(
            refund.description,
            "Refund a ticket.\n\nThe customer gets their money back."
        );
        assert_eq!(
            refund.input_schema,
            json!({
                "type": "object",
                "properties": {
                    "ticketId": { "type": "string" },
                    "notify": { "type": "boolean" },
                    "amount": { "type": "integer" },
                    "note": { "type": ["string", "null"] }
                },
                "required": ["ticketId", "amount"],
                "additionalProperties": false
            })
        );
        let pa = load_openapi_tools(&document, options().audience(Audience::Pa)).unwrap();
        assert_eq!(
            pa.iter().map(|t| t.spec().name.clone()).collect::<Vec<_>>(),
            ["listTickets"]
        );
    }
}

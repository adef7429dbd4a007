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

mod call;
mod events;
mod operation;
mod schema;

use operation::{OperationContext, build};

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub use call::IDEMPOTENCY_KEY_HEADER;
pub use events::{
    CONVERSATION_HEADER, EventDeclaration, EventDeclarations, EventKind, EventWaiter, JobKey, JobWait,
    MAX_JOB_PAYLOAD_BYTES, MemoryEventWaiter, NoSuchJob, NotAJobEvent, Settled,
};

use super::Tool;

/// How long a job is waited for when neither its binding nor its effect says.
pub const DEFAULT_JOB_TIMEOUT: Duration = Duration::from_secs(60);

const X_AGENT_KEYS: [&str; 6] = [
    "expose",
    "effect",
    "destructive",
    "consequence",
    "pa",
    "idempotent",
];

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
    pub session: crate::session::SessionId,
    /// The turn.
    pub turn_id: crate::session::TurnId,
    /// The tool being called.
    pub tool: String,
    /// The person's own token for the API, when the turn carried one (`Debug` hides it).
    pub user_token: Option<crate::protocol::UserToken>,
}

/// Gives the headers that make the API treat a call as the person.
pub type ActAs = Arc<dyn Fn(&ActAsContext) -> Result<Vec<(String, String)>, ActAsError> + Send + Sync>;

/// Why a call cannot act as the person (the turn names no one, a key cannot be read): any
/// error, kept whole; the model is told its text, and nothing is sent.
pub type ActAsError = Box<dyn std::error::Error + Send + Sync>;

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
        act_as: impl Fn(&ActAsContext) -> Result<Vec<(String, String)>, ActAsError> + Send + Sync + 'static,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tools::Effect;
    use serde_json::json;

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

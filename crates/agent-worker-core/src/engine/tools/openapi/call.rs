//! Call time: an operation tool builds its request from the checked input and the act-as
//! headers, sends it, and reads the answer (or waits for the job's event).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::events::{CONVERSATION_HEADER, JobWait, Settled};
use super::{ActAsContext, OpenApiOptions};
use crate::engine::tools::{Tool, ToolContext, ToolError, ToolSpec};

/// Where an input property goes in the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Place {
    Path,
    Query,
    /// A field of a closed object body.
    BodyField,
    /// The whole body.
    Body,
}

/// A job the operation starts, and how to wait for it.
#[derive(Debug, Clone)]
pub(super) struct Binding {
    pub(super) completion: String,
    pub(super) failure: Option<String>,
    pub(super) correlation: String,
    pub(super) id_field: String,
    pub(super) timeout: Duration,
}

/// A tool made from one operation.
pub(super) struct OperationTool {
    pub(super) spec: ToolSpec,
    pub(super) expose: bool,
    pub(super) pa: bool,
    pub(super) method: reqwest::Method,
    pub(super) path: String,
    pub(super) places: BTreeMap<String, Place>,
    pub(super) required_headers: Vec<String>,
    pub(super) binding: Option<Binding>,
    pub(super) options: Arc<OpenApiOptions>,
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

/// Percent-encodes a path segment.
pub(super) fn encode_segment(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(super) fn plain(value: &Value) -> String {
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

    async fn settle(
        &self,
        binding: &Binding,
        answer: Value,
        conversation: &crate::session::SessionId,
    ) -> Result<Value, ToolError> {
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
            conversation: conversation.clone(),
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

/// The header that carries a call's idempotency key
/// ([`ToolContext::idempotency_key`](crate::engine::tools::ToolContext::idempotency_key)).
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

#[async_trait]
impl Tool for OperationTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let mut headers = (self.options.act_as)(&ActAsContext {
            user_id: ctx.user_id.clone(),
            account_id: ctx.account_id.clone(),
            session: ctx.session.clone(),
            turn_id: ctx.turn_id.clone(),
            tool: self.spec.name.clone(),
            user_token: ctx.user_token.clone(),
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
        // A request that changes something carries the call's idempotency key, the same on
        // every run of the turn: one sent again after its worker died takes effect once.
        // A call that changes something by its declaration, whatever its method, or by its
        // method.
        let changes = self.spec.effect != super::super::Effect::View
            || self.spec.destructive
            || !matches!(
                self.method,
                reqwest::Method::GET | reqwest::Method::HEAD | reqwest::Method::OPTIONS
            );
        if changes
            && self.spec.idempotent
            && !headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case(IDEMPOTENCY_KEY_HEADER))
        {
            headers.push((IDEMPOTENCY_KEY_HEADER.to_owned(), ctx.idempotency_key()));
        }
        if self.binding.is_some() {
            // The product names the conversation when it reports the job's event.
            headers.push((CONVERSATION_HEADER.to_owned(), ctx.session.to_string()));
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
            Some(binding) => self.settle(binding, answer, &ctx.session).await,
            None => Ok(answer),
        }
    }
}

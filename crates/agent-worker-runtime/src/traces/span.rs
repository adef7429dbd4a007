//! [`TurnTrace`]: one turn's spans, built from its events as they pass: the turn, each model
//! call, each tool call.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::{TraceConfig, TraceParent};
use crate::metrics::{APPROVAL, tool_result};
use crate::payload::AgentTurnPayload;
use agent_worker_contract::{AgentEvent, codes};

/// A span's kind, as OTLP numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Internal = 1,
    Client = 3,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Attr {
    Str(String),
    Int(u64),
}

impl From<&str> for Attr {
    fn from(value: &str) -> Self {
        Self::Str(value.to_owned())
    }
}

impl From<String> for Attr {
    fn from(value: String) -> Self {
        Self::Str(value)
    }
}

impl From<u64> for Attr {
    fn from(value: u64) -> Self {
        Self::Int(value)
    }
}

/// A span's attributes, in the order they were set.
pub(super) type Attributes = Vec<(&'static str, Attr)>;

/// One span, ready to send.
#[derive(Debug, Clone)]
pub(super) struct Span {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: Option<String>,
    pub name: String,
    pub kind: Kind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Attributes,
    /// Events in the span: when, name, attributes.
    pub events: Vec<(SystemTime, &'static str, Attributes)>,
    /// The error's description, when the span failed.
    pub error: Option<String>,
}

impl Span {
    fn new(trace_id: &str, parent: Option<String>, name: String, kind: Kind, start: SystemTime) -> Self {
        Self {
            trace_id: trace_id.to_owned(),
            span_id: format!(
                "{:016x}",
                (agent_worker_contract::fresh_random_bits() as u64).max(1)
            ),
            parent_span_id: parent,
            name,
            kind,
            start,
            end: start,
            attributes: Vec::new(),
            events: Vec::new(),
            error: None,
        }
    }

    fn set(&mut self, key: &'static str, value: impl Into<Attr>) {
        self.attributes.push((key, value.into()));
    }

    /// Marks the span failed with `error.type` `kind`, `why` as its status.
    fn fail(&mut self, kind: &str, why: String) {
        self.set("error.type", kind);
        self.error = Some(why);
    }
}

/// The tokens a turn or a call used.
#[derive(Debug, Clone, Copy, Default)]
struct Tokens {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
}

impl Tokens {
    fn add(&mut self, other: Tokens) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }

    /// The GenAI usage attributes: input tokens count those read from and written to the
    /// cache too, as the conventions define them.
    fn record(self, span: &mut Span) {
        span.set(
            "gen_ai.usage.input_tokens",
            self.input + self.cache_read + self.cache_write,
        );
        span.set("gen_ai.usage.output_tokens", self.output);
        span.set("gen_ai.usage.cache_read.input_tokens", self.cache_read);
        span.set("gen_ai.usage.cache_creation.input_tokens", self.cache_write);
    }
}

/// What content capture keeps: the answer so far, and which tools may be shown.
#[derive(Debug)]
struct Capture {
    answer: String,
    shown_tools: Arc<HashSet<String>>,
}

/// One turn's trace, gathered from its events ([`observe`](Self::observe)) and sent when it
/// ends ([`Tracer::export`](super::Tracer::export)).
#[derive(Debug)]
pub struct TurnTrace {
    config: Arc<TraceConfig>,
    root: Span,
    /// Spans that ended.
    ended: Vec<Span>,
    /// The model call under way, if one is.
    chat: Option<Span>,
    /// When the next model call begins: the turn's start, or the end of the last call or tool.
    next_chat_from: SystemTime,
    /// Tool calls under way, by call id, with whether their content may be shown.
    tools: HashMap<String, (Span, bool)>,
    tokens: Tokens,
    capture: Option<Capture>,
    /// Whether the turn ran: a duplicate delivery or a refused one is not traced.
    ran: bool,
}

impl TurnTrace {
    pub(super) fn start(
        config: Arc<TraceConfig>,
        shown_tools: Arc<HashSet<String>>,
        turn: &AgentTurnPayload,
        parent: Option<TraceParent>,
        message_id: Option<&str>,
    ) -> Self {
        let now = SystemTime::now();
        let (trace_id, parent_span) = match parent {
            Some(parent) => (parent.trace_id, parent.span_id),
            None => (
                format!("{:032x}", agent_worker_contract::fresh_random_bits()),
                None,
            ),
        };
        let agent = turn.agent.clone().unwrap_or_else(|| config.service.clone());
        let mut root = Span::new(
            &trace_id,
            parent_span,
            format!("invoke_agent {agent}"),
            Kind::Internal,
            now,
        );
        root.set("gen_ai.operation.name", "invoke_agent");
        root.set("gen_ai.agent.name", agent);
        root.set("gen_ai.conversation.id", turn.conversation_id.as_str());
        model_attributes(&config, &mut root);
        root.set("agent_worker.turn_id", turn.turn_id.as_str());
        if let Some(id) = message_id {
            root.set("messaging.system", "aws_sqs");
            root.set("messaging.message.id", id);
        }
        let capture = config.capture_content.then(|| {
            root.set(
                "gen_ai.input.messages",
                messages("user", &turn.content).to_string(),
            );
            Capture {
                answer: String::new(),
                shown_tools,
            }
        });
        Self {
            config,
            root,
            ended: Vec::new(),
            chat: None,
            next_chat_from: now,
            tools: HashMap::new(),
            tokens: Tokens::default(),
            capture,
            ran: false,
        }
    }

    /// Takes in one of the turn's events.
    pub fn observe(&mut self, event: &AgentEvent) {
        let now = SystemTime::now();
        match event {
            AgentEvent::Failed { code: Some(code), .. } if !self.ran && codes::never_ran(code) => return,
            _ => self.ran = true,
        }
        match event {
            AgentEvent::Text { delta } => {
                self.chat();
                if let Some(capture) = &mut self.capture {
                    capture.answer.push_str(delta);
                }
            }
            AgentEvent::Thinking { .. } => {
                self.chat();
            }
            AgentEvent::Retrying { attempt, reason, .. } => {
                let chat = self.chat();
                chat.events.push((
                    now,
                    "retry",
                    vec![
                        ("agent_worker.retry.attempt", u64::from(*attempt).into()),
                        ("agent_worker.retry.reason", reason.as_str().into()),
                    ],
                ));
            }
            AgentEvent::Usage {
                input_tokens,
                output_tokens,
                cache_read_tokens,
                cache_write_tokens,
                ..
            } => {
                let used = Tokens {
                    input: *input_tokens,
                    output: *output_tokens,
                    cache_read: *cache_read_tokens,
                    cache_write: *cache_write_tokens,
                };
                self.tokens.add(used);
                used.record(self.chat());
                self.end_chat(now);
            }
            AgentEvent::ToolStarted { id, name, args } => {
                // A call starts while the stream that asked for it goes on: it is the open
                // model call's, which ends with its usage.
                self.chat();
                let mut span = Span::new(
                    &self.root.trace_id,
                    Some(self.root.span_id.clone()),
                    format!("execute_tool {name}"),
                    Kind::Internal,
                    now,
                );
                span.set("gen_ai.operation.name", "execute_tool");
                span.set("gen_ai.tool.name", name.as_str());
                span.set("gen_ai.tool.call.id", id.as_str());
                span.set("gen_ai.tool.type", "function");
                let shown = self.shows(name);
                if shown {
                    span.set("gen_ai.tool.call.arguments", args.to_string());
                }
                self.tools.insert(id.clone(), (span, shown));
            }
            AgentEvent::ToolEnded {
                id,
                is_error,
                content,
            } => {
                let Some((mut span, shown)) = self.tools.remove(id) else {
                    return;
                };
                let result = tool_result(*is_error, content);
                span.set("agent_worker.tool.result", result);
                if *is_error {
                    span.fail(result, format!("the tool call ended: {result}"));
                }
                if shown {
                    span.set("gen_ai.tool.call.result", content.to_string());
                }
                self.end(span, now);
                // A call that outlasts its model call's stream holds the next call back.
                if self.chat.is_none() {
                    self.next_chat_from = now;
                }
            }
            AgentEvent::Other(value)
                if value.get("type").and_then(Value::as_str) == Some("approval_required") =>
            {
                let call = value.get("callId").and_then(Value::as_str).unwrap_or_default();
                if let Some((mut span, _)) = self.tools.remove(call) {
                    span.set("agent_worker.tool.result", APPROVAL);
                    self.end(span, now);
                }
            }
            _ => {}
        }
    }

    /// Whether a tool's arguments and results may be in its span.
    fn shows(&self, tool: &str) -> bool {
        self.capture
            .as_ref()
            .is_some_and(|capture| capture.shown_tools.contains(tool))
    }

    /// The model call under way; if none is, one begun when the last call, or a tool call that
    /// outlasted it, ended (the engine calls the model again once a step's calls are done).
    fn chat(&mut self) -> &mut Span {
        let (config, root, from) = (&self.config, &self.root, self.next_chat_from);
        self.chat.get_or_insert_with(|| {
            let name = match &config.model {
                Some(model) => format!("chat {model}"),
                None => "chat".to_owned(),
            };
            let mut span = Span::new(
                &root.trace_id,
                Some(root.span_id.clone()),
                name,
                Kind::Client,
                from,
            );
            span.set("gen_ai.operation.name", "chat");
            model_attributes(config, &mut span);
            span
        })
    }

    fn end_chat(&mut self, now: SystemTime) {
        if let Some(chat) = self.chat.take() {
            self.end(chat, now);
        }
        self.next_chat_from = now;
    }

    fn end(&mut self, mut span: Span, now: SystemTime) {
        span.end = now;
        self.ended.push(span);
    }

    /// The turn's spans, the turn's own last, once it ended with `terminal`; none when it did
    /// not run.
    pub(super) fn finish(mut self, terminal: Option<&AgentEvent>) -> Vec<Span> {
        if !self.ran {
            return Vec::new();
        }
        let now = SystemTime::now();
        let failure = match terminal {
            Some(AgentEvent::Failed { details, code, .. }) => {
                Some((code.clone().unwrap_or_else(|| "failed".into()), details.clone()))
            }
            Some(_) => None,
            None => Some((
                "no_terminal".to_owned(),
                "the turn ended without a terminal event".into(),
            )),
        };
        if let Some(mut chat) = self.chat.take() {
            if let Some((code, why)) = &failure {
                chat.fail(code, why.clone());
            }
            self.end(chat, now);
        }
        for (_, (mut tool, _)) in std::mem::take(&mut self.tools) {
            tool.fail("unfinished", "the turn ended before the tool call did".into());
            self.end(tool, now);
        }
        let mut root = self.root;
        self.tokens.record(&mut root);
        if let Some(capture) = &self.capture
            && !capture.answer.is_empty()
        {
            root.set(
                "gen_ai.output.messages",
                messages("assistant", &capture.answer).to_string(),
            );
        }
        if let Some((code, why)) = failure {
            root.fail(&code, why);
        }
        root.end = now;
        self.ended.push(root);
        self.ended
    }
}

/// The provider and model attributes, when the configuration names them.
fn model_attributes(config: &TraceConfig, span: &mut Span) {
    if let Some(provider) = &config.provider {
        span.set("gen_ai.provider.name", provider.as_str());
    }
    if let Some(model) = &config.model {
        span.set("gen_ai.request.model", model.as_str());
    }
}

/// One message of `role` saying `text`, in the conventions' message form.
fn messages(role: &str, text: &str) -> Value {
    json!([{"role": role, "parts": [{"type": "text", "content": text}]}])
}

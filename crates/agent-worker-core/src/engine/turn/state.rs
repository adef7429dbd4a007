//! What a turn has produced so far: its messages, the step on its way, the files it gave the
//! model, and the events each piece of it emits.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::engine::EngineInner;
use crate::engine::approvals::HeldCall;
use crate::engine::attachments::{self, Given};
use crate::engine::compaction::{self, History, Pressure};
use crate::engine::stop;
use crate::engine::think_tags::{Piece, ThinkTags};
use crate::engine::tools::{ToolOutcome, parse_arguments};
use crate::engine::turn_stream::Emitter;
use crate::protocol::AgentEvent;
use crate::session::history::{INTERRUPTED_CALL, repair};
use crate::session::{ContentBlock, Message, Role};

/// The current model response, as it is being built.
#[derive(Debug, Default)]
pub(super) struct Step {
    pub(super) content: Vec<ContentBlock>,
    pub(super) calls: Vec<String>,
    pub(super) results: Vec<Option<ToolOutcome>>,
    pub(super) said: bool,
    /// The model's response has ended: its calls that change something were released.
    pub(super) ended: bool,
}

impl Step {
    /// Whether the caller has seen answer text or a tool call from this step.
    pub(super) fn produced(&self) -> bool {
        self.said || !self.calls.is_empty()
    }
}

/// Everything a turn has produced so far. It lives outside the round loop, so that what was
/// produced survives the loop being cut off by the deadline.
pub(super) struct TurnState {
    /// A call of the current step held for the person's approval.
    pub(super) held: Option<HeldCall>,
    pub(super) history: History,
    pub(super) messages: Vec<Message>,
    pub(super) step: Step,
    pub(super) think: ThinkTags,
    /// What this turn's files are given as, by id: sent with its message, never stored.
    pub(super) given: BTreeMap<String, Given>,
    /// What calls showed the model, by call id: sent after their results, never stored.
    pub(super) shown: BTreeMap<String, Given>,
    /// The tokens the files given and shown may carry in one step.
    pub(super) file_limit: u64,
    /// The estimated tokens of each file given and each showing, counted once, by
    /// `file:<id>` or `call:<id>`.
    pub(super) file_tokens: BTreeMap<String, u64>,
    /// The largest message the store keeps: a step's results are cut to fit it.
    pub(super) message_limit: Option<usize>,
    /// What the worker adds to the person's message (the UI context's lines): sent after its
    /// text and before its files, never stored.
    pub(super) additions: Vec<ContentBlock>,
    /// Where the typed result stands, when the turn asks for one.
    pub(super) result: Option<crate::engine::result::ResultState>,
    /// The places of the commands sent to the turn that it has given the model.
    pub(super) delivered: std::collections::BTreeSet<usize>,
    /// When the turn hands itself over to the host's next run, at a round boundary: set when the
    /// host can continue it and its deadline comes before the turn's own.
    pub(super) hand_over_at: Option<tokio::time::Instant>,
    /// The round of the step under way, or of the next.
    pub(super) round: u32,
    /// When the turn first started (epoch milliseconds), across every run of it.
    pub(super) started_at_ms: u64,
    /// The tool the model asked for once more with the same arguments than a turn may: the
    /// turn ends after this step.
    pub(super) repeated: Option<String>,
    /// What the turn's model calls cost so far, in micro-dollars.
    pub(super) spent: u64,
    /// The tokens the model call under way has used so far (its retries' included).
    pub(super) usage: crate::engine::model::TokenUsage,
    /// The tokens of calls besides the turn's steps (the summaries compaction asks for), not
    /// yet settled: they are, with the next step's call.
    pub(super) unsettled: crate::engine::model::TokenUsage,
    /// What the model call under way reserved against the budgets, until it is settled.
    pub(super) reserved: Option<crate::engine::spending::Reservation>,
    /// Whether the model call under way (or one of its retries) answered anything.
    pub(super) model_answered: bool,
}

impl TurnState {
    /// The tools the model has called in this turn so far, by name, in call order.
    pub(super) fn called(&self) -> Vec<String> {
        self.messages
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|block| match block {
                ContentBlock::ToolUse { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    /// Counts `usage` to the model call under way.
    pub(super) fn add_usage(&mut self, usage: crate::engine::model::TokenUsage) {
        self.usage.add(&usage);
    }

    /// How many calls of this turn's earlier steps were to `name` with `args` (in any key
    /// order): the model asking for the same call again after reading its result.
    pub(super) fn same_calls(&self, name: &str, args: &Value) -> usize {
        self.messages
            .iter()
            .flat_map(|m| &m.content)
            .filter(|block| {
                matches!(block, ContentBlock::ToolUse { name: called, input, .. } if called == name && input == args)
            })
            .count()
    }

    pub(super) fn new(history: History, user: Message) -> Self {
        Self {
            held: None,
            history,
            messages: vec![user],
            step: Step::default(),
            think: ThinkTags::default(),
            given: BTreeMap::new(),
            shown: BTreeMap::new(),
            file_limit: u64::MAX,
            file_tokens: BTreeMap::new(),
            message_limit: None,
            additions: Vec::new(),
            result: None,
            delivered: std::collections::BTreeSet::new(),
            hand_over_at: None,
            round: 0,
            started_at_ms: crate::clock::now_ms(),
            repeated: None,
            spent: 0,
            usage: crate::engine::model::TokenUsage::default(),
            unsettled: crate::engine::model::TokenUsage::default(),
            reserved: None,
            model_answered: false,
        }
    }

    /// With a keeper and a store that bounds messages, keeps the largest of the current step's
    /// results whole until they fit their message ([`keep_to_fit`](super::fit::keep_to_fit)).
    pub(super) async fn keep_results_to_fit(
        &mut self,
        engine: &EngineInner,
        session: &crate::session::SessionId,
    ) {
        if let (Some(keeper), Some(limit)) = (&engine.keeper, self.message_limit) {
            let step = &mut self.step;
            super::fit::keep_to_fit(keeper, session.as_str(), &step.calls, &mut step.results, limit).await;
        }
    }

    /// Keeps what the next step carries of files within the limit: from the step that would
    /// pass it, the costliest file is given as its line instead. Counts what is given.
    pub(super) fn fit_files(&mut self) {
        attachments::fit(
            self.given.values_mut().chain(self.shown.values_mut()),
            self.file_limit,
        );
        let given = self
            .given
            .iter()
            .map(|(id, g)| (format!("file:{id}"), g.budgeted_tokens()));
        let shown = self.shown.iter().map(|(id, g)| (format!("call:{id}"), g.tokens));
        for (key, tokens) in given.chain(shown) {
            if tokens > 0 {
                self.file_tokens.entry(key).or_insert(tokens);
            }
        }
    }

    /// Compacts the history under `pressure` (see [`compaction::compact`]), counting what the
    /// request carries besides it: the system prompt, the tools, and this turn so far.
    pub(super) async fn compact(
        &mut self,
        engine: &EngineInner,
        session: &crate::session::SessionId,
        pressure: Pressure,
        out: &Emitter,
    ) -> bool {
        let files: u64 = self
            .given
            .values()
            .chain(self.shown.values())
            .map(|g| g.tokens)
            .sum();
        let rest = engine.fixed_tokens() + compaction::estimated_tokens(&self.messages) + files;
        compaction::compact(
            engine,
            session,
            &mut self.history,
            rest,
            pressure,
            out,
            &mut self.unsettled,
        )
        .await
    }

    /// The estimated tokens the turn's files gave the model.
    pub(super) fn file_tokens(&self) -> u64 {
        self.file_tokens.values().sum()
    }

    /// The conversation to send: stored history, then this turn so far.
    pub(super) fn conversation(&self) -> Vec<Message> {
        let mut all = self.history.sent();
        all.reserve(self.messages.len());
        let mut messages = self.messages.iter().cloned();
        if let Some(mut user) = messages.next() {
            if !self.additions.is_empty() {
                let at = user
                    .content
                    .iter()
                    .position(|b| !matches!(b, ContentBlock::Text { .. }))
                    .unwrap_or(user.content.len());
                user.content.splice(at..at, self.additions.iter().cloned());
            }
            if !self.given.is_empty() {
                user.content = user
                    .content
                    .into_iter()
                    .flat_map(|block| match &block {
                        ContentBlock::Attachment { reference } => self
                            .given
                            .get(&reference.id)
                            .map_or_else(|| vec![block], |g| g.blocks.clone()),
                        _ => vec![block],
                    })
                    .collect();
            }
            all.push(user);
        }
        all.extend(messages.map(|mut message| {
            // What a call showed follows the results of its message.
            let shown: Vec<ContentBlock> = message
                .content
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::ToolResult { tool_use_id, .. } => self.shown.get(tool_use_id),
                    _ => None,
                })
                .flat_map(|g| g.blocks.iter().cloned())
                .collect();
            message.content.extend(shown);
            message
        }));
        stop::with_notes(repair(all).0)
    }

    pub(super) fn produced_anything(&self) -> bool {
        self.messages.len() > 1
    }

    pub(super) fn add_text(&mut self, delta: &str, out: &Emitter) {
        for piece in self.think.push(delta) {
            self.add_piece(piece, out);
        }
    }

    pub(super) fn flush_text(&mut self, out: &Emitter) {
        for piece in self.think.finish() {
            self.add_piece(piece, out);
        }
    }

    pub(super) fn add_piece(&mut self, piece: Piece, out: &Emitter) {
        match piece {
            Piece::Thinking(text) => out.emit(AgentEvent::thinking(text)),
            Piece::Text(text) => {
                self.step.said |= !text.trim().is_empty();
                match self.step.content.last_mut() {
                    Some(ContentBlock::Text { text: last }) => last.push_str(&text),
                    _ => self.step.content.push(ContentBlock::text(text.clone())),
                }
                out.emit(AgentEvent::text(text));
            }
        }
    }

    pub(super) fn add_reasoning(&mut self, delta: String, out: &Emitter) {
        match self.step.content.last_mut() {
            Some(ContentBlock::Reasoning {
                text,
                signature: None,
            }) => text.push_str(&delta),
            _ => self.step.content.push(ContentBlock::Reasoning {
                text: delta.clone(),
                signature: None,
            }),
        }
        out.emit(AgentEvent::thinking(delta));
    }

    pub(super) fn sign_reasoning(&mut self, sig: String) {
        match self.step.content.last_mut() {
            Some(ContentBlock::Reasoning {
                signature: signature @ None,
                ..
            }) => *signature = Some(sig),
            _ => self.step.content.push(ContentBlock::Reasoning {
                text: String::new(),
                signature: Some(sig),
            }),
        }
    }

    pub(super) fn add_redacted(&mut self, bytes: &[u8]) {
        use base64::Engine as _;
        self.step.content.push(ContentBlock::RedactedReasoning {
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
        });
    }

    /// Records a call and announces it; returns its index and its parsed arguments.
    pub(super) fn add_call(
        &mut self,
        id: String,
        name: String,
        raw: &str,
        out: &Emitter,
    ) -> (usize, Result<Value, String>) {
        let parsed = parse_arguments(raw);
        let args = match &parsed {
            Ok(args) => args.clone(),
            Err(_) => Value::String(raw.to_owned()),
        };
        // The stored call must be a JSON object whatever the model wrote; its result says why
        // it did not run.
        let input = parsed.clone().unwrap_or_else(|_| json!({}));
        self.step.content.push(ContentBlock::ToolUse {
            id: id.clone(),
            name: name.clone(),
            input,
        });
        self.step.calls.push(id.clone());
        self.step.results.push(None);
        out.emit(AgentEvent::ToolStarted { id, name, args });
        (self.step.calls.len() - 1, parsed)
    }

    pub(super) fn finish_call(&mut self, index: usize, outcome: ToolOutcome, out: &Emitter) {
        let Some(slot) = self.step.results.get_mut(index) else {
            return;
        };
        out.emit(AgentEvent::ToolEnded {
            id: self.step.calls[index].clone(),
            is_error: outcome.is_error,
            content: outcome.content.clone(),
        });
        *slot = Some(outcome);
    }

    /// The calls of the current step that have no result yet: their place, id and tool.
    pub(super) fn open_calls(&self) -> Vec<(usize, String, String)> {
        (0..self.step.calls.len())
            .filter(|&i| self.step.results[i].is_none())
            .map(|i| {
                let id = self.step.calls[i].clone();
                let name = self
                    .step
                    .content
                    .iter()
                    .find_map(|b| match b {
                        ContentBlock::ToolUse { id: used, name, .. } if *used == id => Some(name.clone()),
                        _ => None,
                    })
                    .unwrap_or_default();
                (i, id, name)
            })
            .collect()
    }

    /// Ends the step early: calls still running get an error result saying why.
    pub(super) fn interrupt(&mut self, out: &Emitter, reason: &str) {
        self.flush_text(out);
        for index in 0..self.step.calls.len() {
            if self.step.results[index].is_none() {
                self.finish_call(
                    index,
                    ToolOutcome::error(format!("{INTERRUPTED_CALL} ({reason})")),
                    out,
                );
            }
        }
        self.close_step();
    }

    /// Adds the step's response, and the results of its calls in call order, to the turn.
    pub(super) fn close_step(&mut self) {
        let step = std::mem::take(&mut self.step);
        if !step.content.is_empty() {
            self.messages.push(Message::new(Role::Assistant, step.content));
        }
        if !step.calls.is_empty() {
            let mut results: Vec<ContentBlock> = step
                .calls
                .into_iter()
                .zip(step.results)
                .map(|(id, outcome)| {
                    let outcome = outcome.unwrap_or_else(|| ToolOutcome::error(INTERRUPTED_CALL));
                    if !outcome.shown.is_empty() {
                        self.shown.insert(id.clone(), Given::shown(&id, outcome.shown));
                    }
                    ContentBlock::ToolResult {
                        tool_use_id: id,
                        content: outcome.content,
                        is_error: outcome.is_error,
                    }
                })
                .collect();
            if let Some(limit) = self.message_limit {
                let cut = super::fit::fit_results(&mut results, limit);
                if cut > 0 {
                    tracing::warn!(
                        cut,
                        limit,
                        "tool results were cut to fit the message that keeps them"
                    );
                }
            }
            self.messages.push(Message::new(Role::User, results));
        }
    }

    pub(super) fn discard_step(&mut self) {
        self.step = Step::default();
        self.think = ThinkTags::default();
    }

    /// Tells the person something, and keeps it as the model's words.
    pub(super) fn notify(&mut self, out: &Emitter, text: &str) {
        out.emit(AgentEvent::text(text));
        self.messages.push(Message::assistant_text(text.trim_start()));
    }
}

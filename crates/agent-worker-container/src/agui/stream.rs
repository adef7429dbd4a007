//! A turn's events as AG-UI events: [`Translator`] keeps what AG-UI asks a stream to keep (a
//! message opened before its content and closed before anything else, a tool call's start, args
//! and end, a step per model round) and says how the run ended: at the turn's end, or once every
//! call of the page's tools the model made is asked of the page.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::frontend::{FrontendCall, ToolNames};
use agent_worker_contract::AgentEvent;

/// Turns one run's [`AgentEvent`]s into AG-UI events, in order.
#[derive(Debug)]
pub(super) struct Translator {
    thread_id: String,
    run_id: String,
    /// The turn followed (the run's own, or the one a run answering the page's tools goes on).
    turn_id: String,
    /// The page's tools, by the model's name of each.
    tools: ToolNames,
    /// Calls of the page's tools, by the model's id: made and not yet asked of the page.
    unasked: BTreeSet<String>,
    /// Asked of the page: the run ends waiting for their answers once none is unasked.
    asked: Vec<String>,
    /// Every call of the page's tools seen (its result goes under its AG-UI id).
    page_calls: BTreeSet<String>,
    /// Calls this run answered: the client has their results.
    answered: BTreeSet<String>,
    /// The open text message, if any.
    text: Option<String>,
    /// The open reasoning message, if any.
    reasoning: Option<String>,
    /// The open step (a model round), if any, by number.
    step: Option<u32>,
    rounds: u32,
    /// The last event was a tool's result: the next output is the model's next round.
    after_results: bool,
    messages: u32,
    /// Approvals asked in this run: the run ends waiting for them (AG-UI's interrupts).
    interrupts: Vec<Value>,
    input_tokens: u64,
    output_tokens: u64,
    ended: bool,
}

impl Translator {
    /// A translator for run `run_id` of thread `thread_id`, following turn `turn_id`, whose
    /// page offers `tools`.
    pub(super) fn new(
        thread_id: impl Into<String>,
        run_id: impl Into<String>,
        turn_id: impl Into<String>,
        tools: ToolNames,
    ) -> Self {
        Self {
            thread_id: thread_id.into(),
            run_id: run_id.into(),
            turn_id: turn_id.into(),
            tools,
            unasked: BTreeSet::new(),
            asked: Vec::new(),
            page_calls: BTreeSet::new(),
            answered: BTreeSet::new(),
            text: None,
            reasoning: None,
            step: None,
            rounds: 0,
            after_results: false,
            messages: 0,
            interrupts: Vec::new(),
            input_tokens: 0,
            output_tokens: 0,
            ended: false,
        }
    }

    /// The same, for a run that answered calls `calls` of the page's tools: their results are
    /// the client's own, so they are not sent back.
    #[must_use]
    pub(super) fn answered(mut self, calls: Vec<String>) -> Self {
        self.page_calls.extend(calls.iter().cloned());
        self.answered.extend(calls);
        self
    }

    /// Whether the run has ended: nothing more is sent.
    pub(super) fn has_ended(&self) -> bool {
        self.ended
    }

    /// The run's first event.
    pub(super) fn started(&self) -> Value {
        json!({ "type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id })
    }

    /// The AG-UI events `event` stands for (none for what AG-UI has no place for).
    pub(super) fn translate(&mut self, event: &AgentEvent) -> Vec<Value> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        match event {
            AgentEvent::Text { delta } if !delta.is_empty() => {
                self.round(&mut out);
                self.close_reasoning(&mut out);
                let id = match &self.text {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.next_message_id();
                        out.push(
                            json!({ "type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant" }),
                        );
                        self.text = Some(id.clone());
                        id
                    }
                };
                out.push(json!({ "type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": delta }));
            }
            AgentEvent::Thinking { delta } if !delta.is_empty() => {
                self.round(&mut out);
                self.close_text(&mut out);
                let id = match &self.reasoning {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.next_message_id();
                        out.push(json!({ "type": "REASONING_START", "messageId": id }));
                        out.push(json!({ "type": "REASONING_MESSAGE_START", "messageId": id, "role": "reasoning" }));
                        self.reasoning = Some(id.clone());
                        id
                    }
                };
                out.push(json!({ "type": "REASONING_MESSAGE_CONTENT", "messageId": id, "delta": delta }));
            }
            AgentEvent::ToolStarted { id, name, args } => {
                self.round(&mut out);
                self.close_messages(&mut out);
                let (id, name) = match self.tools.get(name) {
                    Some(page_name) => {
                        self.unasked.insert(id.clone());
                        self.page_calls.insert(id.clone());
                        (FrontendCall::id(&self.turn_id, id), page_name.as_str())
                    }
                    None => (id.clone(), name.as_str()),
                };
                out.push(json!({ "type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": name }));
                out.push(json!({ "type": "TOOL_CALL_ARGS", "toolCallId": id, "delta": args.to_string() }));
                out.push(json!({ "type": "TOOL_CALL_END", "toolCallId": id }));
            }
            AgentEvent::ToolEnded { id, .. } if self.answered.contains(id) => {}
            AgentEvent::ToolEnded { id, content, .. } => {
                self.close_messages(&mut out);
                // A call of the page's that ended without being asked (denied, not run).
                self.unasked.remove(id);
                let id = if self.page_calls.contains(id) {
                    FrontendCall::id(&self.turn_id, id)
                } else {
                    id.clone()
                };
                let content = match content {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                let message = self.next_message_id();
                out.push(json!({
                    "type": "TOOL_CALL_RESULT",
                    "messageId": message,
                    "toolCallId": id,
                    "content": content,
                    "role": "tool",
                }));
                self.after_results = true;
                self.end_if_waiting_for_the_page(&mut out);
            }
            AgentEvent::Usage {
                input_tokens,
                output_tokens,
                ..
            } => {
                self.input_tokens += input_tokens;
                self.output_tokens += output_tokens;
            }
            AgentEvent::Completed { data } => self.finish(&mut out, data.as_ref()),
            AgentEvent::Failed { details, code, .. } => {
                self.close_messages(&mut out);
                self.close_step(&mut out);
                let mut error = json!({ "type": "RUN_ERROR", "message": details });
                if let Some(code) = code {
                    error["code"] = json!(code);
                }
                out.push(error);
                self.ended = true;
            }
            AgentEvent::Other(raw) => self.other(&mut out, raw),
            _ => {}
        }
        out
    }

    /// The run's end when its turn never started.
    pub(super) fn not_started(&mut self) -> Value {
        self.ended = true;
        json!({
            "type": "RUN_ERROR",
            "message": "the run did not start: no worker took its turn in time",
            "code": "not_started",
        })
    }

    /// An event of the engine's own: an approval is asked of the person (the run ends
    /// interrupted, waiting for it); anything else goes as a `CUSTOM` event under its type.
    fn other(&mut self, out: &mut Vec<Value>, raw: &Value) {
        let kind = raw.get("type").and_then(Value::as_str).unwrap_or("event");
        let call = raw.get("callId").and_then(Value::as_str);
        if kind == "ui_action_requested"
            && let Some(call) = call.filter(|call| self.unasked.remove(*call))
        {
            // Asked of the page: the client runs it (it has the call from `TOOL_CALL_*`).
            self.asked.push(call.to_owned());
            self.end_if_waiting_for_the_page(out);
            return;
        }
        if kind == "approval_required" {
            let text = |name: &str| raw.get(name).cloned().unwrap_or(Value::Null);
            let message = raw
                .pointer("/preview/title")
                .and_then(Value::as_str)
                .map_or_else(|| format!("approve {}", text("tool")), str::to_owned);
            self.interrupts.push(json!({
                "id": text("approvalId"),
                "reason": "approval",
                "message": message,
                "toolCallId": text("callId"),
                "metadata": {
                    "tool": text("tool"),
                    "token": text("token"),
                    "expiresAt": text("expiresAt"),
                    "preview": text("preview"),
                },
            }));
        }
        self.close_messages(out);
        out.push(json!({ "type": "CUSTOM", "name": kind, "value": raw }));
    }

    /// Ends the run once every call of the page's tools the model made has been asked of the
    /// page: a success whose calls wait for the client (`pendingToolCallIds`), while the turn
    /// waits for their answers.
    fn end_if_waiting_for_the_page(&mut self, out: &mut Vec<Value>) {
        if self.asked.is_empty() || !self.unasked.is_empty() {
            return;
        }
        let pending: Vec<String> = self
            .asked
            .iter()
            .map(|call| FrontendCall::id(&self.turn_id, call))
            .collect();
        self.close_messages(out);
        self.close_step(out);
        out.push(json!({
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.run_id,
            "outcome": { "type": "success", "pendingToolCallIds": pending },
        }));
        self.ended = true;
    }

    /// Closes what is open and ends the run: interrupted while approvals wait, cancelled when
    /// the person stopped it (or replaced it), a success otherwise.
    fn finish(&mut self, out: &mut Vec<Value>, data: Option<&Value>) {
        self.close_messages(out);
        self.close_step(out);
        let stop = data.and_then(|d| d.get("stopReason")).and_then(Value::as_str);
        let outcome = if !self.interrupts.is_empty() {
            json!({ "type": "interrupt", "interrupts": self.interrupts })
        } else if matches!(stop, Some("user_stop" | "superseded")) {
            json!({ "type": "cancelled" })
        } else {
            json!({ "type": "success" })
        };
        let mut finished = json!({
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.run_id,
            "outcome": outcome,
        });
        if let Some(result) = data.and_then(|d| d.get("result")).filter(|r| !r.is_null()) {
            finished["result"] = result.clone();
        }
        if self.input_tokens + self.output_tokens > 0 {
            finished["usage"] = json!([{
                "inputTokens": self.input_tokens,
                "outputTokens": self.output_tokens,
                "totalTokens": self.input_tokens + self.output_tokens,
            }]);
        }
        out.push(finished);
        self.ended = true;
    }

    /// Opens the model's round when none is open, or the next one after tool results.
    fn round(&mut self, out: &mut Vec<Value>) {
        if self.step.is_some() && !self.after_results {
            return;
        }
        self.close_messages(out);
        self.close_step(out);
        self.rounds += 1;
        self.after_results = false;
        self.step = Some(self.rounds);
        out.push(json!({ "type": "STEP_STARTED", "stepName": step_name(self.rounds) }));
    }

    fn close_step(&mut self, out: &mut Vec<Value>) {
        if let Some(step) = self.step.take() {
            out.push(json!({ "type": "STEP_FINISHED", "stepName": step_name(step) }));
        }
    }

    fn close_messages(&mut self, out: &mut Vec<Value>) {
        self.close_text(out);
        self.close_reasoning(out);
    }

    fn close_text(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.text.take() {
            out.push(json!({ "type": "TEXT_MESSAGE_END", "messageId": id }));
        }
    }

    fn close_reasoning(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.reasoning.take() {
            out.push(json!({ "type": "REASONING_MESSAGE_END", "messageId": id }));
            out.push(json!({ "type": "REASONING_END", "messageId": id }));
        }
    }

    fn next_message_id(&mut self) -> String {
        self.messages += 1;
        format!("{}-m{}", self.run_id, self.messages)
    }
}

/// The name of the model's `n`th round, as a step.
fn step_name(n: u32) -> String {
    format!("model round {n}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(events: &[Value]) -> Vec<&str> {
        events.iter().filter_map(|e| e["type"].as_str()).collect()
    }

    fn run(events: &[AgentEvent]) -> Vec<Value> {
        let mut translator = Translator::new("th", "r1", "r1", ToolNames::default());
        let mut out = vec![translator.started()];
        for event in events {
            out.extend(translator.translate(event));
        }
        assert!(translator.ended, "the run did not end: {out:?}");
        out
    }

    #[test]
    fn a_tool_turn_is_two_rounds_with_the_call_between() {
        let out = run(&[
            AgentEvent::text("Let me look."),
            AgentEvent::ToolStarted {
                id: "c1".into(),
                name: "clock".into(),
                args: json!({"zone": "UTC"}),
            },
            AgentEvent::ToolEnded {
                id: "c1".into(),
                is_error: false,
                content: json!({"now": "12:00"}),
            },
            AgentEvent::text("It is noon."),
            AgentEvent::completed(),
        ]);
        assert_eq!(
            types(&out),
            [
                "RUN_STARTED",
                "STEP_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT",
                "STEP_FINISHED",
                "STEP_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "STEP_FINISHED",
                "RUN_FINISHED",
            ]
        );
        assert_eq!(out[6]["delta"], r#"{"zone":"UTC"}"#);
        assert_eq!(out[8]["content"], r#"{"now":"12:00"}"#);
        assert_eq!(out[15]["outcome"], json!({"type": "success"}));
        assert_ne!(out[2]["messageId"], out[11]["messageId"]);
    }

    #[test]
    fn a_stop_is_cancelled_an_approval_is_an_interrupt_and_a_failure_an_error() {
        let stopped = run(&[
            AgentEvent::text("Part"),
            AgentEvent::Completed {
                data: Some(json!({"stopReason": "user_stop"})),
            },
        ]);
        assert_eq!(stopped.last().unwrap()["outcome"], json!({"type": "cancelled"}));
        let asked = run(&[
            AgentEvent::Other(json!({
                "type": "approval_required", "approvalId": "ap-1", "callId": "c1", "tool": "refund",
                "token": "tok", "expiresAt": 5, "preview": {"title": "Refund the order"},
            })),
            AgentEvent::Completed {
                data: Some(json!({"stopReason": "approval_required"})),
            },
        ]);
        let outcome = &asked.last().unwrap()["outcome"];
        assert_eq!(outcome["type"], "interrupt");
        assert_eq!(outcome["interrupts"][0]["id"], "ap-1");
        assert_eq!(outcome["interrupts"][0]["toolCallId"], "c1");
        assert_eq!(outcome["interrupts"][0]["message"], "Refund the order");
        assert_eq!(outcome["interrupts"][0]["metadata"]["token"], "tok");
        let failed = run(&[
            AgentEvent::thinking("hmm"),
            AgentEvent::failed("no", true, Some("x")),
        ]);
        assert_eq!(
            types(&failed),
            [
                "RUN_STARTED",
                "STEP_STARTED",
                "REASONING_START",
                "REASONING_MESSAGE_START",
                "REASONING_MESSAGE_CONTENT",
                "REASONING_MESSAGE_END",
                "REASONING_END",
                "STEP_FINISHED",
                "RUN_ERROR",
            ]
        );
        assert_eq!(failed.last().unwrap()["code"], "x");
    }

    #[test]
    fn a_call_of_the_page_ends_the_run_once_asked_and_the_next_run_goes_on() {
        let tools: ToolNames =
            std::sync::Arc::new([("ui_page_set_color".to_owned(), "set_color".to_owned())].into());
        let mut translator = Translator::new("th", "r1", "r1", tools.clone());
        let mut out = vec![translator.started()];
        for event in [
            AgentEvent::ToolStarted {
                id: "c1".into(),
                name: "ui_page_set_color".into(),
                args: json!({"color": "blue"}),
            },
            AgentEvent::Other(json!({
                "type": "ui_action_requested", "callId": "c1", "turnId": "r1",
                "surface": "page", "action": "set_color", "args": {"color": "blue"},
            })),
        ] {
            out.extend(translator.translate(&event));
        }
        assert!(translator.has_ended());
        let call = FrontendCall::id("r1", "c1");
        assert_eq!(out[2]["toolCallName"], "set_color");
        assert_eq!(out[2]["toolCallId"], call);
        let end = out.last().unwrap();
        assert_eq!(end["type"], "RUN_FINISHED");
        assert_eq!(
            end["outcome"],
            json!({"type": "success", "pendingToolCallIds": [call]})
        );

        // The run that answers goes on with the turn: the answered call's result is the
        // client's own, the model's next round is new.
        let mut next = Translator::new("th", "r2", "r1", tools).answered(vec!["c1".into()]);
        let mut out = vec![next.started()];
        for event in [
            AgentEvent::ToolEnded {
                id: "c1".into(),
                is_error: false,
                content: json!("done"),
            },
            AgentEvent::text("It is blue now."),
            AgentEvent::completed(),
        ] {
            out.extend(next.translate(&event));
        }
        assert_eq!(
            types(&out),
            [
                "RUN_STARTED",
                "STEP_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "STEP_FINISHED",
                "RUN_FINISHED",
            ]
        );
        assert_eq!(out[0]["runId"], "r2");
    }
}

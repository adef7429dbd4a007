//! What the stand-in answers: scripted [`Reply`]s, the stream [`Frame`]s they are made of, and
//! [`StreamScript`], a builder of streams that stall, hold until released, break or end as a test
//! needs.

use std::time::Duration;

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One scripted answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    /// A 200 event stream of `frames`.
    Stream {
        /// The frames, in order.
        frames: Vec<Frame>,
        /// A pause before each frame, in milliseconds.
        #[serde(default)]
        chunk_delay_ms: u64,
        /// Keep the connection open after the last frame, sending nothing more.
        #[serde(default)]
        hang: bool,
        /// The frame before which the stream waits until the stand-in is released
        /// ([`BedrockStandIn::release`](super::BedrockStandIn::release)): a model that has
        /// said its first words and not finished.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hold_before: Option<usize>,
    },
    /// An HTTP error, as Bedrock sends one: `x-amzn-errortype` and a JSON body.
    HttpError {
        /// The status.
        status: u16,
        /// The `x-amzn-errortype` header, e.g. `ThrottlingException`.
        error_type: String,
        /// The JSON body, e.g. `{"message": ".."}`.
        body: Value,
    },
    /// A response body replayed byte for byte.
    Raw {
        /// The status.
        status: u16,
        /// The content type.
        content_type: String,
        /// The body, base64-encoded.
        body_base64: String,
    },
    /// A JSON body for the non-streaming Converse API.
    Converse {
        /// The response body.
        body: Value,
    },
}

/// Why a scripted answer cannot be framed or read.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// A raw frame is not base64.
    #[error("a raw frame is not base64")]
    NotBase64(#[source] base64::DecodeError),
    /// A frame could not be written.
    #[error("a frame cannot be written")]
    Frame(#[source] aws_smithy_eventstream::error::Error),
    /// A line of a chunks fixture is not JSON.
    #[error("line {line}: not JSON")]
    NotJson {
        /// The line, from 1.
        line: usize,
        /// Why.
        #[source]
        cause: serde_json::Error,
    },
    /// A line of a chunks fixture is not one event.
    #[error("line {line}: expected one event name")]
    NotOneEvent {
        /// The line, from 1.
        line: usize,
    },
}

/// One frame of a scripted event stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Frame {
    /// An event: `:event-type` is `event`, the payload its JSON.
    Event {
        /// The event type, e.g. `contentBlockDelta`.
        event: String,
        /// The event object.
        payload: Value,
    },
    /// An exception: `:exception-type` is `exception`, the payload its JSON.
    Exception {
        /// The exception type, e.g. `throttlingException`.
        exception: String,
        /// The exception object, e.g. `{"message": ".."}`.
        payload: Value,
    },
    /// Bytes already framed, base64-encoded (a recorded frame).
    Raw {
        /// The frame's bytes, base64-encoded.
        raw_base64: String,
    },
}

impl Frame {
    /// An event frame.
    pub fn event(event: &str, payload: Value) -> Self {
        Self::Event {
            event: event.to_owned(),
            payload,
        }
    }

    /// The frame's bytes on the wire.
    pub fn encode(&self) -> Result<Vec<u8>, ScriptError> {
        let string = |s: &str| HeaderValue::String(s.to_owned().into());
        let message = match self {
            Self::Raw { raw_base64 } => return BASE64.decode(raw_base64).map_err(ScriptError::NotBase64),
            Self::Event { event, payload } => Message::new(payload.to_string().into_bytes())
                .add_header(Header::new(":event-type", string(event)))
                .add_header(Header::new(":content-type", string("application/json")))
                .add_header(Header::new(":message-type", string("event"))),
            Self::Exception { exception, payload } => Message::new(payload.to_string().into_bytes())
                .add_header(Header::new(":exception-type", string(exception)))
                .add_header(Header::new(":content-type", string("application/json")))
                .add_header(Header::new(":message-type", string("exception"))),
        };
        let mut bytes = Vec::new();
        write_message_to(&message, &mut bytes).map_err(ScriptError::Frame)?;
        Ok(bytes)
    }
}

impl Reply {
    /// A streamed answer of `text` in a few chunks, ending the turn.
    pub fn text(text: &str) -> Self {
        StreamScript::new()
            .text(text, 3)
            .stop("end_turn")
            .usage(12, 8)
            .into_reply()
    }

    /// A streamed call of tool `name` with `input` (JSON text), stopping for its result.
    pub fn tool_call(id: &str, name: &str, input: &str) -> Self {
        StreamScript::new()
            .tool_use(id, name, input, 2)
            .stop("tool_use")
            .usage(20, 10)
            .into_reply()
    }

    /// An HTTP error with Bedrock's error header and a message body.
    pub fn http_error(status: u16, error_type: &str, message: &str) -> Self {
        Self::HttpError {
            status,
            error_type: error_type.to_owned(),
            body: json!({ "message": message }),
        }
    }

    /// An event stream re-framed from decoded events, one `{"eventName": payload}` JSON object
    /// a line (the `.chunks.txt` fixtures).
    pub fn from_chunk_lines(lines: &str) -> Result<Self, ScriptError> {
        let mut frames = Vec::new();
        for (n, line) in lines.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let object: serde_json::Map<String, Value> =
                serde_json::from_str(line).map_err(|cause| ScriptError::NotJson { line: n + 1, cause })?;
            let mut entries = object.into_iter();
            match (entries.next(), entries.next()) {
                (Some((event, payload)), None) => frames.push(Frame::Event { event, payload }),
                _ => return Err(ScriptError::NotOneEvent { line: n + 1 }),
            }
        }
        Ok(Self::Stream {
            frames,
            chunk_delay_ms: 0,
            hang: false,
            hold_before: None,
        })
    }
}

/// Builds a scripted ConverseStream answer the way Bedrock sends one: `messageStart`, content
/// blocks (toolUse blocks with a `contentBlockStart`, text and reasoning without), then
/// `messageStop` and `metadata`.
#[derive(Debug, Clone)]
pub struct StreamScript {
    frames: Vec<Frame>,
    next_index: u64,
    chunk_delay_ms: u64,
    hang: bool,
    hold_before: Option<usize>,
}

impl Default for StreamScript {
    fn default() -> Self {
        Self::new()
    }
}

fn chunks(text: &str, pieces: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(pieces.max(1)).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

impl StreamScript {
    /// A stream that has started an assistant message.
    pub fn new() -> Self {
        Self {
            frames: vec![Frame::event("messageStart", json!({"role": "assistant"}))],
            next_index: 0,
            chunk_delay_ms: 0,
            hang: false,
            hold_before: None,
        }
    }

    fn block(&mut self) -> u64 {
        self.next_index += 1;
        self.next_index - 1
    }

    fn delta(&mut self, index: u64, delta: Value) {
        self.frames.push(Frame::event(
            "contentBlockDelta",
            json!({"contentBlockIndex": index, "delta": delta}),
        ));
    }

    fn stop_block(&mut self, index: u64) {
        self.frames.push(Frame::event(
            "contentBlockStop",
            json!({"contentBlockIndex": index}),
        ));
    }

    /// A text block sent in `pieces` deltas.
    #[must_use]
    pub fn text(mut self, text: &str, pieces: usize) -> Self {
        let index = self.block();
        for piece in chunks(text, pieces) {
            self.delta(index, json!({"text": piece}));
        }
        self.stop_block(index);
        self
    }

    /// A text block left open: its deltas, without the block's end.
    #[must_use]
    pub fn open_text(mut self, text: &str) -> Self {
        let index = self.block();
        self.delta(index, json!({"text": text}));
        self
    }

    /// A reasoning block in two deltas, closed by a delta carrying only its signature.
    #[must_use]
    pub fn reasoning(mut self, text: &str, signature: &str) -> Self {
        let index = self.block();
        for piece in chunks(text, 2) {
            self.delta(index, json!({"reasoningContent": {"text": piece}}));
        }
        self.delta(index, json!({"reasoningContent": {"signature": signature}}));
        self.stop_block(index);
        self
    }

    /// A toolUse block whose input JSON text arrives in `fragments` deltas.
    #[must_use]
    pub fn tool_use(mut self, id: &str, name: &str, input: &str, fragments: usize) -> Self {
        let index = self.block();
        self.frames.push(Frame::event(
            "contentBlockStart",
            json!({"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": id, "name": name}}}),
        ));
        for piece in chunks(input, fragments) {
            self.delta(index, json!({"toolUse": {"input": piece}}));
        }
        self.stop_block(index);
        self
    }

    /// `messageStop` with `reason` (`end_turn`, `tool_use`, `max_tokens`, ...).
    #[must_use]
    pub fn stop(mut self, reason: &str) -> Self {
        self.frames
            .push(Frame::event("messageStop", json!({"stopReason": reason})));
        self
    }

    /// `metadata` with token usage.
    #[must_use]
    pub fn usage(mut self, input: u64, output: u64) -> Self {
        self.frames.push(Frame::event(
            "metadata",
            json!({"usage": {"inputTokens": input, "outputTokens": output, "totalTokens": input + output}, "metrics": {"latencyMs": 100}}),
        ));
        self
    }

    /// An exception frame, e.g. `throttlingException`, which ends the stream for the client.
    #[must_use]
    pub fn exception(mut self, exception: &str, message: &str) -> Self {
        self.frames.push(Frame::Exception {
            exception: exception.to_owned(),
            payload: json!({"message": message}),
        });
        self
    }

    /// Any frame.
    #[must_use]
    pub fn frame(mut self, frame: Frame) -> Self {
        self.frames.push(frame);
        self
    }

    /// A pause before each frame.
    #[must_use]
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Keeps the connection open after the last frame.
    #[must_use]
    pub fn hang(mut self) -> Self {
        self.hang = true;
        self
    }

    /// Holds the stream here: the frames added so far are sent, the rest only once the stand-in
    /// is released ([`BedrockStandIn::release`](super::BedrockStandIn::release)), as a model
    /// that has begun its answer and not finished it. One hold a stream; the last one counts.
    #[must_use]
    pub fn hold(mut self) -> Self {
        self.hold_before = Some(self.frames.len());
        self
    }

    /// A text answer held half-way: `first` streams at once, `rest` (and the end of the turn)
    /// when the stand-in is released.
    pub fn held_text(first: &str, rest: &str) -> Reply {
        Self::new()
            .text(first, 1)
            .hold()
            .text(rest, 1)
            .stop("end_turn")
            .into_reply()
    }

    /// The reply.
    pub fn into_reply(self) -> Reply {
        Reply::Stream {
            frames: self.frames,
            chunk_delay_ms: self.chunk_delay_ms,
            hang: self.hang,
            hold_before: self.hold_before,
        }
    }
}

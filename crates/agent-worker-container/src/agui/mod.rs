//! `POST /agui`: a run of the agent for an AG-UI client (`@ag-ui/client`'s `HttpAgent`,
//! CopilotKit). The body is AG-UI's `RunAgentInput`; the answer is the run as AG-UI events over
//! Server-Sent Events.
//!
//! - `threadId` is the conversation and `runId` the turn: a run posted twice runs once (the
//!   second post follows the first run's events), and the history is the one stored here, so of
//!   `messages` only the last, the person's, is read (its text parts).
//! - The person is the request's, as on every route ([`Asker`]): a person's token stands for
//!   them; the API key names them in the query (`?userId=…&accountId=…`).
//! - The turn starts as `POST /turns` starts one ([`turns::start`]): the conversation must be
//!   theirs and run no other turn; it runs here or goes to the turns queue.
//! - Its events come from the event log, translated ([`stream::Translator`]): `RUN_STARTED`,
//!   a `STEP_*` pair per model round, `TEXT_MESSAGE_*`, `REASONING_*`, `TOOL_CALL_*` (with the
//!   result), `CUSTOM` for the engine's own events, then `RUN_FINISHED` (its outcome `success`,
//!   `cancelled` for a stopped run, `interrupt` for approvals the person must give) or
//!   `RUN_ERROR`.
//! - An approval is answered by the next run's `resume`: `{interruptId, status: "resolved",
//!   payload: {token}}` approves with the token the interrupt carried (`metadata.token`);
//!   `status: "cancelled"` (or `payload.approved: false`) declines.
//! - The input's `tools` are the page's own (AG-UI's frontend tools, [`frontend`]): a call ends
//!   the run waiting for it, and the next run, whose last messages are the results, goes on
//!   with the same turn.

mod frontend;
mod stream;

use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use futures_util::stream::BoxStream;
use serde::Deserialize;
use serde_json::{Value, json};

use super::access::{self, Asker, checked_id};
use super::events::{Followed, follow_turn, stream_place};
use super::extract::{JsonBody, adapted_turn};
use super::turns;
use super::{ContainerHost, HostError};
use agent_worker_contract::ApprovalDecision;
use agent_worker_core::session::{Owner, SessionId, TurnId};
use agent_worker_runtime::AgentTurnPayload;
use frontend::{Answered, FrontendTool};
use stream::Translator;

/// AG-UI's `RunAgentInput`, as much of it as a run here reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RunAgentInput {
    thread_id: String,
    run_id: String,
    #[serde(default)]
    messages: Vec<InputMessage>,
    #[serde(default)]
    resume: Vec<ResumeEntry>,
    #[serde(default)]
    tools: Vec<FrontendTool>,
    #[serde(default)]
    context: Vec<ContextItem>,
}

/// One item of what the application tells the agent (AG-UI's `Context`).
#[derive(Debug, Deserialize)]
struct ContextItem {
    description: String,
    value: String,
}

/// A message of the input: its role and content (a text, or parts of which the text ones are
/// read); a `tool` message's call and error.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InputMessage {
    role: String,
    #[serde(default)]
    content: Value,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// An answer to one of an earlier run's interrupts.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumeEntry {
    interrupt_id: String,
    status: String,
    #[serde(default)]
    payload: Option<Value>,
}

/// `POST /agui`.
pub(super) async fn run(
    State(host): State<ContainerHost>,
    Asker(person): Asker,
    JsonBody(input): JsonBody<RunAgentInput>,
) -> Result<Response, HostError> {
    Ok(sse(start_run(&host, &person, input).await?))
}

/// AG-UI events as Server-Sent Events: each one's JSON as the `data` of an unnamed event.
pub(super) fn sse(events: impl futures_util::Stream<Item = Value> + Send + 'static) -> Response {
    Sse::new(events.map(|event| Ok::<_, Infallible>(Event::default().data(event.to_string()))))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Starts the run `input` asks for `person` and follows it: its AG-UI events, the first
/// `RUN_STARTED`, the last `RUN_FINISHED` or `RUN_ERROR`. A run whose last messages answer the
/// page's tools goes on with the turn that called them. AgentCore Runtime's `/invocations` takes
/// the same input.
pub(super) async fn start_run(
    host: &ContainerHost,
    person: &Owner,
    input: RunAgentInput,
) -> Result<BoxStream<'static, Value>, HostError> {
    // The ids first, named as AG-UI names them.
    let run = checked_id::<TurnId>("runId", input.run_id.as_str())?;
    let session = checked_id::<SessionId>("threadId", input.thread_id.as_str())?;
    let (page, tools) = frontend::surface(&input.tools)?;
    let answers = frontend::trailing_answers(&input.messages)?;
    // The run's stream first: nothing is recorded or started whose answer cannot be given.
    let place = stream_place(host, person)?;
    let mut late = None;
    if !answers.is_empty() {
        // The calls answered are of a turn of the conversation: it must be theirs already (a
        // refusal claims nothing), before anything is read or recorded.
        access::theirs(host, person, &session, false).await?;
        match frontend::answer(host, &session, answers).await? {
            Answered::Waiting { turn, cursor, calls } => {
                let followed = follow_turn(host, place, &session, &turn, Some(cursor));
                let translator =
                    Translator::new(input.thread_id, input.run_id, turn.as_str(), tools).answered(calls);
                return Ok(translated(followed, translator));
            }
            Answered::Late(words) => late = Some(words),
            Answered::Nothing => {}
        }
    }
    let turn = turn_of(person, (&run, &session), &input, late, page)?;
    let turn = adapted_turn(host, turn)?;
    turns::start(host, person, turn).await?;
    let followed = follow_turn(host, place, &session, &run, None);
    let translator = Translator::new(input.thread_id, input.run_id, run.as_str(), tools);
    Ok(translated(followed, translator))
}

/// A followed turn's events translated: the translator's `RUN_STARTED` first, then what each
/// logged event stands for, ending once the run has ended (at the turn's terminal, or earlier
/// when it waits for the page's tools) without waiting for more.
fn translated(
    followed: impl futures_util::Stream<Item = Followed> + Send + 'static,
    translator: Translator,
) -> BoxStream<'static, Value> {
    let started = translator.started();
    let rest = futures_util::stream::unfold(
        (Box::pin(followed), translator),
        |(mut followed, mut translator)| async move {
            if translator.has_ended() {
                return None;
            }
            let out = match followed.next().await? {
                Followed::Logged(logged) => translator.translate(&logged.event),
                Followed::NotStarted => vec![translator.not_started()],
            };
            Some((out, (followed, translator)))
        },
    )
    .flat_map(futures_util::stream::iter);
    futures_util::stream::once(std::future::ready(started))
        .chain(rest)
        .boxed()
}

/// The turn `input` asks for, as `POST /turns` takes one: the run as the turn, the thread as the
/// conversation, the last message's text as the person's words (or `words`, the page's late
/// answers), a resumed interrupt as the decision on its approval, `page`, the page's tools, as
/// the surface the turn's UI actions are on, and the input's `context` as the page's state
/// (with the person's message, never in the system prompt).
fn turn_of(
    person: &Owner,
    (run, thread): (&TurnId, &SessionId),
    input: &RunAgentInput,
    words: Option<String>,
    page: Option<Value>,
) -> Result<AgentTurnPayload, HostError> {
    let approval = input.resume.first().map(decision);
    let content = if let Some(words) = words {
        words
    } else {
        match input.messages.last() {
            Some(message) if message.role == "user" => text_of(&message.content),
            Some(message) if approval.is_none() => {
                return Err(HostError::field(
                    "messages",
                    format!(
                        "the last message is the {}'s; a run here answers the person's (role user) or resumes an interrupt",
                        message.role
                    ),
                ));
            }
            None if approval.is_none() => {
                return Err(HostError::field(
                    "messages",
                    "messages must end with the person's message",
                ));
            }
            _ => String::new(),
        }
    };
    let mut turn = AgentTurnPayload::new(run.clone(), thread.clone(), person, content);
    turn.approval = approval;
    let mut context = serde_json::Map::new();
    if let Some(page) = page {
        context.insert("oui".into(), page);
    }
    // What the application tells the agent is the page's, written where the person's browser
    // could: it goes with the person's message, as the page's state (data, never the system
    // prompt's words), within its bounds.
    if !input.context.is_empty() {
        context.insert(PAGE_CONTEXT_KEY.into(), page_context(&input.context)?);
    }
    turn.context = (!context.is_empty()).then_some(context);
    Ok(turn)
}

/// The most items of `context` a run takes.
pub const MAX_CONTEXT_ITEMS: usize = 100;
/// The most bytes of `context` (its descriptions and values together) a run takes.
pub const MAX_CONTEXT_BYTES: usize = 64 * 1024;
/// The key of the turn's `context` that carries AG-UI's `context`: the page's own state, shown to
/// the model with the person's message as data.
const PAGE_CONTEXT_KEY: &str = "pageContext";

/// The input's `context` as the page's state: `[{description, value}]`, within
/// [`MAX_CONTEXT_ITEMS`] and [`MAX_CONTEXT_BYTES`] (400 naming `context` past them).
fn page_context(context: &[ContextItem]) -> Result<Value, HostError> {
    if context.len() > MAX_CONTEXT_ITEMS {
        return Err(HostError::field(
            "context",
            format!(
                "context has {} items; a run takes at most {MAX_CONTEXT_ITEMS}",
                context.len()
            ),
        ));
    }
    let bytes: usize = context
        .iter()
        .map(|item| item.description.len() + item.value.len())
        .sum();
    if bytes > MAX_CONTEXT_BYTES {
        return Err(HostError::field(
            "context",
            format!("context is {bytes} bytes; a run takes at most {MAX_CONTEXT_BYTES}"),
        ));
    }
    Ok(context
        .iter()
        .map(|item| json!({ "description": item.description, "value": item.value }))
        .collect())
}

/// The approval decision a resume entry gives: approved with the interrupt's token, unless it
/// was cancelled or says `approved: false`.
fn decision(entry: &ResumeEntry) -> ApprovalDecision {
    let payload = entry.payload.as_ref();
    let declined = entry.status != "resolved"
        || payload.and_then(|p| p.get("approved")).and_then(Value::as_bool) == Some(false);
    if declined {
        return ApprovalDecision::decline(entry.interrupt_id.clone());
    }
    ApprovalDecision {
        approval_id: entry.interrupt_id.clone(),
        decision: ApprovalDecision::APPROVE.to_owned(),
        token: payload
            .and_then(|p| p.get("token"))
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

/// The text of a message's content: the text itself, or its text parts joined.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

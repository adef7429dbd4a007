//! What the document says of each route: its operation's id and summary, the queries and body it
//! reads, its answers (an exhaustive `match` on [`Route`]: a route cannot be added without one).

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;

use crate::access::NamedIds;
use crate::answers::{
    ActionRecorded, BlockAsk, Blocked, ErrorBody, Health, JobReport, JobReported, Lifted, PresignedFile,
    StopBody, StopRecorded, TurnAccepted, Usage,
};
use crate::console::ConsoleConfig;
use crate::conversations::PageQuery;
use crate::events::ResumeQuery;
use crate::files::UploadQuery;
use crate::routes::Route;
use crate::sessions::Page;
use crate::spending::{LiftQuery, UsageQuery};
use agent_worker_contract::{AttachmentRef, CommandKept, CommandRefused, SessionCommand, SessionState};
use agent_worker_core::conversations::ConversationView;
use agent_worker_core::engine::Entries;
use agent_worker_core::session::ActionAnswer;
use agent_worker_core::session::conversations::{ConversationPage, Deleted};
use agent_worker_runtime::AgentTurnPayload;

/// The schema of a type, from a generator (its `$ref` where the type is named).
pub(super) type SchemaOf = fn(&mut SchemaGenerator) -> Schema;

fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// What a route reads from its body.
pub(super) enum Body {
    /// None.
    None,
    /// JSON of a schema; `optional` where an empty body is taken too.
    Json { of: SchemaOf, optional: bool },
    /// Any bytes (a file), its media type in `Content-Type`.
    Bytes,
    /// The protocol's own (its specification says).
    Protocol(&'static str),
}

/// What a route answers.
pub(super) enum Content {
    Json(SchemaOf),
    /// Server-Sent Events, each event's data of the schemas named.
    Events,
    /// A file's bytes.
    Bytes,
    /// A page of the console.
    Text(&'static str),
    /// The protocol's own, in one of these media types.
    Protocol(&'static [&'static str]),
    /// No body (a redirect).
    None,
}

/// One answer: its status (or `4XX`, `5XX`, `default`), what it means, its body.
pub(super) struct Answer(
    pub(super) &'static str,
    pub(super) &'static str,
    pub(super) Content,
);

/// What the document says of one route.
pub(super) struct Operation {
    pub(super) id: &'static str,
    pub(super) summary: &'static str,
    pub(super) query: Vec<SchemaOf>,
    pub(super) body: Body,
    pub(super) answers: Vec<Answer>,
}

/// The turn a `POST /turns` body holds: the queue's payload, the person's ids taken from a
/// person's own token where it names none, and no `command` (which the door refuses: a command
/// goes to `/sessions/{id}/commands`).
fn turn_request(generator: &mut SchemaGenerator) -> Schema {
    let mut payload = AgentTurnPayload::json_schema(generator);
    if let Some(Value::Array(required)) = payload.get_mut("required") {
        required.retain(|field| field != "userId" && field != "accountId");
    }
    if let Some(Value::Object(properties)) = payload.get_mut("properties") {
        properties.remove("command");
    }
    payload.insert(
        "description".into(),
        "One turn: the turns queue's payload. `userId` and `accountId` name the person with the product's backend key; a person's own token fills them in (and refuses others).".into(),
    );
    generator
        .definitions_mut()
        .insert("TurnRequest".into(), payload.to_value());
    Schema::new_ref("#/components/schemas/TurnRequest".into())
}

fn problems() -> [Answer; 2] {
    [
        Answer(
            "4XX",
            "Refused: nothing was done.",
            Content::Json(schema::<ErrorBody>),
        ),
        Answer(
            "5XX",
            "Failed, or unavailable for now (503 and 429 say when to come back in `Retry-After`).",
            Content::Json(schema::<ErrorBody>),
        ),
    ]
}

/// A door's answers: its protocol's, in `media`, and what its specification says besides.
fn protocol(media: &'static [&'static str], spec: &'static str) -> Vec<Answer> {
    vec![
        Answer("200", spec, Content::Protocol(media)),
        Answer(
            "default",
            "As the protocol's specification says.",
            Content::Protocol(&["*/*"]),
        ),
    ]
}

/// `answers`, and the refusals and failures every route of the product's API (and the console)
/// answers in the error shape.
fn with_problems(mut answers: Vec<Answer>) -> Vec<Answer> {
    answers.extend(problems());
    answers
}

impl Route {
    pub(super) fn operation(self) -> Operation {
        let person = || vec![schema::<NamedIds> as SchemaOf];
        let api = |id, summary, query, body, ok: Answer| Operation {
            id,
            summary,
            query,
            body,
            answers: with_problems(vec![ok]),
        };
        let door = |id, summary, body, answers| Operation {
            id,
            summary,
            query: Vec::new(),
            body,
            answers,
        };
        let json = |of: SchemaOf| Body::Json { of, optional: false };
        match self {
            Self::AcceptTurn => api(
                "acceptTurn",
                "Accepts a turn of the person's conversation (claimed when no one owns it) and runs it, or sends it to the turns queue.",
                Vec::new(),
                json(turn_request),
                Answer(
                    "202",
                    "Accepted: its events are at /turns/{turn_id}/events.",
                    Content::Json(schema::<TurnAccepted>),
                ),
            ),
            Self::TurnEvents => {
                let mut query = person();
                query.push(schema::<ResumeQuery>);
                api(
                    "turnEvents",
                    "The turn's events as Server-Sent Events, from its log: each under its type, its position as the id (resume with Last-Event-ID), to its terminal.",
                    query,
                    Body::None,
                    Answer("200", "The events.", Content::Events),
                )
            }
            Self::StopTurn => api(
                "stopTurn",
                "Records a stop for the person's turn, which ends at its next boundary.",
                person(),
                Body::Json {
                    of: schema::<StopBody>,
                    optional: true,
                },
                Answer("202", "Recorded.", Content::Json(schema::<StopRecorded>)),
            ),
            Self::AnswerAction => api(
                "answerAction",
                "The person's tab answers a UI action the turn asked for (the first final answer stands).",
                person(),
                json(schema::<ActionAnswer>),
                Answer("200", "Taken.", Content::Json(schema::<ActionRecorded>)),
            ),
            Self::UploadFile => {
                let mut query = person();
                query.push(schema::<UploadQuery>);
                api(
                    "uploadFile",
                    "Keeps a file the person attaches (its bytes in the body), or, given its size, says where the person's client sends them (S3).",
                    query,
                    Body::Bytes,
                    Answer(
                        "201",
                        "Kept: its reference, to attach to a turn; with `size`, the reference and where to send the bytes.",
                        Content::Json(|generator| {
                            let kept = generator.subschema_for::<AttachmentRef>();
                            let presigned = generator.subschema_for::<PresignedFile>();
                            schemars::json_schema!({ "anyOf": [kept, presigned] })
                        }),
                    ),
                )
            }
            Self::DownloadFile => Operation {
                id: "downloadFile",
                summary: "A file of the person's conversation: its bytes, or a redirect to a short-lived link (S3).",
                query: person(),
                body: Body::None,
                answers: with_problems(vec![
                    Answer("200", "The file's bytes.", Content::Bytes),
                    Answer("303", "A link to the file's bytes, in `Location`.", Content::None),
                ]),
            },
            Self::ListConversations => {
                let mut query = person();
                query.push(schema::<PageQuery>);
                api(
                    "listConversations",
                    "The person's conversations, most recent first.",
                    query,
                    Body::None,
                    Answer(
                        "200",
                        "A page of them.",
                        Content::Json(schema::<ConversationPage>),
                    ),
                )
            }
            Self::GetConversation => {
                let mut query = person();
                query.push(schema::<PageQuery>);
                api(
                    "getConversation",
                    "One conversation of the person's, in display form: its newest messages, its waiting approvals.",
                    query,
                    Body::None,
                    Answer(
                        "200",
                        "The conversation.",
                        Content::Json(schema::<ConversationView>),
                    ),
                )
            }
            Self::DeleteConversation => api(
                "deleteConversation",
                "Deletes a conversation of the person's, with its files (a running turn stopped first).",
                person(),
                Body::None,
                Answer("200", "What went, by kind.", Content::Json(schema::<Deleted>)),
            ),
            Self::SendCommand => {
                // A command the session refuses answers in the command's own shape; the person's
                // and the conversation's checks before it, in the error shape.
                let refused = |generator: &mut SchemaGenerator| {
                    let answer = generator.subschema_for::<CommandRefused>();
                    let error = generator.subschema_for::<ErrorBody>();
                    schemars::json_schema!({ "anyOf": [answer, error] })
                };
                Operation {
                    id: "sendCommand",
                    summary: "Steers the conversation's running turn, adds a follow-up, or aborts it.",
                    query: person(),
                    body: json(schema::<SessionCommand>),
                    answers: vec![
                        Answer(
                            "202",
                            "Kept for the running turn.",
                            Content::Json(schema::<CommandKept>),
                        ),
                        Answer("4XX", "Refused: nothing was kept.", Content::Json(refused)),
                        Answer(
                            "5XX",
                            "The store failed: nothing was kept.",
                            Content::Json(refused),
                        ),
                    ],
                }
            }
            Self::SessionState => api(
                "sessionState",
                "Whether the conversation runs a turn, and the commands sent to it.",
                person(),
                Body::None,
                Answer("200", "Its state.", Content::Json(schema::<SessionState>)),
            ),
            Self::SessionEntries => {
                let mut query = person();
                query.push(schema::<Page>);
                api(
                    "sessionEntries",
                    "The conversation's durable history from a place.",
                    query,
                    Body::None,
                    Answer(
                        "200",
                        "Its entries, and the place to read on from.",
                        Content::Json(schema::<Entries>),
                    ),
                )
            }
            Self::ReportJobEvent => api(
                "reportJobEvent",
                "The product's backend reports an event of a job a turn started (the backend's key alone).",
                Vec::new(),
                json(schema::<JobReport>),
                Answer("202", "Recorded.", Content::Json(schema::<JobReported>)),
            ),
            Self::GetUsage => api(
                "getUsage",
                "What an account (a person, a conversation) spent on a day (the backend's key alone).",
                vec![schema::<UsageQuery>],
                Body::None,
                Answer("200", "The spending.", Content::Json(schema::<Usage>)),
            ),
            Self::PutBlock => api(
                "putBlock",
                "Blocks an account or a person: their turns stop and no new one starts (the backend's key alone).",
                Vec::new(),
                json(schema::<BlockAsk>),
                Answer("200", "Blocked.", Content::Json(schema::<Blocked>)),
            ),
            Self::LiftBlock => api(
                "liftBlock",
                "Lifts a block (the backend's key alone).",
                vec![schema::<LiftQuery>],
                Body::None,
                Answer("200", "Lifted.", Content::Json(schema::<Lifted>)),
            ),
            Self::Health => api(
                "health",
                "The host's health: the load balancer's check.",
                Vec::new(),
                Body::None,
                Answer("200", "Serving.", Content::Json(schema::<Health>)),
            ),
            Self::OpenApi => api(
                "openApi",
                "This document.",
                Vec::new(),
                Body::None,
                Answer(
                    "200",
                    "The OpenAPI 3.1 document.",
                    Content::Json(|_| schemars::json_schema!({ "type": "object" })),
                ),
            ),
            Self::ConsolePage => door(
                "consolePage",
                "The console's page.",
                Body::None,
                with_problems(vec![Answer("200", "The page.", Content::Text("text/html"))]),
            ),
            Self::ConsoleScript => door(
                "consoleScript",
                "The console's script.",
                Body::None,
                with_problems(vec![Answer(
                    "200",
                    "The script.",
                    Content::Text("text/javascript"),
                )]),
            ),
            Self::ConsoleStyles => door(
                "consoleStyles",
                "The console's styles.",
                Body::None,
                with_problems(vec![Answer("200", "The styles.", Content::Text("text/css"))]),
            ),
            Self::ConsoleClient => door(
                "consoleClient",
                "The typed client of this API (clients/typescript, built: an ES module), which the console's script uses.",
                Body::None,
                with_problems(vec![Answer(
                    "200",
                    "The module.",
                    Content::Text("text/javascript"),
                )]),
            ),
            Self::ConsoleConfig => door(
                "consoleConfig",
                "Whom the console's page acts for, and the model.",
                Body::None,
                with_problems(vec![Answer(
                    "200",
                    "The console's configuration.",
                    Content::Json(schema::<ConsoleConfig>),
                )]),
            ),
            Self::A2aJsonRpc => door(
                "a2aJsonRpc",
                "A2A 1.0's JSON-RPC binding: every method.",
                Body::Protocol("application/json"),
                protocol(
                    &["application/json", "text/event-stream"],
                    "A JSON-RPC answer, or a stream of them.",
                ),
            ),
            Self::A2aSendMessage => door(
                "a2aSendMessage",
                "A2A 1.0's HTTP+JSON SendMessage.",
                Body::Protocol("application/json"),
                protocol(&["application/json"], "The task, or a message."),
            ),
            Self::A2aStreamMessage => door(
                "a2aStreamMessage",
                "A2A 1.0's HTTP+JSON SendStreamingMessage.",
                Body::Protocol("application/json"),
                protocol(&["text/event-stream"], "The task's updates."),
            ),
            Self::A2aListTasks => door(
                "a2aListTasks",
                "A2A 1.0's HTTP+JSON ListTasks.",
                Body::None,
                protocol(&["application/json"], "A page of the person's tasks."),
            ),
            Self::A2aGetTask => door(
                "a2aGetTask",
                "A2A 1.0's HTTP+JSON GetTask.",
                Body::None,
                protocol(&["application/json"], "The task."),
            ),
            Self::A2aTaskAction => door(
                "a2aTaskAction",
                "A2A 1.0's HTTP+JSON CancelTask (`{id}:cancel`) and SubscribeToTask (`{id}:subscribe`).",
                Body::Protocol("application/json"),
                protocol(
                    &["application/json", "text/event-stream"],
                    "The task, or its updates.",
                ),
            ),
            Self::A2aListPushConfigs => door(
                "a2aListPushConfigs",
                "A2A 1.0's HTTP+JSON ListTaskPushNotificationConfigs.",
                Body::None,
                protocol(&["application/json"], "The task's webhooks."),
            ),
            Self::A2aCreatePushConfig => door(
                "a2aCreatePushConfig",
                "A2A 1.0's HTTP+JSON CreateTaskPushNotificationConfig.",
                Body::Protocol("application/json"),
                protocol(&["application/json"], "The webhook set."),
            ),
            Self::A2aGetPushConfig => door(
                "a2aGetPushConfig",
                "A2A 1.0's HTTP+JSON GetTaskPushNotificationConfig.",
                Body::None,
                protocol(&["application/json"], "The webhook."),
            ),
            Self::A2aDeletePushConfig => door(
                "a2aDeletePushConfig",
                "A2A 1.0's HTTP+JSON DeleteTaskPushNotificationConfig.",
                Body::None,
                protocol(&["application/json"], "Deleted."),
            ),
            Self::A2aExtendedCard => door(
                "a2aExtendedCard",
                "A2A 1.0's HTTP+JSON GetExtendedAgentCard (none is offered).",
                Body::None,
                protocol(&["application/json"], "The protocol's error."),
            ),
            Self::AgentCard => door(
                "agentCard",
                "The A2A agent card.",
                Body::None,
                protocol(&["application/json"], "The card."),
            ),
            Self::A2aInterfaceCard => door(
                "a2aInterfaceCard",
                "The A2A agent card, beside the interface.",
                Body::None,
                protocol(&["application/json"], "The card."),
            ),
            Self::AguiRun => door(
                "aguiRun",
                "AG-UI: a run of the agent, its events streamed.",
                Body::Protocol("application/json"),
                protocol(&["application/json", "text/event-stream"], "AG-UI's events."),
            ),
            Self::McpPost => door(
                "mcpPost",
                "The agent as an MCP server (Streamable HTTP): a JSON-RPC message.",
                Body::Protocol("application/json"),
                protocol(
                    &["application/json", "text/event-stream"],
                    "A JSON-RPC answer, or a stream of messages.",
                ),
            ),
            Self::McpGet => door(
                "mcpGet",
                "MCP's server-initiated stream (not offered: 405).",
                Body::None,
                protocol(&["text/event-stream"], "Not offered."),
            ),
            Self::Ping => door(
                "ping",
                "AgentCore Runtime's health check.",
                Body::None,
                protocol(&["application/json"], "`Healthy` or `HealthyBusy`."),
            ),
            Self::Invocations => door(
                "invocations",
                "AgentCore Runtime's invocation: a turn, its events streamed.",
                Body::Protocol("application/json"),
                protocol(
                    &["application/json", "text/event-stream"],
                    "The turn's events (text/event-stream), or all of them at once (application/json).",
                ),
            ),
            Self::WebSocket => door(
                "webSocket",
                "AgentCore Runtime's bidirectional WebSocket: a turn, then steering, stops and answers on the same socket.",
                Body::None,
                vec![
                    Answer("101", "Switched to the WebSocket.", Content::None),
                    Answer(
                        "default",
                        "As the protocol's specification says.",
                        Content::Protocol(&["*/*"]),
                    ),
                ],
            ),
        }
    }
}

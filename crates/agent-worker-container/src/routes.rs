//! Every route of the container's router, in one table.
//!
//! [`Route`] is the one list, each route one row of the `routes!` table below (its name, method,
//! path, door and handler): the enum, [`Route::ALL`] and the router ([`routes`]) are made from
//! those rows, and the OpenAPI document ([`super::openapi`]) describes each route by an exhaustive
//! `match`. A route cannot be served without being in the document, nor listed without being
//! served.

use axum::Router;
use axum::routing::{MethodFilter, MethodRouter, on};

use super::{
    ContainerHost, a2a, actions, agentcore, agui, console, conversations, events, files, health, jobs, mcp,
    openapi_document, sessions, spending, stops, turns,
};

/// An HTTP method a route takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// GET.
    Get,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// DELETE.
    Delete,
}

impl Method {
    /// Its lower-case name, as OpenAPI keys it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Post => "post",
            Self::Put => "put",
            Self::Delete => "delete",
        }
    }

    /// The router's filter for it.
    const fn filter(self) -> MethodFilter {
        match self {
            Self::Get => MethodFilter::GET,
            Self::Post => MethodFilter::POST,
            Self::Put => MethodFilter::PUT,
            Self::Delete => MethodFilter::DELETE,
        }
    }
}

/// Which door of the host a route belongs to: the document tags each operation with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Door {
    /// The product's own API: turns, events, stops, conversations, files, UI answers, jobs,
    /// spending, sessions, health, this document.
    Api,
    /// The console (served when the host has one).
    Console,
    /// A2A 1.0 (JSON-RPC and HTTP+JSON), its agent cards.
    A2a,
    /// AG-UI.
    Agui,
    /// The agent as an MCP server.
    Mcp,
    /// AgentCore Runtime's contract.
    AgentCore,
}

impl Door {
    /// Its tag in the document.
    pub const fn tag(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Console => "console",
            Self::A2a => "a2a",
            Self::Agui => "ag-ui",
            Self::Mcp => "mcp",
            Self::AgentCore => "agentcore",
        }
    }
}

/// The table's one definition: the enum, [`Route::ALL`] and each route's method, path, door and
/// handler, from one row each, so that no route can be in one and not the others.
macro_rules! routes {
    ($($(#[$doc:meta])* $name:ident: $method:ident $path:expr => $door:ident, $handler:expr;)*) => {
        /// One route of the router: a method on a path.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Route {
            $($(#[$doc])* $name,)*
        }

        impl Route {
            /// Every route, the product's API first.
            pub const ALL: &'static [Route] = &[$(Self::$name,)*];

            /// Its method.
            pub const fn method(self) -> Method {
                match self {
                    $(Self::$name => Method::$method,)*
                }
            }

            /// Its path template, `{name}` for a parameter (the form both OpenAPI and axum use).
            pub const fn path(self) -> &'static str {
                match self {
                    $(Self::$name => $path,)*
                }
            }

            /// Its door.
            pub const fn door(self) -> Door {
                match self {
                    $(Self::$name => Door::$door,)*
                }
            }

            /// Its handler, on its method.
            fn handler(self) -> MethodRouter<ContainerHost> {
                let method = self.method().filter();
                match self {
                    $(Self::$name => on(method, $handler),)*
                }
            }
        }
    };
}

routes! {
    /// A turn, accepted and run (or queued).
    AcceptTurn: Post "/turns" => Api, turns::accept_turn;
    /// A turn's events, streamed from its log.
    TurnEvents: Get "/turns/{turn_id}/events" => Api, events::turn_events;
    /// A stop for a turn.
    StopTurn: Post "/turns/{turn_id}/stop" => Api, stops::stop_turn;
    /// The tab's answer to a UI action.
    AnswerAction: Post "/turns/{turn_id}/actions/{call_id}" => Api, actions::answer;
    /// A file the person attaches.
    UploadFile: Post "/conversations/{id}/files" => Api, files::upload;
    /// A file of the conversation.
    DownloadFile: Get "/conversations/{id}/files/{file}" => Api, files::download;
    /// The person's conversations.
    ListConversations: Get "/conversations" => Api, conversations::list;
    /// One conversation, in display form.
    GetConversation: Get "/conversations/{id}" => Api, conversations::get;
    /// A conversation deleted.
    DeleteConversation: Delete "/conversations/{id}" => Api, conversations::delete;
    /// A steer, follow-up or abort for the running turn.
    SendCommand: Post "/sessions/{id}/commands" => Api, sessions::command;
    /// Whether the conversation runs a turn.
    SessionState: Get "/sessions/{id}/state" => Api, sessions::state;
    /// The conversation's durable history.
    SessionEntries: Get "/sessions/{id}/entries" => Api, sessions::entries;
    /// A job's event, from the product's backend.
    ReportJobEvent: Post "/jobs/events" => Api, jobs::report;
    /// What was spent.
    GetUsage: Get "/usage" => Api, spending::usage;
    /// A block (the kill switch).
    PutBlock: Put "/blocks" => Api, spending::block;
    /// A block lifted.
    LiftBlock: Delete "/blocks" => Api, spending::lift;
    /// The host's health.
    Health: Get "/health" => Api, health;
    /// The OpenAPI document.
    OpenApi: Get "/openapi.json" => Api, openapi_document;
    /// The console's page.
    ConsolePage: Get "/" => Console, console::index;
    /// The console's script.
    ConsoleScript: Get "/console.js" => Console, console::script;
    /// The console's styles.
    ConsoleStyles: Get "/console.css" => Console, console::styles;
    /// The typed client, which the console's script uses.
    ConsoleClient: Get "/client.js" => Console, console::client;
    /// Whom the console acts for.
    ConsoleConfig: Get "/console/config" => Console, console::config;
    /// A2A's JSON-RPC binding.
    A2aJsonRpc: Post a2a::A2A_PATH => A2a, a2a::jsonrpc;
    /// A2A's SendMessage (HTTP+JSON).
    A2aSendMessage: Post "/a2a/message:send" => A2a, a2a::rest::send;
    /// A2A's SendStreamingMessage (HTTP+JSON).
    A2aStreamMessage: Post "/a2a/message:stream" => A2a, a2a::rest::stream;
    /// A2A's ListTasks (HTTP+JSON).
    A2aListTasks: Get "/a2a/tasks" => A2a, a2a::rest::list;
    /// A2A's GetTask (HTTP+JSON).
    A2aGetTask: Get "/a2a/tasks/{target}" => A2a, a2a::rest::task_get;
    /// A2A's CancelTask and SubscribeToTask (HTTP+JSON).
    A2aTaskAction: Post "/a2a/tasks/{target}" => A2a, a2a::rest::task_post;
    /// A2A's ListTaskPushNotificationConfigs (HTTP+JSON).
    A2aListPushConfigs: Get "/a2a/tasks/{target}/pushNotificationConfigs" => A2a, a2a::rest::push_list;
    /// A2A's CreateTaskPushNotificationConfig (HTTP+JSON).
    A2aCreatePushConfig: Post "/a2a/tasks/{target}/pushNotificationConfigs" => A2a, a2a::rest::push_create;
    /// A2A's GetTaskPushNotificationConfig (HTTP+JSON).
    A2aGetPushConfig: Get "/a2a/tasks/{target}/pushNotificationConfigs/{config}" => A2a, a2a::rest::push_get;
    /// A2A's DeleteTaskPushNotificationConfig (HTTP+JSON).
    A2aDeletePushConfig: Delete "/a2a/tasks/{target}/pushNotificationConfigs/{config}" => A2a, a2a::rest::push_delete;
    /// A2A's GetExtendedAgentCard (HTTP+JSON).
    A2aExtendedCard: Get "/a2a/extendedAgentCard" => A2a, a2a::rest::extended_card;
    /// The A2A agent card.
    AgentCard: Get a2a::AGENT_CARD_PATH => A2a, a2a::card;
    /// The A2A agent card, beside the interface.
    A2aInterfaceCard: Get a2a::INTERFACE_CARD_PATH => A2a, a2a::card;
    /// An AG-UI run.
    AguiRun: Post "/agui" => Agui, agui::run;
    /// An MCP message.
    McpPost: Post "/mcp" => Mcp, mcp::post;
    /// MCP's server-initiated stream (not offered).
    McpGet: Get "/mcp" => Mcp, mcp::get;
    /// AgentCore Runtime's health check.
    Ping: Get "/ping" => AgentCore, agentcore::ping;
    /// AgentCore Runtime's invocation.
    Invocations: Post "/invocations" => AgentCore, agentcore::invoke;
    /// AgentCore Runtime's WebSocket.
    WebSocket: Get "/ws" => AgentCore, agentcore::upgrade;
}

impl Route {
    /// Whether it is served without a credential: [`OPEN_PATHS`](super::OPEN_PATHS), and the
    /// console's assets.
    pub fn is_open(self) -> bool {
        super::open_path(self.path(), true)
    }

    /// The names of its path parameters, in order.
    pub fn path_params(self) -> impl Iterator<Item = &'static str> {
        self.path()
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
    }
}

/// The routes of [`Route::ALL`], the console's only where the host serves one.
pub(super) fn routes(console: bool) -> Router<ContainerHost> {
    Route::ALL
        .iter()
        .copied()
        .filter(|route| console || route.door() != Door::Console)
        .fold(Router::new(), |router, route| {
            router.route(route.path(), route.handler())
        })
}

//! The container host: turns over HTTP, for a long-running process (ECS, Fargate, a VM).
//!
//! | request | answers |
//! | --- | --- |
//! | `POST /turns` with an `AgentTurnPayload` and `x-api-key` | 202 accepted; 400 not a turn (the field at fault); 401 wrong or missing key; 404 another person's conversation; 409 that turn, or another turn of the conversation, is running (`runningTurnId`; a turn that lists it in `supersedes` replaces it); 413 too large; 503 with `Retry-After` at capacity or shutting down |
//! | `GET /health` | status, running turns, capacity, model |
//! | `GET /openapi.json` | the OpenAPI 3.1 document of every route ([`openapi`], made from [`Route`]'s table) |
//! | `GET /usage…`, `PUT` / `DELETE /blocks…` | the backend's spending and kill switch: see `spending` |
//! | `GET /`, `/console.js`, `/console.css`, `/client.js`, `/console/config` | the console (with [`ContainerHostBuilder::console`]) |
//! | `POST /turns/{turnId}/stop?session=S&userId=U&accountId=A` with `{"reason": "user_stop" \| "superseded"}` | 202 recorded; 409 the turn had ended; 404 not that person's conversation |
//! | `GET /turns/{turnId}/events?session=S&userId=U&accountId=A` (SSE; `Last-Event-ID` or `?cursor=` resumes) | the turn's events from the event log, live, ending after the terminal; 404 not that person's conversation |
//! | `POST /turns/{turnId}/actions/{callId}?session=S&userId=U&accountId=A` with the tab's answer | a UI action answered by the person's tab: see [`actions`] (with [`ContainerHostBuilder::ui_answers`]) |
//! | `POST /conversations/{id}/files?userId=U&accountId=A&name=N` with the file's bytes | a file the person attaches: see [`files`] (with [`ContainerHostBuilder::uploads`]) |
//! | `POST /jobs/events` with `{"event", "payload"}` | the product's report of the event that settles a job: see [`jobs`] (with [`ContainerHostBuilder::job_reports`]) |
//! | `GET /conversations…`, `GET` / `DELETE /conversations/{id}…` | a person's conversations: see [`conversations`] (with [`ContainerHostBuilder::conversations`]) |
//! | `POST /sessions/{id}/commands?userId=U&accountId=A` with `{"type": "steer" \| "follow_up", "prompt"}` or `{"type": "abort"}`, `GET /sessions/{id}/state…`, `GET /sessions/{id}/entries?since=N…` | the session control plane and the durable history from a cursor: see [`sessions`] |
//! | `GET /.well-known/agent-card.json`, `POST /a2a`, `/a2a/…`; `POST /agui`; `GET /ping`, `POST /invocations` | A2A (its JSON-RPC and HTTP+JSON bindings), AG-UI, AgentCore Runtime: see `a2a`, `agui`, `agentcore` |
//!
//! It holds no turn logic: a host runs its turns through the same [`TurnHandler`] the Lambda
//! uses ([`ContainerHost::builder`]), or sends them to the turns queue, whose worker runs them
//! ([`ContainerHost::queued`]: `serve --queue-url`, the `api` function). Either way a
//! [`ContainerHostBuilder`] is given everything the host serves besides turns before `build`;
//! nothing is set on a host after it is built.
//! [`serve`] stops accepting on shutdown (503), lets running turns finish for a grace period,
//! then stops the rest through the stop path, so that they are stored and marked.

use agent_worker_http::serve::{ConnectionLimits, serve_answering};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use tokio::net::TcpListener;
use tokio::sync::Notify;

mod a2a;
pub mod access;
mod actions;
mod agentcore;
mod agui;
pub mod answers;
mod auth_settings;
mod builder;
mod chain;
pub mod console;
mod conversations;
mod cors;
mod edge;
mod error;
mod events;
mod extract;
mod files;
mod jobs;
pub mod openapi;
use agent_worker_runtime::joined_id;
pub mod jwt;
pub mod mcp;
pub mod routes;
mod sessions;
mod spending;
mod stops;
mod turns;

pub use a2a::{PublicUrl, PublicUrlError};
pub use actions::MAX_ANSWER_BYTES;
pub use agentcore::{MAX_WS_MESSAGE_BYTES, PING_EVERY, SILENT_FOR};
pub use agui::{MAX_CONTEXT_BYTES, MAX_CONTEXT_ITEMS};
pub use auth_settings::{AUTH_SETTINGS, DEFAULT_AGENTCORE_ACCOUNT, DEFAULT_CARD_KEY_ID};
pub use builder::ContainerHostBuilder;
pub use cors::{AllowedOrigins, OriginError, PREFLIGHT_MAX_AGE};
pub use error::{HostError, RETRY_AFTER_SECS};
pub use events::{
    DEFAULT_EVENT_START_WAIT, DEFAULT_MAX_EVENT_STREAMS, DEFAULT_MAX_EVENT_STREAMS_PER_ACCOUNT,
    DEFAULT_MAX_EVENT_STREAMS_PER_PERSON, MAX_IDLE_POLL, StreamCaps,
};
pub use files::{DOWNLOAD_LINK_TTL, MAX_PRESIGNED_BYTES, PRESIGNED_UPLOAD_TTL};
pub use routes::Route;
pub use turns::ACCEPTED_RUN_LEASE;

use agent_worker_aws::dynamo::DynamoEventLog;
use agent_worker_contract::AgentEvent;
use agent_worker_contract::ErrorChain;
use agent_worker_core::session::{SessionId, SessionStore, Stop, StopCause, TurnId};
use agent_worker_runtime::metrics::TurnOutcome;
use agent_worker_runtime::runner::TurnHandler;

/// How many turns run at once by default.
pub const DEFAULT_MAX_CONCURRENT_TURNS: usize = 8;
/// The largest request body by default.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
/// How long running turns may go on after shutdown begins, by default.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// How often an event stream looks for new events, by default.
pub const DEFAULT_EVENT_POLL: Duration = Duration::from_millis(200);
/// The agent's name on its A2A agent card, by default.
pub const DEFAULT_AGENT_NAME: &str = "agent-worker";
/// What its A2A agent card says it does, by default.
pub const DEFAULT_AGENT_DESCRIPTION: &str =
    "A conversational agent: send it a message, follow its answer as it streams.";

/// A container host that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// The API key is missing or too short to be one.
    #[error(
        "the API key is required and must be at least {MIN_API_KEY_CHARS} characters (--api-key or AGENT_WORKER_API_KEY)"
    )]
    ApiKeyTooShort,
}

pub use agent_worker_http::api_key::MIN_API_KEY_CHARS;

/// The container host's settings.
#[derive(Clone)]
pub struct ContainerConfig {
    auth: access::ApiAuth,
    /// The most turns that run at once.
    pub max_concurrent_turns: usize,
    /// The largest request body, in bytes.
    pub body_limit: usize,
    /// How long running turns may go on once shutdown begins.
    pub shutdown_grace: Duration,
    /// How often an event stream looks for new events.
    pub event_poll: Duration,
    /// The limits every connection is served within (timeouts, the most open at once).
    pub connections: ConnectionLimits,
    /// The most event streams open at once: on the host (past it, 503), for one person and for
    /// one account (past either, 429).
    pub event_streams: events::StreamCaps,
    /// How long an event stream waits for a turn that has logged nothing before it ends.
    pub event_start_wait: Duration,
    /// The web origins whose pages may call the API (none by default).
    pub allowed_origins: AllowedOrigins,
    /// The agent's name, as its A2A agent card gives it (`AGENT_NAME`).
    pub agent_name: String,
    /// What the agent does, as its A2A agent card says (`AGENT_DESCRIPTION`).
    pub agent_description: String,
    /// The URL other agents reach this one at (`PUBLIC_URL`, such as `https://agent.example.com`);
    /// without one, the agent card names `http://` and the request's `Host` when that is a plain
    /// `host[:port]` (never a forwarded scheme or host).
    pub public_url: Option<PublicUrl>,
    /// The key that signs the agent card (`AGENT_CARD_SIGNING_KEY`, `AGENT_CARD_KEY_ID`): with
    /// [`public_url`](Self::public_url), every card served carries its signature; without either,
    /// the card is not signed.
    pub card_signer: Option<agent_worker_runtime::card_signature::CardSigner>,
    /// Whether an MCP client that declared elicitation (in the handshake revisions) is asked an
    /// approval on its call's answer stream, its answer coming in a request of its own, which
    /// must reach this same instance: not where an instance serves one request at a time (the
    /// `api` function sets it off), where the answer names the approval instead.
    pub stream_elicitation: bool,
    /// A2A push notifications: `Some` when the workers push (a host built on a worker takes its
    /// settings' `A2A_PUSH`), so the card declares them and the push config methods keep
    /// webhooks under this policy; `None`: refused as not supported.
    pub a2a_push: Option<agent_worker_runtime::a2a_push::PushPolicy>,
}

impl fmt::Debug for ContainerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContainerConfig")
            .field("max_concurrent_turns", &self.max_concurrent_turns)
            .field("body_limit", &self.body_limit)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("connections", &self.connections)
            .finish_non_exhaustive()
    }
}

impl ContainerConfig {
    /// Settings with `api_key`, which is required: a server without a key does not start.
    pub fn new(api_key: impl Into<String>) -> Result<Self, ContainerError> {
        let api_key =
            agent_worker_http::api_key::ApiKey::new(api_key).map_err(|_| ContainerError::ApiKeyTooShort)?;
        Ok(Self::authenticated_by(access::ApiAuth::ApiKey(api_key)))
    }

    /// Settings with people identified by their own tokens, verified by `verifier` (`--auth
    /// jwt`): every route acts for the token's person alone, whatever a request names.
    pub fn people_by_tokens(verifier: Arc<crate::jwt::JwtVerifier>) -> Self {
        Self::authenticated_by(access::ApiAuth::Tokens(verifier))
    }

    /// Settings for the `api` function behind API Gateway's JWT authorizer (`AUTH=apigw-jwt`):
    /// a request the authorizer verified is taken with its claims; one that reached the
    /// function's URL directly (an event stream) has its token verified by `verifier`, which
    /// names the same issuer, audience and claims.
    pub fn people_by_gateway_tokens(verifier: Arc<crate::jwt::JwtVerifier>) -> Self {
        Self::authenticated_by(access::ApiAuth::GatewayTokens(verifier))
    }

    /// Settings for the `api` function behind a Function URL with `AuthType: AWS_IAM`
    /// (`AUTH=iam`): Lambda verified the caller's signature, and the caller (the product's
    /// backend) vouches for the ids it names, as with the API key. A request Lambda did not
    /// verify is refused.
    pub fn signed_by_iam() -> Self {
        Self::authenticated_by(access::ApiAuth::Iam)
    }

    /// These settings, for `serve` behind Amazon Bedrock AgentCore Runtime with IAM (SigV4)
    /// callers (`serve --auth iam`): the runtime verified the caller's signature, and each
    /// request's person is the user the caller named, which the runtime passes in
    /// `X-Amzn-Bedrock-AgentCore-Runtime-User-Id`, of `account`. A request without it is
    /// refused. Only for a container the runtime alone reaches: no setting turns it on
    /// ([`from_lookup`](Self::from_lookup) does not), so the `api` function never believes the
    /// header.
    pub fn with_people_named_by_the_runtime(mut self, account: impl Into<String>) -> Self {
        self.auth = access::ApiAuth::RuntimeUsers {
            account: account.into(),
        };
        self
    }

    fn authenticated_by(auth: access::ApiAuth) -> Self {
        Self {
            auth,
            max_concurrent_turns: DEFAULT_MAX_CONCURRENT_TURNS,
            body_limit: DEFAULT_BODY_LIMIT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            event_poll: DEFAULT_EVENT_POLL,
            connections: ConnectionLimits::default(),
            event_streams: events::StreamCaps::default(),
            event_start_wait: DEFAULT_EVENT_START_WAIT,
            allowed_origins: AllowedOrigins::default(),
            agent_name: DEFAULT_AGENT_NAME.to_owned(),
            agent_description: DEFAULT_AGENT_DESCRIPTION.to_owned(),
            public_url: None,
            card_signer: None,
            stream_elicitation: true,
            a2a_push: None,
        }
    }
}

/// How a turn ended, for [`on_turn_end`](ContainerHostBuilder::on_turn_end).
#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnd {
    /// The session.
    pub session: SessionId,
    /// The turn.
    pub turn_id: TurnId,
    /// How it ended (never `Redriven`: the container has no queue to give it back to).
    pub outcome: TurnOutcome,
    /// Its terminal event.
    pub terminal: Option<AgentEvent>,
}

pub(crate) type TurnEndHook = Arc<dyn Fn(TurnEnd) + Send + Sync>;

/// The shared state of a running container host. Cheap to clone.
#[derive(Clone)]
pub struct ContainerHost {
    inner: Arc<Inner>,
}

/// What a host does with the turns it accepts.
pub(crate) enum Turns {
    /// Runs them here through the runner, on model `model`.
    Run {
        /// The runner.
        handler: TurnHandler,
        /// The model, for the health check.
        model: String,
    },
    /// Sends them to the turns queue, whose worker runs them.
    Queue(agent_worker_runtime::TurnQueue),
}

pub(crate) struct Inner {
    turns: Turns,
    store: Arc<dyn SessionStore>,
    log: Option<DynamoEventLog>,
    config: ContainerConfig,
    running: Mutex<HashMap<TurnId, SessionId>>,
    accepting: AtomicBool,
    idle: Notify,
    on_turn_end: Option<TurnEndHook>,
    conversations: Option<agent_worker_core::conversations::Conversations>,
    jobs: Option<agent_worker_runtime::jobs::JobReports>,
    answers: Option<Arc<dyn agent_worker_core::session::ActionAnswerStore>>,
    console: Option<console::Console>,
    uploads: Option<Arc<dyn agent_worker_core::engine::attachments::FileUploads>>,
    followers: events::Followers,
    /// Whether turns run here, for AgentCore Runtime's `/ping`.
    activity: agentcore::Activity,
    /// The MCP `ask` calls under way here, for their cancellation.
    mcp_calls: mcp::Calls,
}

impl Inner {
    /// The model turns run on here; `None` when they go to the queue.
    fn model(&self) -> Option<&str> {
        match &self.turns {
            Turns::Run { model, .. } => Some(model),
            Turns::Queue(_) => None,
        }
    }
}

impl fmt::Debug for ContainerHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContainerHost")
            .field("config", &self.inner.config)
            .field("model", &self.inner.model())
            .finish_non_exhaustive()
    }
}

impl ContainerHost {
    /// Where the host's sessions are stored.
    fn store(&self) -> &Arc<dyn SessionStore> {
        &self.inner.store
    }

    /// The host's settings.
    fn config(&self) -> &ContainerConfig {
        &self.inner.config
    }

    /// The readers of the turns' event logs, one per followed turn.
    fn followers(&self) -> &events::Followers {
        &self.inner.followers
    }

    /// Where files people attach go, when the host takes them.
    fn uploads(&self) -> Option<&Arc<dyn agent_worker_core::engine::attachments::FileUploads>> {
        self.inner.uploads.as_ref()
    }

    /// A person's conversations, when the host serves them.
    fn conversations(&self) -> Option<&agent_worker_core::conversations::Conversations> {
        self.inner.conversations.as_ref()
    }

    /// The console, when the host serves it.
    fn console(&self) -> Option<&console::Console> {
        self.inner.console.as_ref()
    }

    /// Whether turns run here now, and since when (AgentCore Runtime's `/ping`).
    fn activity(&self) -> &agentcore::Activity {
        &self.inner.activity
    }

    /// What the host does with the turns it accepts.
    fn turns(&self) -> &Turns {
        &self.inner.turns
    }

    /// Whether the host takes new turns (not shutting down).
    fn accepting(&self) -> bool {
        self.inner.accepting.load(Ordering::SeqCst)
    }

    /// Tells the hook that a turn ended, when the host has one.
    fn tell_turn_end(&self, end: TurnEnd) {
        if let Some(hook) = self.inner.on_turn_end.as_ref() {
            hook(end);
        }
    }

    /// Wakes the shutdown's wait for the running turns: one has ended.
    fn notify_idle(&self) {
        self.inner.idle.notify_waiters();
    }

    /// The model turns run on here; `None` when they go to the queue.
    fn model(&self) -> Option<&str> {
        self.inner.model()
    }

    /// Where the tab's answers to UI actions are kept, when the host takes them.
    fn ui_answers(&self) -> Option<&Arc<dyn agent_worker_core::session::ActionAnswerStore>> {
        self.inner.answers.as_ref()
    }

    /// The product's job reports, when the host takes them.
    fn job_reports(&self) -> Option<&agent_worker_runtime::jobs::JobReports> {
        self.inner.jobs.as_ref()
    }

    /// The table the host keeps its turns in, when it has one (its event log's).
    fn table(&self) -> Option<&agent_worker_aws::dynamo::DynamoStore> {
        self.inner.log.as_ref().map(DynamoEventLog::store)
    }

    /// The turns' event log, when the host has one.
    fn event_log(&self) -> Option<&DynamoEventLog> {
        self.inner.log.as_ref()
    }
}

impl ContainerHost {
    /// A host that runs turns through `handler`, asks `store` to stop them, and streams their
    /// events from `log` (without one, `GET /turns/{id}/events` answers 404): its builder.
    pub fn builder(
        handler: TurnHandler,
        store: Arc<dyn SessionStore>,
        log: Option<DynamoEventLog>,
        model: impl Into<String>,
        config: ContainerConfig,
    ) -> ContainerHostBuilder {
        let turns = Turns::Run {
            handler,
            model: model.into(),
        };
        ContainerHostBuilder::serving(turns, store, log, config)
    }

    /// A host that runs no turn itself: `POST /turns` checks the person and the conversation
    /// as ever, sends the turn to `queue` and answers 202 once the queue has it; the worker
    /// that reads the queue runs it (the serverless deployment's way: `serve --queue-url`, the
    /// `api` function). Stops, events and the rest work on `store` and `log` as for
    /// [`builder`](Self::builder). Its builder.
    pub fn queued(
        queue: agent_worker_runtime::TurnQueue,
        store: Arc<dyn SessionStore>,
        log: Option<DynamoEventLog>,
        config: ContainerConfig,
    ) -> ContainerHostBuilder {
        ContainerHostBuilder::serving(Turns::Queue(queue), store, log, config)
    }

    /// The turns running now, by id, with their sessions.
    pub fn running(&self) -> HashMap<TurnId, SessionId> {
        self.inner.running.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The HTTP routes, those of [`Route::ALL`] (the console's where the host has one). Every one
    /// but [`OPEN_PATHS`] passes the credential check first, a layer over the whole router: a
    /// route added later is guarded without asking.
    pub fn router(&self) -> Router {
        let router = routes::routes(self.inner.console.is_some())
            // What no route serves is refused in the one shape too.
            .fallback(|| async { HostError::not_found("no such route") })
            .method_not_allowed_fallback(|| async {
                HostError::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "the route does not take this method",
                )
            })
            .layer(DefaultBodyLimit::max(self.inner.config.body_limit))
            // A body is read whole once the person is known: past the limit, 413 in the shape.
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                edge::whole_body,
            ))
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                access::authenticate,
            ))
            .layer(axum::middleware::map_response(console::security_headers));
        // Outermost: a listed origin's preflight is answered before the person's check.
        let router = match self.inner.config.allowed_origins.layer() {
            Some(cors) => router.layer(cors),
            None => router,
        };
        router.with_state(self.clone())
    }

    /// Stops accepting turns, lets running ones finish for the grace period, then stops the rest
    /// through the stop path and waits for them to be stored.
    pub async fn drain(&self) {
        self.inner.accepting.store(false, Ordering::SeqCst);
        let grace = self.inner.config.shutdown_grace;
        if tokio::time::timeout(grace, self.until_idle()).await.is_ok() {
            return;
        }
        let left = self.running();
        tracing::warn!(turns = left.len(), "stopping the turns still running at shutdown");
        for (turn_id, session) in &left {
            if let Err(e) = self
                .inner
                .store
                .request_stop(session, turn_id, Stop::now(StopCause::Deadline))
                .await
            {
                tracing::error!(turn_id = %turn_id, error = %ErrorChain(&e), "could not stop a turn at shutdown");
            }
        }
        self.until_idle().await;
    }

    async fn until_idle(&self) {
        loop {
            let notified = self.inner.idle.notified();
            if self.running().is_empty() {
                return;
            }
            notified.await;
        }
    }
}

pub(crate) async fn health(State(host): State<ContainerHost>) -> Response {
    let running = host.running().len();
    let status = if host.inner.accepting.load(Ordering::SeqCst) {
        "ok"
    } else {
        "draining"
    };
    let (event_streams, event_readers) = host.inner.followers.counts();
    axum::Json(answers::Health {
        status: status.to_owned(),
        running_turns: running,
        capacity: host.inner.config.max_concurrent_turns,
        model: host.inner.model().map(str::to_owned),
        event_streams,
        event_readers,
    })
    .into_response()
}

/// The paths served without a credential (whatever credential comes with them is not looked
/// at): the load balancer's and AgentCore Runtime's health checks, the agent cards, the OpenAPI
/// document.
pub const OPEN_PATHS: [&str; 5] = [
    Route::Health.path(),
    Route::Ping.path(),
    Route::AgentCard.path(),
    Route::A2aInterfaceCard.path(),
    Route::OpenApi.path(),
];

/// Whether `path` is served without a credential: [`OPEN_PATHS`], and the console's own assets
/// where the host has a console.
fn open_path(path: &str, console: bool) -> bool {
    OPEN_PATHS.contains(&path) || console && console::ASSET_PATHS.contains(&path)
}

/// `GET /openapi.json`: the host's OpenAPI document ([`openapi::document`], made once).
pub(crate) async fn openapi_document() -> axum::Json<serde_json::Value> {
    static DOCUMENT: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    axum::Json(DOCUMENT.get_or_init(openapi::document).clone())
}

/// Serves `host` on `listener` until `shutdown` resolves, then drains: no new turns, running
/// ones finish or are stopped and stored, open event streams end after their terminals.
pub async fn serve(
    listener: TcpListener,
    host: ContainerHost,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = host.router();
    serve_router(listener, host, router, shutdown).await
}

/// [`serve`] with a router of the caller's making from `host`'s ([`ContainerHost::router`] with
/// layers of its own around it): served on `listener` until `shutdown` resolves, then `host`
/// drains as [`serve`] says.
pub async fn serve_router(
    listener: TcpListener,
    host: ContainerHost,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = host.inner.config.connections;
    serve_answering(listener, router, limits, edge::refused_head, async move {
        shutdown.await;
        tracing::info!("shutting down: no new turns; running ones finish or are stopped");
        host.drain().await;
    })
    .await
}

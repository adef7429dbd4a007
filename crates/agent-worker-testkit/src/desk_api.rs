//! [`DeskApi`]: a fixture product's API for OpenAPI tools. A help desk with its own OpenAPI
//! document (with `x-agent` declarations), its event declarations, and a server on 127.0.0.1
//! that enforces its own auth (`x-desk-user`) and permissions. Its report export is a job: a test
//! hears it queued ([`next_queued_report`](DeskApi::next_queued_report)) and ends it with a
//! declared event.
//!
//! | user | permissions |
//! | --- | --- |
//! | `ana` | `tickets:read`, `tickets:refund`, `reports:export` |
//! | `bo` | `tickets:read` |
//!
//! Nobody has `audit:read` or `tickets:delete`, so those routes answer 403. A caller is
//! `x-desk-user`, or the person an `Authorization: Bearer` token ([`DeskApi::token_of`]) belongs
//! to.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use agent_worker_core::engine::tools::openapi::EventDeclarations;

/// One request the desk received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeskCall {
    /// The method.
    pub method: String,
    /// The path and query.
    pub uri: String,
    /// `x-desk-user`, if sent.
    pub user: Option<String>,
    /// `x-desk-account`, if sent.
    pub account: Option<String>,
    /// `authorization`, if sent.
    pub authorization: Option<String>,
    /// `x-agent-assertion`, if sent.
    pub assertion: Option<String>,
    /// `x-agent-conversation-id` (a call that starts a job names its conversation), if sent.
    pub conversation: Option<String>,
    /// `Idempotency-Key`, if sent.
    pub idempotency_key: Option<String>,
}

#[derive(Debug)]
struct Desk {
    permissions: HashMap<&'static str, Vec<&'static str>>,
    refunds: Mutex<Vec<Value>>,
    /// The notes added, each with the idempotency key that added it (if any).
    notes: Mutex<Vec<(Option<String>, Value)>>,
    /// How long adding a note takes, in milliseconds (a slow product API).
    note_delay_ms: std::sync::atomic::AtomicU64,
    calls: Mutex<Vec<DeskCall>>,
    queued: mpsc::UnboundedSender<String>,
    reports: Mutex<u32>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running desk API. Dropping it stops the server.
#[derive(Debug)]
pub struct DeskApi {
    addr: SocketAddr,
    desk: Arc<Desk>,
    queued: tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>,
    _stop: oneshot::Sender<()>,
}

impl DeskApi {
    /// Starts the desk on a free port of 127.0.0.1.
    pub async fn start() -> io::Result<Self> {
        Self::start_on(0).await
    }

    /// Starts the desk on `port` of 127.0.0.1 (0: a free one).
    pub async fn start_on(port: u16) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let (queued_tx, queued_rx) = mpsc::unbounded_channel();
        let desk = Arc::new(Desk {
            permissions: HashMap::from([
                ("ana", vec!["tickets:read", "tickets:refund", "reports:export"]),
                ("bo", vec!["tickets:read"]),
            ]),
            refunds: Mutex::new(Vec::new()),
            notes: Mutex::new(Vec::new()),
            note_delay_ms: std::sync::atomic::AtomicU64::new(0),
            calls: Mutex::new(Vec::new()),
            queued: queued_tx,
            reports: Mutex::new(0),
        });
        let app = Router::new()
            .route("/tickets", get(list_tickets))
            .route("/tickets/{ticket_id}", get(get_ticket).delete(delete_ticket))
            .route("/tickets/{ticket_id}/refunds", post(refund_ticket))
            .route("/tickets/{ticket_id}/notes", post(add_note))
            .route("/audit", get(audit_log))
            .route("/reports", post(export_report))
            .with_state(desk.clone());
        let stop = super::serve_in_background(listener, app);
        Ok(Self {
            addr,
            desk,
            queued: tokio::sync::Mutex::new(queued_rx),
            _stop: stop,
        })
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The refunds it has made, in order.
    pub fn refunds(&self) -> Vec<Value> {
        lock(&self.desk.refunds).clone()
    }

    /// Makes adding a note take `delay` from now on: a slow product API.
    pub fn delay_notes(&self, delay: std::time::Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.desk
            .note_delay_ms
            .store(ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// The notes it has added, in order. A request that repeats an earlier one's
    /// `Idempotency-Key` adds none: it is answered with the note that key added, as a service
    /// that takes keys does.
    pub fn notes(&self) -> Vec<Value> {
        lock(&self.desk.notes)
            .iter()
            .map(|(_, note)| note.clone())
            .collect()
    }

    /// Every request it received, in order.
    pub fn calls(&self) -> Vec<DeskCall> {
        lock(&self.desk.calls).clone()
    }

    /// Waits for the next report export to be queued, and returns its id.
    pub async fn next_queued_report(&self) -> Option<String> {
        self.queued.lock().await.recv().await
    }

    /// The token the desk knows `user` by (`Authorization: Bearer <token>`).
    pub fn token_of(user: &str) -> String {
        format!("desk-token-{user}-7d3f9a")
    }

    /// The headers that make the desk treat a call as `user` of `account`.
    pub fn act_as(user: &str, account: &str) -> Vec<(String, String)> {
        vec![
            ("x-desk-user".to_owned(), user.to_owned()),
            ("x-desk-account".to_owned(), account.to_owned()),
        ]
    }

    /// Its event declarations.
    pub fn events() -> EventDeclarations {
        serde_json::from_value(json!({
            "report:ready": { "kind": "completion", "correlation": "reportId", "failure": "report:failed" },
            "report:failed": { "kind": "failure", "correlation": "reportId" },
            "ticket:updated": { "kind": "other", "correlation": "ticketId" }
        }))
        .unwrap_or_default()
    }

    /// Its OpenAPI document.
    pub fn document() -> Value {
        json!({
            "openapi": "3.0.3",
            "info": { "title": "Desk", "version": "1" },
            "security": [{ "deskUser": [] }],
            "components": {
                "securitySchemes": { "deskUser": { "type": "apiKey", "in": "header", "name": "x-desk-user" } },
                "parameters": {
                    "TicketId": { "name": "ticketId", "in": "path", "required": true, "schema": { "type": "string" }, "description": "The ticket, like T-1." }
                },
                "schemas": {
                    "Ticket": { "type": "object", "properties": {
                        "id": { "type": "string", "readOnly": true },
                        "subject": { "type": "string" },
                        "status": { "type": "string", "enum": ["open", "closed"] }
                    } },
                    "Refund": { "type": "object", "additionalProperties": false, "required": ["amount"], "properties": {
                        "id": { "type": "string", "readOnly": true },
                        "amount": { "type": "integer", "minimum": 1, "description": "In cents." },
                        "reason": { "type": "string", "nullable": true }
                    } }
                }
            },
            "paths": {
                "/tickets": { "get": {
                    "operationId": "listTickets",
                    "summary": "List the desk's tickets.",
                    "parameters": [{ "name": "status", "in": "query", "schema": { "type": "string", "enum": ["open", "closed"] } }],
                    "x-agent": { "expose": true, "effect": "view", "pa": true },
                    "responses": { "200": { "description": "The tickets." } }
                } },
                "/tickets/{ticketId}": {
                    "parameters": [{ "$ref": "#/components/parameters/TicketId" }],
                    "get": {
                        "operationId": "getTicket",
                        "summary": "Read one ticket.",
                        "x-agent": { "expose": true, "effect": "view" },
                        "responses": { "200": { "description": "The ticket." } }
                    },
                    "delete": {
                        "operationId": "deleteTicket",
                        "summary": "Delete a ticket.",
                        "x-agent": { "expose": true, "effect": "mutate", "destructive": true, "consequence": "The ticket and its history are gone." },
                        "responses": { "204": { "description": "Deleted." } }
                    }
                },
                "/tickets/{ticketId}/refunds": { "post": {
                    "operationId": "refundTicket",
                    "summary": "Refund a ticket's customer.",
                    "parameters": [
                        { "$ref": "#/components/parameters/TicketId" },
                        { "name": "x-desk-account", "in": "header", "required": true, "schema": { "type": "string" } }
                    ],
                    "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Refund" } } } },
                    "x-agent": { "expose": true, "effect": "transaction", "consequence": "The customer is paid back; this cannot be undone." },
                    "responses": { "201": { "description": "Refunded." } }
                } },
                "/tickets/{ticketId}/notes": { "post": {
                    "operationId": "addNote",
                    "summary": "Add a note to a ticket.",
                    "parameters": [{ "$ref": "#/components/parameters/TicketId" }],
                    "requestBody": { "required": true, "content": { "application/json": { "schema": {
                        "type": "object", "additionalProperties": false, "required": ["text"],
                        "properties": { "text": { "type": "string" } }
                    } } } },
                    "x-agent": { "expose": true, "effect": "mutate" },
                    "responses": { "201": { "description": "Added." } }
                } },
                "/audit": { "get": {
                    "operationId": "getAuditLog",
                    "summary": "Read the audit log.",
                    "x-agent": { "expose": true, "effect": "view" },
                    "responses": { "200": { "description": "The log." } }
                } },
                "/reports": { "post": {
                    "operationId": "exportReport",
                    "summary": "Export the month's report.",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": {
                        "type": "object", "additionalProperties": false, "required": ["month"],
                        "properties": { "month": { "type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$" } }
                    } } } },
                    "x-agent": { "expose": true, "effect": { "kind": "job", "timeoutMs": 30000 } },
                    "x-async-binding": { "event": "report:ready", "timeout": "30s" },
                    "responses": { "202": { "description": "Queued." } }
                } }
            }
        })
    }
}

/// Records the call; the refusal when the caller lacks `permission`.
fn refusal(
    desk: &Desk,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    permission: &str,
) -> Option<Response> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let authorization = header("authorization");
    let bearer = authorization
        .as_deref()
        .and_then(|a| a.strip_prefix("Bearer "))
        .and_then(|token| {
            desk.permissions
                .keys()
                .find(|user| DeskApi::token_of(user) == token)
                .map(|user| (*user).to_owned())
        });
    let user = header("x-desk-user").or(bearer);
    lock(&desk.calls).push(DeskCall {
        method: method.to_string(),
        uri: uri.to_string(),
        user: user.clone(),
        account: header("x-desk-account"),
        authorization,
        assertion: header("x-agent-assertion"),
        idempotency_key: header("idempotency-key"),
        conversation: header("x-agent-conversation-id"),
    });
    let Some(granted) = user.as_deref().and_then(|u| desk.permissions.get(u)) else {
        return Some(
            (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({ "error": "unauthenticated" })),
            )
                .into_response(),
        );
    };
    if !granted.contains(&permission) {
        return Some(
            (
                StatusCode::FORBIDDEN,
                axum::Json(json!({ "error": "forbidden", "missing": permission })),
            )
                .into_response(),
        );
    }
    None
}

fn tickets() -> Value {
    json!([
        { "id": "T-1", "subject": "Charged twice", "status": "open" },
        { "id": "T-2", "subject": "Login fails", "status": "open" },
        { "id": "T-3", "subject": "Thanks!", "status": "closed" }
    ])
}

async fn list_tickets(
    State(desk): State<Arc<Desk>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&desk, &method, &uri, &headers, "tickets:read") {
        return refused;
    }
    let status = uri
        .query()
        .and_then(|q| q.strip_prefix("status="))
        .map(str::to_owned);
    let all = tickets();
    let listed: Vec<&Value> = all
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| status.as_deref().is_none_or(|s| t["status"] == s))
        .collect();
    axum::Json(json!({ "tickets": listed })).into_response()
}

async fn get_ticket(
    State(desk): State<Arc<Desk>>,
    Path(ticket_id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&desk, &method, &uri, &headers, "tickets:read") {
        return refused;
    }
    match tickets()
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["id"] == ticket_id.as_str())
    {
        Some(ticket) => axum::Json(ticket.clone()).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({ "error": "no such ticket" })),
        )
            .into_response(),
    }
}

async fn delete_ticket(
    State(desk): State<Arc<Desk>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&desk, &method, &uri, &headers, "tickets:delete") {
        return refused;
    }
    StatusCode::NO_CONTENT.into_response()
}

/// The answer to a request whose body is not JSON.
fn not_json() -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({ "error": "not JSON" })),
    )
        .into_response()
}

async fn refund_ticket(
    State(desk): State<Arc<Desk>>,
    Path(ticket_id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = refusal(&desk, &method, &uri, &headers, "tickets:refund") {
        return refused;
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return not_json();
    };
    let refund = json!({ "id": format!("RF-{ticket_id}"), "ticketId": ticket_id, "amount": body["amount"], "reason": body["reason"] });
    lock(&desk.refunds).push(refund.clone());
    (StatusCode::CREATED, axum::Json(refund)).into_response()
}

async fn add_note(
    State(desk): State<Arc<Desk>>,
    Path(ticket_id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = refusal(&desk, &method, &uri, &headers, "tickets:read") {
        return refused;
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return not_json();
    };
    let delay = desk.note_delay_ms.load(std::sync::atomic::Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
    }
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut notes = lock(&desk.notes);
    if let Some((_, note)) = notes.iter().find(|(k, _)| k.is_some() && *k == key) {
        return (StatusCode::CREATED, axum::Json(note.clone())).into_response();
    }
    let note = json!({ "id": format!("N-{}", notes.len() + 1), "ticketId": ticket_id, "text": body["text"] });
    notes.push((key, note.clone()));
    (StatusCode::CREATED, axum::Json(note)).into_response()
}

async fn audit_log(State(desk): State<Arc<Desk>>, method: Method, uri: Uri, headers: HeaderMap) -> Response {
    if let Some(refused) = refusal(&desk, &method, &uri, &headers, "audit:read") {
        return refused;
    }
    axum::Json(json!({ "entries": [] })).into_response()
}

async fn export_report(
    State(desk): State<Arc<Desk>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&desk, &method, &uri, &headers, "reports:export") {
        return refused;
    }
    let id = {
        let mut count = lock(&desk.reports);
        *count += 1;
        format!("RP-{count}")
    };
    let _ = desk.queued.send(id.clone());
    (
        StatusCode::ACCEPTED,
        axum::Json(json!({ "reportId": id, "status": "queued" })),
    )
        .into_response()
}

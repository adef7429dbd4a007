//! Configuration files in a folder of their own, and the desk's, for tests/config*.rs.

use std::path::PathBuf;

use agent_worker_testkit::{DeskApi, moto};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use serde_json::json;

/// A folder of its own, removed when dropped.
pub struct Folder(PathBuf);

impl Folder {
    pub fn new() -> Self {
        let path =
            std::env::temp_dir().join(format!("agent-worker-config-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    /// The folder.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The desk's document beside a configuration that makes it the agent's tools.
pub fn desk_config(folder: &Folder, desk: &DeskApi) -> PathBuf {
    folder.write(
        "desk.openapi.json",
        &serde_json::to_string_pretty(&DeskApi::document()).unwrap(),
    );
    folder.write(
        "agent-worker.yaml",
        &format!(
            "persona: You are the help desk's assistant.\n\
             openapi:\n\
             \x20 - document: desk.openapi.json\n\
             \x20   baseUrl: {}\n\
             \x20   actAs:\n\
             \x20     token: {{ header: Authorization, prefix: 'Bearer ' }}\n\
             \x20     accountIdHeader: x-desk-account\n\
             \x20   events: {}\n\
             policy:\n\
             \x20 - tools: 'delete*'\n\
             \x20   decision: deny\n\
             \x20   reason: Tickets are deleted in the desk itself.\n",
            desk.url(),
            json!({
                "report:ready": { "kind": "completion", "correlation": "reportId", "failure": "report:failed" },
                "report:failed": { "kind": "failure", "correlation": "reportId" },
                "ticket:updated": { "kind": "other", "correlation": "ticketId" }
            })
        ),
    )
}

pub fn turn(turn_id: &str, user_token: Option<&str>) -> SqsEvent {
    let mut body = json!({
        "turnId": turn_id, "conversationId": format!("c-{turn_id}"), "userId": "ana", "accountId": "acme",
        "content": "Which tickets are open?"
    });
    if let Some(token) = user_token {
        body["userToken"] = token.into();
    }
    let mut record = SqsMessage::default();
    record.message_id = Some(format!("m-{turn_id}"));
    record.body = Some(body.to_string());
    record.event_source_arn = Some("arn:aws:sqs:us-east-1:000000000000:turns".into());
    let mut event = SqsEvent::default();
    event.records = vec![record];
    event
}

/// Every item of `table`, as text.
pub async fn table_text(table: &str) -> String {
    let scan = moto().dynamodb().scan().table_name(table).send().await.unwrap();
    format!("{:?}", scan.items())
}

//! A task's updates as A2A streams them (`SendStreamingMessage`, `SubscribeToTask`): the task
//! first, `WORKING` once the turn has begun, the answer's text as artifact chunks as it streams,
//! and the final status last.

use serde_json::{Value, json};

use super::task::{Ids, Progress, TaskState, answer_artifact_id, status};
use crate::events::Followed;
use agent_worker_contract::AgentEvent;

/// Turns a followed turn into A2A's stream responses.
#[derive(Debug)]
pub(super) struct Streamer {
    ids: Ids,
    progress: Progress,
    working_sent: bool,
    chunks: usize,
    ended: bool,
}

impl Streamer {
    pub(super) fn new(ids: Ids) -> Self {
        Self {
            ids,
            progress: Progress::default(),
            working_sent: false,
            chunks: 0,
            ended: false,
        }
    }

    /// The stream responses `item` stands for.
    pub(super) fn next(&mut self, item: &Followed) -> Vec<Value> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        let (event, logged) = match item {
            Followed::Logged(logged) => (&logged.event, logged),
            Followed::NotStarted => {
                self.ended = true;
                self.progress.take_not_started();
                self.progress.terminal = Some(AgentEvent::failed(
                    "the task did not start: no worker took it in time",
                    true,
                    None,
                ));
                out.push(self.status_update(TaskState::Failed));
                return out;
            }
        };
        self.progress.take(logged);
        if !self.working_sent {
            self.working_sent = true;
            out.push(self.status_update(TaskState::Working));
        }
        match event {
            AgentEvent::Text { delta } if !delta.is_empty() => {
                self.chunks += 1;
                out.push(json!({ "artifactUpdate": {
                    "taskId": self.ids.task,
                    "contextId": self.ids.context,
                    "artifact": {
                        "artifactId": answer_artifact_id(&self.ids),
                        "name": "answer",
                        "parts": [{ "text": delta }],
                    },
                    "append": self.chunks > 1,
                    "lastChunk": false,
                }}));
            }
            terminal if terminal.is_terminal() => {
                self.ended = true;
                if let AgentEvent::Completed { data: Some(data) } = terminal
                    && let Some(result) = data.get("result").filter(|r| !r.is_null())
                {
                    out.push(json!({ "artifactUpdate": {
                        "taskId": self.ids.task,
                        "contextId": self.ids.context,
                        "artifact": {
                            "artifactId": format!("{}-result", self.ids.task),
                            "name": "result",
                            "parts": [{ "data": result, "mediaType": "application/json" }],
                        },
                        "lastChunk": true,
                    }}));
                }
                out.push(self.status_update(self.progress.state()));
            }
            _ => {}
        }
        out
    }

    fn status_update(&self, state: TaskState) -> Value {
        json!({ "statusUpdate": {
            "taskId": self.ids.task,
            "contextId": self.ids.context,
            "status": status(state, &self.progress, &self.ids),
        }})
    }
}

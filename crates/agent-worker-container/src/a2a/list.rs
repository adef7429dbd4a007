//! `ListTasks`: the person's tasks (of one context of theirs, or of every conversation they
//! own), most recently updated first, paged by a cursor.
//!
//! A task's place in the list is its status time (when its present state was set: see
//! `Progress::state_at_ms`) and, between tasks set at the same millisecond, its id; a task
//! whose time is not known (logged before the log kept times) comes last. A page's
//! `nextPageToken` holds the place of its last task, so the next page starts after it whatever
//! was added meanwhile (a new task goes to the front, never into a page already read). A list
//! without a `contextId` reads every conversation of the person's, up to
//! [`MAX_LISTED_CONVERSATIONS`] (past it, `-32602` asking for the context). The
//! filters (`status`, `statusTimestampAfter`: at or after that time) apply before paging, and
//! `totalSize` counts every task they let through. `historyLength` bounds each task's history
//! as `GetTask`'s does (all of it when not said, none for 0).

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::{Value, json};

use super::access::{self, checked_id};
use super::rpc::{self, RpcError};
use super::task::{self, Ids, TaskState, task_id};
use super::{Call, continued};
use agent_worker_core::session::{SessionId, StoredMessage, TurnId};

/// The page size when none is asked.
const DEFAULT_PAGE_SIZE: usize = 50;
/// The largest page size a caller may ask.
const MAX_PAGE_SIZE: i64 = 100;
/// How many of the person's conversations one read of their list takes.
const CONVERSATIONS_PER_READ: usize = 100;
/// How many of a conversation's messages are read for its tasks and their histories.
const MESSAGES_READ: usize = 1000;
/// The most conversations a list without a `contextId` reads: every call reads each one's
/// messages and each of its tasks' logs, so a person with more names the context instead of
/// making one call cost thousands of reads.
pub(super) const MAX_LISTED_CONVERSATIONS: usize = 200;

/// `ListTasks`' parameters, as A2A names them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ListParams {
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    page_size: Option<i64>,
    #[serde(default)]
    history_length: Option<i64>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    status_timestamp_after: Option<String>,
    #[serde(default)]
    include_artifacts: bool,
    #[serde(default)]
    page_token: Option<String>,
}

/// A list request, checked.
struct Asked {
    page_size: usize,
    history_length: Option<usize>,
    state: Option<String>,
    after_ms: Option<i64>,
    after: Option<Cursor>,
}

impl ListParams {
    /// Every parameter checked: `-32602` naming the first that A2A does not allow.
    fn checked(&self) -> Result<Asked, RpcError> {
        let page_size = match self.page_size {
            None => DEFAULT_PAGE_SIZE,
            Some(size @ 1..=MAX_PAGE_SIZE) => usize::try_from(size).unwrap_or(DEFAULT_PAGE_SIZE),
            Some(size) => {
                return Err(RpcError::invalid_params(format!(
                    "pageSize {size} is not between 1 and {MAX_PAGE_SIZE}"
                )));
            }
        };
        let history_length = self
            .history_length
            .map(|n| {
                usize::try_from(n).map_err(|_| RpcError::invalid_params("historyLength must not be negative"))
            })
            .transpose()?;
        let after = match self.page_token.as_deref() {
            None | Some("") => None,
            Some(token) => Some(
                Cursor::read(token)
                    .ok_or_else(|| RpcError::invalid_params("pageToken is not one this server gave"))?,
            ),
        };
        let after_ms = match &self.status_timestamp_after {
            None => None,
            Some(after) => Some(
                chrono::DateTime::parse_from_rfc3339(after)
                    .map_err(|_| {
                        RpcError::invalid_params(format!(
                            "statusTimestampAfter {after:?} is not an RFC 3339 time"
                        ))
                    })?
                    .timestamp_millis(),
            ),
        };
        let state = match self.status.as_deref() {
            None | Some("TASK_STATE_UNSPECIFIED") => None,
            Some(state) if TaskState::named(state).is_some() => Some(state.to_owned()),
            Some(state) => {
                return Err(RpcError::invalid_params(format!(
                    "status {state:?} is not a task state"
                )));
            }
        };
        Ok(Asked {
            page_size,
            history_length,
            state,
            after_ms,
            after,
        })
    }
}

/// A task's place in the list: its status time, then its id. The page token is this place of a
/// page's last task, base64url-encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cursor {
    at_ms: i64,
    task: String,
}

impl Cursor {
    fn token(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{}:{}", self.at_ms, self.task))
    }

    fn read(token: &str) -> Option<Self> {
        let text = String::from_utf8(URL_SAFE_NO_PAD.decode(token).ok()?).ok()?;
        let (at_ms, task) = text.split_once(':')?;
        let task = task.to_owned();
        task::parse_task_id(&task)?;
        Some(Self {
            at_ms: at_ms.parse().ok()?,
            task,
        })
    }

    /// Whether a task at `place` comes after this one in the list (newest first, then by id).
    fn before(&self, place: &Self) -> bool {
        place.at_ms < self.at_ms || (place.at_ms == self.at_ms && place.task > self.task)
    }
}

/// A task the filters let through: its place, its turns (for its history) and its body.
struct Listed {
    place: Cursor,
    ids: Ids,
    turns: Vec<TurnId>,
    task: Value,
}

impl Call<'_> {
    /// `ListTasks`.
    pub(super) async fn list(&self, params: Value) -> Result<Value, RpcError> {
        let list: ListParams = rpc::params(params)?;
        let asked = list.checked()?;
        let mut listed = Vec::new();
        for session in self.listed_sessions(list.context_id).await? {
            self.tasks_listed(&session, &asked, list.include_artifacts, &mut listed)
                .await?;
        }
        listed.sort_by(|a, b| {
            b.place
                .at_ms
                .cmp(&a.place.at_ms)
                .then(a.place.task.cmp(&b.place.task))
        });
        let total = listed.len();
        let mut rest = listed
            .into_iter()
            .filter(|task| asked.after.as_ref().is_none_or(|after| after.before(&task.place)))
            .peekable();
        let page: Vec<Listed> = rest.by_ref().take(asked.page_size).collect();
        let next = match (rest.peek(), page.last()) {
            (Some(_), Some(last)) => last.place.token(),
            _ => String::new(),
        };
        let tasks = self.with_histories(page, asked.history_length).await?;
        Ok(json!({
            "tasks": tasks,
            "nextPageToken": next,
            "pageSize": tasks.len(),
            "totalSize": total,
        }))
    }

    /// The conversations listed: `context` when it is the person's (none otherwise), or every
    /// conversation they own.
    async fn listed_sessions(&self, context: Option<String>) -> Result<Vec<SessionId>, RpcError> {
        if let Some(context) = context {
            let session = checked_id("contextId", context).map_err(|e| RpcError::of_host(&e))?;
            let theirs = access::theirs(self.host, self.person, &session, false).await;
            return Ok(if theirs.is_ok() { vec![session] } else { Vec::new() });
        }
        let Some(conversations) = self.host.conversations() else {
            return Ok(Vec::new());
        };
        let mut sessions = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = conversations
                .list(self.person, Some(CONVERSATIONS_PER_READ), cursor.as_deref())
                .await
                .map_err(|e| RpcError::internal(agent_worker_contract::chain(&e)))?;
            sessions.extend(
                page.conversations
                    .into_iter()
                    .filter_map(|c| SessionId::new(c.id).ok()),
            );
            if sessions.len() > MAX_LISTED_CONVERSATIONS {
                return Err(RpcError::invalid_params(format!(
                    "you have more than {MAX_LISTED_CONVERSATIONS} conversations: a list without a contextId reads at most {MAX_LISTED_CONVERSATIONS}; name the contextId"
                )));
            }
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(sessions),
            }
        }
    }

    /// The tasks of `session` that `asked`'s filters let through, added to `listed`.
    async fn tasks_listed(
        &self,
        session: &SessionId,
        asked: &Asked,
        include_artifacts: bool,
        listed: &mut Vec<Listed>,
    ) -> Result<(), RpcError> {
        for (first, latest, place) in self.tasks_of(session).await? {
            let ids = Ids {
                task: task_id(session, &first),
                context: session.clone(),
            };
            let progress = self.progress(session, &latest).await?;
            let at_ms = progress
                .state_at_ms()
                .and_then(|at| i64::try_from(at).ok())
                .unwrap_or(0);
            if asked.after_ms.is_some_and(|after| at_ms < after) {
                continue;
            }
            let mut found = task::task(&progress, &ids, Vec::new());
            if asked
                .state
                .as_ref()
                .is_some_and(|state| found["status"]["state"] != state.as_str())
            {
                continue;
            }
            if !include_artifacts && let Some(task) = found.as_object_mut() {
                task.remove("artifacts");
            }
            listed.push(Listed {
                place: Cursor {
                    at_ms,
                    task: ids.task.clone(),
                },
                turns: (0..=place)
                    .filter_map(|n| continued::chain_turn(&first, n))
                    .collect(),
                ids,
                task: found,
            });
        }
        Ok(())
    }

    /// The page's tasks, each with its history (its last `limit` messages): one read of each
    /// conversation on the page.
    async fn with_histories(&self, page: Vec<Listed>, limit: Option<usize>) -> Result<Vec<Value>, RpcError> {
        if limit == Some(0) {
            return Ok(page.into_iter().map(|listed| listed.task).collect());
        }
        let mut read: HashMap<SessionId, Vec<StoredMessage>> = HashMap::new();
        let mut tasks = Vec::with_capacity(page.len());
        for mut listed in page {
            if !read.contains_key(&listed.ids.context) {
                let entries = self.entries(&listed.ids.context).await?;
                read.insert(listed.ids.context.clone(), entries);
            }
            let entries = read
                .get(&listed.ids.context)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let history = task::history(entries, &listed.turns, &listed.ids, limit);
            if !history.is_empty() {
                listed.task["history"] = json!(history);
            }
            tasks.push(listed.task);
        }
        Ok(tasks)
    }

    /// `session`'s stored messages, the first [`MESSAGES_READ`].
    async fn entries(&self, session: &SessionId) -> Result<Vec<StoredMessage>, RpcError> {
        self.host
            .store()
            .entries(session, 0, MESSAGES_READ)
            .await
            .map_err(|e| RpcError::internal(e.client_message()))
    }

    /// The turns of `session`, newest first: those its stored messages name, then the one running.
    async fn turns_of(&self, session: &SessionId) -> Result<Vec<TurnId>, RpcError> {
        let entries = self.entries(session).await?;
        let running = self.host.store().active_turn(session).await.ok().flatten();
        let mut turns: Vec<TurnId> = Vec::new();
        for turn in entries
            .iter()
            .filter_map(|e| e.turn_id.as_deref())
            .chain(running.as_deref())
        {
            if let Ok(turn) = TurnId::new(turn)
                && !turns.contains(&turn)
            {
                turns.push(turn);
            }
        }
        turns.reverse();
        Ok(turns)
    }

    /// The tasks of `session`, newest first: each task's first turn, its latest and the latest's
    /// place in the chain (a task continued after an approval is one task, as its latest turn
    /// says it stands).
    async fn tasks_of(&self, session: &SessionId) -> Result<Vec<(TurnId, TurnId, u32)>, RpcError> {
        let turns = self.turns_of(session).await?;
        let mut tasks: Vec<(TurnId, TurnId, u32)> = Vec::new();
        for turn in &turns {
            let (first, place) = match continued::chain_place(turn) {
                Some((first, place)) if turns.iter().any(|t| t.as_str() == first) => (first, place),
                _ => (turn.as_str(), 0),
            };
            match tasks.iter_mut().find(|(f, _, _)| f.as_str() == first) {
                Some(task) if task.2 < place => (task.1, task.2) = (turn.clone(), place),
                Some(_) => {}
                None => {
                    let first = TurnId::new(first).map_err(|e| RpcError::internal(e.to_string()))?;
                    tasks.push((first, turn.clone(), place));
                }
            }
        }
        Ok(tasks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_token_reads_back_as_the_place_it_holds_and_nothing_else_reads() {
        let place = Cursor {
            at_ms: 1_780_000_000_123,
            task: task_id(&SessionId::new("ctx-1").unwrap(), &TurnId::new("m-1").unwrap()),
        };
        assert_eq!(Cursor::read(&place.token()), Some(place.clone()));
        for made_up in ["", "x", "bm90LWEtY3Vyc29y", &URL_SAFE_NO_PAD.encode("12:")] {
            assert_eq!(Cursor::read(made_up), None, "{made_up:?}");
        }
    }

    #[test]
    fn the_list_runs_newest_first_then_by_id() {
        let at = |at_ms, task: &str| Cursor {
            at_ms,
            task: task.to_owned(),
        };
        let cursor = at(200, "b");
        assert!(cursor.before(&at(100, "a")));
        assert!(cursor.before(&at(200, "c")));
        assert!(!cursor.before(&at(200, "a")));
        assert!(!cursor.before(&at(200, "b")));
        assert!(!cursor.before(&at(300, "z")));
    }
}

//! The session checker: reads a whole DynamoDB table and says what breaks a promise.
//!
//! For every session it finds, the stored history (what a turn would read) must pass
//! [`history::check`](agent_worker_core::session::history::check): tool uses paired with their results, no
//! empty message, roles alternating. No turn's messages may be stored twice, every turn with
//! stored messages must have ended, and every turn the caller says was accepted must have
//! ended or be in the dead-letter queue.

use agent_worker_core::session::HistoryStore as _;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;

use agent_worker_aws::DynamoStore;
use agent_worker_aws::dynamo::keys::{MESSAGE_PREFIX, META_SK};
use agent_worker_core::session::history::check;
use agent_worker_core::session::{SessionId, StoreError};

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Audit {
    /// Sessions checked.
    pub sessions: usize,
    /// Turn records read.
    pub turns: usize,
    /// Turns that ended (`completed` or `failed`).
    pub ended: usize,
    /// Of those, the turns that completed.
    pub completed: usize,
    /// Of those, the turns that failed.
    pub failed: usize,
    /// Turns claimed more than once: taken over after their worker died or gave up.
    pub taken_over: usize,
    /// Messages in the stored histories.
    pub messages: usize,
    /// Each broken promise, saying which session and what.
    pub violations: Vec<String>,
}

/// One session's items, as the scan found them.
#[derive(Debug, Default)]
struct Found {
    version: u64,
    /// Message sequence number → the turn that wrote it.
    writers: BTreeMap<u64, String>,
    /// Turn id → status.
    turns: BTreeMap<String, Option<String>>,
    taken_over: usize,
}

fn text<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> Option<&'a str> {
    item.get(name).and_then(|v| v.as_s().ok()).map(String::as_str)
}

/// Why the audit could not look at the table.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The table could not be scanned.
    #[error("the table cannot be scanned")]
    Scan(#[source] aws_sdk_dynamodb::Error),
    /// A session's history could not be loaded.
    #[error("session {session} cannot be loaded")]
    History {
        /// The session.
        session: String,
        /// Why.
        #[source]
        cause: agent_worker_core::session::StoreError,
    },
}

/// Every item of `table` on moto's server, read straight from it (past any fault proxy), page
/// after page.
pub async fn every_item(table: &str) -> Result<Vec<HashMap<String, AttributeValue>>, AuditError> {
    let client = crate::moto().dynamodb();
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| AuditError::Scan(e.into()))?;
        items.extend_from_slice(page.items());
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return Ok(items);
        }
    }
}

/// Checks every session of `store`'s table (on moto's server). `accepted` lists the turns that were sent (session,
/// turn id); `dead_lettered` the turn ids found in the dead-letter queue.
pub async fn audit(
    store: &DynamoStore,
    accepted: &[(String, String)],
    dead_lettered: &BTreeSet<String>,
) -> Result<Audit, AuditError> {
    let mut sessions: BTreeMap<String, Found> = BTreeMap::new();
    // The audit reads the table straight from moto, past any fault proxy the run went through.
    let items = every_item(store.table()).await?;
    {
        for item in &items {
            let (Some(pk), Some(sk)) = (text(item, "pk"), text(item, "sk")) else {
                continue;
            };
            let Some(session) = pk.strip_prefix("session#") else {
                continue;
            };
            let found = sessions.entry(session.to_owned()).or_default();
            if sk == META_SK {
                found.version = item
                    .get("version")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
            } else if let Some(seq) = sk.strip_prefix(MESSAGE_PREFIX) {
                if let (Ok(seq), Some(turn)) = (seq.parse(), text(item, "turnId")) {
                    found.writers.insert(seq, turn.to_owned());
                }
            } else if let Some(turn) = sk.strip_prefix("turn#") {
                let attempts = item
                    .get("attempts")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
                found.taken_over += usize::from(attempts > 1);
                found
                    .turns
                    .insert(turn.to_owned(), text(item, "status").map(str::to_owned));
            }
        }
    }

    let mut audit = Audit::default();
    for (session, found) in &sessions {
        audit.sessions += 1;
        audit.taken_over += found.taken_over;
        audit.turns += found.turns.values().filter(|s| s.is_some()).count();
        let count = |status: &str| {
            found
                .turns
                .values()
                .filter(|s| s.as_deref() == Some(status))
                .count()
        };
        audit.completed += count("completed");
        audit.failed += count("failed");
        audit.ended = audit.completed + audit.failed;
        let id = SessionId::new(session.as_str()).map_err(|e| AuditError::History {
            session: session.clone(),
            cause: StoreError::Corrupt(agent_worker_core::Failure::caused_by(
                "the session id is not one",
                e,
            )),
        })?;
        let history = store
            .load_history(&id)
            .await
            .map_err(|cause| AuditError::History {
                session: session.clone(),
                cause,
            })?;
        audit.messages += history.len();
        if let Err(broken) = check(&history) {
            audit.violations.push(format!("session {session}: {broken}"));
        }
        // The turns whose messages the history holds, in order: each must appear as one run.
        let mut runs: Vec<&str> = Vec::new();
        for seq in 0..found.version {
            match found.writers.get(&seq) {
                None => audit.violations.push(format!(
                    "session {session}: message {seq} is missing below the version"
                )),
                Some(turn) if runs.last() != Some(&turn.as_str()) => runs.push(turn),
                Some(_) => {}
            }
        }
        let mut seen = BTreeSet::new();
        for turn in &runs {
            if !seen.insert(*turn) {
                audit
                    .violations
                    .push(format!("session {session}: turn {turn} is stored twice"));
            }
            match found.turns.get(*turn).and_then(Option::as_deref) {
                Some("completed" | "failed") => {}
                other => audit.violations.push(format!(
                    "session {session}: turn {turn} has stored messages but its record is {other:?}"
                )),
            }
        }
    }
    for (session, turn) in accepted {
        let status = sessions
            .get(session)
            .and_then(|f| f.turns.get(turn))
            .and_then(Option::as_deref);
        let ended = matches!(status, Some("completed" | "failed"));
        if !ended && !dead_lettered.contains(turn) {
            audit.violations.push(format!(
                "session {session}: turn {turn} was accepted and is neither stored ({status:?}) nor in the dead-letter queue"
            ));
        }
    }
    Ok(audit)
}

//! The table layout: one table, `pk` / `sk`, every item of a session under one partition key.
//!
//! | item | `pk` | `sk` |
//! | --- | --- | --- |
//! | the session's version (how many messages it holds; a branch's `lineage`) | `session#<id>` | `meta` |
//! | a message | `session#<id>` | `msg#<seq, 10 digits>` |
//! | the summary of the session's older messages (how many: `summaryUpto` on `meta`) | `session#<id>` | `summary` |
//! | a turn record (with the stop asked of it, and the commands sent to it while it runs: `commands`, their bytes in `commandBytes`) | `session#<id>` | `turn#<turnId>` |
//! | a Standard Agents session's thread record (versioned JSON in `doc`) | `session#<id>` | `thread` |
//! | an event of a turn's log | `session#<id>` | `event#<turnId>#<seq, 8 digits>` |
//! | a turn's journal: its last checkpoint, a message of it, a call's result (each names its turn in `turnId`; see the `journal` module) | `session#<id>` | `journal#<turnId>#step`, `journal#<turnId>#m#<n, 6 digits>`, `journal#<turnId>#call#<callId>` |
//! | the tab's answer to a UI action (`answer`, `final`) | `session#<id>` | `uianswer#<turnId>#<callId>` |
//! | a job a call of the conversation waits for, and the events the product reported for it (`events`: each event's payload as JSON, by name) | `session#<id>` | `job#<jobId>` |
//! | a turn sent to the queue for an A2A caller, before a worker claims it (see the `submitted` module) | `session#<id>` | `submitted#<turnId>` |
//! | an A2A task's push config (`config`: JSON; `failures`: deliveries failed in a row; see the `push_configs` module) | `session#<id>` | `push#<task's first turn>#<config id>` |
//! | a conversation's spending ledger (`spent`, micro-dollars; see the `spending` module) | `session#<id>` | `spend` |
//! | a turn's spending ledger (with a ledger and a turn budget) | `session#<id>` | `spend#turn#<turn id>` |
//! | a person's or an account's spending in a day | `spend#person#<owner key>`, `spend#account#<account>` | `<YYYY-MM-DD>` |
//! | a blocked account or person (the kill switch; see the `blocks` module) | `blocks` | `account#<account>`, `person#<owner key>` |
//! | an Agent Protocol task (all in one partition, ids time-ordered) | `aptasks` | `task#<taskId>` |
//! | a task's step (ids time-ordered) | `aptask#<taskId>` | `step#<stepId>` |
//! | a task's artifact record | `aptask#<taskId>` | `artifact#<ms, 13 digits>#<n, 4 digits>#<artifactId>` |
//!
//! Every item carries `expiresAt` (epoch seconds) for the table's TTL.
//!
//! A conversation's owner (`ownerUserId`, `ownerAccountId` on its meta item) is recorded by its
//! first turn, or by a person's first act on it through a route (a stop, an upload, an event
//! stream), which writes the owner alone.
//!
//! The meta item of a conversation with an owner also carries what its person's list shows
//! (`ownerKey`, `lastActiveAt`, `title`, `preview`, `turns`, `activeTurn`, `endedTurn`); every
//! conversation's meta item holds its run while a turn runs (`runTurn`, `runUntil`); and the
//! global secondary index [`OWNER_INDEX`] (`ownerKey` / `lastActiveAt`) lists a person's
//! conversations most recent first. A deleted conversation's meta item is a tombstone
//! (`deletedAt`, `deletedBy`: a digest, never the ids) until the TTL removes it, so that a late
//! delivery of one of its turns runs nothing.

/// The partition key attribute.
pub const PK: &str = "pk";
/// The sort key attribute.
pub const SK: &str = "sk";
/// The TTL attribute, in epoch seconds.
pub const EXPIRES_AT: &str = "expiresAt";
/// On an event item: when it was written to the log, in epoch milliseconds (within the log's
/// gathering window of when the turn emitted it); a reader dates what the event says by it.
pub const LOGGED_AT: &str = "loggedAt";
/// On a turn item: the token of the claim or commit that last wrote it, so that a write whose
/// answer was lost can tell, on the SDK's retry, that it landed.
pub const WRITE_TOKEN: &str = "writeToken";

/// On a meta item of a branched conversation: the parents' parts it begins with
/// (`[{session, upto}]`, see the `lineage` module).
pub const LINEAGE: &str = "lineage";

/// On a turn item: the commands sent to it while it runs, in the order accepted.
pub const COMMANDS: &str = "commands";
/// On a turn item: how many bytes of text its commands hold, kept within their budget.
pub const COMMAND_BYTES: &str = "commandBytes";

/// The index of conversations by owner, most recent first.
pub const OWNER_INDEX: &str = "byOwner";
/// On a meta item: the person the conversation belongs to.
pub const OWNER_USER: &str = "ownerUserId";
/// On a meta item: their account.
pub const OWNER_ACCOUNT: &str = "ownerAccountId";
/// On a meta item: the owner's key ([`owner_key`](agent_worker_core::session::conversations::owner_key)), the index's partition key.
pub const OWNER_KEY: &str = "ownerKey";
/// On a meta item: when the conversation last had a turn (milliseconds), the index's sort key.
pub const LAST_ACTIVE_AT: &str = "lastActiveAt";
/// On a meta item: the latest turn to start.
pub const ACTIVE_TURN: &str = "activeTurn";
/// On a meta item: the latest turn to end.
pub const ENDED_TURN: &str = "endedTurn";
/// On a meta item: the turn that holds the conversation's run (one turn of a conversation runs
/// at a time), taken with the turn's claim and given back by its commit or release.
pub const RUN_TURN: &str = "runTurn";
/// On a meta item: when the run's lease runs out (milliseconds); a run past it is anyone's.
pub const RUN_UNTIL: &str = "runUntil";
/// On a meta item: set when the conversation was deleted.
pub const DELETED_AT: &str = "deletedAt";
/// On a deleted conversation's tombstone while a delete removes its items: until when (epoch
/// ms) that delete holds the finishing of it; a second delete before then answers that it is
/// under way, one after it (an interrupted delete) takes it over.
pub const PURGE_UNTIL: &str = "purgeUntil";

/// The partition key of `session`.
pub fn session_pk(session: &str) -> String {
    format!("session#{session}")
}

/// The sort key of the session's version item.
pub const META_SK: &str = "meta";

/// The sort key of the session's summary item.
pub const SUMMARY_SK: &str = "summary";

/// The sort key of message `seq`.
pub fn message_sk(seq: u64) -> String {
    format!("msg#{seq:010}")
}

/// The sort key prefix of messages.
pub const MESSAGE_PREFIX: &str = "msg#";

/// The sort key of a Standard Agents session's thread record, beside its messages.
pub const THREAD_SK: &str = "thread";

/// The sort key prefix of approvals.
pub(crate) const APPROVAL_PREFIX: &str = "approval#";

/// The sort key of an approval waiting for the person's decision.
pub(crate) fn approval_sk(approval_id: &str) -> String {
    format!("{APPROVAL_PREFIX}{approval_id}")
}

/// The longest session or turn id the table keys, in bytes: DynamoDB refuses a sort key over
/// 1,024 bytes and a partition key over 2,048, and `event#<turnId>#<seq>` must fit.
pub const MAX_ID_BYTES: usize = 512;

/// The sort key of a turn record.
pub(crate) fn turn_sk(turn_id: &str) -> String {
    format!("turn#{turn_id}")
}

/// The sort key of event `seq` of a turn's log.
pub(crate) fn event_sk(turn_id: &str, seq: u64) -> String {
    format!("event#{turn_id}#{seq:08}")
}

/// The sort key prefix of a turn's events. Another turn's keys may share it (turn `a`'s prefix
/// begins turn `a#1`'s keys): [`is_event_of`] tells them apart.
pub(crate) fn event_prefix(turn_id: &str) -> String {
    format!("event#{turn_id}#")
}

/// Whether sort key `sk` is one of turn `turn_id`'s events: its prefix followed by the sequence
/// number alone, whatever `#` the turn ids hold.
pub(crate) fn is_event_of(sk: &str, turn_id: &str) -> bool {
    sk.strip_prefix("event#")
        .and_then(|rest| rest.strip_prefix(turn_id))
        .and_then(|rest| rest.strip_prefix('#'))
        .is_some_and(|seq| !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit()))
}

/// The sort key of the tab's answer to call `call_id` of turn `turn_id`.
pub(crate) fn ui_answer_sk(turn_id: &str, call_id: &str) -> String {
    format!("uianswer#{turn_id}#{call_id}")
}

/// The sort key of job `job_id`, in the partition of the conversation whose call started it.
pub fn job_sk(job_id: &str) -> String {
    format!("job#{job_id}")
}

/// The partition of every Agent Protocol task.
pub const AP_TASKS_PK: &str = "aptasks";
/// The sort key prefix of Agent Protocol tasks.
pub const AP_TASK_PREFIX: &str = "task#";
/// The sort key prefix of a task's steps.
pub const AP_STEP_PREFIX: &str = "step#";
/// The sort key prefix of a task's artifact records.
pub const AP_ARTIFACT_PREFIX: &str = "artifact#";

/// The sort key of an Agent Protocol task (in the [`AP_TASKS_PK`] partition).
pub fn ap_task_sk(task_id: &str) -> String {
    format!("{AP_TASK_PREFIX}{task_id}")
}

/// The sort key of a task's step (in the task's [`ap_task_pk`] partition).
pub fn ap_step_sk(step_id: &str) -> String {
    format!("{AP_STEP_PREFIX}{step_id}")
}

/// The partition key of an Agent Protocol task's steps and artifacts.
pub fn ap_task_pk(task_id: &str) -> String {
    format!("aptask#{task_id}")
}

/// The sort key of an artifact record added at `at_ms`, `n`th of its batch: oldest first.
pub fn ap_artifact_sk(at_ms: u64, n: usize, artifact_id: &str) -> String {
    format!("{AP_ARTIFACT_PREFIX}{at_ms:013}#{n:04}#{artifact_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turns_events_are_its_own_whatever_its_id_holds() {
        assert!(is_event_of(&event_sk("tp", 3), "tp"));
        assert!(!is_event_of(&event_sk("tp#x", 3), "tp"));
        assert!(!is_event_of(&event_sk("q#1", 0), "q"));
        assert!(!is_event_of(&event_sk("tp", 3), "tp#"));
        assert!(is_event_of(&event_sk("a#b", 12), "a#b"));
        assert!(!is_event_of("event#tp#", "tp"));
    }

    #[test]
    fn sort_keys_order_as_numbers_do() {
        assert!(message_sk(9) < message_sk(10));
        assert!(message_sk(99_999) < message_sk(100_000));
        assert!(event_sk("t", 7) < event_sk("t", 12));
        assert!(event_sk("t", 1).starts_with(&event_prefix("t")));
    }
}

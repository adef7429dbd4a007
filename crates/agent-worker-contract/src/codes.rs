//! Failure codes: the `code` of a `failed` event, as named constants so that callers never
//! match on prose.

/// The turn ran past the deadline a [`Deadline`](super::middleware::Deadline) set.
pub const DEADLINE: &str = "deadline";
/// The turn used more tokens than a [`TokenBudget`](super::middleware::TokenBudget) allows.
pub const BUDGET_EXCEEDED: &str = "budget_exceeded";
/// The prompt was empty or carried an image that cannot be sent; `details` names the field.
pub const INVALID_PROMPT: &str = "invalid_prompt";
/// The model was throttled or unavailable, and stayed so after every retry.
pub const MODEL_UNAVAILABLE: &str = "model_unavailable";
/// The model refused the request (validation, access, unknown model): retrying cannot help.
pub const MODEL_REJECTED: &str = "model_rejected";
/// The model's stream broke after output was already streamed; what it produced was kept.
pub const MODEL_STREAM_INTERRUPTED: &str = "model_stream_interrupted";
/// The session store failed; nothing of the turn was half-written.
pub const STORE_FAILED: &str = "store_failed";
/// This turn id already ran to its end: nothing ran again.
pub const DUPLICATE_TURN: &str = "duplicate_turn";
/// This turn id is running elsewhere under a live lease.
pub const TURN_IN_PROGRESS: &str = "turn_in_progress";
/// A bug: something that should not happen did. `details` says what.
pub const INTERNAL: &str = "internal";
/// A turn superseded by the person's next message before it started: nothing ran.
pub const SUPERSEDED: &str = "superseded";
/// A redelivery of a turn that already failed in a way no retry can help ([`MODEL_REJECTED`]):
/// nothing ran again, and the record goes back to its queue until the dead-letter queue takes it.
pub const FAILED_BEFORE: &str = "failed_before";
/// A turn of a conversation that belongs to another person (its `userId` or `accountId` is not
/// the one its first turn recorded): nothing ran, and nothing of it is stored.
pub const NOT_OWNER: &str = "not_owner";
/// A turn of a conversation its person deleted: nothing ran, nothing of it is stored, and the
/// record is acknowledged (it can never run, and nothing is lost by dropping it).
pub const CONVERSATION_DELETED: &str = "conversation_deleted";
/// A turn that reached its deadline and could not store what it did in time: nothing of it was
/// kept.
pub const TURN_DEADLINE_EXCEEDED: &str = "turn_deadline_exceeded";
/// The turn asked for a typed result, and the model gave none that matches the schema, after
/// being asked once more with what was wrong. What the turn produced is kept.
pub const RESULT_INVALID: &str = "result_invalid";
/// The turn's account or person is blocked (the kill switch): it did not start.
pub const BLOCKED: &str = "blocked";
/// Not a failure: the turn goes on in the host's next run (its deadline came before the turn's
/// own, and the host said it can continue it, [`CONTINUABLE_KEY`](crate::CONTINUABLE_KEY)).
/// Where the turn stood is written down; the host hands it back to its queue and shows this
/// event to no reader, so that readers see one turn.
pub const TURN_CONTINUES: &str = "turn_continues";

/// Whether a `failed` event with `code` says the turn never ran: a redelivery of a turn that
/// ran to its end ([`DUPLICATE_TURN`]) or failed for good ([`FAILED_BEFORE`]), one of another
/// person's conversation ([`NOT_OWNER`]) or of a deleted one ([`CONVERSATION_DELETED`]), one running
/// elsewhere ([`TURN_IN_PROGRESS`]), or one the person's next message replaced before it started
/// ([`SUPERSEDED`]). A host sends such a
/// refusal to no sink, so it cannot disturb what the run it repeats wrote.
pub fn never_ran(code: &str) -> bool {
    matches!(
        code,
        DUPLICATE_TURN | FAILED_BEFORE | NOT_OWNER | CONVERSATION_DELETED | TURN_IN_PROGRESS | SUPERSEDED
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_refusals_before_the_run_say_it_never_ran() {
        for code in [
            DUPLICATE_TURN,
            FAILED_BEFORE,
            NOT_OWNER,
            CONVERSATION_DELETED,
            TURN_IN_PROGRESS,
            SUPERSEDED,
        ] {
            assert!(never_ran(code), "{code}");
        }
        for code in [
            STORE_FAILED,
            MODEL_UNAVAILABLE,
            INVALID_PROMPT,
            INTERNAL,
            DEADLINE,
        ] {
            assert!(!never_ran(code), "{code}");
        }
    }
}

//! [`EngineConfig`]: the engine's tuning, with every default in one place.

use std::time::Duration;

/// The most files one message gives the model.
pub const MAX_FILES_PER_MESSAGE: usize = 5;
/// The largest attached picture given to the model, in bytes.
pub const MAX_ATTACHED_IMAGE_BYTES: usize = 1024 * 1024;
/// The longest side of an attached picture given to the model, in pixels.
pub const MAX_IMAGE_SIDE: u32 = 1568;
/// The most characters of one attached text file given to the model.
pub const MAX_TEXT_CHARS: usize = 20_000;
/// The most characters of attached text one turn gives the model.
pub const MAX_TURN_TEXT_CHARS: usize = 40_000;
/// The largest PDF whose text is read, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 32 * 1024 * 1024;
/// The tokens a request may carry before older turns are summarized (the context budget).
pub const DEFAULT_CONTEXT_TOKENS: u64 = 150_000;
/// How many messages since the last summary a session may hold before older turns are
/// summarized, so that a turn's reads stay bounded.
pub const DEFAULT_COMPACT_AFTER_MESSAGES: usize = 400;
/// The tokens the files given to the model may carry in one step, by default.
pub const DEFAULT_TURN_FILE_TOKENS: u64 = 30_000;
/// The tokens the files given to the model may carry over a whole conversation, by default.
pub const DEFAULT_CONVERSATION_FILE_TOKENS: u64 = 300_000;

/// How many model rounds one turn may take.
pub const DEFAULT_MAX_ROUNDS: u32 = 12;
/// How many times one turn may call the same tool with the same arguments.
pub const DEFAULT_MAX_REPEAT_CALLS: u32 = 5;
/// The largest block (a tool's result, the person's text or picture) a message keeps inline
/// where large content is kept in a file area; a larger one goes there whole.
pub const DEFAULT_INLINE_LIMIT_BYTES: usize = 64 * 1024;
/// The most [`EngineConfig::inline_limit_bytes`] may be: well within an item of the table.
pub const MAX_INLINE_LIMIT_BYTES: usize = 256 * 1024;
/// The output tokens one model response may use, reasoning included.
pub const DEFAULT_MAX_TOKENS: u32 = 32_000;
/// The model's sampling temperature.
pub const DEFAULT_TEMPERATURE: f32 = 0.3;
/// Whether a forced step is sent as a forced tool choice (`true`) or as that tool alone plus
/// an instruction to call it (`false`, for models that refuse a forced choice).
pub const DEFAULT_FORCED_TOOL_CHOICE: bool = true;
/// How long one tool call may run.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one turn may run. Keep it below the host's own limit.
pub const DEFAULT_TURN_DEADLINE: Duration = Duration::from_secs(14 * 60);
/// How long the model may take to send the first event of a response; past it the call is
/// given up as a timeout (retried when nothing was said).
pub const DEFAULT_FIRST_CHUNK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a response's stream may go quiet between two events before it is given up.
pub const DEFAULT_CHUNK_TIMEOUT: Duration = Duration::from_secs(30);
/// How many times a transient model failure is retried.
pub const DEFAULT_RETRIES: u32 = 3;
/// The first retry's delay; each further retry doubles it, with jitter.
pub const DEFAULT_RETRY_BASE_DELAY: Duration = Duration::from_millis(500);
/// The longest delay between two retries.
pub const DEFAULT_RETRY_MAX_DELAY: Duration = Duration::from_secs(20);
/// Time a turn's lease holds beyond its deadline, for storing what it produced.
pub const DEFAULT_LEASE_MARGIN: Duration = Duration::from_secs(60);
/// The longest a turn may run, across every invocation of it: SQS's longest visibility timeout.
pub const MAX_TURN_DEADLINE: Duration = Duration::from_secs(12 * 3600);
/// How long before the host's deadline a turn that can go on past it hands itself over, by
/// default: at the first round boundary within it (a model step and its calls are expected to
/// fit in it).
pub const DEFAULT_HAND_OVER_MARGIN: Duration = Duration::from_secs(60);
/// How often a running turn looks for a stop request (one read each time).
pub const DEFAULT_STOP_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How far apart a running turn's looks for a stop may grow while the model is not streaming
/// (a long tool call): from [`DEFAULT_STOP_POLL_INTERVAL`], doubling, up to this.
pub const DEFAULT_STOP_POLL_IDLE: Duration = Duration::from_secs(3);
/// How long an answer already on its way is still waited for once a stop is seen.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(2);
/// How often a UI action's call looks for the tab's answer.
pub const DEFAULT_UI_ANSWER_POLL: Duration = Duration::from_millis(250);
/// How long a UI action waits for the person's tab, by default: a person confirming on the page
/// takes longer than an API call.
pub const DEFAULT_UI_ACTION_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a turn that supersedes others waits for them to be stored before it gives up.
pub const DEFAULT_SUPERSEDE_WAIT: Duration = Duration::from_secs(10);
/// How long the person has to decide on an approval.
pub const DEFAULT_APPROVAL_TTL: Duration = Duration::from_secs(5 * 60);
/// The longest an approval may stay open.
pub const MAX_APPROVAL_TTL: Duration = Duration::from_secs(30 * 60);
/// How long a turn that reached its deadline may take to store what it did.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// The engine's tuning. Start from [`Default`], change fields, and the engine's builder
/// [validates](Self::validate) the whole at construction.
///
/// ```
/// use std::time::Duration;
/// use agent_worker_core::engine::EngineConfig;
///
/// let config = EngineConfig { max_rounds: 4, tool_timeout: Duration::from_secs(5), ..EngineConfig::default() };
/// assert!(config.validate().is_ok());
/// let broken = EngineConfig { temperature: 3.0, ..EngineConfig::default() };
/// assert_eq!(broken.validate().unwrap_err().to_string(), "temperature must be between 0 and 1, not 3");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Model rounds per turn; the turn completes with `stopReason: "max_rounds"` after them.
    pub max_rounds: u32,
    /// Calls of one tool with the same arguments per turn; the model asking for one more ends
    /// the turn with `stopReason: "repeated_call"` (a model in a loop). 0: no limit.
    pub max_repeat_calls: u32,
    /// The largest block a message keeps inline where large content is kept in a file area
    /// (the engine's [`keep_large_content`](super::EngineBuilder::keep_large_content)), 1 KiB
    /// to [`MAX_INLINE_LIMIT_BYTES`].
    pub inline_limit_bytes: usize,
    /// Output tokens per model response.
    pub max_tokens: u32,
    /// Sampling temperature, 0 to 1.
    pub temperature: f32,
    /// How a forced step is sent; see [`DEFAULT_FORCED_TOOL_CHOICE`].
    pub forced_tool_choice: bool,
    /// Per tool call.
    pub tool_timeout: Duration,
    /// Per turn.
    pub turn_deadline: Duration,
    /// How long a response may take to send its first event (a stalled model is a timeout).
    pub first_chunk_timeout: Duration,
    /// How long a response's stream may go quiet between two events.
    pub chunk_timeout: Duration,
    /// Retries of a transient model failure.
    pub retries: u32,
    /// First retry delay.
    pub retry_base_delay: Duration,
    /// Longest retry delay.
    pub retry_max_delay: Duration,
    /// Lease beyond the deadline.
    pub lease_margin: Duration,
    /// How long before the host's deadline a turn the host can continue hands itself over, at
    /// a round boundary (see [`CONTINUABLE_KEY`](crate::protocol::CONTINUABLE_KEY)); at most a
    /// quarter of the host's time. The host's deadline must come more than this before the
    /// turn's own for the turn to be continued at all.
    pub hand_over_margin: Duration,
    /// How often a running turn looks for a stop while the model streams.
    pub stop_poll_interval: Duration,
    /// How far apart its looks may grow while the model is not streaming (at least
    /// `stop_poll_interval`).
    pub stop_poll_idle: Duration,
    /// How long an answer on its way is waited for after a stop.
    pub stop_grace: Duration,
    /// How long a barge-in waits for the turns it supersedes.
    pub supersede_wait: Duration,
    /// How often a UI action's call looks for the tab's answer.
    pub ui_answer_poll: Duration,
    /// How long a UI action's call waits for the tab's answer: then one last look, and a request
    /// still unanswered is withdrawn (`ui_action_withdrawn`) and kept as not run, or, when the
    /// tab took it, as sent with its outcome unknown.
    pub ui_action_timeout: Duration,
    /// How long a turn past its deadline may take to store.
    pub store_timeout: Duration,
    /// How long an approval stays open.
    pub approval_ttl: Duration,
    /// The tokens the files given to the model may carry in one step: from the step that would
    /// pass it, the costliest file is given as its reference line instead.
    pub turn_file_tokens: u64,
    /// The tokens files may give the model over the conversation, counted with the file area's
    /// [`conversation_usage`](super::FileArea::conversation_usage).
    pub conversation_file_tokens: u64,
    /// The tokens a request may carry; past them, older turns are summarized
    /// ([`compaction`](super::compaction)). Set it below the model's context window.
    pub context_tokens: u64,
    /// How many messages since the last summary a session may hold before older turns are
    /// summarized.
    pub compact_after_messages: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_rounds: DEFAULT_MAX_ROUNDS,
            max_repeat_calls: DEFAULT_MAX_REPEAT_CALLS,
            inline_limit_bytes: DEFAULT_INLINE_LIMIT_BYTES,
            max_tokens: DEFAULT_MAX_TOKENS,
            temperature: DEFAULT_TEMPERATURE,
            forced_tool_choice: DEFAULT_FORCED_TOOL_CHOICE,
            tool_timeout: DEFAULT_TOOL_TIMEOUT,
            turn_deadline: DEFAULT_TURN_DEADLINE,
            first_chunk_timeout: DEFAULT_FIRST_CHUNK_TIMEOUT,
            chunk_timeout: DEFAULT_CHUNK_TIMEOUT,
            retries: DEFAULT_RETRIES,
            retry_base_delay: DEFAULT_RETRY_BASE_DELAY,
            retry_max_delay: DEFAULT_RETRY_MAX_DELAY,
            lease_margin: DEFAULT_LEASE_MARGIN,
            hand_over_margin: DEFAULT_HAND_OVER_MARGIN,
            stop_poll_interval: DEFAULT_STOP_POLL_INTERVAL,
            stop_poll_idle: DEFAULT_STOP_POLL_IDLE,
            stop_grace: DEFAULT_STOP_GRACE,
            ui_answer_poll: DEFAULT_UI_ANSWER_POLL,
            ui_action_timeout: DEFAULT_UI_ACTION_TIMEOUT,
            supersede_wait: DEFAULT_SUPERSEDE_WAIT,
            store_timeout: DEFAULT_STORE_TIMEOUT,
            approval_ttl: DEFAULT_APPROVAL_TTL,
            turn_file_tokens: DEFAULT_TURN_FILE_TOKENS,
            conversation_file_tokens: DEFAULT_CONVERSATION_FILE_TOKENS,
            context_tokens: DEFAULT_CONTEXT_TOKENS,
            compact_after_messages: DEFAULT_COMPACT_AFTER_MESSAGES,
        }
    }
}

/// A tuning value out of range: which field, and what it must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be {requirement}")]
pub struct ConfigError {
    /// The field's name, as in [`EngineConfig`].
    pub field: &'static str,
    /// What the field must be, with the value it has where that helps.
    pub requirement: String,
}

impl EngineConfig {
    /// Checks every field, naming the first one out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |field: &'static str, requirement: String| Err(ConfigError { field, requirement });
        let longer_than_zero = |field: &'static str, value: Duration| {
            if value.is_zero() {
                fail(field, "longer than zero".into())
            } else {
                Ok(())
            }
        };
        if self.max_rounds == 0 {
            return fail("max_rounds", "at least 1".into());
        }
        if !(1024..=MAX_INLINE_LIMIT_BYTES).contains(&self.inline_limit_bytes) {
            return fail(
                "inline_limit_bytes",
                format!(
                    "between 1024 and {MAX_INLINE_LIMIT_BYTES}, not {}",
                    self.inline_limit_bytes
                ),
            );
        }
        if self.max_tokens == 0 || self.max_tokens > i32::MAX as u32 {
            return fail(
                "max_tokens",
                format!("between 1 and {}, not {}", i32::MAX, self.max_tokens),
            );
        }
        if !(0.0..=1.0).contains(&self.temperature) {
            return fail(
                "temperature",
                format!("between 0 and 1, not {}", self.temperature),
            );
        }
        longer_than_zero("tool_timeout", self.tool_timeout)?;
        longer_than_zero("ui_answer_poll", self.ui_answer_poll)?;
        longer_than_zero("ui_action_timeout", self.ui_action_timeout)?;
        longer_than_zero("turn_deadline", self.turn_deadline)?;
        if self.turn_deadline > MAX_TURN_DEADLINE {
            return fail(
                "turn_deadline",
                format!(
                    "at most {} hours (a turn goes on across invocations, each within the queue's visibility)",
                    MAX_TURN_DEADLINE.as_secs() / 3600
                ),
            );
        }
        longer_than_zero("first_chunk_timeout", self.first_chunk_timeout)?;
        longer_than_zero("chunk_timeout", self.chunk_timeout)?;
        if self.retries > 10 {
            return fail("retries", format!("at most 10, not {}", self.retries));
        }
        longer_than_zero("stop_poll_interval", self.stop_poll_interval)?;
        if self.stop_poll_idle < self.stop_poll_interval {
            return fail(
                "stop_poll_idle",
                format!(
                    "at least stop_poll_interval ({} ms), not {} ms",
                    self.stop_poll_interval.as_millis(),
                    self.stop_poll_idle.as_millis()
                ),
            );
        }
        if self.approval_ttl.is_zero() || self.approval_ttl > MAX_APPROVAL_TTL {
            return fail(
                "approval_ttl",
                format!("between 0 and {} minutes", MAX_APPROVAL_TTL.as_secs() / 60),
            );
        }
        longer_than_zero("store_timeout", self.store_timeout)?;
        if self.context_tokens < 1_000 {
            return fail(
                "context_tokens",
                format!("at least 1000, not {}", self.context_tokens),
            );
        }
        if self.compact_after_messages < 4 {
            return fail(
                "compact_after_messages",
                format!("at least 4, not {}", self.compact_after_messages),
            );
        }
        if self.retry_base_delay > self.retry_max_delay {
            return fail("retry_base_delay", "no longer than retry_max_delay".into());
        }
        Ok(())
    }
}

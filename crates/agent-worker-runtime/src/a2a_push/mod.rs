//! A2A push notifications: a task's updates POSTed to the webhooks its caller set
//! (`CreateTaskPushNotificationConfig`, or `SendMessage`'s `configuration`), from whichever
//! worker runs the task's turn.
//!
//! - [`PushConfig`]: a webhook as A2A sends one, checked before it is kept ([`PushConfig::check`]):
//!   `https` only (plain `http` to a loopback address where [`PushPolicy::loopback`] allows it,
//!   for local runs and tests), no credentials in the URL, no private, loopback, link-local,
//!   shared or metadata address, bounded lengths. The configs live in the table beside the
//!   conversation (`DynamoStore::push_configs`), so any worker finds them and a deleted
//!   conversation takes them along.
//! - [`A2aPushSink`]: the sink every worker runs turns with when pushes are on. A task's turn
//!   pushes `WORKING` when it begins and the task itself (its final status, its answer and typed
//!   result as artifacts; `INPUT_REQUIRED` with the approval it waits for; read from the turn's
//!   event log, so a turn that ran over several invocations is pushed whole) when it ends, each
//!   to every config the task has then. Each webhook takes its updates in order and on its own
//!   (one that hangs holds back no other). The turn never waits on a webhook: the pushes go out
//!   beside it, and its end waits for them at most [`DELIVERY_BUDGET`]. Best effort: an update
//!   whose tries all fail, or that the budget cuts off, is not sent again (a turn resumed after
//!   a crash pushes `WORKING` again).
//! - [`PushDelivery`]: one POST, retried with backoff ([`ATTEMPTS`]) on a connection failure, a
//!   timeout, a 408, a 429 or a 5xx; never a redirect followed. The host's address is checked again at
//!   every connection (the resolver refuses a name that resolves to an address the URL could
//!   not name), so a name that changes its address after the check gains nothing. A config
//!   whose deliveries fail [`DROP_AFTER`] times in a row is dropped.

mod address;
mod config;
mod deliver;
mod sink;

use std::time::Duration;

pub use address::{AddressRefused, check_url};
pub use config::{PushAuthentication, PushConfig, PushConfigError};
pub use deliver::{PushDelivery, PushError};
pub use sink::A2aPushSink;

/// The most push configs one task keeps.
pub const MAX_CONFIGS_PER_TASK: usize = 10;
/// The longest webhook URL, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// The longest token (`X-A2A-Notification-Token`) or credentials, in bytes.
pub const MAX_SECRET_BYTES: usize = 4096;
/// The longest config id, in bytes.
pub const MAX_CONFIG_ID_BYTES: usize = 128;
/// How long one POST may take, connection included.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(4);
/// How many times one update is tried on one webhook.
pub const ATTEMPTS: u32 = 3;
/// The wait before the second try; each later one waits twice the one before (jittered).
pub const FIRST_RETRY_DELAY: Duration = Duration::from_millis(500);
/// Updates that fail in a row before their webhook's config is dropped.
pub const DROP_AFTER: u64 = 5;
/// The longest a turn's end waits for its pushes to go out: within the time a Lambda invocation
/// keeps back for storing the turn (`STORE_MARGIN_MS`, 10 s), beside the other sinks.
pub const DELIVERY_BUDGET: Duration = Duration::from_secs(6);

/// Which webhooks a deployment pushes to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushPolicy {
    /// Plain `http` to a loopback address (`127.0.0.0/8`, `::1`, `localhost`) is taken: for
    /// local runs and tests, never a deployment (`A2A_PUSH_LOOPBACK`).
    pub loopback: bool,
}

//! The one table: every DynamoDB key and item codec of agent-worker lives under this module, and
//! nothing outside it builds an `AttributeValue`.
//!
//! - [`keys`]: the layout, every `pk` / `sk` the table holds.
//! - [`DynamoStore`]: sessions, turns, stops and summaries ([`SessionStore`](agent_worker_core::session::SessionStore)),
//!   approvals ([`ApprovalStore`](agent_worker_core::session::ApprovalStore)), and a person's
//!   conversations ([`ConversationStore`](agent_worker_core::session::ConversationStore)).
//! - [`DynamoEventLog`]: a turn's events, read back from a cursor.
//! - [`DynamoJobEvents`]: the events that settle jobs, reported by the product, waited for by
//!   calls on any worker.
//! - [`DynamoThreadStore`]: a Standard Agents session's thread record.
//! - [`Documents`]: typed JSON documents at keys of the table (the Agent Protocol task store's).

mod approvals;
mod blocks;
mod codec;
mod commands;
mod commit;
mod conversations;
mod documents;
mod event_items;
mod event_log;
mod history;
mod job_events;
mod journal;
pub mod keys;
mod lineage;
mod log_tail;
mod opening;
mod owner;
mod push_configs;
mod read_ahead;
mod run;
mod sdk_error;
mod spending;
mod store;
mod submitted;
mod table;
mod thread;
mod transact;
mod ui_answers;

pub use blocks::{CachedBlocklist, DEFAULT_BLOCKS_FRESH_FOR};
pub use codec::MAX_MESSAGE_BYTES;
pub use documents::{DocKey, Documents, DocumentsError, MAX_DOCUMENTS_PER_WRITE};
pub use event_log::{DynamoEventLog, LOOK_AHEAD, LoggedEvent, TEXT_COALESCE_BYTES, TEXT_COALESCE_WINDOW};
pub use job_events::{DEFAULT_JOB_POLL, DynamoJobEvents, RecordError};
pub use push_configs::{PushConfigPut, PushConfigWrite, StoredPushConfig};
pub use store::{DEFAULT_STOP_WAIT, DEFAULT_TTL, DynamoConfig, DynamoStore};
pub use thread::DynamoThreadStore;
pub use transact::{MAX_TRANSACTION_BYTES, MAX_TRANSACTION_ITEMS};

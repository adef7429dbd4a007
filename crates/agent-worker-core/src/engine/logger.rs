//! [`TurnLogger`]: the turn's log lines to a sink the embedding program gives (seed 004's
//! `logger`), beside `tracing`, so that a product can keep them in its own store.
//!
//! The lines are the `tracing` events the turn's own task emits at the logger's level or above
//! (the engine's, its tools' and its model client's), each with the turn's session and id. They
//! still reach the program's `tracing` subscriber as before: the logger is given a copy, never
//! in its place. Without a logger (the default) nothing changes and nothing is spent.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Level, Metadata, Subscriber};
use tracing_core::span::Current;

use crate::session::{SessionId, TurnId};

/// One log line of a turn.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LogLine {
    /// Its level.
    pub level: Level,
    /// Where it was said (the module's path).
    pub target: String,
    /// What it says.
    pub message: String,
    /// Its other fields, as JSON.
    pub fields: Map<String, Value>,
    /// The turn's session.
    pub session: SessionId,
    /// The turn.
    pub turn_id: TurnId,
}

/// A sink for the turn's log lines: called on the turn's task, so it should hand the line on
/// (to a channel, a buffer) rather than wait on I/O.
pub trait TurnLogger: Send + Sync + fmt::Debug {
    /// Takes one line.
    fn log(&self, line: LogLine);
}

/// A logger and the level from which it takes lines.
#[derive(Debug, Clone)]
pub(crate) struct Logging {
    pub(crate) logger: Arc<dyn TurnLogger>,
    pub(crate) level: Level,
}

impl Logging {
    /// The dispatcher a turn of `session` and `turn_id` runs under: the one in effect now,
    /// with every line at the level or above copied to the logger.
    pub(crate) fn dispatch(&self, session: &SessionId, turn_id: &TurnId) -> Dispatch {
        let inner = tracing::dispatcher::get_default(Dispatch::clone);
        Dispatch::new(Tee {
            inner,
            logging: self.clone(),
            session: session.clone(),
            turn_id: turn_id.clone(),
        })
    }
}

/// A subscriber that is `inner` for everything, and gives the logger a copy of each event.
struct Tee {
    inner: Dispatch,
    logging: Logging,
    session: SessionId,
    turn_id: TurnId,
}

impl Tee {
    fn takes(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_event() && *metadata.level() <= self.logging.level
    }
}

impl Subscriber for Tee {
    fn register_callsite(&self, _metadata: &'static Metadata<'static>) -> Interest {
        // Asked per event: the inner subscriber and the logger decide alike each time.
        Interest::sometimes()
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.inner.enabled(metadata) || self.takes(metadata)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        // The inner subscriber's hint cannot be read through its dispatcher: no hint, so that
        // whatever it wants still reaches it (`enabled` decides per event).
        None
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        self.inner.new_span(span)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        self.inner.record(span, values);
    }

    fn record_follows_from(&self, span: &Id, follows: &Id) {
        self.inner.record_follows_from(span, follows);
    }

    fn event(&self, event: &Event<'_>) {
        let metadata = event.metadata();
        if self.inner.enabled(metadata) {
            self.inner.event(event);
        }
        if self.takes(metadata) {
            let mut fields = Fields::default();
            event.record(&mut fields);
            self.logging.logger.log(LogLine {
                level: *metadata.level(),
                target: metadata.target().to_owned(),
                message: fields.message,
                fields: fields.rest,
                session: self.session.clone(),
                turn_id: self.turn_id.clone(),
            });
        }
    }

    fn enter(&self, span: &Id) {
        self.inner.enter(span);
    }

    fn exit(&self, span: &Id) {
        self.inner.exit(span);
    }

    fn clone_span(&self, id: &Id) -> Id {
        self.inner.clone_span(id)
    }

    fn try_close(&self, id: Id) -> bool {
        self.inner.try_close(id)
    }

    fn current_span(&self) -> Current {
        self.inner.current_span()
    }
}

/// An event's fields: its message, and the rest as JSON.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Map<String, Value>,
}

impl Fields {
    fn put(&mut self, field: &tracing::field::Field, value: Value) {
        if field.name() == "message" {
            self.message = match value {
                Value::String(text) => text,
                other => other.to_string(),
            };
        } else {
            self.rest.insert(field.name().to_owned(), value);
        }
    }
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.put(field, Value::from(value));
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        self.put(field, Value::from(value));
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.put(field, Value::from(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Debug, Default)]
    struct Kept(Mutex<Vec<LogLine>>);

    impl TurnLogger for Kept {
        fn log(&self, line: LogLine) {
            self.0.lock().unwrap().push(line);
        }
    }

    #[test]
    fn lines_at_the_level_or_above_reach_the_logger_with_the_turn_and_their_fields() {
        let kept = Arc::new(Kept::default());
        let logging = Logging {
            logger: kept.clone(),
            level: Level::INFO,
        };
        tracing::dispatcher::with_default(
            &logging.dispatch(
                &crate::session::test_ids::sid("conv-1"),
                &crate::session::test_ids::tid("t-1"),
            ),
            || {
                tracing::info!(tool = "add", ms = 12_u64, "a call ended");
                tracing::debug!("too fine for the logger");
                tracing::warn!(retry = 2, "the model was throttled");
            },
        );
        let lines = kept.0.lock().unwrap().clone();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0].message, "a call ended");
        assert_eq!(lines[0].fields["tool"], "add");
        assert_eq!(lines[0].fields["ms"], 12);
        assert_eq!(
            (lines[0].session.as_str(), lines[0].turn_id.as_str()),
            ("conv-1", "t-1")
        );
        assert_eq!(lines[1].level, Level::WARN);
        assert_eq!(lines[1].fields["retry"], 2);
    }
}

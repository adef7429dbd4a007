//! `GET /turns/{turnId}/events`: a turn's logged events as Server-Sent Events, live.
//!
//! One reader per turn polls the event log for every subscriber in this process, so a hundred
//! people watching one turn cost what one does; the reader stops when its last subscriber goes or
//! the turn's terminal is read. The number of open streams is capped
//! ([`ContainerConfig::max_event_streams`](super::ContainerConfig::max_event_streams)).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::{ContainerHost, SessionQuery, error, unavailable};
use crate::sinks::{DynamoEventLog, LoggedEvent};

/// The most event streams open at once, by default.
pub const DEFAULT_MAX_EVENT_STREAMS: usize = 256;

/// The event streams of one host: a reader per followed turn, and the cap on subscribers.
pub(super) struct Followers {
    readers: Mutex<HashMap<(String, String), Weak<TurnReader>>>,
    streams: Arc<Semaphore>,
    max_streams: usize,
}

impl Followers {
    pub(super) fn new(max_streams: usize) -> Self {
        let max_streams = max_streams.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            readers: Mutex::new(HashMap::new()),
            streams: Arc::new(Semaphore::new(max_streams)),
            max_streams,
        }
    }

    /// How many streams are open, and how many turns are being read for them.
    pub(super) fn counts(&self) -> (usize, usize) {
        let readers = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
        let live = readers.values().filter(|r| r.strong_count() > 0).count();
        (self.max_streams - self.streams.available_permits(), live)
    }

    /// The reader of `turn_id`, started if no one follows that turn yet.
    fn reader(&self, log: &DynamoEventLog, session: &str, turn_id: &str, poll: Duration) -> Arc<TurnReader> {
        let mut readers = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
        readers.retain(|_, reader| reader.strong_count() > 0);
        let key = (session.to_owned(), turn_id.to_owned());
        if let Some(reader) = readers.get(&key).and_then(Weak::upgrade) {
            return reader;
        }
        let reader = TurnReader::start(log.clone(), key.0.clone(), key.1.clone(), poll);
        readers.insert(key, Arc::downgrade(&reader));
        reader
    }
}

/// What has been read of one turn's log.
#[derive(Debug, Clone, Default)]
struct Read {
    events: Arc<Vec<LoggedEvent>>,
    /// The terminal has been read: nothing more will come.
    ended: bool,
}

/// The one reader of a turn's log in this process. Subscribers hold it; the polling task holds
/// it weakly and stops once none does.
struct TurnReader {
    read: watch::Sender<Read>,
}

impl TurnReader {
    fn start(log: DynamoEventLog, session: String, turn_id: String, poll: Duration) -> Arc<Self> {
        let reader = Arc::new(Self {
            read: watch::Sender::new(Read::default()),
        });
        let weak = Arc::downgrade(&reader);
        tokio::spawn(async move {
            let mut first = true;
            loop {
                if !std::mem::take(&mut first) {
                    tokio::time::sleep(poll).await;
                }
                let Some(reader) = weak.upgrade() else {
                    return;
                };
                let after = reader.read.borrow().events.last().map(|e| e.seq);
                match log.read(&session, &turn_id, after).await {
                    Ok(new) if new.is_empty() => {}
                    Ok(new) => {
                        let ended = new.iter().any(|e| e.event.is_terminal());
                        reader.read.send_modify(|read| {
                            Arc::make_mut(&mut read.events).extend(new);
                            read.ended = ended;
                        });
                        if ended {
                            return;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "could not read the event log; trying again"),
                }
            }
        });
        reader
    }
}

pub(super) async fn turn_events(
    State(host): State<ContainerHost>,
    Path(turn_id): Path<String>,
    Query(query): Query<SessionQuery>,
    headers: HeaderMap,
) -> Response {
    let Some(log) = host.inner.log.clone() else {
        return error(StatusCode::NOT_FOUND, "this worker keeps no event log");
    };
    if let Err(refused) = query.check_person(&host, &turn_id).await {
        return refused;
    }
    let resume = match headers.get("last-event-id").map(|v| v.to_str()) {
        Some(Ok(text)) => match text.trim().parse::<u64>() {
            Ok(cursor) => Some(cursor),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "Last-Event-ID is not an event's position",
                );
            }
        },
        Some(Err(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "Last-Event-ID is not an event's position",
            );
        }
        None => query.cursor,
    };
    let followers = &host.inner.followers;
    let Ok(permit) = followers.streams.clone().try_acquire_owned() else {
        return unavailable("too many event streams are open; try again");
    };
    let reader = followers.reader(&log, &query.session, &turn_id, host.inner.config.event_poll);
    Sse::new(follow(reader, resume, permit))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The turn's events after `after`, as its reader reads them, ending after the terminal; at once
/// when the terminal is at or before `after`.
fn follow(
    reader: Arc<TurnReader>,
    after: Option<u64>,
    permit: OwnedSemaphorePermit,
) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static {
    struct Follow {
        /// Held so that the turn's reader goes on while this stream is open.
        _reader: Arc<TurnReader>,
        seen: watch::Receiver<Read>,
        after: Option<u64>,
        _permit: OwnedSemaphorePermit,
    }
    let seen = reader.read.subscribe();
    let state = Follow {
        _reader: reader,
        seen,
        after,
        _permit: permit,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        loop {
            let read = state.seen.borrow_and_update().clone();
            let from = state
                .after
                .map_or(0, |a| read.events.partition_point(|e| e.seq <= a));
            if let Some(next) = read.events.get(from) {
                state.after = Some(next.seq);
                let data = serde_json::to_string(&next.event).unwrap_or_default();
                let event = Event::default()
                    .id(next.seq.to_string())
                    .event(next.event.type_name())
                    .data(data);
                return Some((Ok(event), state));
            }
            // Nothing after the cursor: done if the terminal has been read (it was at or before
            // the cursor), else wait for the reader.
            if read.ended || state.seen.changed().await.is_err() {
                return None;
            }
        }
    })
}

//! `GET /turns/{turnId}/events`: a turn's logged events as Server-Sent Events, live.
//!
//! One reader per turn polls the event log for every subscriber in this process, so a hundred
//! people watching one turn cost what one does; the reader stops when its last subscriber goes or
//! the turn's terminal is read. The number of open streams is capped on the host, for each person
//! and for each account ([`ContainerConfig::event_streams`](super::ContainerConfig::event_streams)):
//! one person cannot take the streams of all. A protocol that starts a turn and streams its
//! answer (AG-UI, `/invocations`, A2A) takes its stream's place ([`stream_place`]) before it
//! starts the turn, so that no turn starts whose answer cannot be given.
//!
//! A turn that has logged nothing yet is looked for less and less often (from the poll interval,
//! doubling up to [`MAX_IDLE_POLL`]), and one that has not started within
//! [`ContainerConfig::event_start_wait`](super::ContainerConfig::event_start_wait) ends its
//! streams with a `stream_ended` event (`{"turnId", "reason": "not_started"}`), so that a stream
//! on a turn that never comes neither holds a place under the cap nor reads forever. A stream
//! opened with a token ends when the token does, with `stream_ended` (`"reason":
//! "token_expired"`): the client opens it again with a new token, from its `Last-Event-ID`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use axum::Extension;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt as _};
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::access::{Acting, Asker, TakenUntil, TurnPath};
use super::answers::StreamEnded;
use super::extract::Params;
use super::{ContainerHost, HostError};
use agent_worker_aws::dynamo::{DynamoEventLog, LoggedEvent};
use agent_worker_contract::ErrorChain;
use agent_worker_core::session::{Owner, SessionId, TurnId};

/// The most event streams open at once, by default.
pub const DEFAULT_MAX_EVENT_STREAMS: usize = 256;
/// How long a stream waits for a turn that has logged nothing, by default.
pub const DEFAULT_EVENT_START_WAIT: Duration = Duration::from_secs(60);
/// The longest pause between reads of a turn that has logged nothing yet.
pub const MAX_IDLE_POLL: Duration = Duration::from_secs(2);

/// How a turn's reader reads: its pace, and how long it waits for a first event.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    pub(super) poll: Duration,
    pub(super) start_wait: Duration,
}

/// The most event streams one person holds open at once, by default.
pub const DEFAULT_MAX_EVENT_STREAMS_PER_PERSON: usize = 16;
/// The most event streams the people of one account hold open at once, by default.
pub const DEFAULT_MAX_EVENT_STREAMS_PER_ACCOUNT: usize = 64;

/// How many event streams may be open at once: on the host, for one person, for one account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCaps {
    /// On the whole host.
    pub host: usize,
    /// For one person.
    pub person: usize,
    /// For the people of one account.
    pub account: usize,
}

impl Default for StreamCaps {
    fn default() -> Self {
        Self {
            host: DEFAULT_MAX_EVENT_STREAMS,
            person: DEFAULT_MAX_EVENT_STREAMS_PER_PERSON,
            account: DEFAULT_MAX_EVENT_STREAMS_PER_ACCOUNT,
        }
    }
}

/// The event streams of one host: a reader per followed turn, and the caps on subscribers.
pub(super) struct Followers {
    readers: Mutex<HashMap<(String, String), Weak<TurnReader>>>,
    streams: Arc<Semaphore>,
    max_streams: usize,
    /// Open streams by person and by account.
    held: Arc<Mutex<HashMap<Holder, usize>>>,
    caps: StreamCaps,
}

/// Who holds open streams, for the caps beside the host's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Holder {
    Person(Owner),
    Account(String),
}

/// A place among a host's event streams, taken before a stream begins, and before the turn a
/// stream answers is started: a turn is never started whose answer cannot be streamed. Given
/// back when the stream ends (or when it is dropped unused).
pub(super) struct StreamPlace {
    log: DynamoEventLog,
    _host: OwnedSemaphorePermit,
    _holders: HeldPlace,
}

/// A person's and their account's count of open streams, given back on drop.
struct HeldPlace {
    held: Arc<Mutex<HashMap<Holder, usize>>>,
    holders: [Holder; 2],
}

impl Drop for HeldPlace {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        for holder in &self.holders {
            if let Some(count) = held.get_mut(holder) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    held.remove(holder);
                }
            }
        }
    }
}

impl Followers {
    pub(super) fn new(caps: StreamCaps) -> Self {
        let max_streams = caps.host.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            readers: Mutex::new(HashMap::new()),
            streams: Arc::new(Semaphore::new(max_streams)),
            max_streams,
            held: Arc::new(Mutex::new(HashMap::new())),
            caps,
        }
    }

    /// Counts one more stream for `person` and their account: 429 past either's cap.
    fn hold(&self, person: &Owner) -> Result<HeldPlace, HostError> {
        let holders = [
            Holder::Person(person.clone()),
            Holder::Account(person.account_id.clone()),
        ];
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = |holder: &Holder| held.get(holder).copied().unwrap_or(0);
        if count(&holders[0]) >= self.caps.person {
            return Err(HostError::too_many(format!(
                "you have {} event streams open, the most one person may; close one first",
                self.caps.person
            )));
        }
        if count(&holders[1]) >= self.caps.account {
            return Err(HostError::too_many(format!(
                "your account has {} event streams open, the most one account may; close one first",
                self.caps.account
            )));
        }
        for holder in &holders {
            *held.entry(holder.clone()).or_insert(0) += 1;
        }
        drop(held);
        Ok(HeldPlace {
            held: self.held.clone(),
            holders,
        })
    }

    /// How many streams are open, and how many turns are being read for them.
    pub(super) fn counts(&self) -> (usize, usize) {
        let readers = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
        let live = readers.values().filter(|r| r.strong_count() > 0).count();
        (self.max_streams - self.streams.available_permits(), live)
    }

    /// The reader of `turn_id`, started if no one follows that turn yet.
    fn reader(&self, log: &DynamoEventLog, session: &str, turn_id: &str, pace: Pace) -> Arc<TurnReader> {
        let mut readers = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
        readers.retain(|_, reader| reader.strong_count() > 0);
        let key = (session.to_owned(), turn_id.to_owned());
        if let Some(reader) = readers.get(&key).and_then(Weak::upgrade) {
            return reader;
        }
        let reader = TurnReader::start(log.clone(), key.0.clone(), key.1.clone(), pace);
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
    /// The turn logged nothing within the wait: the reader stopped looking.
    not_started: bool,
}

/// The one reader of a turn's log in this process. Subscribers hold it; the polling task holds
/// it weakly and stops once none does.
struct TurnReader {
    read: watch::Sender<Read>,
}

impl TurnReader {
    fn start(log: DynamoEventLog, session: String, turn_id: String, pace: Pace) -> Arc<Self> {
        let reader = Arc::new(Self {
            read: watch::Sender::new(Read::default()),
        });
        let weak = Arc::downgrade(&reader);
        tokio::spawn(async move {
            let give_up_at = tokio::time::Instant::now() + pace.start_wait;
            let idle_most = MAX_IDLE_POLL.max(pace.poll);
            let mut pause = None;
            loop {
                if let Some(pause) = pause {
                    tokio::time::sleep(pause).await;
                }
                let Some(reader) = weak.upgrade() else {
                    return;
                };
                let after = reader.read.borrow().events.last().map(|e| e.seq);
                match log.read(&session, &turn_id, after).await {
                    Ok(new) if new.is_empty() && after.is_none() => {
                        if tokio::time::Instant::now() >= give_up_at {
                            reader.read.send_modify(|read| read.not_started = true);
                            return;
                        }
                        // Nothing yet: look less often, up to the idle pace.
                        pause = Some(pause.map_or(pace.poll, |p: Duration| (p * 2).min(idle_most)));
                        continue;
                    }
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
                    Err(e) => {
                        tracing::warn!(error = %ErrorChain(&e), "could not read the event log; trying again")
                    }
                }
                pause = Some(pace.poll);
            }
        });
        reader
    }
}

/// Where a stream resumes from, when no `Last-Event-ID` says.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(super) struct ResumeQuery {
    /// The stream from after this event's position (its SSE `id`), as `Last-Event-ID` says it;
    /// for a client that cannot send that header.
    cursor: Option<u64>,
}

/// Where a stream resumes from: after `Last-Event-ID`, or the query's `cursor`; from the start
/// when neither says. Read before the conversation is looked at, so a bad one changes nothing.
pub(super) struct Resume(Option<u64>);

impl FromRequestParts<ContainerHost> for Resume {
    type Rejection = HostError;

    async fn from_request_parts(parts: &mut Parts, host: &ContainerHost) -> Result<Self, HostError> {
        if let Some(header) = parts.headers.get("last-event-id") {
            return header
                .to_str()
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok())
                .map(|seq| Resume(Some(seq)))
                .ok_or_else(|| {
                    HostError::field("Last-Event-ID", "Last-Event-ID is not an event's position")
                });
        }
        let Params(query) = Params::<ResumeQuery>::from_request_parts(parts, host).await?;
        Ok(Resume(query.cursor))
    }
}

/// A place for one event stream of the request's person ([`stream_place`]), taken before the
/// conversation is looked at: a stream refused for its cap (429, 503) claims no conversation.
pub(super) struct StreamSlot(StreamPlace);

impl FromRequestParts<ContainerHost> for StreamSlot {
    type Rejection = HostError;

    async fn from_request_parts(parts: &mut Parts, host: &ContainerHost) -> Result<Self, HostError> {
        let Asker(person) = Asker::from_request_parts(parts, host).await?;
        stream_place(host, &person).map(StreamSlot)
    }
}

/// `GET /turns/{turnId}/events?session=S…`: the extractors in the order they decide (the turn's
/// id, the stream's place, where it resumes, then the person's conversation, claimed last).
pub(super) async fn turn_events(
    State(host): State<ContainerHost>,
    TurnPath(turn_id): TurnPath,
    StreamSlot(place): StreamSlot,
    Resume(resume): Resume,
    token: Option<Extension<TakenUntil>>,
    conversation: Acting,
) -> Response {
    let followed = follow_turn(&host, place, &conversation.id, &turn_id, resume);
    logged_sse(followed, turn_id, token.map(|Extension(until)| until))
}

/// Whether a request's client takes Server-Sent Events in answer (`Accept: text/event-stream`).
pub(super) fn takes_event_stream(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(axum::http::header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"))
}

/// A followed turn as Server-Sent Events: each logged event under its type with its position as
/// the id (so a client resumes with `Last-Event-ID`), and `stream_ended` for a turn that never
/// started, or when the token the stream was opened with (`token`) ends first.
pub(super) fn logged_sse(
    followed: impl Stream<Item = Followed> + Send + 'static,
    turn_id: TurnId,
    token: Option<TakenUntil>,
) -> Response {
    let ended = move |turn_id: &TurnId, reason: &str| {
        let data = StreamEnded {
            turn_id: turn_id.clone(),
            reason: reason.to_owned(),
        };
        Event::default()
            .event("stream_ended")
            .data(serde_json::to_string(&data).unwrap_or_default())
    };
    let events = until_token_ends(followed, token).map(move |item| {
        Ok::<_, Infallible>(match item {
            Some(Followed::Logged(next)) => Event::default()
                .id(next.seq.to_string())
                .event(next.event.type_name())
                .data(serde_json::to_string(&next.event).unwrap_or_default()),
            Some(Followed::NotStarted) => ended(&turn_id, "not_started"),
            None => ended(&turn_id, "token_expired"),
        })
    });
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

/// `followed`'s items until `token` ends: then `None`, once, and the end.
fn until_token_ends(
    followed: impl Stream<Item = Followed> + Send + 'static,
    token: Option<TakenUntil>,
) -> impl Stream<Item = Option<Followed>> + Send + 'static {
    futures_util::stream::unfold(
        (Box::pin(followed), Box::pin(TakenUntil::ended(token)), false),
        |(mut followed, mut ends, cut)| async move {
            if cut {
                return None;
            }
            let next = tokio::select! {
                () = ends.as_mut() => None,
                item = followed.next() => Some(item),
            };
            match next {
                None => Some((None, (followed, ends, true))),
                Some(Some(item)) => Some((Some(item), (followed, ends, false))),
                Some(None) => None,
            }
        },
    )
}

/// What a followed turn has said so far ([`Heard`], shared with the worker's pushes).
pub(crate) use agent_worker_runtime::heard::Heard;

/// What `followed` says, to its end.
pub(crate) async fn heard_to_end(followed: impl Stream<Item = Followed>) -> Heard {
    let mut heard = Heard::default();
    futures_util::pin_mut!(followed);
    while let Some(item) = followed.next().await {
        match item {
            Followed::Logged(logged) => heard.take(&logged),
            Followed::NotStarted => heard.take_not_started(),
        }
    }
    heard
}

/// What following a turn gives: its logged events, in order, ending after the terminal; or, for
/// a turn that logged nothing within the wait, that it did not start.
#[derive(Debug, Clone)]
pub(super) enum Followed {
    /// The turn's next event.
    Logged(LoggedEvent),
    /// The turn logged nothing within [`ContainerConfig::event_start_wait`](super::ContainerConfig::event_start_wait).
    NotStarted,
}

/// A place for one event stream of `person`'s: one under the host's cap (503 when every place is
/// taken), and under the caps for one person and one account (429); 404 when the host keeps no
/// log. Taken before a turn is started whose answer is streamed.
pub(super) fn stream_place(host: &ContainerHost, person: &Owner) -> Result<StreamPlace, HostError> {
    let log = host
        .event_log()
        .cloned()
        .ok_or_else(|| HostError::not_found("this worker keeps no event log"))?;
    let followers = host.followers();
    let held = followers.hold(person)?;
    let Ok(permit) = followers.streams.clone().try_acquire_owned() else {
        return Err(HostError::unavailable(
            "too many event streams are open; try again",
        ));
    };
    Ok(StreamPlace {
        log,
        _host: permit,
        _holders: held,
    })
}

/// Follows turn `turn_id` of `session` in the host's event log from after position `after`, in
/// `place`, held while the stream lives.
pub(super) fn follow_turn(
    host: &ContainerHost,
    place: StreamPlace,
    session: &SessionId,
    turn_id: &TurnId,
    after: Option<u64>,
) -> impl Stream<Item = Followed> + Send + use<> {
    let pace = Pace {
        poll: host.config().event_poll,
        start_wait: host.config().event_start_wait,
    };
    let reader = host.followers().reader(&place.log, session, turn_id, pace);
    follow(reader, after, place)
}

/// The turn's events after `after`, as its reader reads them, ending after the terminal; at once
/// when the terminal is at or before `after`.
fn follow(
    reader: Arc<TurnReader>,
    after: Option<u64>,
    place: StreamPlace,
) -> impl Stream<Item = Followed> + Send + 'static {
    struct Follow {
        /// Held so that the turn's reader goes on while this stream is open.
        _reader: Arc<TurnReader>,
        seen: watch::Receiver<Read>,
        after: Option<u64>,
        /// The last item (not started) has been given.
        done: bool,
        _place: StreamPlace,
    }
    let seen = reader.read.subscribe();
    let state = Follow {
        _reader: reader,
        seen,
        after,
        done: false,
        _place: place,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        loop {
            if state.done {
                return None;
            }
            let read = state.seen.borrow_and_update().clone();
            let from = state
                .after
                .map_or(0, |a| read.events.partition_point(|e| e.seq <= a));
            if let Some(next) = read.events.get(from) {
                state.after = Some(next.seq);
                return Some((Followed::Logged(next.clone()), state));
            }
            if read.not_started {
                state.done = true;
                return Some((Followed::NotStarted, state));
            }
            // Nothing after the cursor: done if the terminal has been read (it was at or before
            // the cursor), else wait for the reader.
            if read.ended || state.seen.changed().await.is_err() {
                return None;
            }
        }
    })
}

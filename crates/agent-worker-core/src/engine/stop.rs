//! Stopping a turn: the flag a running turn shares, the cheap look for a stop request, the
//! barge-in that stops superseded turns, and the note that tells the next model call where a turn
//! was stopped.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::protocol::ErrorChain;
use crate::session::{
    Blocklist, ContentBlock, Message, Role, SeenSignals, SessionId, SessionStore, Stop, StopCause,
    StopSource, TurnCommand, TurnId, TurnSignals,
};

/// How long the stop question asked before a turn starts ([`ask_source`]) is waited for, beside
/// the claim: past it the turn runs, and its watch asks again.
pub(crate) const FIRST_ASK_WAIT: Duration = Duration::from_secs(1);

/// What a running turn has heard of its stop and its commands, shared between its watcher and
/// its rounds, and when it last read them.
#[derive(Debug, Clone, Default)]
pub(crate) struct StopFlag(Arc<Mutex<Heard>>);

#[derive(Debug, Default)]
struct Heard {
    stop: Option<Stop>,
    commands: Vec<TurnCommand>,
    last_read: Option<Instant>,
    /// Whether the model is streaming a response now.
    streaming: bool,
}

impl StopFlag {
    pub(crate) fn get(&self) -> Option<Stop> {
        self.0.lock().ok().and_then(|heard| heard.stop)
    }

    /// Takes what one read found: its stop, and its commands when they are more than known
    /// (a store only ever adds to them).
    pub(crate) fn heard(&self, signals: TurnSignals) {
        self.heard_at(Instant::now(), signals);
    }

    /// Takes a look at the signals taken `at` (by this turn's reads or by a store's writes),
    /// as [`heard`](Self::heard) does; the last read is the latest look.
    fn heard_at(&self, at: Instant, signals: TurnSignals) {
        if let Ok(mut heard) = self.0.lock() {
            heard.last_read = heard.last_read.max(Some(at));
            if let Some(stop) = signals.stop {
                heard.stop.get_or_insert(stop);
            }
            if signals.commands.len() > heard.commands.len() {
                heard.commands = signals.commands;
            }
        }
    }

    /// Takes a stop heard from elsewhere than the store (a [`StopSource`]): it puts off no
    /// read of the store, which its commands still need.
    fn stop_heard(&self, stop: Stop) {
        if let Ok(mut heard) = self.0.lock() {
            heard.stop.get_or_insert(stop);
        }
    }

    /// The commands heard so far, in the order they were accepted.
    pub(crate) fn commands(&self) -> Vec<TurnCommand> {
        self.0
            .lock()
            .map(|heard| heard.commands.clone())
            .unwrap_or_default()
    }

    fn last_read(&self) -> Option<Instant> {
        self.0.lock().ok().and_then(|heard| heard.last_read)
    }

    /// Marks the model as streaming a response (the watch looks most often then) for as long
    /// as the mark lives, however the step ends.
    pub(crate) fn mark_streaming(&self) -> StreamingMark<'_> {
        self.set_streaming(true);
        StreamingMark(self)
    }

    fn set_streaming(&self, streaming: bool) {
        if let Ok(mut heard) = self.0.lock() {
            heard.streaming = streaming;
        }
    }

    fn streaming(&self) -> bool {
        self.0.lock().is_ok_and(|heard| heard.streaming)
    }
}

/// The model streams while this lives ([`StopFlag::mark_streaming`]).
pub(crate) struct StreamingMark<'a>(&'a StopFlag);

impl Drop for StreamingMark<'_> {
    fn drop(&mut self) {
        self.0.set_streaming(false);
    }
}

/// Reads the turn's stop and commands once, into `flag`. Failing to read never fails or holds
/// a turn: it is logged, and the next read tries again.
pub(crate) async fn read_signals(
    store: &dyn SessionStore,
    session: &SessionId,
    turn_id: &TurnId,
    flag: &StopFlag,
) {
    match store.turn_signals(session, turn_id).await {
        Ok(signals) => flag.heard(signals),
        Err(e) => {
            tracing::warn!(error = %ErrorChain(&e), "could not look for a stop or commands; looking again later")
        }
    }
}

/// The running turn's watch: the store's ([`watch_store`]), and beside it the `source`'s, when
/// there is one ([`watch_source`]). Returns the stop once either heard one.
pub(crate) async fn watch(
    store: &dyn SessionStore,
    source: Option<&dyn StopSource>,
    session: &SessionId,
    turn_id: &TurnId,
    interval: Duration,
    idle: Duration,
    flag: &StopFlag,
) -> Stop {
    let from_store = watch_store(store, session, turn_id, interval, idle, flag);
    let Some(source) = source else {
        return from_store.await;
    };
    tokio::select! {
        stop = from_store => stop,
        stop = watch_source(source, session, turn_id, interval, idle, flag) => stop,
    }
}

/// `watch`, and beside it a look at `blocks` every `apart` for a block on the turn's `account`
/// and `user` (the kill switch): the first stop either hears. A look that fails is logged, and
/// looked again.
pub(crate) async fn or_blocked(
    watch: impl std::future::Future<Output = Stop>,
    blocks: Option<&dyn Blocklist>,
    account: Option<&str>,
    user: Option<&str>,
    apart: Duration,
    flag: &StopFlag,
) -> Stop {
    let Some(blocks) = blocks else {
        return watch.await;
    };
    let looks = async {
        loop {
            tokio::time::sleep(apart).await;
            match blocks.block_on(account, user).await {
                Ok(Some(block)) => {
                    tracing::warn!(target = %block.target.describe(), "the turn's account or person is blocked; it stops");
                    let stop = Stop::now(StopCause::Blocked);
                    flag.stop_heard(stop);
                    return flag.get().unwrap_or(stop);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %ErrorChain(&e), "could not look for a block on the turn; looking again")
                }
            }
        }
    };
    tokio::select! {
        stop = watch => stop,
        stop = looks => stop,
    }
}

/// Asks `source` for the turn's stop once, for at most `wait`: the question asked before the
/// turn starts. A source that cannot be asked, or does not answer in time, is logged, and the
/// turn runs (the watch asks again).
pub(crate) async fn ask_source(
    source: &dyn StopSource,
    session: &SessionId,
    turn_id: &TurnId,
    wait: Duration,
) -> Option<Stop> {
    match tokio::time::timeout(wait, source.stop_for(session, turn_id)).await {
        Ok(Ok(stop)) => stop,
        Ok(Err(e)) => {
            tracing::warn!(error = %ErrorChain(&e), "could not ask for a stop before the turn started; it runs, and asks again");
            None
        }
        Err(_) => {
            tracing::warn!(
                wait_ms = wait.as_millis(),
                "no answer to the stop question before the turn started; it runs, and asks again"
            );
            None
        }
    }
}

/// Asks `source` for the turn's stop `interval` apart while the model streams, the asks growing
/// apart while it does not (doubling up to `idle`), until one is heard. A failed ask is logged
/// (the first at `warn`, the rest at `debug`) and asked again.
async fn watch_source(
    source: &dyn StopSource,
    session: &SessionId,
    turn_id: &TurnId,
    interval: Duration,
    idle: Duration,
    flag: &StopFlag,
) -> Stop {
    let mut apart = interval;
    let mut failed = false;
    loop {
        let wait = if flag.streaming() { interval } else { apart };
        tokio::time::sleep(wait).await;
        match source.stop_for(session, turn_id).await {
            Ok(Some(stop)) => {
                flag.stop_heard(stop);
                return flag.get().unwrap_or(stop);
            }
            Ok(None) => {}
            Err(e) if !failed => {
                failed = true;
                tracing::warn!(error = %ErrorChain(&e), "could not ask for a stop; asking again");
            }
            Err(e) => tracing::debug!(error = %ErrorChain(&e), "could not ask for a stop; asking again"),
        }
        apart = if flag.streaming() {
            interval
        } else {
            (apart * 2).min(idle)
        };
    }
}

/// The store's watch: reads the turn's stop and commands `interval` after the last read while
/// the model streams; while it does not (a long tool call), the reads grow apart, doubling up to
/// `idle`. The rounds read too, at each round boundary, and a read there puts this one off; so
/// does a look the store's writes took for the turn ([`SignalStore::signals_seen`]: the
/// DynamoDB event log looks while it writes the streamed answer, so a streaming turn reads
/// nothing), and a stop such a look saw is taken at once. It wakes at most once an `interval`
/// (a timer, no request) and returns the stop once one is heard.
async fn watch_store(
    store: &dyn SessionStore,
    session: &SessionId,
    turn_id: &TurnId,
    interval: Duration,
    idle: Duration,
    flag: &StopFlag,
) -> Stop {
    let started = Instant::now();
    let mut apart = interval;
    let mut seen = store.signals_seen(session, turn_id, interval);
    loop {
        if let Some(look) = seen.as_mut().and_then(SeenSignals::latest) {
            flag.heard_at(look.at, look.signals);
        }
        if let Some(stop) = flag.get() {
            return stop;
        }
        let last = flag.last_read().unwrap_or(started);
        let wait = if flag.streaming() { interval } else { apart };
        let now = Instant::now();
        if last + wait > now {
            let timer = tokio::time::sleep_until((last + wait).min(now + interval));
            match seen.as_mut() {
                Some(seen) => {
                    tokio::select! {
                        () = timer => {}
                        () = seen.changed() => {}
                    }
                }
                None => timer.await,
            }
            continue;
        }
        read_signals(store, session, turn_id, flag).await;
        apart = if flag.streaming() {
            interval
        } else {
            (apart * 2).min(idle)
        };
        if let Some(stop) = flag.get() {
            return stop;
        }
    }
}

/// Stops the turns `ids` supersede, and waits until each is stored, never started, or given up
/// on (its lease ran out, or `wait` passed).
pub(crate) async fn supersede(
    store: &dyn SessionStore,
    session: &SessionId,
    ids: &[TurnId],
    interval: Duration,
    wait: Duration,
) {
    if ids.is_empty() {
        return;
    }
    for id in ids {
        if let Err(e) = store
            .request_stop(session, id, Stop::now(StopCause::Superseded))
            .await
        {
            tracing::warn!(superseded = %id, error = %ErrorChain(&e), "could not ask a superseded turn to stop");
        }
    }
    let give_up = Instant::now() + wait;
    for id in ids {
        loop {
            match store.turn(session, id).await {
                Ok(None) => break,
                Ok(Some(record)) if record.status.is_done() => break,
                Ok(Some(record)) if record.lease_until <= SystemTime::now() => {
                    tracing::warn!(superseded = %id, "a superseded turn's worker is gone; not waiting for it");
                    break;
                }
                Ok(Some(_)) => {}
                Err(e) => {
                    tracing::warn!(superseded = %id, error = %ErrorChain(&e), "could not read a superseded turn")
                }
            }
            if Instant::now() >= give_up {
                tracing::warn!(superseded = %id, "gave up waiting for a superseded turn to be stored");
                break;
            }
            tokio::time::sleep(interval.min(give_up.saturating_duration_since(Instant::now()))).await;
        }
    }
}

/// What the model is told after the words of a turn that was stopped.
pub(crate) fn note(reason: StopCause) -> &'static str {
    match reason {
        StopCause::UserStop => "[The person stopped this turn here.]",
        StopCause::Superseded => "[This turn was cut short here by the person's next message.]",
        StopCause::Deadline => "[This turn ran out of time and stopped here.]",
        StopCause::Blocked => "[This turn was stopped here: its account or person was blocked.]",
    }
}

/// Marks the turn's last assistant message as stopped; a turn that ends without one gets one
/// whose text is the note.
pub(crate) fn mark(messages: &mut Vec<Message>, stop: Stop) {
    match messages.last_mut() {
        Some(last) if last.role == Role::Assistant => last.stopped = Some(stop),
        _ => {
            let mut message = Message::assistant_text(note(stop.reason));
            message.stopped = Some(stop);
            messages.push(message);
        }
    }
}

/// Adds the stop note to each stopped message, after its text and before its tool calls.
pub(crate) fn with_notes(mut messages: Vec<Message>) -> Vec<Message> {
    for message in messages.iter_mut() {
        let Some(stop) = message.stopped else {
            continue;
        };
        let note = note(stop.reason);
        if message.text().trim_end().ends_with(note) {
            continue;
        }
        let at = message
            .content
            .iter()
            .position(|b| matches!(b, ContentBlock::ToolUse { .. }))
            .unwrap_or(message.content.len());
        message.content.insert(at, ContentBlock::text(note));
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_turn_that_said_nothing_gets_one_marked_line() {
        let mut messages = vec![Message::user_text("hi")];
        mark(&mut messages, Stop::now(StopCause::UserStop));
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[1].text(), note(StopCause::UserStop));
        assert!(messages[1].stopped.is_some());
        // The note is not said twice.
        assert_eq!(with_notes(messages.clone()), messages);
    }

    #[test]
    fn the_note_goes_after_the_text_and_before_the_calls() {
        let mut messages = vec![
            Message::user_text("hi"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text("Looking"),
                    ContentBlock::ToolUse {
                        id: "t".into(),
                        name: "x".into(),
                        input: json!({}),
                    },
                ],
            ),
        ];
        mark(&mut messages, Stop::now(StopCause::Superseded));
        let noted = with_notes(messages);
        assert_eq!(
            noted[1].content[1],
            ContentBlock::text(note(StopCause::Superseded))
        );
        assert!(matches!(noted[1].content[2], ContentBlock::ToolUse { .. }));
    }
}

//! The commands a running turn takes (see [`TurnCommand`]): steering at each round boundary,
//! follow-ups when it is otherwise done, one at a time. Each is given to the model as the
//! person's words, once, in the order the store accepted them, and said to the caller with a
//! `command_delivered` event.

use crate::engine::EngineInner;
use crate::engine::events::EngineEvent;
use crate::engine::stop::{self, StopFlag};
use crate::engine::turn_stream::Emitter;
use crate::session::{ContentBlock, Message, Role, TurnCommand};
use crate::session::{SessionId, TurnId};

use super::state::TurnState;

/// At a round boundary (the step's calls have their results, the next model call is next): reads
/// the turn's stop and commands (the read that also serves the stop watch, which it puts off),
/// and adds the steering not yet given to the results the next call carries.
pub(super) async fn steer_at_boundary(
    engine: &EngineInner,
    session: &SessionId,
    turn_id: &TurnId,
    turn: &mut TurnState,
    out: &Emitter,
    flag: &StopFlag,
) {
    stop::read_signals(engine.store.as_ref(), session, turn_id, flag).await;
    let heard = flag.commands();
    let steering: Vec<usize> = pending(turn, &heard)
        .filter(|&i| matches!(heard[i], TurnCommand::Steer { .. }))
        .collect();
    if steering.is_empty() {
        return;
    }
    let words: Vec<ContentBlock> = steering
        .iter()
        .map(|&i| ContentBlock::text(heard[i].text()))
        .collect();
    match turn.messages.last_mut() {
        Some(last) if last.role == Role::User => last.content.extend(words),
        _ => turn.messages.push(Message::new(Role::User, words)),
    }
    for position in steering {
        delivered(turn, out, &heard[position], position);
    }
}

/// When the model has ended its answer: the next commands not yet given, as the person's next
/// message (the steering that came too late for a boundary, all of it; else the first
/// follow-up). Whether there was one, so that the turn goes on.
pub(super) fn deliver_next(turn: &mut TurnState, out: &Emitter, flag: &StopFlag) -> bool {
    let heard = flag.commands();
    let Some(first) = pending(turn, &heard).next() else {
        return false;
    };
    let positions: Vec<usize> = match heard[first] {
        TurnCommand::Steer { .. } => pending(turn, &heard)
            .filter(|&i| matches!(heard[i], TurnCommand::Steer { .. }))
            .collect(),
        TurnCommand::FollowUp { .. } => vec![first],
    };
    let words = positions
        .iter()
        .map(|&i| ContentBlock::text(heard[i].text()))
        .collect();
    turn.messages.push(Message::new(Role::User, words));
    for position in positions {
        delivered(turn, out, &heard[position], position);
    }
    true
}

/// How many of the turn's commands it has taken, counting from the first, with none missing:
/// what it says it has seen when it completes.
pub(super) fn seen(turn: &TurnState) -> usize {
    (0..).take_while(|i| turn.delivered.contains(i)).count()
}

/// The places of the commands heard and not yet given, in order.
fn pending<'a>(turn: &'a TurnState, heard: &'a [TurnCommand]) -> impl Iterator<Item = usize> + 'a {
    (0..heard.len()).filter(|i| !turn.delivered.contains(i))
}

fn delivered(turn: &mut TurnState, out: &Emitter, command: &TurnCommand, position: usize) {
    tracing::info!(kind = command.kind(), position, "a command reached the turn");
    turn.delivered.insert(position);
    out.emit(
        EngineEvent::CommandDelivered {
            kind: command.kind().to_owned(),
            position,
            text: command.text().to_owned(),
        }
        .into(),
    );
}

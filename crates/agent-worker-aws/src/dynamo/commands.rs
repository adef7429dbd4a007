//! Commands for a running turn, on its turn item (`commands`, a list in the order accepted):
//! added by one conditional write while the turn runs unstopped, read with its stop in the one
//! read the turn makes for both, and counted by the commit's condition (see
//! [`TurnCommand`]).

use std::collections::HashMap;
use std::time::Duration;

use agent_worker_core::clock::now_ms;
use agent_worker_core::session::{
    CommandOutcome, MAX_QUEUED_COMMAND_BYTES, SeenSignals, SessionId, SignalStore, SignalsSeen, Stop,
    StopOutcome, StoreError, TurnCommand, TurnId, TurnSignals, command_fits,
};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use tokio::time::Instant;

use super::DynamoStore;
use super::codec::{decode_stop, get_n, get_s, n, s};
use super::keys::{ACTIVE_TURN, COMMAND_BYTES, COMMANDS, ENDED_TURN, EXPIRES_AT, META_SK, turn_sk};
use super::sdk_error::{is_conditional_failure, past_transactions, store_error};
use agent_worker_core::protocol::ErrorChain;

fn encode(command: &TurnCommand) -> AttributeValue {
    AttributeValue::M(HashMap::from([
        ("kind".to_owned(), s(command.kind())),
        ("text".to_owned(), s(command.text())),
    ]))
}

fn decode(value: &AttributeValue) -> Option<TurnCommand> {
    let map = value.as_m().ok()?;
    let text = get_s(map, "text")?.to_owned();
    match get_s(map, "kind")? {
        "steer" => Some(TurnCommand::Steer { text }),
        "follow_up" => Some(TurnCommand::FollowUp { text }),
        _ => None,
    }
}

fn commands_of(item: &HashMap<String, AttributeValue>) -> Result<Vec<TurnCommand>, StoreError> {
    let Some(list) = item.get(COMMANDS) else {
        return Ok(Vec::new());
    };
    let list = list
        .as_l()
        .map_err(|_| StoreError::Corrupt("a turn's commands are not a list".into()))?;
    list.iter()
        .map(|value| {
            decode(value).ok_or_else(|| StoreError::Corrupt("a turn's command cannot be read".into()))
        })
        .collect()
}

/// A look at a turn's signals that rides on a write for it.
pub(super) struct SignalsLook {
    /// When it was taken.
    pub(super) at: Instant,
    /// The condition on the turn's item, an item of the write's transaction.
    pub(super) check: TransactWriteItem,
}

/// How a look at a turn's signals came out.
pub(super) enum Look<'a> {
    /// Its condition held: no stop, no command beyond those known.
    Held,
    /// It did not: the turn's item as the answer carried it, if it did.
    Failed(Option<&'a HashMap<String, AttributeValue>>),
}

fn signals_of(item: &HashMap<String, AttributeValue>) -> Result<TurnSignals, StoreError> {
    Ok(TurnSignals {
        stop: decode_stop(item),
        commands: commands_of(item)?,
    })
}

impl DynamoStore {
    /// Adds `command` after the turn's others, while it runs (under a live lease: a turn that
    /// gave up its claim, or whose worker is gone, takes nothing) and no stop was asked of it.
    pub(super) async fn add_turn_command(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        command: &TurnCommand,
    ) -> Result<CommandOutcome, StoreError> {
        let size = command.text().len();
        // The condition keeps the turn's commands within their budget: a command that would pass
        // it is refused before it is written (the item could not hold it).
        let room = MAX_QUEUED_COMMAND_BYTES.saturating_sub(size);
        let request = self
            .update_turn(session, turn_id)
            .update_expression(
                "SET #cmds = list_append(if_not_exists(#cmds, :none), :one), \
                 #bytes = if_not_exists(#bytes, :zero) + :size, #exp = :exp",
            )
            .condition_expression(
                "#status = :running AND leaseUntil > :now AND attribute_not_exists(stopReason) \
                 AND (attribute_not_exists(#bytes) OR #bytes <= :room)",
            )
            .expression_attribute_names("#cmds", COMMANDS)
            .expression_attribute_names("#bytes", COMMAND_BYTES)
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":size", n(size as u64))
            .expression_attribute_values(":room", n(room as u64))
            .expression_attribute_names("#exp", EXPIRES_AT)
            .expression_attribute_values(":none", AttributeValue::L(Vec::new()))
            .expression_attribute_values(":one", AttributeValue::L(vec![encode(command)]))
            .expression_attribute_values(":running", s("running"))
            .expression_attribute_values(":now", n(now_ms()))
            .expression_attribute_values(":exp", n(self.expires_at()))
            .return_values(ReturnValue::UpdatedNew);
        let result = past_transactions(|| request.clone().send()).await;
        match result {
            Ok(out) => {
                let count = out
                    .attributes()
                    .and_then(|a| a.get(COMMANDS))
                    .and_then(|l| l.as_l().ok())
                    .map_or(1, Vec::len);
                Ok(CommandOutcome::Accepted {
                    position: count.saturating_sub(1),
                })
            }
            Err(e) if is_conditional_failure(&e) => self.why_not_added(session, turn_id, size).await,
            Err(e) => Err(store_error("adding a command for the turn", e)),
        }
    }

    /// Why a command of `size` bytes was refused: the turn's commands are full, or it is not
    /// running. One read, made only after a refusal.
    async fn why_not_added(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        size: usize,
    ) -> Result<CommandOutcome, StoreError> {
        let out = self
            .get_turn(session, turn_id)
            .projection_expression("#bytes")
            .expression_attribute_names("#bytes", COMMAND_BYTES)
            .send()
            .await
            .map_err(|e| store_error("reading why a command was refused", e))?;
        let held = out
            .item()
            .and_then(|item| get_n(item, COMMAND_BYTES))
            .and_then(|bytes| usize::try_from(bytes).ok())
            .unwrap_or_default();
        Ok(if command_fits(held, size) {
            CommandOutcome::NotRunning
        } else {
            CommandOutcome::Full
        })
    }

    /// The turn's stop and commands: one consistent read. What it saw goes on the turn's board
    /// too, so that the event log's looks know the commands heard so far.
    pub(super) async fn read_signals(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<TurnSignals, StoreError> {
        let at = Instant::now();
        let out = self
            .get_turn(session, turn_id)
            .projection_expression("stopReason, stopAt, #cmds")
            .expression_attribute_names("#cmds", COMMANDS)
            .send()
            .await
            .map_err(|e| store_error("looking for a stop or commands", e))?;
        let signals = match out.item() {
            Some(item) => signals_of(item)?,
            None => TurnSignals::default(),
        };
        self.signals.saw(
            session,
            turn_id,
            SignalsSeen {
                at,
                signals: signals.clone(),
            },
        );
        Ok(signals)
    }

    /// The look a write for `turn_id`, whose next write may come `until_next` after it, takes
    /// at its signals when its watch would read before then ([`SignalBoards::look_due`]): a
    /// condition on the turn's item, in the write's transaction, that holds while no stop was
    /// asked and no command came beyond those known. `None`: no look is due.
    ///
    /// [`SignalBoards::look_due`]: agent_worker_core::session::SignalBoards::look_due
    pub(super) fn signals_look(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        until_next: Duration,
    ) -> Option<SignalsLook> {
        let known = self.signals.look_due(session, turn_id, until_next)?;
        let check = ConditionCheck::builder()
            .table_name(self.table())
            .set_key(Some(self.key(session, turn_sk(turn_id))))
            .condition_expression(
                "attribute_not_exists(stopReason) AND (attribute_not_exists(#cmds) OR size(#cmds) <= :known)",
            )
            .expression_attribute_names("#cmds", COMMANDS)
            .expression_attribute_values(":known", n(u64::try_from(known).unwrap_or(u64::MAX)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .ok()?;
        Some(SignalsLook {
            at: Instant::now(),
            check: TransactWriteItem::builder().condition_check(check).build(),
        })
    }

    /// Puts what a look saw on the turn's board: nothing new when its condition held; when it
    /// failed, what the turn's item held then (or, where the answer did not carry the item,
    /// what a read finds now).
    pub(super) async fn looked(&self, session: &SessionId, turn_id: &TurnId, at: Instant, look: Look<'_>) {
        match look {
            Look::Held => self.signals.saw_unchanged(session, turn_id, at),
            Look::Failed(Some(item)) => match signals_of(item) {
                Ok(signals) => self.signals.saw(session, turn_id, SignalsSeen { at, signals }),
                Err(e) => tracing::warn!(error = %ErrorChain(&e), "a turn's signals cannot be read"),
            },
            Look::Failed(None) => {
                if let Err(e) = self.read_signals(session, turn_id).await {
                    tracing::warn!(error = %ErrorChain(&e), "could not read a turn's signals after a write saw them change");
                }
            }
        }
    }

    /// The running turn of `session`, from its meta item: the latest to start, when it is not
    /// the latest to end.
    pub(super) async fn read_active_turn(&self, session: &SessionId) -> Result<Option<TurnId>, StoreError> {
        let out = self
            .client()
            .get_item()
            .table_name(self.table())
            .set_key(Some(self.key(session, META_SK.to_owned())))
            .projection_expression("#active, #ended")
            .expression_attribute_names("#active", ACTIVE_TURN)
            .expression_attribute_names("#ended", ENDED_TURN)
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("reading the session's running turn", e))?;
        Ok(out.item().and_then(|item| {
            let active = get_s(item, ACTIVE_TURN)?;
            (Some(active) != get_s(item, ENDED_TURN))
                .then(|| TurnId::new(active).ok())
                .flatten()
        }))
    }
}

#[async_trait]
impl SignalStore for DynamoStore {
    async fn add_command(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        command: &TurnCommand,
    ) -> Result<CommandOutcome, StoreError> {
        self.add_turn_command(session, turn_id, command).await
    }

    async fn turn_signals(&self, session: &SessionId, turn_id: &TurnId) -> Result<TurnSignals, StoreError> {
        self.read_signals(session, turn_id).await
    }

    fn signals_seen(&self, session: &SessionId, turn_id: &TurnId, interval: Duration) -> Option<SeenSignals> {
        self.signals.subscribe(session, turn_id, interval)
    }

    async fn request_stop(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        stop: Stop,
    ) -> Result<StopOutcome, StoreError> {
        let reason = serde_json::to_value(stop.reason)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let request = self.update_turn(session, turn_id)
            .update_expression("SET stopReason = if_not_exists(stopReason, :reason), stopAt = if_not_exists(stopAt, :at), #exp = if_not_exists(#exp, :exp)")
            .condition_expression("attribute_not_exists(#status) OR #status = :running")
            .expression_attribute_names("#exp", EXPIRES_AT)
            .expression_attribute_values(":reason", s(reason))
            .expression_attribute_values(":at", n(stop.at))
            .expression_attribute_values(":running", s("running"))
            .expression_attribute_values(":exp", n(self.expires_at()));
        let result = past_transactions(|| request.clone().send()).await;
        match result {
            Ok(_) => Ok(StopOutcome::Recorded),
            Err(e) if is_conditional_failure(&e) => Ok(StopOutcome::AlreadyEnded),
            Err(e) => Err(store_error("asking the turn to stop", e)),
        }
    }

    async fn stop_requested(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
    ) -> Result<Option<Stop>, StoreError> {
        let out = self
            .get_turn(session, turn_id)
            .projection_expression("stopReason, stopAt")
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("looking for a stop", e))?;
        Ok(out.item().and_then(decode_stop))
    }
}

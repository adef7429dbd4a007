//! A turn's commit: its messages, the session's version bump and the turn's end, in one
//! transaction when they fit (the rest written before it, under the version check), tried again
//! at a moved version; a turn that ran to its own end commits only while no command it has not
//! seen waits for it. A turn that said what it says last has its event log's end (the events the
//! log holds unwritten, and that terminal) written in the same transaction
//! ([`LogTails`](super::log_tail::LogTails)): the log then has nothing left to write.

use agent_worker_core::Failure;
use agent_worker_core::clock::now_ms;
use agent_worker_core::session::conversations::{preview_of, title_of};
use agent_worker_core::session::history::check;
use agent_worker_core::session::{Message, SessionId, StoreError, TurnId, TurnOutcome, TurnStatus};
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{ConditionCheck, Put, TransactWriteItem, Update};

use super::DynamoStore;
use super::codec::{n, s, status_name, write_token};
use super::event_items::event_item;
use super::keys::{
    COMMANDS, ENDED_TURN, EXPIRES_AT, LAST_ACTIVE_AT, META_SK, RUN_TURN, RUN_UNTIL, WRITE_TOKEN, turn_sk,
};
use super::log_tail::Rider;
use super::sdk_error::{build_error, cancellation_reasons, is_condition_reason, store_error};
use super::store::{TAIL_BYTES, VERSION_RETRIES};
use super::transact::{MAX_TRANSACTION_ITEMS, item_size, plan};

/// The most of a turn's log a commit writes with it; a larger end the log writes itself.
const MAX_LOG_BYTES: usize = 1024 * 1024;

/// How one try of a commit went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// It landed.
    Stored,
    /// The session's version moved: try again at the new one.
    VersionMoved,
    /// Only the log's first position was taken (an earlier run of the turn logged there): try
    /// again without the log, which finds its place itself.
    LogRefused,
}

/// What one commit stores: a turn's messages and its end.
#[derive(Debug, Clone, Copy)]
struct Commit<'a> {
    session: &'a SessionId,
    turn_id: &'a TurnId,
    messages: &'a [Message],
    outcome: &'a TurnOutcome,
    /// The commands the turn has seen, when it ran to its own end.
    seen: Option<usize>,
}

impl DynamoStore {
    /// Stores a turn's end, trying again at a moved version; with `seen`, only while no more
    /// commands than that wait for it.
    pub(super) async fn complete(
        &self,
        session: &SessionId,
        turn_id: &TurnId,
        messages: &[Message],
        outcome: &TurnOutcome,
        seen: Option<usize>,
    ) -> Result<(), StoreError> {
        check(messages)?;
        let commit = Commit {
            session,
            turn_id,
            messages,
            outcome,
            seen,
        };
        // What the turn says last holds for this commit alone, landed or not.
        let mut ending = self.log_tails.take_ending(session, turn_id);
        // The version the turn read with its claim is the first guess; a moved one is read.
        let mut guess = self.versions.take(session, turn_id);
        for _ in 0..VERSION_RETRIES {
            let version = match guess.take() {
                Some(version) => version,
                None => self.version(session).await?,
            };
            let rider = ending
                .as_ref()
                .and_then(|ending| self.log_tails.rider(session, turn_id, ending));
            match self.try_complete(commit, version, rider).await? {
                Attempt::Stored => {
                    self.journals.forget(session, turn_id);
                    return Ok(());
                }
                Attempt::LogRefused => {
                    ending = None;
                    guess = Some(version);
                }
                Attempt::VersionMoved => {
                    tracing::info!("the session's version moved while storing; storing again at the new one");
                }
            }
        }
        Err(StoreError::Backend(
format!(
            "the session's history kept changing; turn {turn_id} was not stored after {VERSION_RETRIES} tries"
        )
.into()))
    }

    async fn try_complete(
        &self,
        commit: Commit<'_>,
        version: u64,
        rider: Option<Rider>,
    ) -> Result<Attempt, StoreError> {
        let Commit {
            session,
            turn_id,
            messages,
            outcome,
            seen,
        } = commit;
        let token = write_token();
        let log = rider.and_then(|rider| {
            let (writes, bytes) = self.log_writes(session, turn_id, &rider, &token)?;
            Some((rider, writes, bytes))
        });
        let (log_items, log_bytes) = log
            .as_ref()
            .map_or((0, 0), |(_, writes, bytes)| (writes.len(), *bytes));
        let (puts, sizes): (Vec<TransactWriteItem>, Vec<usize>) = messages
            .iter()
            .enumerate()
            .map(|(i, m)| self.message_put(session, turn_id, version + i as u64, m))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();

        // Messages beyond what the last transaction holds (by count and by bytes) are written
        // first, past the version, where no reader looks until the version moves. Each chunk
        // checks that the version is still ours, so it can only overwrite leftovers of an
        // earlier failed write.
        let (earlier, last) = plan(&sizes, 2 + log_items, TAIL_BYTES + log_bytes);
        for range in earlier {
            let chunk = &puts[range];
            let (condition, names, values) = self.version_condition(version);
            let check = ConditionCheck::builder()
                .table_name(&self.config.table)
                .set_key(Some(self.key(session, META_SK.to_owned())))
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values))
                .build()
                .map_err(build_error)?;
            let mut items = vec![TransactWriteItem::builder().condition_check(check).build()];
            items.extend_from_slice(chunk);
            match self
                .client
                .transact_write_items()
                .set_transact_items(Some(items))
                .send()
                .await
            {
                Ok(_) => {}
                Err(error) if error.code() == Some("TransactionCanceledException") => {
                    return Ok(Attempt::VersionMoved);
                }
                Err(error) => return Err(store_error("writing the turn's messages", error)),
            }
        }

        let expires = n(self.expires_at());
        let new_version = version + messages.len() as u64;
        let (condition, mut names, mut values) = self.version_condition(version);
        names.insert("#exp".into(), EXPIRES_AT.into());
        values.insert(":new".into(), n(new_version));
        values.insert(":exp".into(), expires.clone());
        // What the person's list shows of the conversation, kept beside the version.
        let mut bump_expression =
            String::from("SET #version = :new, #exp = :exp, #last = :now, #ended = :turn");
        names.insert("#last".into(), LAST_ACTIVE_AT.into());
        names.insert("#ended".into(), ENDED_TURN.into());
        values.insert(":now".into(), n(now_ms()));
        values.insert(":turn".into(), s(turn_id.as_str()));
        if let Some(title) = title_of(messages) {
            bump_expression.push_str(", title = if_not_exists(title, :title)");
            values.insert(":title".into(), s(title));
        }
        if let Some(preview) = preview_of(messages) {
            bump_expression.push_str(", preview = :preview");
            values.insert(":preview".into(), s(preview));
        }
        bump_expression.push_str(" ADD turns :one");
        values.insert(":one".into(), n(1));
        // The conversation's run is given back with the turn's end.
        bump_expression.push_str(" REMOVE #run, #until");
        names.insert("#run".into(), RUN_TURN.into());
        names.insert("#until".into(), RUN_UNTIL.into());
        let bump = Update::builder()
            .table_name(&self.config.table)
            .set_key(Some(self.key(session, META_SK.to_owned())))
            .update_expression(bump_expression)
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(build_error)?;
        let terminal = serde_json::to_string(outcome)
            .map_err(|e| StoreError::Corrupt(Failure::caused_by("the turn's outcome does not encode", e)))?;
        let finish = Update::builder()
            .table_name(&self.config.table)
            .set_key(Some(self.key(session, turn_sk(turn_id))))
            .update_expression("SET #status = :done, outcome = :outcome, #exp = :exp, #token = :token")
            // A turn that ran to its own end completes only when no command waits for it.
            .condition_expression(match seen {
                Some(_) => "#status = :running AND (attribute_not_exists(#cmds) OR size(#cmds) <= :seen)",
                None => "#status = :running",
            })
            .set_expression_attribute_names(
                seen.map(|_| std::collections::HashMap::from([("#cmds".to_owned(), COMMANDS.to_owned())])),
            )
            .set_expression_attribute_values(
                seen.map(|seen| std::collections::HashMap::from([(":seen".to_owned(), n(seen as u64))])),
            )
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#exp", EXPIRES_AT)
            .expression_attribute_names("#token", WRITE_TOKEN)
            .expression_attribute_values(":token", s(&token))
            .expression_attribute_values(":done", s(status_name(outcome.status())))
            .expression_attribute_values(":running", s("running"))
            .expression_attribute_values(":outcome", s(terminal))
            .expression_attribute_values(":exp", expires)
            .build()
            .map_err(build_error)?;
        let mut items = puts[last].to_vec();
        items.push(TransactWriteItem::builder().update(bump).build());
        items.push(TransactWriteItem::builder().update(finish).build());
        let log_from = items.len();
        let rider = log.map(|(rider, writes, _)| {
            items.extend(writes);
            rider
        });
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            // DynamoDB answers a retry of a transaction that landed with success (for ten
            // minutes); the token on the item covers a store that does not.
            .client_request_token(&token)
            .send()
            .await
        {
            Ok(_) => {
                if let Some(rider) = rider {
                    rider.landed();
                }
                Ok(Attempt::Stored)
            }
            Err(error) if error.code() == Some("TransactionCanceledException") => {
                let log_refused = rider.is_some()
                    && cancellation_reasons(&error)
                        .iter()
                        .skip(log_from)
                        .any(|reason| is_condition_reason(Some(reason)));
                // Which condition failed? If this very write landed and only its answer was
                // lost (the SDK's retry then finds the turn ended), it is stored. If the turn is
                // no longer ours, give up; if only the log's place or the version moved, the
                // caller tries again without the log or at the new version.
                match self.read_turn_with_token(session, turn_id).await? {
                    Some((_, Some(landed))) if landed == token => {
                        tracing::info!("the commit landed and its answer was lost; it is stored");
                        if let Some(rider) = rider {
                            rider.landed();
                        }
                        Ok(Attempt::Stored)
                    }
                    Some((record, _)) if record.status == TurnStatus::Running && log_refused => {
                        Ok(Attempt::LogRefused)
                    }
                    Some((record, _)) if record.status == TurnStatus::Running => match seen {
                        Some(seen) => {
                            let sent = self.read_signals(session, turn_id).await?.commands.len();
                            if sent > seen {
                                Err(StoreError::CommandsPending(sent))
                            } else {
                                Ok(Attempt::VersionMoved)
                            }
                        }
                        None => Ok(Attempt::VersionMoved),
                    },
                    _ => Err(StoreError::LostLease(format!(
                        "turn {turn_id} was ended by another worker"
                    ))),
                }
            }
            Err(error) => Err(store_error("completing the turn", error)),
        }
    }

    /// The writes of `rider`'s events at their positions, and their size: `None` where they do
    /// not fit a commit's transaction beside its own writes, and the log writes them itself.
    fn log_writes(
        &self,
        session: &str,
        turn_id: &str,
        rider: &Rider,
        token: &str,
    ) -> Option<(Vec<TransactWriteItem>, usize)> {
        if rider.events.len() + 2 >= MAX_TRANSACTION_ITEMS {
            return None;
        }
        let mut bytes = 0;
        let mut writes = Vec::with_capacity(rider.events.len());
        for (i, (event, seq)) in rider.events.iter().zip(rider.seq..).enumerate() {
            let item = event_item(self, session, turn_id, event, seq, token).ok()?;
            bytes += item_size(&item);
            let put = Put::builder().table_name(&self.config.table).set_item(Some(item));
            // A first write takes the log's first position only while it is free.
            let put = if rider.first && i == 0 {
                put.condition_expression("attribute_not_exists(sk)")
            } else {
                put
            };
            writes.push(TransactWriteItem::builder().put(put.build().ok()?).build());
        }
        (bytes <= MAX_LOG_BYTES).then_some((writes, bytes))
    }
}

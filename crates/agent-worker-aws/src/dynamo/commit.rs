//! A turn's commit: its messages, the session's version bump and the turn's end, in one
//! transaction when they fit (the rest written before it, under the version check), tried again
//! at a moved version; a turn that ran to its own end commits only while no command it has not
//! seen waits for it.

use agent_worker_core::Failure;
use agent_worker_core::clock::now_ms;
use agent_worker_core::session::conversations::{preview_of, title_of};
use agent_worker_core::session::history::check;
use agent_worker_core::session::{Message, StoreError, TurnOutcome, TurnStatus};
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{ConditionCheck, TransactWriteItem, Update};

use super::DynamoStore;
use super::codec::{n, s, status_name, write_token};
use super::keys::{
    COMMANDS, ENDED_TURN, EXPIRES_AT, LAST_ACTIVE_AT, META_SK, RUN_TURN, RUN_UNTIL, WRITE_TOKEN, turn_sk,
};
use super::sdk_error::store_error;
use super::store::{TAIL_BYTES, VERSION_RETRIES};
use super::transact::plan;

impl DynamoStore {
    /// Stores a turn's end, trying again at a moved version; with `seen`, only while no more
    /// commands than that wait for it.
    pub(super) async fn complete(
        &self,
        session: &str,
        turn_id: &str,
        messages: &[Message],
        outcome: &TurnOutcome,
        seen: Option<usize>,
    ) -> Result<(), StoreError> {
        check(messages)?;
        // The version the turn read with its claim is the first guess; a moved one is read.
        let mut guess = self.versions.take(session, turn_id);
        for _ in 0..VERSION_RETRIES {
            let version = match guess.take() {
                Some(version) => version,
                None => self.version(session).await?,
            };
            if self
                .try_complete(session, turn_id, version, messages, outcome, seen)
                .await?
            {
                return Ok(());
            }
            tracing::info!("the session's version moved while storing; storing again at the new one");
        }
        Err(StoreError::Backend(
format!(
            "the session's history kept changing; turn {turn_id} was not stored after {VERSION_RETRIES} tries"
        )
.into()))
    }

    async fn try_complete(
        &self,
        session: &str,
        turn_id: &str,
        version: u64,
        messages: &[Message],
        outcome: &TurnOutcome,
        seen: Option<usize>,
    ) -> Result<bool, StoreError> {
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
        let (earlier, last) = plan(&sizes, 2, TAIL_BYTES);
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
                .map_err(|e| StoreError::Backend(Failure::caused_by(e.to_string(), e)))?;
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
                Err(error) if error.code() == Some("TransactionCanceledException") => return Ok(false),
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
        values.insert(":turn".into(), s(turn_id));
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
            .map_err(|e| StoreError::Backend(Failure::caused_by(e.to_string(), e)))?;
        let terminal = serde_json::to_string(outcome)
            .map_err(|e| StoreError::Corrupt(Failure::caused_by(e.to_string(), e)))?;
        let token = write_token();
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
            .expression_attribute_values(":done", s(status_name(outcome.status)))
            .expression_attribute_values(":running", s("running"))
            .expression_attribute_values(":outcome", s(terminal))
            .expression_attribute_values(":exp", expires)
            .build()
            .map_err(|e| StoreError::Backend(Failure::caused_by(e.to_string(), e)))?;
        let mut items = puts[last].to_vec();
        items.push(TransactWriteItem::builder().update(bump).build());
        items.push(TransactWriteItem::builder().update(finish).build());
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
            Ok(_) => Ok(true),
            Err(error) if error.code() == Some("TransactionCanceledException") => {
                // Which condition failed? If this very write landed and only its answer was
                // lost (the SDK's retry then finds the turn ended), it is stored. If the turn is
                // no longer ours, give up; if only the version moved, the caller tries again at
                // the new version.
                match self.read_turn_with_token(session, turn_id).await? {
                    Some((_, Some(landed))) if landed == token => {
                        tracing::info!("the commit landed and its answer was lost; it is stored");
                        Ok(true)
                    }
                    Some((record, _)) if record.status == TurnStatus::Running => match seen {
                        Some(seen) => {
                            let sent = self.read_signals(session, turn_id).await?.commands.len();
                            if sent > seen {
                                Err(StoreError::CommandsPending(sent))
                            } else {
                                Ok(false)
                            }
                        }
                        None => Ok(false),
                    },
                    _ => Err(StoreError::LostLease(format!(
                        "turn {turn_id} was ended by another worker"
                    ))),
                }
            }
            Err(error) => Err(store_error("completing the turn", error)),
        }
    }
}

//! A conversation's run, on its meta item (`runTurn`, `runUntil`): at most one turn of a
//! conversation runs at a time, on every host. A turn takes the run with its claim (in the same
//! write as the owner check when it has a person, see [`owner::claim_reading`](super::owner)),
//! its commit gives it back in the same transaction, and a release or a turn that will not run
//! after all gives it back with one conditional write. A run whose lease ran out is anyone's.

use agent_worker_core::clock::now_ms;
use agent_worker_core::session::{OwnerCheck, StoreError, TurnId};
use aws_sdk_dynamodb::types::ReturnValue;

use super::DynamoStore;
use super::codec::{get_n, get_s, n, s};
use super::keys::{EXPIRES_AT, META_SK, RUN_TURN, RUN_UNTIL, WRITE_TOKEN};
use super::owner::{META_TRIES, MetaAnswer, RUN_IS_FREE, changing, read_meta, refusal};
use super::sdk_error::{is_conditional_failure, store_error};

impl DynamoStore {
    /// Takes `session`'s run for `turn_id` until `until` (milliseconds), for a turn of no person:
    /// one conditional write, answering with the meta item as it was; one read to say who holds
    /// it when it is refused.
    pub(super) async fn take_run(
        &self,
        session: &str,
        turn_id: &str,
        until: u64,
    ) -> Result<MetaAnswer, StoreError> {
        let request = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(self.key(session, META_SK.to_owned())))
            .update_expression("SET #run = :turn, #until = :until, #exp = if_not_exists(#exp, :exp)")
            .condition_expression(RUN_IS_FREE)
            .expression_attribute_names("#run", RUN_TURN)
            .expression_attribute_names("#until", RUN_UNTIL)
            .expression_attribute_names("#exp", EXPIRES_AT)
            .expression_attribute_values(":turn", s(turn_id))
            .expression_attribute_values(":until", n(until))
            .expression_attribute_values(":now", n(now_ms()))
            .expression_attribute_values(":exp", n(self.expires_at()))
            .return_values(ReturnValue::AllOld);
        for _ in 0..META_TRIES {
            match request.clone().send().await {
                Ok(out) => return Ok(MetaAnswer::Written(OwnerCheck::Same, out.attributes)),
                Err(e) if is_conditional_failure(&e) => {
                    if let Some(busy) = refusal(read_meta(self, session).await?, None, turn_id) {
                        return Ok(busy);
                    }
                    // Given back in between: take it again.
                }
                Err(e) => return Err(store_error("taking the conversation's run", e)),
            }
        }
        Err(changing(session))
    }

    /// Gives `session`'s run back if `turn_id` holds it: one conditional write.
    pub(super) async fn give_back_run(&self, session: &str, turn_id: &str) -> Result<(), StoreError> {
        let given = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .set_key(Some(self.key(session, META_SK.to_owned())))
            .update_expression("REMOVE #run, #until")
            .condition_expression("#run = :turn")
            .expression_attribute_names("#run", RUN_TURN)
            .expression_attribute_names("#until", RUN_UNTIL)
            .expression_attribute_values(":turn", s(turn_id))
            .send()
            .await;
        match given {
            Ok(_) => Ok(()),
            Err(e) if is_conditional_failure(&e) => Ok(()),
            Err(e) => Err(store_error("giving the conversation's run back", e)),
        }
    }

    /// Gives up this worker's lease of running turn `turn_id` (its lease set to 0, for the next
    /// delivery to claim it at once): one conditional write, on this worker's claim when the
    /// process knows its token. Says whether it was given up (not: the turn had ended, or another
    /// worker's claim holds it).
    pub(super) async fn give_up_lease(&self, session: &str, turn_id: &str) -> Result<bool, StoreError> {
        self.versions.forget(session, turn_id);
        let token = self.journals.forget(session, turn_id);
        let mut update = self
            .update_turn(session, turn_id)
            .update_expression("SET leaseUntil = :zero")
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":running", s("running"));
        update = match token {
            Some(token) => update
                .condition_expression("#status = :running AND #token = :token")
                .expression_attribute_names("#token", WRITE_TOKEN)
                .expression_attribute_values(":token", s(token)),
            None => update.condition_expression("#status = :running"),
        };
        match update.send().await {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(store_error("releasing the turn", e)),
        }
    }

    /// The turn holding `session`'s run under a live lease: one consistent read.
    pub(super) async fn run_holder(&self, session: &str) -> Result<Option<TurnId>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .set_key(Some(self.key(session, META_SK.to_owned())))
            .projection_expression("#run, #until")
            .expression_attribute_names("#run", RUN_TURN)
            .expression_attribute_names("#until", RUN_UNTIL)
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("reading the conversation's run", e))?;
        let now = now_ms();
        Ok(out.item().and_then(|item| {
            let live = get_n(item, RUN_UNTIL).is_some_and(|until| until > now);
            live.then(|| get_s(item, RUN_TURN).and_then(|turn| TurnId::new(turn).ok()))
                .flatten()
        }))
    }
}

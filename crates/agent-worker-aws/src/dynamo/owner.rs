//! A conversation's owner, on its meta item (`pk = session#<id>`, `sk = meta`).

use std::collections::HashMap;

use agent_worker_core::clock::now_ms;
use agent_worker_core::session::conversations::owner_key;
use agent_worker_core::session::{ConversationClaim, Owner, OwnerCheck, StoreError, TurnId};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use super::DynamoStore;
use super::keys::{
    ACTIVE_TURN, DELETED_AT, EXPIRES_AT, LAST_ACTIVE_AT, META_SK, OWNER_ACCOUNT, OWNER_KEY, OWNER_USER, PK,
    RUN_TURN, RUN_UNTIL, SK, session_pk,
};
use super::sdk_error::{is_conditional_failure, store_error};

/// Records `owner` on `session`'s meta item unless someone else is there or it was deleted, and
/// `turn_id` as its latest activity (what the person's list shows): one conditional write, then,
/// only when it is refused, one read to say why.
pub(super) async fn claim(
    store: &DynamoStore,
    session: &str,
    turn_id: &str,
    owner: &Owner,
) -> Result<OwnerCheck, StoreError> {
    Ok(match claim_reading(store, session, turn_id, owner, None).await? {
        MetaAnswer::Written(check, _) | MetaAnswer::Refused(check) => check,
        // Asked for no run, so held by no other turn: the owner's check passed.
        MetaAnswer::Busy(_) => OwnerCheck::Same,
    })
}

/// What a turn's opening found when it wrote the meta item.
pub(super) enum MetaAnswer {
    /// The write landed: the owner's check, and the item as it was before it.
    Written(OwnerCheck, Option<HashMap<String, AttributeValue>>),
    /// The conversation is someone else's, or was deleted: nothing was written.
    Refused(OwnerCheck),
    /// Another turn (named) holds the conversation's run: nothing was written.
    Busy(TurnId),
}

/// [`claim`], taking the conversation's run for `turn_id` until `run_until` (milliseconds) when
/// given, and the meta item as it was before the write when the conversation is the person's:
/// its version, summary position and lineage, which the write does not change.
pub(super) async fn claim_reading(
    store: &DynamoStore,
    session: &str,
    turn_id: &str,
    owner: &Owner,
    run_until: Option<u64>,
) -> Result<MetaAnswer, StoreError> {
    let mut update = String::from(
        "SET #user = :user, #account = :account, #okey = :okey, #last = :now, #active = :turn, \
         #exp = if_not_exists(#exp, :exp)",
    );
    let mut condition = String::from(
        "attribute_not_exists(#deleted) AND \
         (attribute_not_exists(#user) OR (#user = :user AND #account = :account))",
    );
    let now = now_ms();
    let mut request = store
        .client()
        .update_item()
        .table_name(store.table())
        .key(PK, AttributeValue::S(session_pk(session)))
        .key(SK, AttributeValue::S(META_SK.to_owned()));
    if let Some(until) = run_until {
        update.push_str(", #run = :turn, #until = :until");
        condition.push_str(" AND ");
        condition.push_str(RUN_IS_FREE);
        request = request
            .expression_attribute_names("#run", RUN_TURN)
            .expression_attribute_names("#until", RUN_UNTIL)
            .expression_attribute_values(":until", AttributeValue::N(until.to_string()));
    }
    let request = request
        .update_expression(update)
        .condition_expression(condition)
        .expression_attribute_names("#user", OWNER_USER)
        .expression_attribute_names("#account", OWNER_ACCOUNT)
        .expression_attribute_names("#okey", OWNER_KEY)
        .expression_attribute_names("#last", LAST_ACTIVE_AT)
        .expression_attribute_names("#active", ACTIVE_TURN)
        .expression_attribute_names("#deleted", DELETED_AT)
        .expression_attribute_names("#exp", EXPIRES_AT)
        .expression_attribute_values(":user", AttributeValue::S(owner.user_id.clone()))
        .expression_attribute_values(":account", AttributeValue::S(owner.account_id.clone()))
        .expression_attribute_values(":okey", AttributeValue::S(owner_key(owner)))
        .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
        .expression_attribute_values(":turn", AttributeValue::S(turn_id.to_owned()))
        .expression_attribute_values(":exp", AttributeValue::N(store.expires_at().to_string()))
        .return_values(ReturnValue::AllOld);
    for _ in 0..META_TRIES {
        match request.clone().send().await {
            // The old values say whether it was already this person's.
            Ok(out) => {
                let check = match out.attributes().and_then(|a| a.get(OWNER_USER)) {
                    Some(_) => OwnerCheck::Same,
                    None => OwnerCheck::Claimed,
                };
                return Ok(MetaAnswer::Written(check, out.attributes));
            }
            Err(e) if is_conditional_failure(&e) => {
                if let Some(refused) = refusal(read_meta(store, session).await?, Some(owner), turn_id) {
                    return Ok(refused);
                }
                // Refused, then changed in between (the run given back, an owner gone): again.
            }
            Err(e) => return Err(store_error("recording the conversation's owner", e)),
        }
    }
    Err(changing(session))
}

/// How many times a turn's opening writes the meta item when what refused it was gone by the
/// time it looked.
pub(super) const META_TRIES: usize = 3;

/// The failure of an opening whose meta item changed under every try.
pub(super) fn changing(session: &str) -> StoreError {
    StoreError::Backend(format!("conversation {session}'s record kept changing while a turn opened").into())
}

/// Why a write of the meta item for turn `turn_id` (of `person`, when it has one) was refused,
/// as the item reads now: deleted, someone else's, or another turn's run; `None` when none of
/// these holds any more.
pub(super) fn refusal(meta: Meta, person: Option<&Owner>, turn_id: &str) -> Option<MetaAnswer> {
    match (meta, person) {
        (Meta { deleted: true, .. }, Some(_)) => Some(MetaAnswer::Refused(OwnerCheck::Deleted)),
        (
            Meta {
                owner: Some(known), ..
            },
            Some(person),
        ) if &known != person => Some(MetaAnswer::Refused(OwnerCheck::Other(known))),
        (
            Meta {
                running: Some(holder),
                ..
            },
            _,
        ) if holder != turn_id => Some(MetaAnswer::Busy(holder)),
        _ => None,
    }
}

/// The condition under which a turn may take the conversation's run: no turn holds it, this turn
/// does, or its holder's lease ran out (`:turn` and `:now` are the write's).
pub(super) const RUN_IS_FREE: &str = "(attribute_not_exists(#run) OR #run = :turn OR #until < :now)";

/// What the meta item says of who may use the conversation.
pub(super) struct Meta {
    /// Its owner, if one was recorded.
    pub(super) owner: Option<Owner>,
    /// Whether it was deleted.
    pub(super) deleted: bool,
    /// The turn that holds its run under a live lease.
    pub(super) running: Option<TurnId>,
}

/// The owner recorded on `session`'s meta item, and whether it was deleted.
pub(super) async fn read_meta(store: &DynamoStore, session: &str) -> Result<Meta, StoreError> {
    let out = store
        .client()
        .get_item()
        .table_name(store.table())
        .key(PK, AttributeValue::S(session_pk(session)))
        .key(SK, AttributeValue::S(META_SK.to_owned()))
        .projection_expression("#user, #account, #deleted, #run, #until")
        .expression_attribute_names("#user", OWNER_USER)
        .expression_attribute_names("#account", OWNER_ACCOUNT)
        .expression_attribute_names("#deleted", DELETED_AT)
        .expression_attribute_names("#run", RUN_TURN)
        .expression_attribute_names("#until", RUN_UNTIL)
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| store_error("reading the conversation's owner", e))?;
    let item = out.item();
    let text = |name: &str| {
        item.and_then(|item| item.get(name))
            .and_then(|v| v.as_s().ok())
            .cloned()
    };
    let until = item
        .and_then(|item| item.get(RUN_UNTIL))
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    Ok(Meta {
        owner: text(OWNER_USER).map(|user| Owner::new(user, text(OWNER_ACCOUNT).unwrap_or_default())),
        deleted: item.is_some_and(|item| item.contains_key(DELETED_AT)),
        running: text(RUN_TURN)
            .filter(|_| until > now_ms())
            .and_then(|turn| TurnId::new(turn).ok()),
    })
}

/// The owner recorded on `session`'s meta item, if any. A deleted conversation belongs to an
/// owner with empty ids: no one who asks (hosts refuse empty ids) is it.
pub(super) async fn read(store: &DynamoStore, session: &str) -> Result<Option<Owner>, StoreError> {
    let meta = read_meta(store, session).await?;
    if meta.deleted {
        return Ok(Some(Owner::of_deleted()));
    }
    Ok(meta.owner)
}

/// Records `owner` on `session`'s meta item when it has none and was not deleted, marking no
/// turn (so the conversation is not listed until its first turn): one consistent read, and one
/// conditional write only when no one owns it yet. The read also says which turn runs in it.
pub(super) async fn claim_without_turn(
    store: &DynamoStore,
    session: &str,
    owner: &Owner,
) -> Result<ConversationClaim, StoreError> {
    let judged = |meta: &Meta| match meta {
        Meta { deleted: true, .. } => Some(OwnerCheck::Deleted),
        Meta {
            owner: Some(known), ..
        } if known == owner => Some(OwnerCheck::Same),
        Meta {
            owner: Some(other), ..
        } => Some(OwnerCheck::Other(other.clone())),
        Meta { owner: None, .. } => None,
    };
    let meta = read_meta(store, session).await?;
    if let Some(check) = judged(&meta) {
        return Ok(ConversationClaim {
            owner: check,
            running_turn: meta.running,
        });
    }
    let written = store
        .client()
        .update_item()
        .table_name(store.table())
        .key(PK, AttributeValue::S(session_pk(session)))
        .key(SK, AttributeValue::S(META_SK.to_owned()))
        .update_expression("SET #user = :user, #account = :account, #exp = if_not_exists(#exp, :exp)")
        .condition_expression("attribute_not_exists(#deleted) AND attribute_not_exists(#user)")
        .expression_attribute_names("#user", OWNER_USER)
        .expression_attribute_names("#account", OWNER_ACCOUNT)
        .expression_attribute_names("#deleted", DELETED_AT)
        .expression_attribute_names("#exp", EXPIRES_AT)
        .expression_attribute_values(":user", AttributeValue::S(owner.user_id.clone()))
        .expression_attribute_values(":account", AttributeValue::S(owner.account_id.clone()))
        .expression_attribute_values(":exp", AttributeValue::N(store.expires_at().to_string()))
        .send()
        .await;
    match written {
        // A turn of no one's (a turn without a person) may hold the run: the read said which.
        Ok(_) => Ok(ConversationClaim {
            owner: OwnerCheck::Claimed,
            running_turn: meta.running,
        }),
        // Someone claimed it (or deleted it) between the read and the write: say who.
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
        {
            let meta = read_meta(store, session).await?;
            Ok(ConversationClaim {
                owner: judged(&meta).unwrap_or_else(|| OwnerCheck::Other(Owner::of_deleted())),
                running_turn: meta.running,
            })
        }
        Err(e) => Err(store_error("recording the conversation's owner", e)),
    }
}

//! A conversation's owner, on its meta item (`pk = session#<id>`, `sk = meta`).

use agent_worker_core::session::{Owner, OwnerCheck, StoreError};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use super::DynamoStore;
use super::keys::{EXPIRES_AT, META_SK, PK, SK, session_pk};
use super::sdk_error::store_error;

/// The attribute of the person a conversation belongs to.
const OWNER_USER: &str = "ownerUserId";
/// The attribute of their account.
const OWNER_ACCOUNT: &str = "ownerAccountId";

/// Records `owner` on `session`'s meta item unless someone else is there: one conditional write,
/// then, only when it is refused, one read to say who.
pub(super) async fn claim(
    store: &DynamoStore,
    session: &str,
    owner: &Owner,
) -> Result<OwnerCheck, StoreError> {
    let written = store
        .client()
        .update_item()
        .table_name(store.table())
        .key(PK, AttributeValue::S(session_pk(session)))
        .key(SK, AttributeValue::S(META_SK.to_owned()))
        .update_expression("SET #user = :user, #account = :account, #exp = if_not_exists(#exp, :exp)")
        .condition_expression("attribute_not_exists(#user) OR (#user = :user AND #account = :account)")
        .expression_attribute_names("#user", OWNER_USER)
        .expression_attribute_names("#account", OWNER_ACCOUNT)
        .expression_attribute_names("#exp", EXPIRES_AT)
        .expression_attribute_values(":user", AttributeValue::S(owner.user_id.clone()))
        .expression_attribute_values(":account", AttributeValue::S(owner.account_id.clone()))
        .expression_attribute_values(":exp", AttributeValue::N(store.expires_at().to_string()))
        .return_values(ReturnValue::AllOld)
        .send()
        .await;
    match written {
        // The old values say whether it was already this person's.
        Ok(out) => Ok(match out.attributes().and_then(|a| a.get(OWNER_USER)) {
            Some(_) => OwnerCheck::Same,
            None => OwnerCheck::Claimed,
        }),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
        {
            // Refused, then gone (deleted in between): nobody's now, and still not this turn's.
            let holder = read(store, session)
                .await?
                .unwrap_or_else(|| Owner::new(String::new(), String::new()));
            Ok(OwnerCheck::Other(holder))
        }
        Err(e) => Err(store_error("recording the conversation's owner", e)),
    }
}

/// The owner recorded on `session`'s meta item, if any.
pub(super) async fn read(store: &DynamoStore, session: &str) -> Result<Option<Owner>, StoreError> {
    let out = store
        .client()
        .get_item()
        .table_name(store.table())
        .key(PK, AttributeValue::S(session_pk(session)))
        .key(SK, AttributeValue::S(META_SK.to_owned()))
        .projection_expression("#user, #account")
        .expression_attribute_names("#user", OWNER_USER)
        .expression_attribute_names("#account", OWNER_ACCOUNT)
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| store_error("reading the conversation's owner", e))?;
    let text = |name: &str| {
        out.item()
            .and_then(|item| item.get(name))
            .and_then(|v| v.as_s().ok())
            .cloned()
    };
    Ok(text(OWNER_USER).map(|user| Owner::new(user, text(OWNER_ACCOUNT).unwrap_or_default())))
}

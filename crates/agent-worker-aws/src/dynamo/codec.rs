//! The item codec of the session table: attribute values in and out, a turn record's item, a
//! stored message's JSON. The store and its siblings build and read items only through it.

use agent_worker_core::Failure;
use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use agent_worker_core::session::{
    ContentBlock, Message, Stop, StoreError, TurnId, TurnOutcome, TurnRecord, TurnStatus,
};
use aws_sdk_dynamodb::types::AttributeValue;

/// The largest message item this store writes; an image that would make one larger is replaced
/// by a line saying it was not kept. DynamoDB's own item limit is 400 KB.
pub const MAX_MESSAGE_BYTES: usize = 350 * 1024;

pub(super) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

pub(super) fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

pub(super) fn get_n(item: &HashMap<String, AttributeValue>, name: &str) -> Option<u64> {
    item.get(name)?.as_n().ok()?.parse().ok()
}

pub(super) fn get_s<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> Option<&'a str> {
    item.get(name)?.as_s().ok().map(String::as_str)
}

pub(super) fn status_name(status: TurnStatus) -> &'static str {
    match status {
        TurnStatus::Running => "running",
        TurnStatus::Completed => "completed",
        TurnStatus::Failed => "failed",
    }
}

pub(super) fn parse_status(name: &str) -> Option<TurnStatus> {
    match name {
        "running" => Some(TurnStatus::Running),
        "completed" => Some(TurnStatus::Completed),
        "failed" => Some(TurnStatus::Failed),
        _ => None,
    }
}

/// The message as it is stored: pictures too large for an item become a line saying so.
pub(super) fn storable(message: &Message) -> Result<String, StoreError> {
    let encode = |m: &Message| {
        serde_json::to_string(m)
            .map_err(|e| StoreError::Corrupt(Failure::caused_by("a message does not encode", e)))
    };
    let json = encode(message)?;
    if json.len() <= MAX_MESSAGE_BYTES {
        return Ok(json);
    }
    let mut slim = message.clone();
    for block in &mut slim.content {
        if let ContentBlock::Image { mime_type, data } = block {
            *block = ContentBlock::text(format!(
                "(The person sent a picture here, {mime_type}, about {} KB; it is too large to keep in the conversation's history.)",
                data.len() * 3 / 4 / 1024
            ));
        }
    }
    let json = encode(&slim)?;
    if json.len() > MAX_MESSAGE_BYTES {
        return Err(StoreError::Backend(
            format!(
                "a message of {} bytes is larger than the {MAX_MESSAGE_BYTES} bytes one item may hold",
                json.len()
            )
            .into(),
        ));
    }
    Ok(json)
}

pub(super) fn decode_stop(item: &HashMap<String, AttributeValue>) -> Option<Stop> {
    let reason =
        serde_json::from_value(serde_json::Value::String(get_s(item, "stopReason")?.to_owned())).ok()?;
    Some(Stop {
        reason,
        at: get_n(item, "stopAt").unwrap_or_default(),
    })
}

pub(super) fn decode_turn(
    turn_id: &TurnId,
    item: &HashMap<String, AttributeValue>,
) -> Result<TurnRecord, StoreError> {
    let status = get_s(item, "status")
        .and_then(parse_status)
        .ok_or_else(|| StoreError::Corrupt(format!("turn {turn_id} has no valid status").into()))?;
    let outcome = get_s(item, "outcome")
        .map(serde_json::from_str::<TurnOutcome>)
        .transpose()
        .map_err(|e| {
            StoreError::Corrupt(Failure::caused_by(
                format!("turn {turn_id}'s outcome does not decode"),
                e,
            ))
        })?;
    Ok(TurnRecord {
        turn_id: turn_id.clone(),
        status,
        lease_until: UNIX_EPOCH + Duration::from_millis(get_n(item, "leaseUntil").unwrap_or(0)),
        attempts: u32::try_from(get_n(item, "attempts").unwrap_or(1)).unwrap_or(u32::MAX),
        outcome,
        stop: decode_stop(item),
    })
}

/// A token for one conditional write, kept on the item it wrote.
pub(super) fn write_token() -> String {
    uuid::Uuid::new_v4().to_string()
}

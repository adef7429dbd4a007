//! The items of a turn's event log: one per event, its JSON cut to fit one item, and as many in
//! one write as a transaction holds.
//!
//! DynamoDB refuses an item over 400 KB, and a `tool_ended` carrying a large result (or a
//! `tool_started` with large arguments) would otherwise make every write of the log fail, and its
//! turn with it. Every long string is cut, in one pass, to the one length that makes the event
//! fit, each ending with a note that says how large the event was; what escapes keep over is cut
//! longest first; a value with no long string (a large array of numbers), or too many strings
//! to keep, is replaced by the note. What is left decodes as the same kind of event, with the
//! same ids.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;

use agent_worker_core::clock::now_ms;
use agent_worker_core::protocol::AgentEvent;
use agent_worker_core::session::CallResult;
use agent_worker_core::sinks::SinkError;

use super::DynamoStore;
use super::codec::MAX_MESSAGE_BYTES;
use super::keys::{EXPIRES_AT, LOGGED_AT, PK, SK, WRITE_TOKEN, event_sk, session_pk};

/// The largest event JSON an item of the log holds: a message's limit, under DynamoDB's 400 KB
/// with room for the item's keys and attributes.
pub(super) const MAX_EVENT_BYTES: usize = MAX_MESSAGE_BYTES;

/// A string no longer than this is not cut (the note would not make it shorter).
const SHORTEST_CUT: usize = 1024;

/// `event`'s JSON: whole when it is at most `max` bytes, else cut to fit them.
pub(super) fn event_json(event: &AgentEvent, max: usize) -> Result<String, serde_json::Error> {
    let json = serde_json::to_string(event)?;
    if json.len() <= max {
        return Ok(json);
    }
    let note = format!(
        " … [cut: this event was {} bytes, more than the {max} bytes one item of the turn's event log holds]",
        json.len()
    );
    let mut value: Value = serde_json::from_str(&json)?;
    // First every long string at once, to one length that makes the whole fit (each cut ending
    // with the note); then, should escapes or structure keep it over, the longest one by one.
    cut_to_fit(&mut value, json.len() - max, &note);
    drop(json);
    loop {
        let json = serde_json::to_string(&value)?;
        if json.len() <= max {
            return Ok(json);
        }
        let over = json.len() - max;
        drop(json);
        let cut = match longest_string(&mut value) {
            Some(text) if text.len() > SHORTEST_CUT => {
                cut_string(text, over + note.len(), &note);
                true
            }
            _ => replace_largest_field(&mut value, &note),
        };
        if !cut {
            // Nothing left to cut: only the event's short fields remain, and they fit.
            return serde_json::to_string(&value);
        }
    }
}

/// The item of `event` at position `seq` of turn `turn_id`'s log, written with `token`: the
/// log's own writes and the commit that writes the log's end make them alike.
pub(super) fn event_item(
    store: &DynamoStore,
    session: &str,
    turn_id: &str,
    event: &AgentEvent,
    seq: u64,
    token: &str,
) -> Result<HashMap<String, AttributeValue>, SinkError> {
    let json = event_json(event, MAX_EVENT_BYTES)
        .map_err(|e| SinkError::caused_by("an event does not encode", e))?;
    Ok(HashMap::from([
        (PK.to_owned(), AttributeValue::S(session_pk(session))),
        (SK.to_owned(), AttributeValue::S(event_sk(turn_id, seq))),
        ("seq".to_owned(), AttributeValue::N(seq.to_string())),
        ("event".to_owned(), AttributeValue::S(json)),
        (LOGGED_AT.to_owned(), AttributeValue::N(now_ms().to_string())),
        (WRITE_TOKEN.to_owned(), AttributeValue::S(token.to_owned())),
        (
            EXPIRES_AT.to_owned(),
            AttributeValue::N(store.expires_at().to_string()),
        ),
    ]))
}

/// Events written together, at most: one transaction's worth of small items.
pub(super) const EVENTS_PER_WRITE: usize = 25;

/// Room an event's item takes beside its JSON: its keys and attributes.
const ITEM_ROOM: usize = 512;

/// How many of `events` (at least one, if there are any) one write of the log holds in `room`
/// bytes: each as large as its item may be at most ([`MAX_EVENT_BYTES`]), with its keys and
/// attributes.
pub(super) fn events_that_fit<'a>(events: impl Iterator<Item = &'a AgentEvent>, room: usize) -> usize {
    let mut bytes = 0;
    let mut count = 0;
    for event in events {
        let size = match event {
            AgentEvent::Text { delta } | AgentEvent::Thinking { delta } => delta.len() + 64,
            other => serde_json::to_string(other).map_or(MAX_EVENT_BYTES, |json| json.len()),
        };
        bytes += size.min(MAX_EVENT_BYTES) + ITEM_ROOM;
        if count > 0 && bytes > room {
            break;
        }
        count += 1;
    }
    count
}

/// The most results of a turn's calls one write of the log carries into the journal.
const RESULTS_PER_WRITE: usize = 10;

/// The most bytes of results one write of the log carries.
const RESULT_BYTES_PER_WRITE: usize = 1024 * 1024;

/// How many of `results` (each already cut to fit an item) the log's next write carries, from
/// the oldest, and their bytes.
pub(super) fn riding(results: &[CallResult]) -> (usize, usize) {
    let mut bytes = 0;
    let mut count = 0;
    for result in results.iter().take(RESULTS_PER_WRITE) {
        let size = serde_json::to_string(result).map_or(MAX_EVENT_BYTES, |json| json.len()) + ITEM_ROOM;
        if count > 0 && bytes + size > RESULT_BYTES_PER_WRITE {
            break;
        }
        bytes += size;
        count += 1;
    }
    (count, bytes)
}

/// Cuts every string of `value` longer than one length, the longest that takes `over` bytes
/// off the strings' sum (each cut string ending with `note`): one pass, however many strings.
fn cut_to_fit(value: &mut Value, over: usize, note: &str) {
    let mut lengths = Vec::new();
    string_lengths(value, &mut lengths);
    let room = note.len();
    // What cutting every string to `cap` (and appending the note) takes off.
    let taken = |cap: usize| -> usize {
        lengths
            .iter()
            .filter(|&&len| len > cap + room)
            .map(|&len| len - cap - room)
            .sum()
    };
    let longest = lengths.iter().copied().max().unwrap_or(0);
    if longest <= SHORTEST_CUT {
        return;
    }
    if taken(0) < over {
        // Not even every string cut to the note takes enough off: so cut, the rest is the
        // largest field's to give.
        cut_longer_than(value, 0, note);
        return;
    }
    // The largest cap that still takes `over` off: `taken` shrinks as the cap grows.
    let (mut low, mut high) = (0, longest);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if taken(mid) >= over {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    cut_longer_than(value, low, note);
}

fn string_lengths(value: &Value, into: &mut Vec<usize>) {
    match value {
        Value::String(text) => into.push(text.len()),
        Value::Array(items) => items.iter().for_each(|item| string_lengths(item, into)),
        Value::Object(fields) => fields.values().for_each(|field| string_lengths(field, into)),
        _ => {}
    }
}

/// Cuts each string longer than `cap` and the note to `cap` bytes and the note.
fn cut_longer_than(value: &mut Value, cap: usize, note: &str) {
    match value {
        Value::String(text) if text.len() > cap + note.len() => {
            let by = text.len() - cap;
            cut_string(text, by, note);
        }
        Value::Array(items) => items.iter_mut().for_each(|item| cut_longer_than(item, cap, note)),
        Value::Object(fields) => fields
            .values_mut()
            .for_each(|field| cut_longer_than(field, cap, note)),
        _ => {}
    }
}

/// Cuts `by` bytes off the end of `text` (at a character's boundary) and appends `note`.
fn cut_string(text: &mut String, by: usize, note: &str) {
    let mut keep = text.len().saturating_sub(by);
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    text.truncate(keep);
    text.push_str(note);
}

/// The longest string anywhere in `value` (an object's keys aside).
fn longest_string(value: &mut Value) -> Option<&mut String> {
    match value {
        Value::String(text) => Some(text),
        Value::Array(items) => items
            .iter_mut()
            .filter_map(longest_string)
            .max_by_key(|text| text.len()),
        Value::Object(fields) => fields
            .values_mut()
            .filter_map(longest_string)
            .max_by_key(|text| text.len()),
        _ => None,
    }
}

/// Replaces the largest of the event's fields (its `type` aside, and those already replaced)
/// with `note`; `false` when there is none.
fn replace_largest_field(value: &mut Value, note: &str) -> bool {
    let Value::Object(fields) = value else {
        return false;
    };
    let largest = fields
        .iter()
        .filter(|(name, field)| *name != "type" && field.as_str() != Some(note))
        .map(|(name, field)| (name.clone(), serde_json::to_string(field).map_or(0, |j| j.len())))
        .max_by_key(|(_, size)| *size);
    match largest {
        Some((name, _)) => {
            fields.insert(name, Value::String(note.to_owned()));
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ended(content: Value) -> AgentEvent {
        AgentEvent::ToolEnded {
            id: "c1".into(),
            is_error: false,
            content,
        }
    }

    fn fitted(event: &AgentEvent, max: usize) -> (String, AgentEvent) {
        let json = event_json(event, max).unwrap();
        assert!(json.len() <= max, "{} bytes past {max}", json.len());
        let decoded = serde_json::from_str(&json).expect("still an event");
        (json, decoded)
    }

    #[test]
    fn an_event_that_fits_is_kept_whole() {
        let event = ended(json!({"data": "x".repeat(1000)}));
        assert_eq!(
            event_json(&event, 2000).unwrap(),
            serde_json::to_string(&event).unwrap()
        );
    }

    #[test]
    fn a_large_result_is_cut_with_a_note_and_keeps_its_call() {
        let event = ended(json!({"data": "x".repeat(500_000), "status": "ok"}));
        let (json, decoded) = fitted(&event, MAX_EVENT_BYTES);
        let AgentEvent::ToolEnded { id, content, .. } = decoded else {
            panic!("{json}")
        };
        assert_eq!(id, "c1");
        assert_eq!(content["status"], "ok");
        let data = content["data"].as_str().unwrap();
        assert!(data.starts_with("xxxx"));
        assert!(
            data.ends_with("one item of the turn's event log holds]"),
            "{}",
            &data[data.len() - 200..]
        );
        assert!(
            data.contains("this event was 500"),
            "the note says how large it was"
        );
        assert!(
            json.len() > MAX_EVENT_BYTES - 1024,
            "cut no more than needed: {}",
            json.len()
        );
    }

    #[test]
    fn text_that_escapes_and_spans_characters_is_cut_on_a_boundary() {
        let event = AgentEvent::ToolStarted {
            id: "c1".into(),
            name: "write".into(),
            args: json!({"body": "é\n\"".repeat(200_000)}),
        };
        let (_, decoded) = fitted(&event, 100_000);
        assert!(matches!(decoded, AgentEvent::ToolStarted { ref name, .. } if name == "write"));
    }

    #[test]
    fn many_strings_are_each_cut_until_the_event_fits() {
        let parts: Vec<Value> = (0..40).map(|_| Value::String("y".repeat(20_000))).collect();
        let (_, decoded) = fitted(&ended(Value::Array(parts)), 100_000);
        assert!(matches!(decoded, AgentEvent::ToolEnded { .. }));
    }

    #[test]
    fn a_thousand_strings_are_cut_in_one_pass_to_one_length() {
        let parts: Vec<Value> = (0..1_000)
            .map(|i| Value::String(format!("{i:05}{}", "z".repeat(2_000))))
            .collect();
        let (json, decoded) = fitted(&ended(Value::Array(parts)), MAX_EVENT_BYTES);
        let AgentEvent::ToolEnded { content, .. } = decoded else {
            panic!("{json}")
        };
        let parts = content.as_array().unwrap();
        assert_eq!(parts.len(), 1_000, "every part kept, each cut");
        assert!(
            parts
                .iter()
                .all(|p| p.as_str().unwrap().ends_with("event log holds]"))
        );
        assert!(
            parts[999].as_str().unwrap().starts_with("00999z"),
            "each keeps its start"
        );
    }

    #[test]
    fn ten_thousand_strings_too_many_to_keep_give_way_to_the_note() {
        let parts: Vec<Value> = (0..10_000).map(|_| Value::String("z".repeat(2_000))).collect();
        let (json, decoded) = fitted(&ended(Value::Array(parts)), MAX_EVENT_BYTES);
        let AgentEvent::ToolEnded { content, .. } = decoded else {
            panic!("{json}")
        };
        assert!(
            content.as_str().unwrap().contains("[cut: this event was"),
            "{content}"
        );
    }

    #[test]
    fn a_value_without_long_strings_is_replaced_by_the_note() {
        let numbers: Vec<u64> = (0..100_000).collect();
        let (json, decoded) = fitted(&ended(json!({ "rows": numbers })), 10_000);
        let AgentEvent::ToolEnded { content, .. } = decoded else {
            panic!("{json}")
        };
        assert!(
            content.as_str().unwrap().contains("[cut: this event was"),
            "{content}"
        );
    }
}

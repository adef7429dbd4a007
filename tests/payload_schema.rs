//! The payload's JSON Schema and the decoder agree, and the sample events follow both.

use agent_worker::hosts::AgentTurnPayload;
use aws_lambda_events::event::sqs::SqsEvent;
use serde_json::{Value, json};

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn schema() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(&read("schema/agent-turn-payload.schema.json")).unwrap();
    jsonschema::validator_for(&schema).expect("a valid JSON Schema")
}

#[test]
fn the_raw_payload_follows_the_schema_and_decodes() {
    let body = read("events/payload.json");
    let value: Value = serde_json::from_str(&body).unwrap();
    assert!(schema().is_valid(&value));
    AgentTurnPayload::decode(&body).unwrap();
}

#[test]
fn every_record_of_the_sample_events_is_judged_alike_by_schema_and_decoder() {
    let schema = schema();
    let mut judged = 0;
    for file in ["events/one-turn.json", "events/mixed-batch.json"] {
        let event: SqsEvent = serde_json::from_str(&read(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        for record in event.records {
            let body = record.body.unwrap();
            let by_schema = serde_json::from_str::<Value>(&body).is_ok_and(|v| schema.is_valid(&v));
            let by_decoder = AgentTurnPayload::decode(&body).is_ok();
            assert_eq!(by_schema, by_decoder, "{file}: {body}");
            judged += 1;
        }
    }
    assert_eq!(judged, 4);
}

#[test]
fn schema_and_decoder_agree_on_bodies_that_are_not_turns() {
    let schema = schema();
    let minimal =
        json!({"turnId":"t-1","conversationId":"c-1","userId":"u-1","accountId":"a-1","content":"Hi"});
    let mut cases = vec![(minimal.clone(), true)];
    for field in ["turnId", "conversationId", "userId", "accountId", "content"] {
        let mut missing = minimal.clone();
        missing.as_object_mut().unwrap().remove(field);
        cases.push((missing, false));
    }
    let mut blank = minimal.clone();
    blank["turnId"] = json!("  ");
    cases.push((blank, false));
    // Ids a store cannot key: too long, or holding a control character.
    for (field, id) in [
        ("turnId", "t".repeat(513)),
        ("conversationId", "c\u{0}1".to_owned()),
        ("userId", "u\n1".to_owned()),
    ] {
        let mut refused = minimal.clone();
        refused[field] = json!(id);
        cases.push((refused, false));
    }
    let mut longest = minimal.clone();
    longest["turnId"] = json!("t".repeat(512));
    cases.push((longest, true));
    let mut superseding_nul = minimal.clone();
    superseding_nul["supersedes"] = json!(["t\u{0}"]);
    cases.push((superseding_nul, false));
    let mut wrong = minimal.clone();
    wrong["images"] = json!([{"mimeType": "image/png"}]);
    cases.push((wrong, false));
    for (approval, valid) in [
        (
            json!({"approvalId": "ap-1", "decision": "approve", "token": "tok"}),
            true,
        ),
        (json!({"approvalId": "ap-1", "decision": "decline"}), true),
        (json!({"approvalId": 5, "decision": "approve"}), false),
        (json!({"decision": "approve"}), false),
        (json!({}), false),
        (
            json!({"approvalId": "ap-1", "decision": "approve", "token": 7}),
            false,
        ),
    ] {
        let mut deciding = minimal.clone();
        deciding["approval"] = approval;
        cases.push((deciding, valid));
    }
    let mut with_image = minimal.clone();
    with_image["images"] = json!([{"mimeType": "image/png", "data": "iVBORw0KGgo="}]);
    cases.push((with_image, true));
    for (body, valid) in cases {
        assert_eq!(schema.is_valid(&body), valid, "schema: {body}");
        assert_eq!(
            AgentTurnPayload::decode(&body.to_string()).is_ok(),
            valid,
            "decoder: {body}"
        );
    }
}

//! Spans in OTLP's JSON encoding (`ExportTraceServiceRequest`): ids as hex, 64-bit integers and
//! times as decimal strings, as OTLP/HTTP with `application/json` takes them.

use std::time::SystemTime;

use serde_json::{Value, json};

use super::span::{Attr, Span};

/// The instrumentation scope the spans come from.
const SCOPE: &str = "agent-worker";

/// The request that sends `spans`, from service `service`.
pub(super) fn request(service: &str, spans: &[Span]) -> Value {
    json!({
        "resourceSpans": [{
            "resource": {"attributes": [
                attribute("service.name", &Attr::Str(service.to_owned())),
                attribute("telemetry.sdk.name", &Attr::Str(SCOPE.to_owned())),
                attribute("telemetry.sdk.language", &Attr::Str("rust".to_owned())),
            ]},
            "scopeSpans": [{
                "scope": {"name": SCOPE, "version": env!("CARGO_PKG_VERSION")},
                "spans": spans.iter().map(span).collect::<Vec<_>>(),
            }],
        }],
    })
}

fn span(span: &Span) -> Value {
    let mut out = json!({
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "name": span.name,
        "kind": span.kind as u8,
        "startTimeUnixNano": nanos(span.start),
        "endTimeUnixNano": nanos(span.end),
        "attributes": span.attributes.iter().map(|(k, v)| attribute(k, v)).collect::<Vec<_>>(),
        "events": span.events.iter().map(|(at, name, attributes)| json!({
            "timeUnixNano": nanos(*at),
            "name": name,
            "attributes": attributes.iter().map(|(k, v)| attribute(k, v)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        // 2: error; 0: unset (OK is for what a user decides).
        "status": match &span.error {
            Some(why) => json!({"code": 2, "message": why}),
            None => json!({"code": 0}),
        },
    });
    if let Some(parent) = &span.parent_span_id {
        out["parentSpanId"] = parent.as_str().into();
    }
    out
}

fn attribute(key: &str, value: &Attr) -> Value {
    let value = match value {
        Attr::Str(text) => json!({"stringValue": text}),
        Attr::Int(n) => json!({"intValue": n.to_string()}),
    };
    json!({"key": key, "value": value})
}

fn nanos(at: SystemTime) -> String {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
        .to_string()
}

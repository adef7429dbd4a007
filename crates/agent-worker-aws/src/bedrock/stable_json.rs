//! [`StableJson`]: request bodies whose JSON is the same bytes for the same request.
//!
//! The SDK writes a JSON document (a tool's input schema, a call's input, a JSON tool result)
//! from a `HashMap`, so the order of its keys changes from one request to the next and from one
//! process to another. The prompt cache keys on the exact prefix of a request, so the same tools
//! and history written in another order are a cache miss. This interceptor sorts every object's
//! keys before the request is signed, so the same request is always the same bytes, on every
//! worker.

use aws_sdk_bedrockruntime::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_bedrockruntime::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_types::body::SdkBody;
use serde_json::Value;

/// Sorts the keys of every JSON object in a request body, before signing.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StableJson;

/// Sorts the keys of every object in `value`, at every depth.
pub(crate) fn sort_keys(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.sort_keys();
            map.values_mut().for_each(sort_keys);
        }
        Value::Array(items) => items.iter_mut().for_each(sort_keys),
        _ => {}
    }
}

impl Intercept for StableJson {
    fn name(&self) -> &'static str {
        "StableJson"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let request = context.request_mut();
        let Some(bytes) = request.body().bytes() else {
            return Ok(());
        };
        let Ok(mut json) = serde_json::from_slice::<Value>(bytes) else {
            return Ok(());
        };
        sort_keys(&mut json);
        let body = serde_json::to_vec(&json)?;
        request
            .headers_mut()
            .insert("content-length", body.len().to_string());
        *request.body_mut() = SdkBody::from(body);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_at_every_depth_and_arrays_keep_their_order() {
        let mut value: Value =
            serde_json::from_str(r#"{"b":{"z":1,"a":[{"y":2,"x":1},3]},"a":"s"}"#).unwrap();
        sort_keys(&mut value);
        assert_eq!(
            value.to_string(),
            r#"{"a":"s","b":{"a":[{"x":1,"y":2},3],"z":1}}"#
        );
        assert_eq!(value, json!({"a":"s","b":{"z":1,"a":[{"y":2,"x":1},3]}}));
    }
}

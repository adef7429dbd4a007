//! The trace configuration from OpenTelemetry's standard variables.

use super::{ModelProvider, SettingsError, error, list};
use crate::metrics::DEFAULT_SERVICE;
use crate::traces::TraceConfig;

/// The only OTLP protocol the exporter speaks.
const HTTP_JSON: &str = "http/json";

/// Every name [`trace_config`] reads: OpenTelemetry's standard variables, and
/// `POWERTOOLS_SERVICE_NAME`, the service name traces fall back to.
pub const TRACE_SETTINGS: [&str; 11] = [
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "POWERTOOLS_SERVICE_NAME",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
];

/// What OpenTelemetry's variables configure: `None` without an OTLP endpoint, with
/// `OTEL_SDK_DISABLED=true` or with `OTEL_TRACES_EXPORTER=none`. The spans name `model_id` on
/// `provider`.
pub(super) fn trace_config(
    get: &impl Fn(&str) -> Option<String>,
    provider: &ModelProvider,
    model_id: &str,
) -> Result<Option<TraceConfig>, SettingsError> {
    let value = |name: &str| get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    if value("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    match value("OTEL_TRACES_EXPORTER").as_deref() {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => {
            return Err(error(
                "OTEL_TRACES_EXPORTER",
                format!("{other:?} is not supported: `otlp` or `none`"),
            ));
        }
    }
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = value(name) {
            if protocol != HTTP_JSON {
                return Err(error(
                    name,
                    format!("{protocol:?} is not supported: the exporter sends `{HTTP_JSON}`"),
                ));
            }
            break;
        }
    }
    let service = value("OTEL_SERVICE_NAME")
        .or_else(|| value("POWERTOOLS_SERVICE_NAME"))
        .unwrap_or_else(|| DEFAULT_SERVICE.to_owned());
    let (config, endpoint_name) = if let Some(endpoint) = value("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        (
            TraceConfig::new(endpoint, service),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        )
    } else if let Some(base) = value("OTEL_EXPORTER_OTLP_ENDPOINT") {
        (
            TraceConfig::under_base(&base, service),
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        )
    } else {
        return Ok(None);
    };
    let mut config = config.map_err(|e| error(endpoint_name, e.to_string()))?;
    let headers_name = ["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"]
        .into_iter()
        .find(|name| value(name).is_some());
    if let Some(name) = headers_name {
        for pair in list(get(name)) {
            let Some((key, val)) = pair.split_once('=') else {
                return Err(error(name, "a header is not name=value".to_owned()));
            };
            config = config
                .header(key.trim(), val.trim())
                .map_err(|e| error(name, e.to_string()))?;
        }
    }
    let capture = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
    let mut content = false;
    if let Some(raw) = value(capture) {
        content = raw
            .to_ascii_lowercase()
            .parse()
            .map_err(|_| error(capture, format!("{raw:?} is not true or false")))?;
    }
    let provider = match provider {
        ModelProvider::Bedrock => "aws.bedrock",
        ModelProvider::Anthropic { .. } => "anthropic",
        ModelProvider::OpenAi { .. } => "openai",
    };
    Ok(Some(config.capture_content(content).model(provider, model_id)))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<Option<TraceConfig>, SettingsError> {
        let vars: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        trace_config(&|name| vars.get(name).cloned(), &ModelProvider::Bedrock, "m-1")
    }

    #[test]
    fn traces_are_on_with_an_otlp_endpoint_as_opentelemetry_reads_it() {
        assert_eq!(read(&[]).unwrap(), None);
        let base = read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")])
            .unwrap()
            .unwrap();
        let expected = TraceConfig::new("http://localhost:4318/v1/traces", DEFAULT_SERVICE)
            .unwrap()
            .model("aws.bedrock", "m-1");
        assert_eq!(base, expected);
        let own = read(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://collector/x/traces"),
            ("OTEL_SERVICE_NAME", "desk"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-key=abc, x-team = t"),
            ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "TRUE"),
        ])
        .unwrap()
        .unwrap();
        let expected = TraceConfig::new("https://collector/x/traces", "desk")
            .unwrap()
            .header("x-key", "abc")
            .unwrap()
            .header("x-team", "t")
            .unwrap()
            .capture_content(true)
            .model("aws.bedrock", "m-1");
        assert_eq!(own, expected);
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318");
        assert_eq!(read(&[endpoint, ("OTEL_SDK_DISABLED", "true")]).unwrap(), None);
        assert_eq!(read(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]).unwrap(), None);
    }

    #[test]
    fn what_the_exporter_cannot_do_is_named() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318");
        let grpc = read(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap_err();
        assert_eq!(grpc.name, "OTEL_EXPORTER_OTLP_PROTOCOL");
        let zipkin = read(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")]).unwrap_err();
        assert_eq!(zipkin.name, "OTEL_TRACES_EXPORTER");
        let bad = read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318")]).unwrap_err();
        assert_eq!(bad.name, "OTEL_EXPORTER_OTLP_ENDPOINT");
        let capture = read(&[
            endpoint,
            ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "yes"),
        ]);
        assert_eq!(
            capture.unwrap_err().name,
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
        );
        let headers = read(&[endpoint, ("OTEL_EXPORTER_OTLP_HEADERS", "novalue")]).unwrap_err();
        assert_eq!(headers.name, "OTEL_EXPORTER_OTLP_HEADERS");
    }
}

//! The metrics configuration from the Powertools settings.

use super::{SettingsError, error, list, parsed};
use crate::metrics::{DEFAULT_SERVICE, MetricsConfig};

/// The metrics configuration the Powertools settings give: `None` without a namespace, or when
/// `POWERTOOLS_METRICS_DISABLED` is true.
pub(super) fn metrics_config(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<MetricsConfig>, SettingsError> {
    let mut disabled = false;
    parsed(get, "POWERTOOLS_METRICS_DISABLED", &mut disabled)?;
    let namespace = get("POWERTOOLS_METRICS_NAMESPACE").filter(|v| !v.trim().is_empty());
    let (Some(namespace), false) = (namespace, disabled) else {
        return Ok(None);
    };
    let service = get("POWERTOOLS_SERVICE_NAME")
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_SERVICE.to_owned());
    let mut config = MetricsConfig::new(namespace, service)
        .map_err(|e| error("POWERTOOLS_METRICS_NAMESPACE", e.to_string()))?;
    for pair in list(get("METRICS_DIMENSIONS")) {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(error("METRICS_DIMENSIONS", format!("{pair:?} is not name=value")));
        };
        config = config
            .dimension(name.trim(), value.trim())
            .map_err(|e| error("METRICS_DIMENSIONS", e.to_string()))?;
    }
    Ok(Some(config))
}

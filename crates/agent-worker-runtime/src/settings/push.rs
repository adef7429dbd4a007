//! A2A pushes from the push settings.

use super::{SettingsError, error, parsed};
use crate::a2a_push::PushPolicy;

/// The pushes `A2A_PUSH` (`on`, or `off`, the default) and `A2A_PUSH_LOOPBACK` (`true`: plain
/// `http` to a loopback webhook, for local runs and tests; refused where Lambda's Runtime API
/// listens on loopback) give: `None` when off.
pub(super) fn push_policy(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<PushPolicy>, SettingsError> {
    let on = match get("A2A_PUSH").as_deref().map(str::trim) {
        Some("on") => true,
        None | Some("" | "off") => false,
        Some(other) => return Err(error("A2A_PUSH", format!("{other:?} is not on or off"))),
    };
    let mut loopback = false;
    parsed(get, "A2A_PUSH_LOOPBACK", &mut loopback)?;
    // On Lambda, loopback is the Runtime API and its extensions: never a webhook's.
    if loopback && get("AWS_LAMBDA_RUNTIME_API").is_some() {
        return Err(error(
            "A2A_PUSH_LOOPBACK",
            "is for local runs and tests: on Lambda, loopback is the Runtime API's",
        ));
    }
    Ok(on.then_some(PushPolicy { loopback }))
}

//! The one clock: wall time in milliseconds since the Unix epoch, for leases, expiries and the
//! table's TTL. Everything that stamps or compares a moment reads it here.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch (0 before it, `u64::MAX` past what fits).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

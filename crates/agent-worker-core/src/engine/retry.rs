//! Retry delays: exponential backoff with jitter.

use std::time::Duration;

use super::EngineConfig;

/// The delay before retry `attempt` (1 for the first) of the engine's calls ([`jittered_backoff`]
/// on its base and cap).
pub(crate) fn backoff(config: &EngineConfig, attempt: u32) -> Duration {
    jittered_backoff(config.retry_base_delay, config.retry_max_delay, attempt)
}

/// The delay before retry `attempt` (1 for the first): `base` doubled per attempt, capped at
/// `max`, then drawn between half and all of that, so that callers failing together spread out.
pub fn jittered_backoff(base: Duration, max: Duration, attempt: u32) -> Duration {
    let exp = base
        .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)))
        .min(max);
    let half = exp / 2;
    // 62 of the fresh bits (the version 4 UUID's low 62 are all random), as a fraction.
    let bits = agent_worker_contract::fresh_random_bits() as u64 & ((1 << 62) - 1);
    half + half.mul_f64(bits as f64 / (1u64 << 62) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_with_jitter_and_stay_under_the_cap() {
        let config = EngineConfig {
            retry_base_delay: Duration::from_millis(100),
            retry_max_delay: Duration::from_millis(350),
            ..EngineConfig::default()
        };
        for _ in 0..100 {
            let first = backoff(&config, 1);
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
            let second = backoff(&config, 2);
            assert!(second >= Duration::from_millis(100) && second <= Duration::from_millis(200));
            let capped = backoff(&config, 9);
            assert!(capped >= Duration::from_millis(175) && capped <= Duration::from_millis(350));
        }
    }
}

//! The retry policy: how long a failed job waits before its next attempt. Pure, so it is
//! unit-tested without a database.

use std::time::Duration;

/// Backoff after failed attempt `attempt` (1-based): `attempt⁴ × unit`, spread by ±10%
/// jitter so a burst of failures does not retry in lockstep, and capped at `max`.
/// `jitter` is a number in `[0, 1)` (random in production, fixed in tests).
pub fn backoff(attempt: i32, unit: Duration, max: Duration, jitter: f64) -> Duration {
    let n = attempt.max(1) as f64;
    let base = unit.as_secs_f64() * n.powi(4);
    let spread = 0.9 + 0.2 * jitter.clamp(0.0, 1.0);
    let secs = (base * spread).min(max.as_secs_f64());
    Duration::from_secs_f64(secs.max(0.0))
}

/// A random jitter in `[0, 1)`.
pub fn random_jitter() -> f64 {
    rand::random::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const DAY: Duration = Duration::from_secs(86400);

    #[test]
    fn grows_as_the_fourth_power_of_the_attempt() {
        assert_eq!(backoff(1, S, DAY, 0.5), Duration::from_secs(1));
        assert_eq!(backoff(2, S, DAY, 0.5), Duration::from_secs(16));
        assert_eq!(backoff(3, S, DAY, 0.5), Duration::from_secs(81));
        assert_eq!(backoff(10, S, DAY, 0.5), Duration::from_secs(10_000));
    }

    #[test]
    fn jitter_spreads_by_ten_percent_either_way() {
        assert_eq!(backoff(2, S, DAY, 0.0), Duration::from_secs_f64(14.4));
        let hi = backoff(2, S, DAY, 0.999_999);
        assert!(hi > Duration::from_secs(17) && hi <= Duration::from_secs_f64(17.6));
    }

    #[test]
    fn is_capped_and_never_negative() {
        assert_eq!(backoff(25, S, DAY, 0.5), DAY);
        assert_eq!(backoff(1000, S, DAY, 1.0), DAY);
        assert_eq!(backoff(0, S, DAY, 0.5), Duration::from_secs(1));
        assert_eq!(backoff(-3, S, DAY, 0.5), Duration::from_secs(1));
        assert_eq!(
            backoff(3, Duration::from_millis(10), DAY, 0.5),
            Duration::from_millis(810)
        );
    }
}

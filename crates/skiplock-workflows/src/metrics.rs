//! The workflows' series, recorded through the `metrics` facade like the core's
//! (`skiplock::metrics`; no-ops unless a recorder is installed, such as the Prometheus
//! exporter of skiplock-console, which describes them).

#[cfg(feature = "pack")]
use std::time::Duration;

/// HTTP fetches by status code (`error`: no response).
pub const FETCHES: &str = "skiplock_fetches_total";
/// Packs written.
pub const PACKS: &str = "skiplock_packs_total";
/// How long a pack took (lock to commit).
pub const PACK_DURATION: &str = "skiplock_pack_duration_seconds";

/// Counts one HTTP fetch: its status code, or `None` when no response came.
#[cfg(feature = "fetch")]
pub fn fetched(status: Option<u16>) {
    let label = match status {
        Some(s) => s.to_string(),
        None => "error".to_string(),
    };
    metrics::counter!(FETCHES, "status" => label).increment(1);
}

/// Counts one pack and its duration.
#[cfg(feature = "pack")]
pub fn packed(took: Duration) {
    metrics::counter!(PACKS).increment(1);
    metrics::histogram!(PACK_DURATION).record(took.as_secs_f64());
}

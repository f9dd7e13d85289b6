//! The pack's fault point, for the tests of the `skiplock` command: with the feature
//! `fault-injection` (enabled only by those tests), a pack can be made to wait between
//! building and uploading its artifact, so a worker can be killed mid-pack. Without it,
//! [`upload_delay`] is an empty inline function: no setting, no production code path can
//! reach the fault.

use std::time::Duration;

#[cfg(feature = "fault-injection")]
static UPLOAD_DELAYS: std::sync::Mutex<Vec<(String, Duration)>> = std::sync::Mutex::new(Vec::new());

/// Makes every pack of `host` in this process wait `delay` between building and uploading.
#[cfg(feature = "fault-injection")]
pub fn delay_upload(host: &str, delay: Duration) {
    UPLOAD_DELAYS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((host.to_string(), delay));
}

/// How long the pack of `host` waits before its upload: what [`delay_upload`] armed, else
/// `SKIPLOCK_FAULT_UPLOAD_DELAY` (for a worker process a test spawns and then kills), else 0.
#[cfg(feature = "fault-injection")]
pub(crate) fn upload_delay(host: &str) -> Duration {
    let armed = UPLOAD_DELAYS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(h, _)| h == host)
        .map(|(_, d)| *d);
    armed
        .or_else(|| {
            std::env::var("SKIPLOCK_FAULT_UPLOAD_DELAY")
                .ok()
                .and_then(|v| humantime::parse_duration(&v).ok())
        })
        .unwrap_or(Duration::ZERO)
}

/// No delay: fault injection is compiled out.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn upload_delay(_host: &str) -> Duration {
    Duration::ZERO
}

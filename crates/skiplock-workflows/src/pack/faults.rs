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

/// The packs of each host that reached their armed upload delay ([`upload_delays_reached`]).
#[cfg(feature = "fault-injection")]
static UPLOAD_DELAYS_REACHED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// How many packs of `host` have reached the delay [`delay_upload`] armed: each had read all
/// its pages (its statement's snapshot is taken) and built its artifact. A test waits on this,
/// not on `pg_stat_activity`: a connection shows the pages query as its last, idle in its
/// transaction, already after the statement was only prepared (sqlx sends Parse and Describe
/// with a Sync of their own before Bind and Execute), so a change committed then is still seen
/// (crates/skiplock-cli/tests/pack.rs, `a_reset_during_a_pack_gives_a_second_pack_with_the_new_content`).
#[cfg(feature = "fault-injection")]
pub fn upload_delays_reached(host: &str) -> usize {
    UPLOAD_DELAYS_REACHED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|h| *h == host)
        .count()
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
    if armed.is_some() {
        UPLOAD_DELAYS_REACHED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(host.to_string());
    }
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

//! Fault points for the supervision tests: with the `fault-injection` feature (enabled only
//! for this crate's own tests, through its dev-dependency on itself), a test can make one
//! task of one worker panic at a chosen point, or make a pack wait between building and
//! uploading its artifact (so a worker can be killed mid-pack). Without the feature, [`hit`]
//! and [`upload_delay`] are empty inline functions: no setting, no production code path can
//! reach a fault.

use std::time::Duration;

/// Where a fault can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// In a producer, after a claim returned jobs and before any of them started: the
    /// claimed batch is `running` in the database and held by nobody.
    ProducerClaimed,
    /// In the completer, before a batch of acks is written.
    CompleterFlush,
    /// In the heartbeat task, before a beat.
    Heartbeat,
    /// In the NOTIFY listener, on a notification.
    Listener,
}

#[cfg(feature = "fault-injection")]
mod armed {
    use super::Point;
    use std::sync::Mutex;
    use std::time::Duration;

    static ARMED: Mutex<Vec<(String, Point, u32)>> = Mutex::new(Vec::new());
    static UPLOAD_DELAYS: Mutex<Vec<(String, Duration)>> = Mutex::new(Vec::new());

    pub fn delay_upload(host: &str, delay: Duration) {
        UPLOAD_DELAYS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((host.to_string(), delay));
    }

    pub fn upload_delay(host: &str) -> Option<Duration> {
        let delays = UPLOAD_DELAYS.lock().unwrap_or_else(|p| p.into_inner());
        delays.iter().find(|(h, _)| h == host).map(|(_, d)| *d)
    }

    pub fn arm(worker_id: &str, point: Point, times: u32) {
        ARMED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((worker_id.to_string(), point, times));
    }

    pub fn take(worker_id: &str, point: Point) -> bool {
        let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
        match armed
            .iter_mut()
            .find(|(w, p, n)| w == worker_id && *p == point && *n > 0)
        {
            Some(entry) => {
                entry.2 -= 1;
                true
            }
            None => false,
        }
    }
}

/// Makes the task at `point` of worker `worker_id` panic the next `times` times it passes.
#[cfg(feature = "fault-injection")]
pub fn arm(worker_id: &str, point: Point, times: u32) {
    armed::arm(worker_id, point, times)
}

/// Panics if a fault is armed here for this worker (only with `fault-injection`).
#[cfg(feature = "fault-injection")]
pub(crate) fn hit(worker_id: &str, point: Point) {
    if armed::take(worker_id, point) {
        panic!("injected fault at {point:?}");
    }
}

/// Does nothing: fault injection is compiled out.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn hit(_worker_id: &str, _point: Point) {}

/// Makes every pack of `host` in this process wait `delay` between building and uploading.
#[cfg(feature = "fault-injection")]
pub fn delay_upload(host: &str, delay: Duration) {
    armed::delay_upload(host, delay)
}

/// How long the pack of `host` waits before its upload: what [`delay_upload`] armed, else
/// `SKIPLOCK_FAULT_UPLOAD_DELAY` (for a worker process a test spawns and then kills), else 0.
#[cfg(feature = "fault-injection")]
pub(crate) fn upload_delay(host: &str) -> Duration {
    armed::upload_delay(host)
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

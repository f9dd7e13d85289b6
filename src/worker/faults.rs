//! Fault points for the supervision tests: with the `fault-injection` feature (enabled only
//! for this crate's own tests, through its dev-dependency on itself), a test can make one
//! task of one worker panic at a chosen point. Without the feature, [`hit`] is an empty
//! inline function: no setting, no production code path can reach a fault.

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

    static ARMED: Mutex<Vec<(String, Point, u32)>> = Mutex::new(Vec::new());

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

//! Fault points for the supervision tests: with the `fault-injection` feature (enabled only
//! for this crate's own tests, through its dev-dependency on itself), a test can make one
//! task of one worker panic at a chosen point, or make a pack wait between building and
//! uploading its artifact (so a worker can be killed mid-pack), or hold or slow a worker's
//! claims after they answered (so something can happen while one is in flight). Without the feature, [`hit`]
//! [`upload_delay`] and `claim_returned` are empty inline functions: no setting, no production code path can
//! reach a fault.

#[cfg(any(feature = "pack", feature = "fault-injection"))]
use std::time::Duration;

/// Where a fault can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// In a producer, after a claim returned jobs and before any of them started: the
    /// claimed batch is `running` in the database and held by nobody.
    ProducerClaimed,
    /// In the ack writer, before a batch of acks is written.
    AckWriterFlush,
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
    static CLAIM_GATES: Mutex<Vec<(String, std::sync::Arc<super::ClaimGate>)>> =
        Mutex::new(Vec::new());
    static CLAIM_DELAYS: Mutex<Vec<(String, Duration)>> = Mutex::new(Vec::new());

    pub fn delay_claims(worker_id: &str, delay: Duration) {
        CLAIM_DELAYS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((worker_id.to_string(), delay));
    }

    pub fn claim_delay(worker_id: &str) -> Option<Duration> {
        let delays = CLAIM_DELAYS.lock().unwrap_or_else(|p| p.into_inner());
        delays
            .iter()
            .find(|(w, _)| w == worker_id)
            .map(|(_, d)| *d)
    }

    pub fn gate_claims(worker_id: &str) -> std::sync::Arc<super::ClaimGate> {
        let gate = std::sync::Arc::new(super::ClaimGate::default());
        CLAIM_GATES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((worker_id.to_string(), gate.clone()));
        gate
    }

    pub fn claim_gate(worker_id: &str) -> Option<std::sync::Arc<super::ClaimGate>> {
        let gates = CLAIM_GATES.lock().unwrap_or_else(|p| p.into_inner());
        gates
            .iter()
            .find(|(w, _)| w == worker_id)
            .map(|(_, g)| g.clone())
    }
    static UPLOAD_DELAYS: Mutex<Vec<(String, Duration)>> = Mutex::new(Vec::new());

    pub fn delay_upload(host: &str, delay: Duration) {
        UPLOAD_DELAYS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((host.to_string(), delay));
    }

    /// The packs of each host that reached their armed upload delay (see `upload_delays_reached`).
    static UPLOAD_DELAYS_REACHED: Mutex<Vec<String>> = Mutex::new(Vec::new());

    #[cfg_attr(not(feature = "pack"), allow(dead_code))]
    pub fn upload_delay(host: &str) -> Option<Duration> {
        let delays = UPLOAD_DELAYS.lock().unwrap_or_else(|p| p.into_inner());
        let d = delays.iter().find(|(h, _)| h == host).map(|(_, d)| *d);
        if d.is_some() {
            UPLOAD_DELAYS_REACHED
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(host.to_string());
        }
        d
    }

    pub fn upload_delays_reached(host: &str) -> usize {
        let reached = UPLOAD_DELAYS_REACHED
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        reached.iter().filter(|h| *h == host).count()
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

/// Holds the answers of a worker's claims (see [`gate_claims`]): a test sees a claim come
/// back, makes something happen while it is still in flight, then lets it through.
#[cfg(feature = "fault-injection")]
#[derive(Debug)]
pub struct ClaimGate {
    arrived: tokio::sync::Semaphore,
    open: tokio::sync::Semaphore,
    woken: tokio::sync::Semaphore,
}

#[cfg(feature = "fault-injection")]
impl Default for ClaimGate {
    fn default() -> Self {
        ClaimGate {
            arrived: tokio::sync::Semaphore::new(0),
            open: tokio::sync::Semaphore::new(0),
            woken: tokio::sync::Semaphore::new(0),
        }
    }
}

#[cfg(feature = "fault-injection")]
impl ClaimGate {
    /// Waits until a claim of the worker came back from the database and waits at the gate.
    pub async fn arrived(&self) {
        if let Ok(p) = self.arrived.acquire().await {
            p.forget();
        }
    }

    /// Forgets the wake-ups the worker's producers took so far.
    pub fn forget_wake_ups(&self) {
        while let Ok(p) = self.woken.try_acquire() {
            p.forget();
        }
    }

    /// Waits until a producer of the worker took a wake-up (since the last
    /// [`ClaimGate::forget_wake_ups`]).
    pub async fn woken(&self) {
        if let Ok(p) = self.woken.acquire().await {
            p.forget();
        }
    }

    /// Lets every waiting claim, and every later one, through (again: no effect).
    pub fn open(&self) {
        if self.open.available_permits() == 0 {
            self.open
                .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
        }
    }
}

/// From now on, every claim of worker `worker_id` in this process waits, once its statement
/// has answered, until the returned gate is opened (only with `fault-injection`).
#[cfg(feature = "fault-injection")]
pub fn gate_claims(worker_id: &str) -> std::sync::Arc<ClaimGate> {
    armed::gate_claims(worker_id)
}

/// From now on, every claim of worker `worker_id` in this process answers `delay` after its
/// statement did, as claims do on a loaded database (only with `fault-injection`).
#[cfg(feature = "fault-injection")]
pub fn delay_claims(worker_id: &str, delay: Duration) {
    armed::delay_claims(worker_id, delay)
}

/// Where a claim's answer waits if a test gated or delayed the worker's claims.
#[cfg(feature = "fault-injection")]
pub(crate) async fn claim_returned(worker_id: &str) {
    if let Some(d) = armed::claim_delay(worker_id) {
        tokio::time::sleep(d).await;
    }
    if let Some(g) = armed::claim_gate(worker_id) {
        g.arrived.add_permits(1);
        if let Ok(p) = g.open.acquire().await {
            drop(p);
        }
    }
}

/// A producer took a wake-up (counted for a test that gated the worker's claims).
#[cfg(feature = "fault-injection")]
pub(crate) fn producer_woken(worker_id: &str) {
    if let Some(g) = armed::claim_gate(worker_id) {
        g.woken.add_permits(1);
    }
}

/// Nothing to count: fault injection is compiled out.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn producer_woken(_worker_id: &str) {}

/// Nothing waits: fault injection is compiled out.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) async fn claim_returned(_worker_id: &str) {}

/// Makes every pack of `host` in this process wait `delay` between building and uploading.
#[cfg(feature = "fault-injection")]
pub fn delay_upload(host: &str, delay: Duration) {
    armed::delay_upload(host, delay)
}

/// How many packs of `host` have reached the delay [`delay_upload`] armed: each had read all
/// its pages (its statement's snapshot is taken) and built its artifact. A test waits on this,
/// not on `pg_stat_activity`: a connection shows the pages query as its last, idle in its
/// transaction, already after the statement was only prepared (sqlx sends Parse and Describe
/// with a Sync of their own before Bind and Execute), so a change committed then is still seen
/// (crates/skiplock-cli/tests/pack.rs, `a_reset_during_a_pack_gives_a_second_pack_with_the_new_content`).
#[cfg(feature = "fault-injection")]
pub fn upload_delays_reached(host: &str) -> usize {
    armed::upload_delays_reached(host)
}

/// How long the pack of `host` waits before its upload: what [`delay_upload`] armed, else
/// `SKIPLOCK_FAULT_UPLOAD_DELAY` (for a worker process a test spawns and then kills), else 0.
#[cfg(feature = "fault-injection")]
#[cfg_attr(not(feature = "pack"), allow(dead_code))]
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
#[cfg(all(feature = "pack", not(feature = "fault-injection")))]
#[inline(always)]
pub(crate) fn upload_delay(_host: &str) -> Duration {
    Duration::ZERO
}

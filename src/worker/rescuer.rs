//! The rescuer: running jobs whose heartbeat is older than the rescue timeout belonged to a
//! worker that died. They go back to `available` (or `discarded` when out of attempts), with
//! the reason appended to `errors`. A live worker beats four times per timeout, so it is
//! never rescued; if it was merely stalled, its late ack is fenced off.
//!
//! **Outages.** A heartbeat can also be stale because nobody could reach the database. So
//! the rescuer rescues nothing until its process has been connected without a failure for
//! a whole rescue window ([`crate::db::outage::Availability`]: any runtime statement that
//! finds the database unavailable restarts that clock, as does the process's start), and
//! the statement itself refuses while the server has been up for less than a window. Live
//! workers write their heartbeats first when they reconnect, well inside that window; a
//! worker that really died during the outage has its jobs rescued one window after the
//! database came back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::service::Service;
use crate::db::outage::{Availability, may_rescue};
use crate::error::Result;
use crate::store::{self, Pool};
use crate::worker::handler::BoxFuture;
use crate::worker::hooks::{Hooks, Rescued};

/// Rows handled per statement.
pub const BATCH: i64 = 1000;

/// Returns orphaned running jobs to the queue.
pub struct Rescuer {
    rescue_after: Duration,
    availability: Arc<Availability>,
    gated: Arc<AtomicBool>,
    hooks: Hooks,
}

impl Rescuer {
    /// A rescuer for jobs whose heartbeat is older than `rescue_after`, gated by this
    /// process's view of the database's `availability`.
    pub fn new(rescue_after: Duration, availability: Arc<Availability>) -> Self {
        Rescuer {
            rescue_after,
            availability,
            gated: Arc::new(AtomicBool::new(false)),
            hooks: Hooks::default(),
        }
    }

    /// Tells `hooks` of every job it rescues ([`Hook::rescued`](super::Hook::rescued)).
    pub(crate) fn with_hooks(mut self, hooks: Hooks) -> Self {
        self.hooks = hooks;
        self
    }
}

/// Edges one sweep statement settles at most (cancel cascades included); the rescuer calls it
/// again while a statement settles that many, at most [`SETTLE_STATEMENTS`] times a pass.
pub(super) const SETTLE_BATCH: i32 = 1000;
/// Sweep statements one pass runs at most (20,000 edges): the rest is the next pass's (every
/// half rescue timeout, at most 30 s). Without a bound, a pass followed any enqueuer's fan-out
/// or cascade of millions of edges to its end before it forgot silent workers or let the next
/// pass rescue.
pub const SETTLE_STATEMENTS: usize = 20;

/// Rescues up to [`BATCH`] rows per statement until none are left; returns how many.
pub async fn rescue(pool: &Pool, rescue_after: Duration) -> Result<u64> {
    rescue_telling(pool, rescue_after, &Hooks::default()).await
}

/// [`rescue`], telling `hooks` of each job.
async fn rescue_telling(pool: &Pool, rescue_after: Duration, hooks: &Hooks) -> Result<u64> {
    let mut total = 0u64;
    loop {
        let rows = store::rescue::rescue(pool, rescue_after, BATCH).await?;
        for r in &rows {
            tracing::warn!(job.id = r.id, job.kind = %r.kind, new_state = %r.state, "rescued a job whose worker stopped sending heartbeats");
            crate::metrics::rescued(&r.kind, r.state);
            if !hooks.is_empty() {
                hooks.rescued(&Rescued {
                    id: r.id,
                    kind: r.kind.clone(),
                    state: r.state,
                });
            }
        }
        total += rows.len() as u64;
        if (rows.len() as i64) < BATCH {
            break;
        }
    }
    // Jobs this pass (or the reaper, or a claim) discarded without settling their flows:
    // their dependents are released or cancelled now, not at the next ack of a dependency
    // (sql/api/12_flows.sql, skiplock.settle_dependencies).
    for _ in 0..SETTLE_STATEMENTS {
        if store::flows::settle_dependencies(pool, SETTLE_BATCH).await? < SETTLE_BATCH as i64 {
            break;
        }
    }
    // Forget worker rows that have been silent for much longer than the rescue timeout.
    let silent_for = (rescue_after * 10).max(Duration::from_secs(600));
    store::rescue::forget_workers(pool, silent_for).await?;
    Ok(total)
}

impl Service for Rescuer {
    fn name(&self) -> &'static str {
        "rescuer"
    }
    fn interval(&self) -> Duration {
        (self.rescue_after / 2).clamp(Duration::from_millis(100), Duration::from_secs(30))
    }
    fn run_once(&self, pool: Pool) -> BoxFuture<Result<u64>> {
        let after = self.rescue_after;
        let availability = self.availability.clone();
        let gated = self.gated.clone();
        let hooks = self.hooks.clone();
        Box::pin(async move {
            let up_for = availability.up_for();
            if !may_rescue(up_for, after) {
                if availability.failures() > 0 && !gated.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        "rescuer: the database was unavailable; rescuing nothing until it has been reachable for {} (live workers' heartbeats land first)",
                        humantime::format_duration(after)
                    );
                }
                return Ok(0);
            }
            if gated.swap(false, Ordering::Relaxed) {
                tracing::info!(
                    "rescuer: the database has been reachable for a whole rescue window; rescuing again"
                );
            }
            match rescue_telling(&pool, after, &hooks).await {
                Ok(n) => {
                    availability.success();
                    Ok(n)
                }
                Err(e) => {
                    availability.observe(&e);
                    Err(e)
                }
            }
        })
    }
}

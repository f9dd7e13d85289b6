//! Maintenance, built on the worker's contracts ([`crate::worker::handler::Handler`],
//! [`Service`]) and installed by [`crate::worker::WorkerBuilder`] by default: the
//! periodic-job scheduler is a [`Service`] every worker process runs; the reaper and
//! retention are periodic *jobs* (kinds `reap` and `retain`, see [`builtin_jobs`]): enqueued
//! once per `SKIPLOCK_REAPER_INTERVAL` across all processes by the scheduler, run by
//! whichever worker claims them, each run is a row with its result. [`parts`] builds their
//! handlers together with the scheduler that enqueues them, so no worker declares a kind it
//! cannot run. The rescuer is part of the worker runtime itself (`rescuer`).
//!
//! This module depends on the worker's handler and service contracts; the worker's builder
//! depends on it (to install it), and nothing in it reaches back into the builder.

pub mod periodic;
pub mod reaper;
pub mod retention;

use std::time::Duration;

use crate::config::env_duration;
use crate::error::{Error, Result};
use crate::queue::NewJob;

#[cfg(feature = "internals")]
pub use crate::worker::rescuer;
pub use crate::worker::service::{Service, failure_wait_cap, supervise};

/// The queue of the built-in maintenance jobs (`reap`, `retain`). A name of skiplock's own, so
/// that adding it to a worker's queues never serves (and throttles) a queue of the user's.
pub const QUEUE: &str = "skiplock.maintenance";
/// Slots a worker with an explicit queue list gives [`QUEUE`] unless it lists it itself: one
/// each for `reap` and `retain`, so a long retention pass never delays a reaper run.
pub const QUEUE_CONCURRENCY: usize = 2;

/// The built-in periodic jobs: `reap` (the reaper) and `retain` (retention), each every
/// interval of its settings (`SKIPLOCK_REAPER_INTERVAL`), in [`QUEUE`], with one attempt (a
/// failed run is recorded in its row and the next period runs anyway). Their periodic names
/// are their kinds.
pub fn builtin_jobs(
    reaper: &reaper::ReaperSettings,
    retention: &retention::RetentionSettings,
) -> Result<periodic::PeriodicJobs> {
    let job = |kind: &'static str, every: Duration| {
        periodic::PeriodicJob::every(
            kind,
            every,
            NewJob::new(kind, serde_json::json!({}))
                .queue(QUEUE)
                .max_attempts(1),
        )
        .map_err(|e| Error::config("SKIPLOCK_REAPER_INTERVAL", e.to_string()))
    };
    Ok(periodic::PeriodicJobs::new()
        .add(job(reaper::KIND, reaper.interval)?)
        .add(job(retention::KIND, retention.interval)?))
}

/// The settings of the maintenance a worker installs by default.
#[derive(Debug, Clone, Default)]
pub struct MaintenanceSettings {
    /// The reaper's (`SKIPLOCK_REAPER_MAX_AGE`, `SKIPLOCK_REAPER_INTERVAL`).
    pub reaper: reaper::ReaperSettings,
    /// Retention's (`SKIPLOCK_RETAIN_COMPLETED`, `SKIPLOCK_RETAIN_FAILED`).
    pub retention: retention::RetentionSettings,
    /// Periodic jobs to schedule besides `reap` and `retain` (those of
    /// `SKIPLOCK_PERIODIC_FILE`, and any declared in code).
    pub periodic: periodic::PeriodicJobs,
}

impl MaintenanceSettings {
    /// Reads every maintenance setting from the environment, validated (for a program's
    /// edge, e.g. `skiplock worker`; the library itself never calls it).
    pub fn from_env() -> Result<Self> {
        let (reaper, retention) = Self::services_from_env()?;
        Ok(MaintenanceSettings {
            reaper,
            retention,
            periodic: periodic::PeriodicJobs::from_env()?,
        })
    }

    /// The reaper's and retention's settings from the environment, validated:
    /// `SKIPLOCK_REAPER_MAX_AGE`, `SKIPLOCK_RETAIN_COMPLETED`, `SKIPLOCK_RETAIN_FAILED`, and
    /// `SKIPLOCK_REAPER_INTERVAL` (read once: it is the period of both jobs).
    pub fn services_from_env() -> Result<(reaper::ReaperSettings, retention::RetentionSettings)> {
        let reaper = Self::reaper_from_env()?;
        let t = retention::RetentionSettings::default();
        let retention = retention::RetentionSettings {
            completed: env_duration("SKIPLOCK_RETAIN_COMPLETED", t.completed)?,
            failed: env_duration("SKIPLOCK_RETAIN_FAILED", t.failed)?,
            interval: reaper.interval,
        };
        retention.validate()?;
        Ok((reaper, retention))
    }

    /// The reaper's settings from the environment, validated (`skiplock reap` needs no more).
    pub fn reaper_from_env() -> Result<reaper::ReaperSettings> {
        let r = reaper::ReaperSettings::default();
        let reaper = reaper::ReaperSettings {
            max_age: env_duration("SKIPLOCK_REAPER_MAX_AGE", r.max_age)?,
            interval: env_duration("SKIPLOCK_REAPER_INTERVAL", r.interval)?,
        };
        reaper.validate()?;
        Ok(reaper)
    }
}

/// The maintenance of one worker: the `reap` and `retain` handlers and the scheduler that
/// enqueues them and the other periodic jobs.
pub struct Parts {
    /// The `reap` handler.
    pub reaper: reaper::Reaper,
    /// The `retain` handler.
    pub retention: retention::Retention,
    /// The periodic-job scheduler (a service).
    pub scheduler: periodic::Scheduler,
}

/// Builds the maintenance of a worker whose handlers use `pool`.
pub fn parts(pool: crate::store::Pool, s: MaintenanceSettings) -> Result<Parts> {
    s.reaper.validate()?;
    s.retention.validate()?;
    let reaper = reaper::Reaper::new(pool, s.reaper);
    let retention = retention::Retention {
        settings: s.retention,
    };
    parts_from(reaper, retention, s.periodic)
}

/// Like [`parts`], with the reaper and retention built by the caller (a test keeps a clone
/// of the reaper to watch its counters).
pub fn parts_from(
    reaper: reaper::Reaper,
    retention: retention::Retention,
    jobs: periodic::PeriodicJobs,
) -> Result<Parts> {
    // The built-in jobs first: each job's enqueue is independent of the others'
    // (`periodic::Scheduler::tick_once`), and `reap` and `retain` also never wait behind a
    // user job's statement within a tick.
    let jobs = builtin_jobs(&reaper.settings(), &retention.settings)?.extend(jobs);
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let scheduler = periodic::Scheduler::new(jobs, format!("{host}:{}", std::process::id()))?;
    Ok(Parts {
        reaper,
        retention,
        scheduler,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_jobs_are_reap_and_retain_every_reaper_interval_in_their_queue() {
        let r = reaper::ReaperSettings {
            interval: Duration::from_secs(45),
            ..Default::default()
        };
        let t = retention::RetentionSettings::default();
        let jobs = builtin_jobs(&r, &t).unwrap();
        let got: Vec<_> = jobs
            .jobs()
            .iter()
            .map(|j| {
                (
                    j.name.as_str(),
                    j.job.kind.as_str(),
                    j.job.queue.as_str(),
                    j.schedule.describe(),
                    j.job.max_attempts,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("reap", "reap", QUEUE, "every 45s".to_string(), 1),
                ("retain", "retain", QUEUE, "every 30s".to_string(), 1),
            ]
        );
        let bad = reaper::ReaperSettings {
            interval: Duration::from_millis(1500) + Duration::from_nanos(1),
            ..Default::default()
        };
        let e = builtin_jobs(&bad, &t).unwrap_err().to_string();
        assert!(e.contains("SKIPLOCK_REAPER_INTERVAL"), "{e}");
    }
}

//! `skiplock-devtools bench --pressure`: sustained load while Postgres cannot vacuum.
//!
//! A producer enqueues no-op jobs at a fixed offered rate (credited on wall-clock time, in
//! small `enqueue_many` calls) while one `skiplock worker --queues default=N` process, as users
//! run it, drains them. Each scenario runs on a fresh database in three phases: clean, then
//! pressure, then recovery. The pressure is either a session holding a transaction id (the
//! vacuum horizon stays where it was: `idle in transaction`) or four `REPEATABLE READ` readers,
//! each counting the queue's table twice a second in one long transaction. Graphile Worker
//! (`scripts/graphile/pressure.js`) runs the same phases at the same rate in the same run.
//!
//! Every second the run records what was offered and completed, the pickup latency of each
//! completed job and the dead tuples of the queue's tables; [`summarize`] turns that into
//! per-phase figures (completion rate as a share of the offered rate, median of 5-second
//! samples; pickup p50/p95/p99/max; backlog; how long the backlog took to drain after the
//! pressure ended). A ramp (`--ramp`) finds the highest rate the worker sustains clean.
//!
//! skiplock's figures are read from the database: a job is completed when its ack committed
//! (`finalized_at`), and its pickup is `attempted_at - created_at` (both the database's clock).
//! Graphile's are what its harness reports: a job is completed when its task returned (before
//! Graphile's batched completion is written) and its pickup runs from the producer's clock to
//! the task's start. Both are on the same machine.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, Semaphore};
use tokio_util::sync::CancellationToken;

use super::peers::Graphile;
use super::stats::percentile;
use super::{BenchDb, same_transport, store};
use skiplock::Pool as PgPool;
use skiplock::error::{Error, Result};

/// What makes Postgres unable to vacuum during a scenario's pressure phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// One session holds a transaction id (`BEGIN; SELECT txid_current();`, then idle).
    HeldXmin,
    /// Four `REPEATABLE READ` transactions, each counting the queue's table twice a second.
    Readers,
}

impl Scenario {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::HeldXmin => "held-xmin",
            Scenario::Readers => "readers",
        }
    }

    /// Parses `held-xmin` or `readers`.
    pub fn parse(s: &str) -> Result<Scenario> {
        match s.trim() {
            "held-xmin" | "held" => Ok(Scenario::HeldXmin),
            "readers" => Ok(Scenario::Readers),
            other => Err(Error::Invalid(format!(
                "bench: unknown pressure scenario {other:?} (held-xmin or readers)"
            ))),
        }
    }
}

/// The queue under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    /// `skiplock worker` (the CLI, maintenance on).
    Skiplock,
    /// Graphile Worker through `scripts/graphile/pressure.js`.
    Graphile,
}

impl System {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            System::Skiplock => "skiplock",
            System::Graphile => "graphile",
        }
    }
}

/// A phase of a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Nothing holds the horizon.
    Clean,
    /// The scenario's pressure is on.
    Pressure,
    /// The pressure has ended.
    Recovery,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct PressureOptions {
    /// Offered jobs per second.
    pub rate: f64,
    /// Length of the clean phase.
    pub clean: Duration,
    /// Length of the pressure phase.
    pub pressure: Duration,
    /// Length of the recovery phase.
    pub recovery: Duration,
    /// The scenarios, each on a fresh database.
    pub scenarios: Vec<Scenario>,
    /// The worker's concurrency (`--queues default=N`).
    pub concurrency: usize,
    /// The `skiplock` binary whose `worker` runs.
    pub worker_bin: PathBuf,
    /// Whether skiplock runs (false: Graphile only, to probe its rate).
    pub skiplock: bool,
    /// The Graphile harness (None: skiplock only).
    pub graphile: Option<Graphile>,
    /// Also find the highest rate sustained clean.
    pub ramp: bool,
    /// How long each step of the ramp runs.
    pub ramp_step: Duration,
}

/// One second of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Tick {
    /// Seconds since the scenario started.
    pub t: f64,
    /// The phase it belongs to.
    pub phase: Phase,
    /// Jobs offered (committed by the producer) in this second.
    pub offered: u64,
    /// Jobs completed in this second.
    pub completed: u64,
    /// Offered but not completed, at the end of this second.
    pub backlog: i64,
    /// Pickup latency of each job completed in this second, ms.
    #[serde(skip)]
    pub pickup_ms: Vec<f64>,
    /// Dead tuples of the queue's tables (the statistics' figure, read every 5 s; -1: not read).
    pub dead_tuples: i64,
}

/// A phase's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseFigures {
    pub phase: Phase,
    pub secs: f64,
    /// Median of the 5-second samples of completed jobs/s.
    pub completed_per_s: f64,
    /// `completed_per_s` / the offered rate.
    pub completion_ratio: f64,
    /// Offered jobs/s actually enqueued (the producer's own rate).
    pub offered_per_s: f64,
    pub pickup_p50_ms: Option<f64>,
    pub pickup_p95_ms: Option<f64>,
    pub pickup_p99_ms: Option<f64>,
    pub pickup_max_ms: Option<f64>,
    /// Backlog at the phase's end, and the most it reached.
    pub backlog_end: i64,
    pub backlog_max: i64,
    /// Dead tuples at the phase's end (-1: not read).
    pub dead_tuples_end: i64,
    /// For a recovery phase: seconds after the pressure ended until the backlog was under one
    /// second's worth of jobs (None: not within the phase).
    pub recovered_after_s: Option<f64>,
}

/// One scenario of one system.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioRun {
    pub system: System,
    pub scenario: Scenario,
    pub rate: f64,
    pub phases: Vec<PhaseFigures>,
    pub ticks: Vec<Tick>,
    /// 5-second windows: (t at the window's end, completed/s, pickup p95 ms).
    pub windows: Vec<(f64, f64, Option<f64>)>,
}

/// A ramp's step.
#[derive(Debug, Clone, Serialize)]
pub struct RampStep {
    pub rate: f64,
    pub completion_ratio: f64,
    pub pickup_p95_ms: Option<f64>,
    pub backlog_end: i64,
    pub sustained: bool,
}

/// The highest rate sustained clean.
#[derive(Debug, Clone, Serialize)]
pub struct Ramp {
    pub system: System,
    pub steps: Vec<RampStep>,
    pub max_sustained: Option<f64>,
}

/// Everything `--pressure` measured.
#[derive(Debug, Clone, Serialize)]
pub struct PressureReport {
    pub rate: f64,
    pub concurrency: usize,
    pub runs: Vec<ScenarioRun>,
    pub ramps: Vec<Ramp>,
    pub graphile_worker: Option<String>,
    /// The server's version and settings ([`super::postgres_facts`]).
    pub postgres: BTreeMap<String, String>,
}

/// The rates the ramp tries, in order, until one is not sustained.
pub const RAMP_RATES: [f64; 14] = [
    1000.0, 2000.0, 3000.0, 4000.0, 6000.0, 8000.0, 10_000.0, 12_000.0, 15_000.0, 18_000.0,
    21_000.0, 25_000.0, 30_000.0, 40_000.0,
];

/// Whether a rate counts as sustained: completion at least this share of the offered rate,
/// pickup p95 at most [`SUSTAINED_P95_MS`], and at most one second's worth of backlog left.
pub const SUSTAINED_RATIO: f64 = 0.95;
/// See [`SUSTAINED_RATIO`].
pub const SUSTAINED_P95_MS: f64 = 1000.0;

/// Per-phase figures of a run's ticks (pure: unit-tested).
pub fn summarize(ticks: &[Tick], rate: f64, pressure_end: Option<f64>) -> Vec<PhaseFigures> {
    let mut out = Vec::new();
    for phase in [Phase::Clean, Phase::Pressure, Phase::Recovery] {
        let ts: Vec<&Tick> = ticks.iter().filter(|t| t.phase == phase).collect();
        if ts.is_empty() {
            continue;
        }
        let secs = ts.len() as f64;
        let per_window: Vec<f64> = ts
            .chunks(5)
            .filter(|c| c.len() == 5)
            .map(|c| c.iter().map(|t| t.completed as f64).sum::<f64>() / 5.0)
            .collect();
        let completed_per_s = median(&per_window)
            .unwrap_or_else(|| ts.iter().map(|t| t.completed as f64).sum::<f64>() / secs);
        let offered_per_s = ts.iter().map(|t| t.offered as f64).sum::<f64>() / secs;
        let mut lat: Vec<f64> = ts
            .iter()
            .flat_map(|t| t.pickup_ms.iter().copied())
            .collect();
        lat.sort_by(f64::total_cmp);
        let pct = |p: f64| (!lat.is_empty()).then(|| percentile(&lat, p));
        let recovered_after_s = match (phase, pressure_end) {
            (Phase::Recovery, Some(end)) => ts
                .iter()
                .find(|t| t.backlog as f64 <= rate)
                .map(|t| (t.t - end).max(0.0)),
            _ => None,
        };
        out.push(PhaseFigures {
            phase,
            secs,
            completed_per_s,
            completion_ratio: completed_per_s / rate,
            offered_per_s,
            pickup_p50_ms: pct(50.0),
            pickup_p95_ms: pct(95.0),
            pickup_p99_ms: pct(99.0),
            pickup_max_ms: lat.last().copied(),
            backlog_end: ts.last().map(|t| t.backlog).unwrap_or(0),
            backlog_max: ts.iter().map(|t| t.backlog).max().unwrap_or(0),
            dead_tuples_end: ts
                .iter()
                .rev()
                .map(|t| t.dead_tuples)
                .find(|d| *d >= 0)
                .unwrap_or(-1),
            recovered_after_s,
        });
    }
    out
}

/// 5-second windows of a run's ticks: (end, completed/s, pickup p95 ms), for the picture.
pub fn windows(ticks: &[Tick]) -> Vec<(f64, f64, Option<f64>)> {
    ticks
        .chunks(5)
        .map(|c| {
            let done = c.iter().map(|t| t.completed as f64).sum::<f64>() / c.len() as f64;
            let mut lat: Vec<f64> = c.iter().flat_map(|t| t.pickup_ms.iter().copied()).collect();
            lat.sort_by(f64::total_cmp);
            let p95 = (!lat.is_empty()).then(|| percentile(&lat, 95.0));
            (c.last().map(|t| t.t).unwrap_or(0.0), done, p95)
        })
        .collect()
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some(percentile(&s, 50.0))
}

/// Whether a ramp step's ticks (after its first 5 seconds) count as sustained.
pub fn ramp_step(ticks: &[Tick], rate: f64) -> RampStep {
    let settled: Vec<Tick> = ticks.iter().skip(5).cloned().collect();
    let f = summarize(&settled, rate, None);
    let f = f.first();
    let completion_ratio = f.map(|f| f.completion_ratio).unwrap_or(0.0);
    let pickup_p95_ms = f.and_then(|f| f.pickup_p95_ms);
    let backlog_end = f.map(|f| f.backlog_end).unwrap_or(i64::MAX);
    RampStep {
        rate,
        completion_ratio,
        pickup_p95_ms,
        backlog_end,
        sustained: completion_ratio >= SUSTAINED_RATIO
            && pickup_p95_ms.is_some_and(|p| p <= SUSTAINED_P95_MS)
            && backlog_end as f64 <= rate,
    }
}

/// Runs every scenario for skiplock and (when given) Graphile, then the ramps.
pub async fn run(
    server_url: &str,
    o: &PressureOptions,
    progress: impl Fn(&str),
) -> Result<PressureReport> {
    if let Some(g) = &o.graphile {
        g.check_script("pressure.js")?;
    }
    let server_url = same_transport(server_url)?;
    let postgres = {
        let p = skiplock::db::connect(&server_url, 1).await?;
        let facts = super::postgres_facts(&p).await;
        p.close().await;
        facts?
    };
    let mut report = PressureReport {
        rate: o.rate,
        concurrency: o.concurrency,
        runs: Vec::new(),
        ramps: Vec::new(),
        graphile_worker: None,
        postgres,
    };
    let mut systems = Vec::new();
    if o.skiplock {
        systems.push(System::Skiplock);
    }
    if o.graphile.is_some() {
        systems.push(System::Graphile);
    }
    for &scenario in &o.scenarios {
        for &system in &systems {
            progress(&format!(
                "{} under {}: {:.0} jobs/s, clean {}s, pressure {}s, recovery {}s",
                system.name(),
                scenario.name(),
                o.rate,
                o.clean.as_secs(),
                o.pressure.as_secs(),
                o.recovery.as_secs()
            ));
            let schedule = [
                (Phase::Clean, o.clean),
                (Phase::Pressure, o.pressure),
                (Phase::Recovery, o.recovery),
            ];
            let (ticks, version) =
                run_phases(&server_url, system, Some(scenario), o, o.rate, &schedule).await?;
            if version.is_some() {
                report.graphile_worker = version;
            }
            let pressure_end = (o.clean + o.pressure).as_secs_f64();
            report.runs.push(ScenarioRun {
                system,
                scenario,
                rate: o.rate,
                phases: summarize(&ticks, o.rate, Some(pressure_end)),
                windows: windows(&ticks),
                ticks,
            });
        }
    }
    if o.ramp {
        for &system in &systems {
            progress(&format!("{}: highest rate sustained clean", system.name()));
            report.ramps.push(ramp(&server_url, system, o).await?);
        }
    }
    Ok(report)
}

/// The ramp of one system: [`RAMP_RATES`] in turn on one database and worker, each for
/// `o.ramp_step`, until one is not sustained.
async fn ramp(server_url: &str, system: System, o: &PressureOptions) -> Result<Ramp> {
    let mut steps = Vec::new();
    for rate in RAMP_RATES {
        // Each step on a fresh database and worker: a step's backlog does not weigh on the next.
        let (ticks, _) = run_phases(
            server_url,
            system,
            None,
            o,
            rate,
            &[(Phase::Clean, o.ramp_step)],
        )
        .await?;
        let step = ramp_step(&ticks, rate);
        let go_on = step.sustained;
        steps.push(step);
        if !go_on {
            break;
        }
    }
    let max_sustained = steps
        .iter()
        .take_while(|s| s.sustained)
        .map(|s| s.rate)
        .last();
    Ok(Ramp {
        system,
        steps,
        max_sustained,
    })
}

/// The queue under test, running.
enum Runner {
    Skiplock(tokio::process::Child),
    Graphile {
        child: tokio::process::Child,
        stdin: tokio::process::ChildStdin,
        samples: Arc<Mutex<GraphileSamples>>,
    },
}

#[derive(Default)]
struct GraphileSamples {
    done: u64,
    pickup_ms: Vec<f64>,
    failed: Option<String>,
}

#[derive(Deserialize)]
struct GraphileLine {
    #[serde(default)]
    ready: bool,
    graphile_worker: Option<String>,
    #[serde(default)]
    done: u64,
    #[serde(default)]
    pickup_ms: Vec<f64>,
}

/// Runs one system through `schedule` on a fresh database at `rate`; returns the ticks (and
/// Graphile's version).
async fn run_phases(
    server_url: &str,
    system: System,
    scenario: Option<Scenario>,
    o: &PressureOptions,
    rate: f64,
    schedule: &[(Phase, Duration)],
) -> Result<(Vec<Tick>, Option<String>)> {
    let db = BenchDb::create(server_url).await?;
    let r = run_phases_in(&db, system, scenario, o, rate, schedule).await;
    db.drop_db().await;
    r
}

async fn run_phases_in(
    db: &BenchDb,
    system: System,
    scenario: Option<Scenario>,
    o: &PressureOptions,
    rate: f64,
    schedule: &[(Phase, Duration)],
) -> Result<(Vec<Tick>, Option<String>)> {
    let url = db.url.as_str();
    let monitor = store::monitor(url).await?;
    let mut version = None;
    let mut runner = match system {
        System::Skiplock => {
            skiplock::store::schema::migrate_parts(&monitor, &skiplock_workflows::schemas())
                .await?;
            let child = tokio::process::Command::new(&o.worker_bin)
                .args(["worker", "--queues"])
                .arg(format!("default={}", o.concurrency))
                .env("DATABASE_URL", url)
                .env("RUST_LOG", "error")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| {
                    Error::Other(format!(
                        "bench: cannot start {} worker: {e}",
                        o.worker_bin.display()
                    ))
                })?;
            let deadline = Instant::now() + Duration::from_secs(60);
            while store::pressure_workers(&monitor).await? == 0 {
                if Instant::now() > deadline {
                    return Err(Error::Other(
                        "bench: the worker did not register within 60s".into(),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Runner::Skiplock(child)
        }
        System::Graphile => {
            let g = o
                .graphile
                .as_ref()
                .ok_or_else(|| Error::Invalid("bench: no Graphile harness given".into()))?;
            let mut child = tokio::process::Command::new(&g.node)
                .arg(g.dir.join("pressure.js"))
                .args(["--concurrency", &o.concurrency.to_string()])
                .args(["--local-queue", "500"])
                .env("DATABASE_URL", url)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| Error::Other(format!("bench: cannot start `{}`: {e}", g.node)))?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(Error::Other(
                    "bench: the Graphile harness has no pipes".into(),
                ));
            };
            let mut lines = BufReader::new(stdout).lines();
            let first = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
                .await
                .map_err(|_| Error::Other("bench: the Graphile harness is not ready".into()))??
                .ok_or_else(|| Error::Other("bench: the Graphile harness exited".into()))?;
            let ready: GraphileLine = serde_json::from_str(&first).map_err(|e| {
                Error::Other(format!(
                    "bench: the Graphile harness said {first:.200} ({e})"
                ))
            })?;
            if !ready.ready {
                return Err(Error::Other(
                    "bench: the Graphile harness is not ready".into(),
                ));
            }
            version = ready.graphile_worker;
            let samples = Arc::new(Mutex::new(GraphileSamples::default()));
            let s = samples.clone();
            tokio::spawn(async move {
                loop {
                    match lines.next_line().await {
                        Ok(Some(l)) => match serde_json::from_str::<GraphileLine>(&l) {
                            Ok(g) => {
                                let mut s = s.lock().await;
                                s.done += g.done;
                                s.pickup_ms
                                    .extend(g.pickup_ms.into_iter().filter(|p| *p >= 0.0));
                            }
                            Err(e) => s.lock().await.failed = Some(format!("{e}: {l:.200}")),
                        },
                        Ok(None) => break,
                        Err(e) => {
                            s.lock().await.failed = Some(e.to_string());
                            break;
                        }
                    }
                }
            });
            Runner::Graphile {
                child,
                stdin,
                samples,
            }
        }
    };

    let stop = CancellationToken::new();
    let offered = Arc::new(AtomicU64::new(0));
    let producer = {
        let pool = store::pool(url, 5).await?;
        let (stop, offered) = (stop.clone(), offered.clone());
        tokio::spawn(produce(pool, system, rate, offered, stop))
    };

    let mut ticks: Vec<Tick> = Vec::new();
    // skiplock's completions are read for a window that ends LAG behind now: an ack whose
    // finalized_at is in the window may commit a moment later.
    const LAG: f64 = 2.0;
    let t0 = store::clock(&monitor).await?;
    let mut offered_at: Vec<(f64, u64)> = vec![(t0, 0)];
    let mut completed_total: u64 = 0;
    let mut window_from = t0 - LAG;
    let mut phase_start = 0.0;
    let mut pressure: Option<Pressure> = None;
    for &(phase, len) in schedule {
        if phase == Phase::Pressure {
            pressure = Some(Pressure::start(url, system, scenario).await?);
        }
        if phase == Phase::Recovery
            && let Some(p) = pressure.take()
        {
            p.stop().await;
        }
        let phase_end = phase_start + len.as_secs_f64();
        let mut next = Instant::now();
        loop {
            next += Duration::from_secs(1);
            tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
            let now = store::clock(&monitor).await?;
            let offered_now = offered.load(Ordering::Relaxed);
            offered_at.push((now, offered_now));
            let (t, completed, pickup_ms, backlog) = match &mut runner {
                Runner::Skiplock(child) => {
                    if let Ok(Some(status)) = child.try_wait() {
                        return Err(Error::Other(format!(
                            "bench: the worker exited with {status} during the run"
                        )));
                    }
                    let to = now - LAG;
                    let pickups = store::pressure_completed(&monitor, window_from, to).await?;
                    window_from = to;
                    completed_total += pickups.len() as u64;
                    let offered_then = offered_by(&offered_at, to);
                    // The producer counts a batch once its commit has returned, so a job
                    // may finish before it is counted as offered: a worker that keeps up
                    // would otherwise show a backlog of a few dozen below zero.
                    (
                        to - t0,
                        pickups.len() as u64,
                        pickups,
                        (offered_then as i64 - completed_total as i64).max(0),
                    )
                }
                Runner::Graphile { samples, .. } => {
                    let mut s = samples.lock().await;
                    if let Some(e) = s.failed.take() {
                        return Err(Error::Other(format!("bench: the Graphile harness: {e}")));
                    }
                    let done = std::mem::take(&mut s.done);
                    completed_total += done;
                    (
                        now - t0,
                        done,
                        std::mem::take(&mut s.pickup_ms),
                        offered_now as i64 - completed_total as i64,
                    )
                }
            };
            let dead_tuples = if ticks.len() % 5 == 4 {
                store::pressure_dead_tuples(&monitor, system.schema()).await?
            } else {
                -1
            };
            let prev = offered_at
                .len()
                .checked_sub(2)
                .map(|i| offered_at[i].1)
                .unwrap_or(0);
            // A tick belongs to the phase its window ends in (skiplock's lag behind now).
            if t < 0.0 {
                continue;
            }
            ticks.push(Tick {
                t,
                phase: phase_at(schedule, t),
                offered: offered_now - prev,
                completed,
                backlog,
                pickup_ms,
                dead_tuples,
            });
            if now - t0 >= phase_end {
                break;
            }
        }
        phase_start = phase_end;
    }
    if let Some(p) = pressure.take() {
        p.stop().await;
    }
    stop.cancel();
    let _ = producer.await;
    match runner {
        Runner::Skiplock(mut child) => {
            stop_child(&mut child).await;
        }
        Runner::Graphile {
            mut child,
            mut stdin,
            ..
        } => {
            let _ = stdin.write_all(b"stop\n").await;
            let _ = stdin.flush().await;
            drop(stdin);
            if tokio::time::timeout(Duration::from_secs(30), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
    }
    monitor.close().await;
    Ok((ticks, version))
}

/// The phase of `schedule` that second `t` of a run falls in.
fn phase_at(schedule: &[(Phase, Duration)], t: f64) -> Phase {
    let mut end = 0.0;
    for &(phase, len) in schedule {
        end += len.as_secs_f64();
        if t < end {
            return phase;
        }
    }
    schedule.last().map(|(p, _)| *p).unwrap_or(Phase::Clean)
}

/// The offered total at database time `t`, interpolated between the readings taken each
/// second.
fn offered_by(readings: &[(f64, u64)], t: f64) -> u64 {
    let after = readings.iter().position(|(at, _)| *at > t);
    match after {
        None => readings.last().map(|(_, n)| *n).unwrap_or(0),
        Some(0) => 0,
        Some(i) => {
            let (t0, n0) = readings[i - 1];
            let (t1, n1) = readings[i];
            let f = ((t - t0) / (t1 - t0)).clamp(0.0, 1.0);
            n0 + ((n1 - n0) as f64 * f) as u64
        }
    }
}

impl System {
    fn schema(self) -> &'static str {
        match self {
            System::Skiplock => "skiplock",
            System::Graphile => "graphile_worker",
        }
    }
}

/// SIGTERM (a clean stop), then SIGKILL after 30 s.
async fn stop_child(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) with a pid this process started and still owns.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
    }
    if tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// The producer: every 10 ms, one call with the jobs owed at `rate` since it started (at most
/// [`MAX_BATCH`]; more calls when it fell behind), at most 4 calls in flight. `offered`
/// counts the jobs whose call committed.
async fn produce(
    pool: PgPool,
    system: System,
    rate: f64,
    offered: Arc<AtomicU64>,
    stop: CancellationToken,
) {
    const MAX_BATCH: u64 = 500;
    let started = Instant::now();
    let sent = Arc::new(AtomicU64::new(0));
    let slots = Arc::new(Semaphore::new(4));
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let owed = (rate * started.elapsed().as_secs_f64()) as u64;
        while sent.load(Ordering::Relaxed) < owed {
            let n = (owed - sent.load(Ordering::Relaxed)).min(MAX_BATCH);
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                break;
            };
            sent.fetch_add(n, Ordering::Relaxed);
            let (pool, offered, sent) = (pool.clone(), offered.clone(), sent.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let r = match system {
                    System::Skiplock => store::pressure_enqueue(&pool, n as i32).await,
                    System::Graphile => {
                        let t = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map(|d| d.as_secs_f64() * 1000.0)
                            .unwrap_or(0.0);
                        store::pressure_enqueue_graphile(&pool, n as i32, t).await
                    }
                };
                match r {
                    Ok(()) => {
                        offered.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(e) => {
                        // Credited again: the next tick sends them.
                        sent.fetch_sub(n, Ordering::Relaxed);
                        tracing::warn!(error = %e, "bench: an enqueue of the producer failed");
                    }
                }
            });
        }
    }
    // Let the calls in flight finish, so none is cut off half-way.
    let _ = slots.acquire_many(4).await;
    pool.close().await;
}

/// The pressure of a scenario while it is on.
struct Pressure {
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Pressure {
    async fn start(url: &str, system: System, scenario: Option<Scenario>) -> Result<Pressure> {
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        match scenario {
            None => {}
            Some(Scenario::HeldXmin) => {
                let conn = store::pressure_holder(url).await?;
                let stop = stop.clone();
                tasks.push(tokio::spawn(async move {
                    stop.cancelled().await;
                    conn.end().await;
                }));
            }
            Some(Scenario::Readers) => {
                for _ in 0..4 {
                    let mut r = store::pressure_reader(url, system.schema()).await?;
                    let stop = stop.clone();
                    tasks.push(tokio::spawn(async move {
                        let mut tick = tokio::time::interval(Duration::from_millis(500));
                        loop {
                            tokio::select! {
                                _ = stop.cancelled() => break,
                                _ = tick.tick() => {
                                    if let Err(e) = r.count().await {
                                        tracing::warn!(error = %e, "bench: a reader's count failed");
                                        break;
                                    }
                                }
                            }
                        }
                        r.end().await;
                    }));
                }
            }
        }
        Ok(Pressure { stop, tasks })
    }

    async fn stop(self) {
        self.stop.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

impl Graphile {
    /// A clear error when the harness's `script` is missing or not installed.
    pub fn check_script(&self, script: &str) -> Result<()> {
        self.check()?;
        let path = self.dir.join(script);
        if !path.is_file() {
            return Err(Error::Invalid(format!(
                "bench: no Graphile harness at {}",
                path.display()
            )));
        }
        Ok(())
    }
}

/// The report as a table.
pub fn render(r: &PressureReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "pressure: {:.0} jobs/s offered, worker concurrency {}{}",
        r.rate,
        r.concurrency,
        r.graphile_worker
            .as_ref()
            .map(|v| format!(", graphile-worker {v}"))
            .unwrap_or_default()
    );
    let _ = writeln!(out, "{}", super::postgres_heading(&r.postgres));
    let ms = |v: Option<f64>| v.map(|v| format!("{v:.0}")).unwrap_or_else(|| "–".into());
    let _ = writeln!(
        out,
        "{:<9} {:<10} {:<9} {:>5} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>10} {:>9}",
        "queue",
        "scenario",
        "phase",
        "secs",
        "done/off",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "backlog",
        "dead tup",
        "recovered"
    );
    for run in &r.runs {
        for f in &run.phases {
            let _ = writeln!(
                out,
                "{:<9} {:<10} {:<9} {:>5.0} {:>9.2} {:>8} {:>8} {:>8} {:>8} {:>9} {:>10} {:>9}",
                run.system.name(),
                run.scenario.name(),
                match f.phase {
                    Phase::Clean => "clean",
                    Phase::Pressure => "pressure",
                    Phase::Recovery => "recovery",
                },
                f.secs,
                f.completion_ratio,
                ms(f.pickup_p50_ms),
                ms(f.pickup_p95_ms),
                ms(f.pickup_p99_ms),
                ms(f.pickup_max_ms),
                f.backlog_end,
                f.dead_tuples_end,
                f.recovered_after_s
                    .map(|s| format!("{s:.0} s"))
                    .unwrap_or_else(|| "–".into()),
            );
        }
    }
    for ramp in &r.ramps {
        let steps: Vec<String> = ramp
            .steps
            .iter()
            .map(|s| {
                format!(
                    "{:.0}:{:.2}/{}{}",
                    s.rate,
                    s.completion_ratio,
                    ms(s.pickup_p95_ms),
                    if s.sustained { "" } else { "✗" }
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "{} highest rate sustained clean: {} jobs/s   (rate:done/offered/p95 ms: {})",
            ramp.system.name(),
            ramp.max_sustained
                .map(|v| format!("{v:.0}"))
                .unwrap_or_else(|| "none".into()),
            steps.join("  ")
        );
    }
    out
}

/// A picture of each scenario: completed jobs/s and pickup p95 over time, skiplock and
/// Graphile side by side, the pressure phase shaded (SVG).
pub fn svg(r: &PressureReport) -> String {
    use plotters::prelude::*;
    let scenarios: Vec<Scenario> = {
        let mut v: Vec<Scenario> = Vec::new();
        for run in &r.runs {
            if !v.contains(&run.scenario) {
                v.push(run.scenario);
            }
        }
        v
    };
    let mut buf = String::new();
    {
        let height = 320 * scenarios.len().max(1) as u32;
        let root = SVGBackend::with_string(&mut buf, (1100, height)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let rows = root.split_evenly((scenarios.len().max(1), 2));
        for (i, scenario) in scenarios.iter().enumerate() {
            let runs: Vec<&ScenarioRun> =
                r.runs.iter().filter(|x| x.scenario == *scenario).collect();
            let t_max = runs
                .iter()
                .flat_map(|x| x.windows.iter().map(|w| w.0))
                .fold(1.0_f64, f64::max);
            let done_max = runs
                .iter()
                .flat_map(|x| x.windows.iter().map(|w| w.1))
                .fold(r.rate * 1.2, f64::max);
            let p95_max = runs
                .iter()
                .flat_map(|x| x.windows.iter().filter_map(|w| w.2))
                .fold(1000.0_f64, f64::max)
                * 2.0;
            let (pressure_from, pressure_to) = runs
                .first()
                .map(|x| {
                    let from: f64 = x
                        .phases
                        .iter()
                        .take_while(|p| p.phase != Phase::Pressure)
                        .map(|p| p.secs)
                        .sum();
                    let len = x
                        .phases
                        .iter()
                        .find(|p| p.phase == Phase::Pressure)
                        .map(|p| p.secs)
                        .unwrap_or(0.0);
                    (from, from + len)
                })
                .unwrap_or((0.0, 0.0));
            let colour = |s: System| match s {
                System::Skiplock => RGBColor(0x1f, 0x77, 0xb4),
                System::Graphile => RGBColor(0xd6, 0x27, 0x28),
            };
            // Completed jobs/s.
            if let Ok(mut chart) = ChartBuilder::on(&rows[i * 2])
                .caption(
                    format!(
                        "{}: completed jobs/s ({:.0} offered)",
                        scenario.name(),
                        r.rate
                    ),
                    ("sans-serif", 16),
                )
                .margin(10)
                .x_label_area_size(30)
                .y_label_area_size(60)
                .build_cartesian_2d(0.0..t_max, 0.0..done_max)
            {
                let _ = chart.configure_mesh().x_desc("s").draw();
                let _ = chart.draw_series(std::iter::once(Rectangle::new(
                    [(pressure_from, 0.0), (pressure_to, done_max)],
                    RGBColor(0xee, 0xee, 0xee).filled(),
                )));
                for run in &runs {
                    let c = colour(run.system);
                    if let Ok(s) = chart.draw_series(LineSeries::new(
                        run.windows.iter().map(|w| (w.0, w.1)),
                        c.stroke_width(2),
                    )) {
                        s.label(run.system.name()).legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                        });
                    }
                }
                let _ = chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw();
            }
            // Pickup p95, on a log scale.
            if let Ok(mut chart) = ChartBuilder::on(&rows[i * 2 + 1])
                .caption(
                    format!("{}: pickup p95 (ms, log scale)", scenario.name()),
                    ("sans-serif", 16),
                )
                .margin(10)
                .x_label_area_size(30)
                .y_label_area_size(60)
                .build_cartesian_2d(0.0..t_max, (1.0..p95_max).log_scale())
            {
                let _ = chart.configure_mesh().x_desc("s").draw();
                let _ = chart.draw_series(std::iter::once(Rectangle::new(
                    [(pressure_from, 1.0), (pressure_to, p95_max)],
                    RGBColor(0xee, 0xee, 0xee).filled(),
                )));
                for run in &runs {
                    let c = colour(run.system);
                    let _ = chart.draw_series(LineSeries::new(
                        run.windows
                            .iter()
                            .filter_map(|w| w.2.map(|p| (w.0, p.max(1.0)))),
                        c.stroke_width(2),
                    ));
                }
            }
        }
        let _ = root.present();
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(t: f64, phase: Phase, offered: u64, completed: u64, backlog: i64, lat: &[f64]) -> Tick {
        Tick {
            t,
            phase,
            offered,
            completed,
            backlog,
            pickup_ms: lat.to_vec(),
            dead_tuples: -1,
        }
    }

    #[test]
    fn phases_are_summarized_by_the_median_of_five_second_windows() {
        let mut ticks = Vec::new();
        for i in 0..10 {
            ticks.push(tick(i as f64, Phase::Clean, 100, 100, 0, &[10.0]));
        }
        // Pressure: the first window completes 50/s, the second 20/s, the third 60/s.
        for (w, c) in [(0, 50), (1, 20), (2, 60)] {
            for j in 0..5 {
                let t = 10.0 + (w * 5 + j) as f64;
                ticks.push(tick(
                    t,
                    Phase::Pressure,
                    100,
                    c,
                    (w * 5 + j) as i64 * 50,
                    &[500.0],
                ));
            }
        }
        // Recovery: the backlog drains below one second's worth at t = 27.
        for (i, b) in [700, 400, 150, 90, 0].into_iter().enumerate() {
            ticks.push(tick(
                25.0 + i as f64,
                Phase::Recovery,
                100,
                200,
                b,
                &[100.0],
            ));
        }
        let f = summarize(&ticks, 100.0, Some(25.0));
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].completion_ratio, 1.0);
        assert_eq!(f[1].completed_per_s, 50.0);
        assert_eq!(f[1].completion_ratio, 0.5);
        assert_eq!(f[1].pickup_p95_ms, Some(500.0));
        assert_eq!(f[1].backlog_max, 700);
        assert_eq!(f[2].recovered_after_s, Some(3.0));
        assert_eq!(f[0].recovered_after_s, None);
    }

    #[test]
    fn a_ramp_step_is_sustained_only_when_it_keeps_up_with_low_latency() {
        let steady: Vec<Tick> = (0..20)
            .map(|i| tick(i as f64, Phase::Clean, 1000, 990, 40, &[20.0, 30.0]))
            .collect();
        assert!(ramp_step(&steady, 1000.0).sustained);
        let slow: Vec<Tick> = (0..20)
            .map(|i| tick(i as f64, Phase::Clean, 1000, 990, 40, &[2000.0]))
            .collect();
        assert!(!ramp_step(&slow, 1000.0).sustained);
        let behind: Vec<Tick> = (0..20)
            .map(|i| tick(i as f64, Phase::Clean, 1000, 700, 300 * i, &[20.0]))
            .collect();
        assert!(!ramp_step(&behind, 1000.0).sustained);
    }

    #[test]
    fn the_offered_total_at_a_time_is_interpolated_between_readings() {
        let r = [(10.0, 0), (11.0, 100), (12.0, 250)];
        assert_eq!(offered_by(&r, 9.0), 0);
        assert_eq!(offered_by(&r, 11.5), 175);
        assert_eq!(offered_by(&r, 12.0), 250);
        assert_eq!(offered_by(&r, 13.0), 250);
    }
}

//! Workflow `pack`: debounced packing of a host's pages into a SQLite + FTS5 artifact.
//!
//! The pack timer of a host is a row, not a timer in some process's memory: the host's single
//! available `do-the-packing` job (queue `pack`, unique key `pack:<host>`). Each `timer-reset`
//! pushes it forward in one statement (`skiplock.pack_arm`); when it comes due, a worker
//! builds the artifact and uploads it, and the job completes only after the upload, so a
//! crash mid-pack leaves the job to be rescued and retried. See `docs/pack.md`.

pub mod artifact;
pub mod debounce;
pub mod faults;
pub mod store;

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use crate::config::{env_duration, env_string};
use crate::error::{Error, Result};
use crate::names;
use crate::store::pack::{self as sql, PackRecord};
use crate::worker::{Handler, HandlerResult, JobContext, JobError, Outcome, WorkerBuilder};

pub use store::Store;

/// The queue both pack kinds live in.
pub const QUEUE: &str = names::PACK_QUEUE;
/// Kind of the "content of this host changed" message.
pub const TIMER_RESET: &str = names::TIMER_RESET_KIND;
/// Kind of the pack job (the timer while it waits).
pub const DO_THE_PACKING: &str = names::DO_THE_PACKING_KIND;

/// Default quiet period after the last reset before a host is packed.
pub const DEFAULT_QUIET: Duration = Duration::from_secs(60);
/// Default longest wait after the first reset of a window.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(3600);
/// Default artifact store.
pub const DEFAULT_STORE: &str = "./data/store";

/// Settings of the pack workflow.
#[derive(Debug, Clone)]
pub struct PackSettings {
    /// Quiet period (`SKIPLOCK_PACK_QUIET`, 60s).
    pub quiet: Duration,
    /// Maximum wait (`SKIPLOCK_PACK_MAX_WAIT`, 1h).
    pub max_wait: Duration,
    /// Store spec (`SKIPLOCK_STORE`, `./data/store`).
    pub store: String,
}

impl Default for PackSettings {
    fn default() -> Self {
        PackSettings {
            quiet: DEFAULT_QUIET,
            max_wait: DEFAULT_MAX_WAIT,
            store: DEFAULT_STORE.to_string(),
        }
    }
}

impl PackSettings {
    /// Reads the settings from the environment.
    pub fn from_env() -> Result<Self> {
        let d = PackSettings::default();
        let s = PackSettings {
            quiet: env_duration("SKIPLOCK_PACK_QUIET", d.quiet)?,
            max_wait: env_duration("SKIPLOCK_PACK_MAX_WAIT", d.max_wait)?,
            store: env_string("SKIPLOCK_STORE", &d.store),
        };
        if s.max_wait.is_zero() {
            return Err(Error::config(
                "SKIPLOCK_PACK_MAX_WAIT",
                "must be more than 0s",
            ));
        }
        Ok(s)
    }
}

/// Args of both pack kinds.
#[derive(Debug, Clone, Deserialize)]
pub struct HostArgs {
    /// The host (lower case, with ":port" when not the default).
    pub host: String,
    /// Set by `skiplock.pack_now`: pack even if a timer is pending.
    #[serde(default)]
    pub now: bool,
}

fn check_host(host: &str) -> std::result::Result<(), JobError> {
    if host.trim().is_empty()
        || host.len() > 300
        || host.contains('/')
        || host.chars().any(char::is_whitespace)
    {
        return Err(JobError::discard(format!("invalid host {host:?}")));
    }
    Ok(())
}

/// Handles `timer-reset`: pushes the host's pack timer forward (creating it if needed).
#[derive(Debug, Clone)]
pub struct TimerReset {
    settings: PackSettings,
}

impl Handler for TimerReset {
    type Args = HostArgs;

    fn kind(&self) -> &'static str {
        TIMER_RESET
    }

    async fn run(&self, ctx: JobContext, args: HostArgs) -> HandlerResult {
        check_host(&args.host)?;
        let t = sql::arm(
            &ctx.pool,
            &args.host,
            self.settings.quiet,
            self.settings.max_wait,
        )
        .await?;
        Ok(Outcome::CompleteWith(
            json!({"timer_job": t.timer_id, "fires_at": t.fires_at}),
        ))
    }
}

/// Handles `do-the-packing`: skips if a newer timer is pending, else builds the artifact and
/// uploads it while holding the host's lock row (`skiplock.locks`).
#[derive(Debug, Clone)]
pub struct DoThePacking {
    settings: PackSettings,
    store: Store,
}

impl Handler for DoThePacking {
    type Args = HostArgs;

    fn kind(&self) -> &'static str {
        DO_THE_PACKING
    }

    async fn run(&self, ctx: JobContext, args: HostArgs) -> HandlerResult {
        check_host(&args.host)?;
        let host = args.host.as_str();
        let p = sql::pending(&ctx.pool, ctx.id, host).await?;
        let start = debounce::PackStart {
            now: p.now,
            window_start: p.window_start.unwrap_or(p.now),
            pending_at: p.pending_at,
            forced: args.now,
        };
        if let Some(reason) = debounce::skip_reason(&start, self.settings.max_wait) {
            tracing::info!(host, pending_job = p.pending_id, "pack skipped: {reason}");
            return Ok(Outcome::CompleteWith(
                json!({"skipped": reason, "pending_job": p.pending_id, "pending_at": p.pending_at}),
            ));
        }

        // Everything below runs on one connection, inside the transaction that holds the
        // host's lock row: one connection per pack, and the lock goes when the transaction
        // does (commit, rollback, a dropped future, or a dead process).
        let began = Instant::now();
        sql::lock_row(&ctx.pool, host).await?;
        let mut tx = ctx.pool.begin().await?;
        if !sql::lock(&mut *tx, host).await? {
            tx.rollback().await?;
            let wait = debounce::busy_snooze(self.settings.quiet);
            tracing::info!(
                host,
                "another pack of this host is running; snoozing {wait:?}"
            );
            return Ok(Outcome::Snooze(wait));
        }

        let (send, recv) = mpsc::channel::<sql::PageRow>(256);
        let owned_host = host.to_string();
        let build = tokio::task::spawn_blocking(move || artifact::build(&owned_host, recv));
        {
            let mut rows = sql::pages(&mut *tx, host);
            while let Some(row) = rows.try_next().await? {
                if send.send(row).await.is_err() {
                    break; // the builder failed; its error is reported below
                }
            }
        }
        drop(send);
        let built = build
            .await
            .map_err(|e| JobError::retry(format!("artifact builder panicked: {e}")))??;

        // Test builds only (the `fault-injection` feature): a pack a test means to interrupt.
        let delay = faults::upload_delay(host);
        if !delay.is_zero() {
            tracing::warn!(host, "fault injection: waiting {delay:?} before the upload");
            tokio::time::sleep(delay).await;
        }
        let key = store::key_for(host);
        self.store.upload(&key, &built.path, built.bytes).await?;

        let ms = began.elapsed().as_millis() as i64;
        let record = PackRecord {
            host,
            pages: built.pages as i64,
            bytes: built.bytes as i64,
            object_key: key.as_ref(),
            store: &self.store.spec,
            job_id: ctx.id,
            duration_ms: ms,
        };
        sql::record(&mut *tx, record).await?;
        tx.commit().await?;
        crate::metrics::packed(began.elapsed());
        let location = self.store.location(&key);
        tracing::info!(host, pages = built.pages, bytes = built.bytes, %location, "packed");
        Ok(Outcome::CompleteWith(json!({
            "packed": built.pages,
            "bytes": built.bytes,
            "key": key.as_ref(),
            "location": location,
            "ms": ms,
        })))
    }
}

/// Registers the pack handlers with `settings` (a bad store stops the worker at start-up).
pub fn register_with(builder: WorkerBuilder, settings: PackSettings) -> Result<WorkerBuilder> {
    let mut builder = builder;
    let store = Store::open(&settings.store)?;
    builder.registry_mut().register(TimerReset {
        settings: settings.clone(),
    });
    builder
        .registry_mut()
        .register(DoThePacking { settings, store });
    Ok(builder.on_start(one_pack_per_host_hook()))
}

/// The start-up hook that gives the pack queue a per-key concurrency of 1 (do-the-packing
/// jobs carry their host as limit_key): a second pack of a host is not claimed while one
/// runs, instead of being claimed and snoozed. A rate an operator set on the queue is kept.
/// The host's lock row stays as the guard (a rescued pack that still runs holds it). Set
/// through `skiplock.set_one_pack_per_host`: the worker role may not call the key-limit
/// setters (`sql/api/90_roles.sql`).
fn one_pack_per_host_hook() -> crate::worker::StartHook {
    Box::new(|pool: crate::store::Pool| {
        Box::pin(async move { crate::store::pack::one_pack_per_host(&pool).await })
    })
}

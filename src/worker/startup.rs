//! Start-up: wait for the database, check the schema, register the worker and run the
//! start-up hooks, all retried with a capped backoff while the database is unavailable
//! (one log line per attempt), forever unless `SKIPLOCK_CONNECT_TIMEOUT` bounds it. A
//! permanent problem (wrong password, missing schema, a hook's own error) ends it at once.

use tokio::time::Instant;

use super::StartHook;
use crate::db::hosts;
use crate::db::outage::{Availability, Backoff};
use crate::db::session::{CONNECT_BACKOFF, attempt_failed};
use crate::error::Result;
use crate::store::heartbeat::{WorkerInfo, worker_upsert};
use crate::store::{Pool, schema};

/// Runs the start-up sequence; each hook runs once (a hook that failed because the
/// database went away is run again).
pub(crate) async fn start(
    runtime: &Pool,
    handlers: &Pool,
    info: &WorkerInfo,
    hooks: &[StartHook],
    timeout: Option<std::time::Duration>,
    availability: &Availability,
) -> Result<()> {
    let started = Instant::now();
    let mut backoff = Backoff::new(CONNECT_BACKOFF.0, CONNECT_BACKOFF.1);
    let mut attempt = 1u64;
    let mut hooks_done = 0;
    loop {
        let step = async {
            // The pools' first connections are opened while the probe runs, side by side:
            // each is a TCP (and TLS) handshake, and opened one after the other by the
            // statements below they took most of a worker's start (tenths of a second with
            // TLS). A failure here shows again in the statement that needs the connection.
            // (With several hosts in the URL the probe also points both pools at the one
            // that accepts writes, and the warm-up may have met another: see `hosts::point`.)
            let both = [runtime.pg(), handlers.pg()];
            let (probed, ()) = tokio::join!(hosts::point(&both), warm(runtime, handlers));
            probed?;
            // A login without the worker's role is named with the grant it needs.
            let opts = runtime.connect_options();
            let grant =
                |e| crate::error::missing_grant(e, "skiplock_worker", opts.get_username().into());
            schema::ensure_ready(runtime).await.map_err(grant)?;
            worker_upsert(runtime, info).await.map_err(grant)?;
            while hooks_done < hooks.len() {
                hooks[hooks_done](handlers.clone()).await?;
                hooks_done += 1;
            }
            Ok(())
        }
        .await;
        match step {
            Ok(()) => {
                availability.success();
                if attempt > 1 {
                    tracing::info!(attempt, "database reachable; starting");
                }
                return Ok(());
            }
            Err(e) => {
                availability.observe(&e);
                let opts = runtime.connect_options();
                attempt_failed(&opts, e, attempt, started.elapsed(), timeout, &mut backoff).await?;
                attempt += 1;
            }
        }
    }
}

/// Opens connections of both pools at once (two of the runtime's, two of the handlers'), and
/// leaves them idle in their pools.
async fn warm(runtime: &Pool, handlers: &Pool) {
    let opened = futures::future::join_all(
        [runtime, runtime, handlers, handlers]
            .into_iter()
            .map(|p| p.acquire()),
    )
    .await;
    drop(opened);
    // Returned to their pools by tasks of their own: let those run before the statements.
    tokio::task::yield_now().await;
}

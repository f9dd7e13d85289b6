//! [`examine`]: runs each read of `src/store/doctor.rs` in its own read-only, time-bounded
//! transaction and turns the rows into findings with the decisions of the parent module. A
//! read that fails (its statement timed out, or this login may not read what it needs) is a
//! finding of its own (`check_failed`), and the other checks still run.

use super::*;
use crate::error::Result;
use crate::store::{self, Pool};

/// Runs every check against the database `pool` reaches and reports, worst first. Fails only
/// when no transaction can begin at all (the database is unreachable). A pool of at least two
/// connections also lets it see a transaction-mode pooler (`pool_mode`).
pub async fn examine(pool: &Pool, t: &Thresholds) -> Result<Report> {
    let mut r = Report::default();
    let mut failed: Vec<Finding> = Vec::new();

    // First: behind a transaction-mode pooler in session mode every other read fails alike
    // (or worse, lands on another client's statement), so that one finding is the report.
    pool_mode(pool, &mut r, &mut failed).await;
    if r.findings
        .iter()
        .chain(&failed)
        .any(|f| f.check == "pool_mode")
    {
        failed.retain(|f| f.check == "pool_mode");
        r.findings.append(&mut failed);
        r.findings.truncate(1);
        r.sort();
        return Ok(r);
    }

    // Each read in its own transaction: a statement_timeout aborts only that one.
    macro_rules! read {
        ($name:literal, |$tx:ident| $body:expr) => {{
            let mut $tx = store::doctor::begin(pool, t.statement_timeout).await?;
            let res = $body.await;
            let _ = $tx.rollback().await;
            match res {
                Ok(v) => Some(v),
                Err(e) => {
                    failed.push(check_failed($name, &e));
                    None
                }
            }
        }};
    }

    let tables = read!("tables", |tx| store::doctor::tables(&mut tx, 100)).unwrap_or_default();
    r.dead_tuples = tables.iter().map(|s| s.dead_tuples).sum();
    let held_back = r.dead_tuples;

    if let Some(backends) = read!("backends", |tx| store::doctor::backends(&mut tx, t.limit)) {
        for b in &backends {
            r.horizon_seconds = r.horizon_seconds.max(b.xact_seconds);
            r.horizon_xid_age = r.horizon_xid_age.max(b.xid_age.unwrap_or(0));
            if let Some(f) = backend_finding(b, held_back, t) {
                r.findings.push(f);
            }
        }
    }
    let hidden = read!("hidden", |tx| store::doctor::hidden(&mut tx)).unwrap_or(0);
    if hidden > 0 {
        r.findings.push(
            Finding::new(
                "hidden_sessions",
                Area::Horizon,
                Severity::Warning,
                format!("{hidden} session(s) of other logins cannot be seen by this one"),
            )
            .with("sessions", hidden)
            .cost("one of them may hold the vacuum horizon, and could not be named")
            .fix("run doctor as a login with pg_monitor: GRANT pg_monitor TO <login> (docs/roles.md)"),
        );
    }

    if let Some(slots) = read!("slots", |tx| store::doctor::slots(&mut tx, t.limit)) {
        for s in &slots {
            r.horizon_xid_age = r.horizon_xid_age.max(s.xid_age.unwrap_or(0));
            if let Some(sev) = slot_severity(s.active, s.xid_age, s.retained_wal_bytes) {
                r.findings.push(slot_finding(s, sev, held_back));
            }
        }
    }

    if let Some(prepared) = read!("prepared", |tx| store::doctor::prepared(&mut tx, t.limit)) {
        for p in &prepared {
            r.horizon_seconds = r.horizon_seconds.max(p.seconds);
            r.horizon_xid_age = r.horizon_xid_age.max(p.xid_age.unwrap_or(0));
            if let Some(sev) = holder_severity(p.seconds, p.xid_age, t) {
                r.findings.push(
                    Finding::new(
                        "prepared_transaction",
                        Area::Horizon,
                        sev,
                        format!(
                            "prepared transaction '{}' open for {}",
                            p.gid,
                            format_age(p.seconds)
                        ),
                    )
                    .with("gid", &p.gid)
                    .with_opt("owner", p.owner.as_ref())
                    .with_opt("database", p.database.as_ref())
                    .with_opt("xid", p.xid.as_ref())
                    .with_opt("xid age", p.xid_age)
                    .with("age", format_age(p.seconds))
                    .with("dead tuples in skiplock's tables", held_back)
                    .cost("vacuum removes no dead tuple newer than it, in any table of the cluster; it holds its locks until it ends")
                    .fix(format!(
                        "COMMIT PREPARED '{0}' or ROLLBACK PREPARED '{0}' (in database {1}), once its coordinator is known to have gone",
                        p.gid,
                        p.database.as_deref().unwrap_or("?")
                    )),
                );
            }
        }
    }

    for s in &tables {
        if let Some(sev) = table_severity(s.live_tuples, s.dead_tuples) {
            r.findings.push(
                Finding::new(
                    "dead_tuples",
                    Area::Tables,
                    sev,
                    format!(
                        "skiplock.{} has {} dead tuples against {} live",
                        s.table_name, s.dead_tuples, s.live_tuples
                    ),
                )
                .with("table", format!("skiplock.{}", s.table_name))
                .with("live tuples", s.live_tuples)
                .with("dead tuples", s.dead_tuples)
                .with("size", format_bytes(s.total_bytes))
                .with(
                    "last vacuum",
                    s.vacuumed_seconds_ago
                        .map_or("never".into(), |a| format!("{} ago", format_age(a))),
                )
                .cost("claims and scans step over dead index entries; the table and its indexes grow")
                .fix("end what holds the horizon (the findings above), then VACUUM (VERBOSE) the table; if autovacuum runs but lags, lower autovacuum_vacuum_scale_factor for it"),
            );
        }
    }
    r.tables = tables
        .into_iter()
        .map(|s| TableReport {
            table: s.table_name,
            live_tuples: s.live_tuples,
            dead_tuples: s.dead_tuples,
            total_bytes: s.total_bytes,
            vacuumed_seconds_ago: s.vacuumed_seconds_ago,
            analyzed_seconds_ago: s.analyzed_seconds_ago,
        })
        .collect();

    if migrated(pool, t, &mut r, &mut failed).await? {
        grants(pool, t, &mut r, &mut failed).await?;
        runtime(pool, t, &mut r, &mut failed).await?;
    }
    listen_url(pool, t, &mut r, &mut failed).await;
    let server = settings(pool, t, &mut r, &mut failed).await?;
    if let Some(server) = server {
        autovacuum(pool, t, &server, &mut r, &mut failed).await?;
    }

    // A pool mode that does not match (seen only now, by a later read) is said once.
    if failed.iter().any(|f| f.check == "pool_mode") {
        failed.retain(|f| f.check == "pool_mode");
        failed.truncate(1);
    }
    r.findings.append(&mut failed);
    r.sort();
    Ok(r)
}

async fn runtime(
    pool: &Pool,
    t: &Thresholds,
    r: &mut Report,
    failed: &mut Vec<Finding>,
) -> Result<()> {
    macro_rules! read {
        ($name:literal, |$tx:ident| $body:expr) => {{
            let mut $tx = store::doctor::begin(pool, t.statement_timeout).await?;
            let res = $body.await;
            let _ = $tx.rollback().await;
            match res {
                Ok(v) => v,
                Err(e) => {
                    failed.push(check_failed($name, &e));
                    Vec::new()
                }
            }
        }};
    }
    let window = t.rescue_after;
    for w in read!("stale_workers", |tx| store::doctor::stale_workers(
        &mut tx, window, t.limit
    )) {
        r.findings.push(
            Finding::new(
                "stale_worker",
                Area::Runtime,
                Severity::Warning,
                format!("worker {} has sent no heartbeat for {}", w.id, format_age(w.heartbeat_seconds)),
            )
            .with("worker", &w.id)
            .with("host", &w.host)
            .with("pid", w.pid)
            .with("last heartbeat", format!("{} ago", format_age(w.heartbeat_seconds)))
            .cost("its running jobs wait for a rescue; its kinds count as handled until the row goes")
            .fix("check the process on that host; a worker that stopped for good is forgotten by the live workers' maintenance"),
        );
    }
    for j in read!("stuck_jobs", |tx| store::doctor::stuck_jobs(
        &mut tx, window, t.limit
    )) {
        let Some(sev) = stuck_severity(j.heartbeat_seconds, window) else {
            continue;
        };
        r.findings.push(
            Finding::new(
                "stuck_job",
                Area::Runtime,
                sev,
                format!(
                    "job {} ({}) has been running {} without a heartbeat for {}",
                    j.id,
                    j.kind,
                    format_age(j.running_seconds),
                    format_age(j.heartbeat_seconds)
                ),
            )
            .with("job", j.id)
            .with("kind", &j.kind)
            .with("queue", &j.queue)
            .with_opt("worker", j.attempted_by.as_ref())
            .with("running for", format_age(j.running_seconds))
            .with("last heartbeat", format!("{} ago", format_age(j.heartbeat_seconds)))
            .with("rescue window", format_age(window.as_secs_f64()))
            .cost("the job never finishes: a live worker's rescuer would have moved it back within one window")
            .fix("start a worker (its rescuer moves the job back), or `skiplock cancel` the job"),
        );
    }
    let reaper = t.reaper_max_age;
    for j in read!("long_running_jobs", |tx| store::doctor::long_running_jobs(
        &mut tx,
        window,
        reaper.mul_f64(0.5),
        t.limit
    )) {
        let Some(sev) = long_running_severity(j.running_seconds, reaper) else {
            continue;
        };
        let left = (reaper.as_secs_f64() - j.running_seconds).max(0.0);
        r.findings.push(
            Finding::new(
                "long_running_job",
                Area::Runtime,
                sev,
                format!(
                    "job {} ({}) has been running {}; the reaper discards it in {}",
                    j.id,
                    j.kind,
                    format_age(j.running_seconds),
                    format_age(left)
                ),
            )
            .with("job", j.id)
            .with("kind", &j.kind)
            .with("queue", &j.queue)
            .with_opt("worker", j.attempted_by.as_ref())
            .with("running for", format_age(j.running_seconds))
            .with("last heartbeat", format!("{} ago", format_age(j.heartbeat_seconds)))
            .with("SKIPLOCK_REAPER_MAX_AGE", format_age(reaper.as_secs_f64()))
            .cost("its worker is live, but the reaper discards a running job past SKIPLOCK_REAPER_MAX_AGE, heartbeat or not: its work is lost")
            .fix("if the job is meant to run this long, raise SKIPLOCK_REAPER_MAX_AGE on the workers (or split the work into steps); if it hangs, `skiplock cancel` it"),
        );
    }
    for d in read!("stranded_dependents", |tx| {
        store::doctor::stranded_dependents(&mut tx, window, t.limit)
    }) {
        let since = d.last_finished_seconds.unwrap_or(d.waiting_seconds);
        let sev = if since >= t.action_age.as_secs_f64() {
            Severity::Action
        } else {
            Severity::Warning
        };
        r.findings.push(
            Finding::new(
                "stranded_dependent",
                Area::Runtime,
                sev,
                format!(
                    "job {} ({}) still waits although its {} dependenc{} finished",
                    d.id,
                    d.kind,
                    d.dependencies,
                    if d.dependencies == 1 { "y" } else { "ies all" }
                ),
            )
            .with("job", d.id)
            .with("kind", &d.kind)
            .with("queue", &d.queue)
            .with("dependencies", d.dependencies)
            .with(
                "last dependency finished",
                d.last_finished_seconds
                    .map_or("unknown (deleted)".into(), |s| format!("{} ago", format_age(s))),
            )
            .cost("the job is never released or cancelled: the flow does not finish")
            .fix("start a worker (its rescuer runs the dependencies' sweep), or run SELECT skiplock.settle_dependencies();"),
        );
    }
    for k in read!("unhandled_kinds", |tx| store::jobs::unhandled_kinds(
        &mut *tx,
        window.as_secs_f64(),
        Some(t.limit)
    )) {
        let sev = if k.oldest_seconds >= t.action_age.as_secs_f64() {
            Severity::Action
        } else {
            Severity::Warning
        };
        r.findings.push(
            Finding::new(
                "unhandled_kind",
                Area::Runtime,
                sev,
                format!("{} job(s) of kind {} wait, and no live worker handles it", k.count, k.kind),
            )
            .with("kind", &k.kind)
            .with("jobs", k.count)
            .with("oldest due for", format_age(k.oldest_seconds))
            .cost("these jobs are never claimed")
            .fix("deploy a worker with a handler for the kind (or cancel the jobs if the kind was retired)"),
        );
    }
    for q in read!("paused_queues", |tx| store::doctor::paused_queues(
        &mut tx, t.limit, 100_000
    )) {
        let sev = if q.waiting > 0 {
            Severity::Warning
        } else {
            Severity::Info
        };
        r.findings.push(
            Finding::new(
                "paused_queue",
                Area::Runtime,
                sev,
                format!("queue {} is paused ({} job(s) waiting)", q.queue, q.waiting),
            )
            .with("queue", &q.queue)
            .with("paused for", format_age(q.paused_seconds))
            .with("waiting", q.waiting)
            .cost("no job of the queue is claimed while it is paused")
            .fix(format!("skiplock queue resume {}", q.queue)),
        );
    }
    for q in read!("full_queues", |tx| store::doctor::full_queues(
        &mut tx, t.limit, 100_000
    )) {
        if q.waiting < i64::from(q.max_waiting) {
            continue;
        }
        r.findings.push(
            Finding::new(
                "queue_full",
                Area::Runtime,
                Severity::Warning,
                format!(
                    "queue {} is at its admission limit of {} waiting jobs",
                    q.queue, q.max_waiting
                ),
            )
            .with("queue", &q.queue)
            .with("max_waiting", q.max_waiting)
            .with("waiting", q.waiting)
            .cost("enqueues into it are refused (SK429) until the workers drain it")
            .fix("add workers for the queue, or raise the limit with skiplock.set_queue_admission"),
        );
    }
    for k in read!("held_keys", |tx| store::doctor::held_keys(&mut tx, t.limit)) {
        r.findings.push(
            Finding::new(
                "held_key",
                Area::Runtime,
                Severity::Info,
                format!(
                    "key {} of queue {} is held for {} more",
                    k.limit_key,
                    k.queue,
                    format_age(k.seconds_left)
                ),
            )
            .with("queue", &k.queue)
            .with("key", &k.limit_key)
            .with("released in", format_age(k.seconds_left))
            .cost("the key's jobs wait until the hold ends")
            .fix("none if the hold is meant; skiplock.hold_key with a past time releases it"),
        );
    }
    for p in read!("periodic_failures", |tx| store::doctor::periodic_failures(
        &mut tx, t.limit
    )) {
        r.findings.push(
            Finding::new(
                "periodic_failure",
                Area::Runtime,
                Severity::Warning,
                format!("the latest enqueue of periodic job {} failed", p.name),
            )
            .with("name", &p.name)
            .with("kind", &p.kind)
            .with("queue", &p.queue)
            .with_opt("error", p.last_error.as_ref())
            .with_opt(
                "failed",
                p.seconds_ago.map(|s| format!("{} ago", format_age(s))),
            )
            .cost("its periods are not run until an enqueue succeeds")
            .fix("read the error (docs/maintenance.md, \"When an enqueue fails\")"),
        );
    }
    Ok(())
}

/// A login in session mode (`SKIPLOCK_POOL_MODE` unset or `session`) whose URL goes through a
/// pooler in transaction mode: seen when two connections held at once share one server
/// process, or when the pooler's answer is the one the worker ends with (`check_failed`).
async fn pool_mode(pool: &Pool, r: &mut Report, failed: &mut Vec<Finding>) {
    if pool.mode() != crate::config::PoolMode::Session {
        return;
    }
    match store::doctor::shared_backend(pool).await {
        Ok(None) => {}
        Ok(Some(pid)) => r.findings.push(
            Finding::new(
                "pool_mode",
                Area::Settings,
                Severity::Action,
                "SKIPLOCK_POOL_MODE is session, but the URL goes through a pooler in transaction mode: two connections were answered by one server process".into(),
            )
            .with("setting", "SKIPLOCK_POOL_MODE")
            .with("server process", pid)
            .cost("a worker with this setting ends at its first statements (prepared statement \"sqlx_s_N\" already exists); commands fail at random")
            .fix("set SKIPLOCK_POOL_MODE=transaction for every process whose URL goes through the pooler (docs/operations.md, \"Behind PgBouncer\")"),
        ),
        Err(e) => failed.push(check_failed("pool_mode", &e)),
    }
}

/// A login that lacks what `skiplock worker` needs (`sql/doctor/worker_grants.sql`), named
/// with the grant that gives it all (docs/roles.md). An operator's login (the console's, and
/// the one docs/operations.md runs doctor as) is never a worker's: nothing to say.
async fn grants(
    pool: &Pool,
    t: &Thresholds,
    r: &mut Report,
    failed: &mut Vec<Finding>,
) -> Result<()> {
    let mut tx = store::doctor::begin(pool, t.statement_timeout).await?;
    let res = store::doctor::worker_grants(&mut tx).await;
    let _ = tx.rollback().await;
    match res {
        Err(e) => failed.push(check_failed("worker_grants", &e)),
        Ok(g) => {
            if let Some(f) = grants_finding(&g) {
                r.findings.push(f);
            }
        }
    }
    Ok(())
}

/// The `missing_grant` finding of [`grants`], if any.
fn grants_finding(g: &store::doctor::WorkerGrants) -> Option<Finding> {
    if g.missing.is_empty() || g.operator_login {
        return None;
    }
    let fix = if g.worker_role {
        format!(
            "as the owner or a superuser: GRANT skiplock_worker TO {}; (docs/roles.md)",
            g.login
        )
    } else {
        format!(
            "the role skiplock_worker does not exist: run `skiplock migrate` as a login with CREATEROLE, then GRANT skiplock_worker TO {}; (docs/roles.md)",
            g.login
        )
    };
    Some(
        Finding::new(
            "missing_grant",
            Area::Settings,
            Severity::Action,
            format!(
                "login {} lacks what a worker needs: {}",
                g.login,
                g.missing.join(", ")
            ),
        )
        .with("login", &g.login)
        .with("missing", g.missing.join("; "))
        .with("role", "skiplock_worker")
        .cost("a worker on this login fails at its first claim, ack or heartbeat (permission denied, 42501)")
        .fix(fix),
    )
}

/// In transaction mode a worker LISTENs on `SKIPLOCK_LISTEN_URL` (src/worker/lifecycle.rs,
/// `listen_pool`); a URL that reaches a pooler in transaction mode never hears a wake-up.
/// Seen when it names the same address and database as `DATABASE_URL` (the pooler the pool
/// mode says it is), or when two connections held at once on it are answered by one server
/// process (as `pool_mode` sees it; its absence proves nothing). In session mode the worker
/// LISTENs on its own pool and does not read the setting: nothing to check.
async fn listen_url(pool: &Pool, t: &Thresholds, r: &mut Report, failed: &mut Vec<Finding>) {
    let Some(url) = &t.listen_url else {
        return;
    };
    if pool.mode() != crate::config::PoolMode::Transaction {
        return;
    }
    let opts = match crate::db::parse_url_of("SKIPLOCK_LISTEN_URL", url) {
        Ok(o) => o,
        Err(e) => {
            failed.push(check_failed("listen_url", &e));
            return;
        }
    };
    let finding = |why: String, evidence: (&str, String)| {
        Finding::new(
            "listen_url",
            Area::Settings,
            Severity::Warning,
            format!("SKIPLOCK_LISTEN_URL goes through a pooler in transaction mode: {why}"),
        )
        .with("setting", "SKIPLOCK_LISTEN_URL")
        .with(evidence.0, evidence.1)
        .cost("the workers' LISTEN never hears a wake-up: new jobs wait for the next poll (SKIPLOCK_POLL_INTERVAL)")
        .fix("point SKIPLOCK_LISTEN_URL at the server itself or a session-mode pool (docs/operations.md, \"Behind PgBouncer\")")
    };
    if crate::db::same_endpoint(&opts, &pool.connect_options()) {
        r.findings.push(finding(
            "it reaches the same address and database as DATABASE_URL, which SKIPLOCK_POOL_MODE=transaction says is one".into(),
            (
                "address",
                format!(
                    "{}:{}/{}",
                    opts.get_host(),
                    opts.get_port(),
                    opts.get_database().unwrap_or("")
                ),
            ),
        ));
        return;
    }
    let res = async {
        let p = crate::db::pool(url, 2, t.statement_timeout).await?;
        let shared = store::doctor::shared_backend(&p).await;
        p.close().await;
        shared
    }
    .await;
    match res {
        Ok(None) => {}
        Ok(Some(pid)) => r.findings.push(finding(
            "two connections on it were answered by one server process".into(),
            ("server process", pid.to_string()),
        )),
        Err(e) => failed.push(check_failed("listen_url", &e)),
    }
}

/// The server settings' findings; returns the settings read (`None`: they could not be).
async fn settings(
    pool: &Pool,
    t: &Thresholds,
    r: &mut Report,
    failed: &mut Vec<Finding>,
) -> Result<Option<store::doctor::ServerSettings>> {
    let mut tx = store::doctor::begin(pool, t.statement_timeout).await?;
    let res = store::doctor::settings(&mut tx).await;
    let _ = tx.rollback().await;
    match res {
        Err(e) => {
            failed.push(check_failed("settings", &e));
            Ok(None)
        }
        Ok(s) => {
            if s.in_recovery {
                r.findings.push(
                    Finding::new("read_only_server", Area::Settings, Severity::Action, "the server is a standby: read only".into())
                        .with("server_version", &s.server_version)
                        .cost("nothing can be enqueued, claimed or finished")
                        .fix("point DATABASE_URL at the primary (with several hosts: target_session_attrs=read-write)"),
                );
            }
            if s.synchronous_commit == "off" {
                r.findings.push(
                    Finding::new("synchronous_commit", Area::Settings, Severity::Warning, "synchronous_commit is off".into())
                        .with("synchronous_commit", &s.synchronous_commit)
                        .cost("a server crash loses the last moments of acknowledged enqueues and completions (a completed job may run again)")
                        .fix("ALTER ROLE <worker login> SET synchronous_commit = on, unless that loss is accepted (docs/reliability.md)"),
                );
            }
            if timeout_unset(&s.idle_in_transaction_session_timeout) {
                r.findings.push(
                    Finding::new("idle_in_transaction_timeout", Area::Settings, Severity::Warning, "idle_in_transaction_session_timeout is unset".into())
                        .with("idle_in_transaction_session_timeout", &s.idle_in_transaction_session_timeout)
                        .cost("a client that opens a transaction and walks away holds the vacuum horizon until someone notices")
                        .fix("ALTER DATABASE <db> SET idle_in_transaction_session_timeout = '10min' (skiplock's own transactions are short)"),
                );
            }
            if let Some(sev) =
                headroom_severity(s.connections, s.max_connections, s.reserved_connections)
            {
                r.findings.push(
                    Finding::new(
                        "connection_headroom",
                        Area::Settings,
                        sev,
                        format!("{} of {} connections in use", s.connections, s.max_connections - s.reserved_connections),
                    )
                    .with("connections", s.connections)
                    .with("max_connections", s.max_connections)
                    .with("superuser_reserved_connections", s.reserved_connections)
                    .cost("a worker that cannot open its pool's connections stalls; a new one fails to start")
                    .fix("lower SKIPLOCK_MAX_CONNECTIONS per worker, put PgBouncer in front (SKIPLOCK_POOL_MODE=transaction), or raise max_connections"),
                );
            }
            Ok(Some(s))
        }
    }
}

/// Whether autovacuum keeps up with skiplock's tables: off on the server (or without
/// `track_counts`, which it needs), off for a table, or behind a table whose dead tuples passed
/// its threshold long ago (docs/operations.md, "Keeping the database healthy").
async fn autovacuum(
    pool: &Pool,
    t: &Thresholds,
    server: &store::doctor::ServerSettings,
    r: &mut Report,
    failed: &mut Vec<Finding>,
) -> Result<()> {
    let mut tx = store::doctor::begin(pool, t.statement_timeout).await?;
    let res = store::doctor::autovacuum(&mut tx, 100).await;
    let _ = tx.rollback().await;
    let tables = match res {
        Ok(v) => v,
        Err(e) => {
            failed.push(check_failed("autovacuum", &e));
            return Ok(());
        }
    };
    // What turns autovacuum off for every table, named as the setting to change.
    let server_off = if !server.autovacuum {
        Some("autovacuum = off")
    } else if !server.track_counts {
        Some("track_counts = off")
    } else {
        None
    };
    let mut past = 0;
    for a in &tables {
        let over = a.dead_tuples > a.threshold;
        let setting = match (server_off, a.enabled) {
            (Some(s), _) => Some(s.to_string()),
            (None, false) => Some(format!(
                "autovacuum_enabled = false on skiplock.{}",
                a.table_name
            )),
            (None, true) => None,
        };
        let vacuumed = a
            .vacuumed_seconds_ago
            .map_or("never".into(), |s| format!("{} ago", format_age(s)));
        if let Some(setting) = setting {
            if server_off.is_some() && !over {
                continue;
            }
            past += usize::from(over);
            r.findings.push(
                Finding::new(
                    "autovacuum_off",
                    Area::Tables,
                    autovacuum_off_severity(a.dead_tuples, a.threshold),
                    format!(
                        "autovacuum does not vacuum skiplock.{} ({setting}): {} dead tuples, its threshold {}",
                        a.table_name, a.dead_tuples, a.threshold
                    ),
                )
                .with("table", format!("skiplock.{}", a.table_name))
                .with("setting", &setting)
                .with("dead tuples", a.dead_tuples)
                .with("autovacuum threshold", a.threshold)
                .with("last vacuum", &vacuumed)
                .cost("nothing removes the dead tuples every finished job leaves: the table and its indexes grow and claims slow down")
                .fix(if server_off.is_some() {
                    format!("ALTER SYSTEM SET {} = on; SELECT pg_reload_conf(); then VACUUM skiplock.{}", setting.split(' ').next().unwrap_or("autovacuum"), a.table_name)
                } else {
                    format!("ALTER TABLE skiplock.{0} RESET (autovacuum_enabled); then VACUUM skiplock.{0}", a.table_name)
                }),
            );
        } else if let Some(sev) =
            lagging_severity(a.dead_tuples, a.threshold, a.vacuumed_seconds_ago, t)
        {
            r.findings.push(
                Finding::new(
                    "autovacuum_lagging",
                    Area::Tables,
                    sev,
                    format!(
                        "skiplock.{} has {} dead tuples, past autovacuum's threshold of {}, and was last vacuumed {vacuumed}",
                        a.table_name, a.dead_tuples, a.threshold
                    ),
                )
                .with("table", format!("skiplock.{}", a.table_name))
                .with("dead tuples", a.dead_tuples)
                .with("autovacuum threshold", a.threshold)
                .with("last vacuum", &vacuumed)
                .cost("dead tuples pile up between vacuums: the table and its indexes grow and claims slow down")
                .fix("autovacuum is busy elsewhere or throttled: raise autovacuum_max_workers or autovacuum_vacuum_cost_limit (or lower autovacuum_vacuum_cost_delay), and check pg_stat_activity for a running autovacuum on the table; VACUUM it now"),
            );
        }
    }
    if let Some(setting) = server_off
        && past == 0
    {
        r.findings.push(
            Finding::new(
                "autovacuum_off",
                Area::Settings,
                Severity::Warning,
                format!("autovacuum is off on the server ({setting})"),
            )
            .with("setting", setting)
            .cost("no table is vacuumed unless someone runs VACUUM: skiplock's tables bloat as jobs finish")
            .fix(format!(
                "ALTER SYSTEM SET {} = on; SELECT pg_reload_conf();",
                setting.split(' ').next().unwrap_or("autovacuum")
            )),
        );
    }
    Ok(())
}

/// The SQL API version check; false when the database has no skiplock schema at all (one
/// finding then, instead of every runtime check failing).
async fn migrated(
    pool: &Pool,
    t: &Thresholds,
    r: &mut Report,
    failed: &mut Vec<Finding>,
) -> Result<bool> {
    let mut tx = store::doctor::begin(pool, t.statement_timeout).await?;
    let res = store::doctor::api_version(&mut tx).await;
    let _ = tx.rollback().await;
    match res {
        Err(e) if undefined_table(&e) => {
            r.findings.push(
                Finding::new("not_migrated", Area::Settings, Severity::Action, "the database has no skiplock schema".into())
                    .with("error", e)
                    .cost("no worker or command of skiplock runs against it")
                    .fix("check DATABASE_URL names the queue's database; on a new one, run `skiplock migrate`"),
            );
            return Ok(false);
        }
        Err(e) => failed.push(check_failed("api_version", &e)),
        Ok(info) => {
            let binary = store::schema::API_VERSION;
            if let Some(m) = store::schema::mismatch_of(info.as_ref()) {
                r.findings.push(
                    Finding::new("api_version", Area::Settings, Severity::Action, m.to_string())
                        .with_opt("database's SQL API", info.as_ref().map(|i| i.api_version))
                        .with("this binary's SQL API", binary)
                        .with_opt("migrated by", info.as_ref().map(|i| i.migrated_by.clone()))
                        .cost("workers and commands of this release refuse to run against the database")
                        .fix("run `skiplock migrate` with the newer of the two releases, and deploy the same release everywhere"),
                );
            }
        }
    }
    Ok(true)
}

fn undefined_table(e: &crate::Error) -> bool {
    matches!(e, crate::Error::Database(sqlx::Error::Database(d)) if d.code().as_deref() == Some("42P01"))
}

fn backend_finding(b: &store::doctor::Backend, held_back: i64, t: &Thresholds) -> Option<Finding> {
    let sev = holder_severity(b.xact_seconds, b.xid_age, t)?;
    let state = b.state.as_deref().unwrap_or("?");
    let idle = state.starts_with("idle in transaction");
    let (check, summary) = if idle {
        (
            "idle_in_transaction",
            format!(
                "pid {} is idle in transaction for {}",
                b.pid,
                format_age(b.state_seconds)
            ),
        )
    } else {
        (
            "long_transaction",
            format!(
                "pid {} has a transaction open for {} ({state})",
                b.pid,
                format_age(b.xact_seconds)
            ),
        )
    };
    Some(
        Finding::new(check, Area::Horizon, sev, summary)
            .with("pid", b.pid)
            .with_opt("user", b.user_name.as_ref())
            .with_opt("application", b.application_name.as_ref().filter(|a| !a.is_empty()))
            .with("client", b.client.as_deref().unwrap_or("local socket"))
            .with("state", state)
            .with("transaction age", format_age(b.xact_seconds))
            .with_opt("xid", b.xid.as_ref())
            .with_opt("xmin", b.xmin.as_ref())
            .with_opt("xid age", b.xid_age)
            .with_opt("query", b.query.as_ref())
            .with("dead tuples in skiplock's tables", held_back)
            .cost("vacuum removes no dead tuple newer than its snapshot, in any table: skiplock's jobs and indexes bloat and claims slow down")
            .fix(if idle {
                format!("fix the client that leaves its transaction open; now: SELECT pg_terminate_backend({}); and set idle_in_transaction_session_timeout", b.pid)
            } else {
                format!("if the statement is not meant to run this long: SELECT pg_cancel_backend({0}); (or pg_terminate_backend({0}))", b.pid)
            }),
    )
}

fn slot_finding(s: &store::doctor::Slot, sev: Severity, held_back: i64) -> Finding {
    let kind = s.slot_type.as_deref().unwrap_or("replication");
    Finding::new(
        "replication_slot",
        Area::Horizon,
        sev,
        format!(
            "{kind} slot {} is {}",
            s.slot_name,
            if s.active { "active but far behind" } else { "inactive: no consumer is connected" }
        ),
    )
    .with("slot", &s.slot_name)
    .with("type", kind)
    .with_opt("database", s.database.as_ref())
    .with("active", s.active)
    .with_opt("xmin", s.xmin.as_ref())
    .with_opt("catalog_xmin", s.catalog_xmin.as_ref())
    .with_opt("xid age", s.xid_age)
    .with_opt("retained WAL", s.retained_wal_bytes.map(format_bytes))
    .with("dead tuples in skiplock's tables", held_back)
    .cost("the server keeps all WAL since the slot's position (the disk fills) and vacuum keeps what its xmin / catalog_xmin still needs")
    .fix(format!(
        "if its consumer is gone for good: SELECT pg_drop_replication_slot('{}'); else reconnect the consumer (and set max_slot_wal_keep_size)",
        s.slot_name
    ))
}

fn check_failed(name: &'static str, e: &crate::Error) -> Finding {
    // The answer of a pooler in transaction mode to a login in session mode (the same line
    // the worker ends with, src/error.rs): one finding naming the setting, not a failed check.
    if let crate::Error::Config {
        name: setting,
        message,
    } = e
        && setting == "SKIPLOCK_POOL_MODE"
    {
        return Finding::new(
            "pool_mode",
            Area::Settings,
            Severity::Action,
            format!("SKIPLOCK_POOL_MODE does not match the server: {message}"),
        )
        .with("setting", "SKIPLOCK_POOL_MODE")
        .with("check", name)
        .cost("a worker with this setting ends at its first statements; commands fail at random")
        .fix("set SKIPLOCK_POOL_MODE=transaction for every process whose URL goes through the pooler (docs/operations.md, \"Behind PgBouncer\")");
    }
    let text = e.to_string();
    let timed_out = text.contains("statement timeout");
    Finding::new(
        "check_failed",
        Area::Settings,
        Severity::Warning,
        format!("the {name} check could not run"),
    )
    .with("check", name)
    .with("error", text)
    .cost("what it looks for is not known")
    .fix(if timed_out {
        "the database answered too slowly: rerun with a longer --statement-timeout"
    } else {
        "run doctor as a login with SELECT on skiplock's tables and pg_monitor (docs/roles.md)"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(
        missing: &[&str],
        operator_login: bool,
        worker_role: bool,
    ) -> store::doctor::WorkerGrants {
        store::doctor::WorkerGrants {
            login: "app".into(),
            worker_role,
            operator_login,
            missing: missing.iter().map(|m| m.to_string()).collect(),
        }
    }

    #[test]
    fn a_login_without_the_workers_grants_is_named_with_the_grant_to_run() {
        assert_eq!(grants_finding(&grants(&[], false, true)), None);
        // An operator's login is never a worker's.
        assert_eq!(
            grants_finding(&grants(&["USAGE on schema skiplock"], true, true)),
            None
        );
        let f = grants_finding(&grants(
            &["USAGE on schema skiplock", "UPDATE on table skiplock.jobs"],
            false,
            true,
        ))
        .unwrap();
        assert_eq!((f.check, f.severity), ("missing_grant", Severity::Action));
        assert_eq!(
            f.summary,
            "login app lacks what a worker needs: USAGE on schema skiplock, UPDATE on table skiplock.jobs"
        );
        assert!(f.fix.contains("GRANT skiplock_worker TO app;"), "{}", f.fix);
        let f = grants_finding(&grants(&["USAGE on schema skiplock"], false, false)).unwrap();
        assert!(f.fix.contains("CREATEROLE"), "{}", f.fix);
    }
}

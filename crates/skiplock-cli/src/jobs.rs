//! `enqueue`, `jobs`, `job`, `cancel`, `retry`, `reschedule`, `stats`, `signal`.

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use clap::Args;

use super::connect_migrated;
use super::output::{print_json, print_table, say, truncate, ts};
use skiplock::config::parse_duration;
use skiplock::queue::flow::{COUNTED_DEPENDENCIES, LISTED_DEPENDENCIES, not_listed};
use skiplock::queue::{
    EnqueueOutcome, JobState, NewJob, OnConflict, OnDependencyFailure, UniqueBy,
};
use skiplock::store::flows;
use skiplock::store::jobs::{self, JobFilter};

/// `skiplock enqueue`.
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// Job kind (the handler's name).
    pub kind: String,
    /// Arguments as a JSON object.
    #[arg(default_value = "{}")]
    pub args: String,
    /// Queue.
    #[arg(long, default_value = skiplock::names::DEFAULT_QUEUE)]
    pub queue: String,
    /// Priority (smaller runs first).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i16,
    /// When to run, RFC 3339 (e.g. 2026-12-01T10:00:00Z).
    #[arg(long, conflicts_with = "in_")]
    pub run_at: Option<String>,
    /// Run after this long (e.g. 30s, 5m).
    #[arg(long = "in", id = "in_")]
    pub in_: Option<String>,
    /// Attempt limit.
    #[arg(long, default_value_t = 25, allow_negative_numbers = true)]
    pub max_attempts: i32,
    /// Unique key: at most one available job holds it.
    #[arg(long, conflicts_with = "unique_by")]
    pub unique_key: Option<String>,
    /// Unique by the args instead of a key: `args` (all of them) or `args:a,b` (those fields).
    #[arg(long, value_parser = parse_unique_by)]
    pub unique_by: Option<UniqueBy>,
    /// At most one such job (kind, queue, and key or args) created per window of this length
    /// (e.g. 1m, 1h), whatever became of it.
    #[arg(long)]
    pub unique_for: Option<String>,
    /// With --unique-key or --unique-by: update the waiting job (args, run time, priority, max
    /// attempts, tags, meta; its attempt count starts again) instead of keeping it.
    #[arg(long)]
    pub replace: bool,
    /// The key the queue's per-key limits count this job under (see `skiplock queue limit`).
    #[arg(long)]
    pub limit_key: Option<String>,
    /// A tag (repeat for more).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Meta, a JSON object (what is about the job rather than its work).
    #[arg(long)]
    pub meta: Option<String>,
    /// A job that must finish first (repeat for more): this one waits until then.
    #[arg(long = "depends-on")]
    pub depends_on: Vec<i64>,
    /// What a failed (discarded or cancelled) dependency does to this job: cancel it too, or
    /// run it anyway once every dependency has finished.
    #[arg(long, value_enum, default_value = "cancel", requires = "depends_on")]
    pub on_dependency_failure: DependencyFailureArg,
}

/// `--on-dependency-failure`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum DependencyFailureArg {
    /// Cancel this job too.
    Cancel,
    /// Run it anyway.
    Run,
}

fn parse_unique_by(s: &str) -> Result<UniqueBy, String> {
    s.parse()
}

/// Parses a `--meta` argument into a JSON object, with a message naming the problem.
fn parse_meta(s: &str) -> anyhow::Result<serde_json::Value> {
    let v = json_object("--meta", r#"{"tenant": "a"}"#, s)?;
    // A `\u0000` escape: Postgres's jsonb cannot hold NUL (as a filter it would fail the query).
    if let Some(path) = skiplock::queue::enqueue::find_nul(&v) {
        bail!("invalid --meta: a NUL character (\\u0000) at {path}, which no stored meta can hold");
    }
    Ok(v)
}

/// Parses the ARGS_JSON argument into a JSON object, with a message naming the problem.
pub fn parse_args_json(s: &str) -> anyhow::Result<serde_json::Value> {
    json_object("ARGS_JSON", r#"{"key": 1}"#, s)
}

/// `s` as a JSON object, or an error naming `what` and showing `example`.
fn json_object(what: &str, example: &str, s: &str) -> anyhow::Result<serde_json::Value> {
    let v: serde_json::Value =
        serde_json::from_str(s).map_err(|e| anyhow::anyhow!("invalid {what}: {e}"))?;
    if !v.is_object() {
        bail!(
            "invalid {what}: expected a JSON object like {example}, got {}",
            skiplock::queue::typed::json_type(&v)
        );
    }
    Ok(v)
}

/// The time `--run-at` (RFC 3339) or `--in` (a duration from now) names, if either is given.
fn run_at(run_at: Option<&str>, in_: Option<&str>) -> anyhow::Result<Option<DateTime<Utc>>> {
    if let Some(s) = run_at {
        let t = DateTime::parse_from_rfc3339(s).map_err(|e| {
            anyhow::anyhow!(
                "invalid --run-at {s:?}: {e} (expected RFC 3339, e.g. 2026-12-01T10:00:00Z)"
            )
        })?;
        return Ok(Some(t.with_timezone(&Utc)));
    }
    if let Some(s) = in_ {
        let d = parse_duration(s).map_err(|e| anyhow::anyhow!("invalid --in: {e}"))?;
        let d = chrono::Duration::from_std(d).context("--in is too large")?;
        return Ok(Some(
            Utc::now()
                .checked_add_signed(d)
                .context("--in is too large")?,
        ));
    }
    Ok(None)
}

/// Enqueues and prints the id.
pub async fn enqueue(url: Option<&str>, a: EnqueueArgs) -> anyhow::Result<()> {
    let args = parse_args_json(&a.args)?;
    if a.max_attempts < 1 {
        bail!(
            "invalid --max-attempts {}: must be at least 1",
            a.max_attempts
        );
    }
    let when = run_at(a.run_at.as_deref(), a.in_.as_deref())?;
    let meta = a.meta.as_deref().map(parse_meta).transpose()?;
    let unique_for = a
        .unique_for
        .as_deref()
        .map(|s| parse_duration(s).map_err(|e| anyhow::anyhow!("invalid --unique-for: {e}")))
        .transpose()?;
    if a.replace && a.unique_key.is_none() && a.unique_by.is_none() {
        bail!("--replace needs --unique-key or --unique-by (which waiting job would it replace?)");
    }
    let pool = connect_migrated(url).await?;
    let mut job = NewJob::new(a.kind.clone(), args)
        .queue(a.queue.clone())
        .priority(a.priority)
        .max_attempts(a.max_attempts);
    job.run_at = when;
    job.limit_key = a.limit_key.clone();
    job.tags = a.tags.clone();
    job.meta = meta;
    job.unique_for = unique_for;
    job.depends_on = a.depends_on.clone();
    job.on_dependency_failure = match a.on_dependency_failure {
        DependencyFailureArg::Cancel => OnDependencyFailure::Cancel,
        DependencyFailureArg::Run => OnDependencyFailure::Run,
    };
    let on_conflict = if a.replace {
        OnConflict::Replace
    } else {
        OnConflict::Keep
    };
    if let Some(k) = &a.unique_key {
        job = job.unique_key(k.clone(), on_conflict);
    }
    if let Some(by) = &a.unique_by {
        job = job.unique_by(by.clone(), on_conflict);
    }
    let got = jobs::enqueue(&pool, &job).await?;
    // stdout stays the bare id (scripts capture it); what happened goes to stderr.
    match got.outcome {
        EnqueueOutcome::Inserted => {}
        EnqueueOutcome::Deduplicated => {
            eprintln!(
                "a job with this key or args already exists ({}): left as it was",
                got.id
            )
        }
        EnqueueOutcome::Replaced => {
            eprintln!(
                "a job with this key or args was waiting ({}): replaced",
                got.id
            )
        }
    }
    say!("{}", got.id);
    Ok(())
}

/// `skiplock jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Only jobs in this state (available, running, completed, discarded, cancelled).
    #[arg(long)]
    pub state: Option<String>,
    /// Only this kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only jobs with this tag.
    #[arg(long)]
    pub tag: Option<String>,
    /// Only jobs whose meta contains this JSON object (e.g. '{"tenant": "a"}').
    #[arg(long)]
    pub meta: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 50)]
    pub limit: i64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Lists jobs.
pub async fn list(url: Option<&str>, a: JobsArgs) -> anyhow::Result<()> {
    let state = match &a.state {
        Some(s) => Some(
            s.parse::<JobState>()
                .map_err(|e| anyhow::anyhow!("invalid --state: {e}"))?,
        ),
        None => None,
    };
    super::check_flag("--limit", a.limit.into(), 1, super::MAX_LIMIT)?;
    let meta = a.meta.as_deref().map(parse_meta).transpose()?;
    let pool = connect_migrated(url).await?;
    let rows = jobs::list_jobs(
        &pool,
        &JobFilter {
            state,
            kind: a.kind,
            queue: a.queue,
            tag: a.tag,
            meta,
            limit: a.limit,
        },
    )
    .await?;
    if a.json {
        return print_json(&rows);
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|j| {
            let last_error = j
                .errors
                .value()
                .and_then(|e| e.as_array())
                .and_then(|e| e.last())
                .and_then(|e| e.get("error"))
                .and_then(|e| e.as_str())
                .unwrap_or("");
            vec![
                j.id.to_string(),
                j.kind.clone(),
                j.queue.clone(),
                j.state.to_string(),
                format!("{}/{}", j.attempt, j.max_attempts),
                ts(Some(j.scheduled_at)),
                truncate(&j.args.to_string(), 40),
                truncate(last_error, 60),
            ]
        })
        .collect();
    print_table(
        &[
            "ID",
            "KIND",
            "QUEUE",
            "STATE",
            "ATTEMPT",
            "SCHEDULED_AT",
            "ARGS",
            "LAST_ERROR",
        ],
        &table,
    );
    Ok(())
}

/// `skiplock job ID`.
#[derive(Debug, Args)]
pub struct JobArgs {
    /// Job id.
    pub id: i64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Shows one job.
pub async fn show(url: Option<&str>, a: JobArgs) -> anyhow::Result<()> {
    let pool = connect_migrated(url).await?;
    let j = jobs::get_job(&pool, a.id).await?;
    if a.json {
        return print_json(&j);
    }
    say!("id:            {}", j.id);
    say!("kind:          {}", j.kind);
    say!("queue:         {}", j.queue);
    say!("state:         {}", j.state);
    say!("priority:      {}", j.priority);
    say!("attempt:       {}/{}", j.attempt, j.max_attempts);
    say!("args:          {}", j.args);
    say!("scheduled_at:  {}", ts(Some(j.scheduled_at)));
    say!("created_at:    {}", ts(Some(j.created_at)));
    say!("attempted_at:  {}", ts(j.attempted_at));
    say!(
        "attempted_by:  {}",
        j.attempted_by.as_deref().unwrap_or("-")
    );
    say!("heartbeat_at:  {}", ts(j.heartbeat_at));
    say!("finalized_at:  {}", ts(j.finalized_at));
    say!("unique_key:    {}", j.unique_key.as_deref().unwrap_or("-"));
    if !j.tags.is_empty() {
        say!("tags:          {}", j.tags.join(", "));
    }
    if !j.meta.is_empty_object() {
        say!("meta:          {}", j.meta.describe());
    }
    if let Some(r) = &j.result {
        say!("result:        {}", r.describe());
    }
    // Bounded, as the console's page: any enqueuer may make 100,000 jobs a call wait for this one.
    let counts = flows::dependency_counts(&pool, j.id, COUNTED_DEPENDENCIES).await?;
    let deps = flows::first_dependency_results(&pool, j.id, LISTED_DEPENDENCIES).await?;
    if !deps.is_empty() {
        say!("depends on:");
        for d in &deps {
            say!(
                "  {}{} {} {}",
                d.id,
                d.name
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default(),
                d.kind.as_deref().unwrap_or("-"),
                d.state.map_or("deleted", JobState::as_str)
            );
        }
        if let Some(more) = not_listed(deps.len(), counts.dependencies) {
            say!("  … {more}");
        }
    }
    let dependents = flows::first_dependents(&pool, j.id, LISTED_DEPENDENCIES).await?;
    if !dependents.is_empty() {
        say!("dependents:");
        for d in &dependents {
            say!("  {} {} {}", d.id, d.kind, d.state);
        }
        if let Some(more) = not_listed(dependents.len(), counts.dependents) {
            say!("  … {more}");
        }
    }
    // What its durable steps recorded (docs/steps.md): at most 1000 rows, the bound per job.
    let steps = skiplock::store::steps::load(&pool, j.id).await?;
    if !steps.is_empty() {
        say!("steps:");
        for s in &steps {
            say!(
                "  {} {} {} attempt {}: {}{}",
                s.seq,
                s.kind,
                s.name,
                s.attempt,
                s.result.as_ref().map_or("-".into(), |r| r.describe()),
                s.note
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            );
        }
    }
    if j.errors.value().is_none() {
        say!("errors:        {}", j.errors.describe());
    }
    if let Some(errs) = j
        .errors
        .value()
        .and_then(|e| e.as_array())
        .filter(|e| !e.is_empty())
    {
        say!("errors:");
        for e in errs {
            say!(
                "  attempt {} at {}: {}",
                e.get("attempt").map(|v| v.to_string()).unwrap_or_default(),
                e.get("at").and_then(|v| v.as_str()).unwrap_or(""),
                e.get("error").and_then(|v| v.as_str()).unwrap_or("")
            );
        }
    }
    Ok(())
}

/// A job id argument.
#[derive(Debug, Args)]
pub struct IdArg {
    /// Job id.
    pub id: i64,
}

/// `skiplock cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Job id.
    #[arg(required_unless_present = "key", conflicts_with = "key")]
    pub id: Option<i64>,
    /// Instead of an id: cancel the waiting and running jobs with this unique key.
    #[arg(long)]
    pub key: Option<String>,
    /// With --key: only jobs of this kind.
    #[arg(long, requires = "key")]
    pub kind: Option<String>,
    /// With --key: only jobs in this queue.
    #[arg(long, requires = "key")]
    pub queue: Option<String>,
}

/// Cancels a job, or the unfinished jobs with a unique key.
pub async fn cancel(url: Option<&str>, a: CancelArgs) -> anyhow::Result<()> {
    let pool = connect_migrated(url).await?;
    match (a.id, &a.key) {
        (Some(id), _) => {
            jobs::cancel_job(&pool, id).await?;
            say!("job {id} cancelled");
        }
        (None, Some(key)) => {
            let n = jobs::cancel_by_key(&pool, key, a.kind.as_deref(), a.queue.as_deref()).await?;
            say!("{n} job(s) with unique key {key:?} cancelled");
        }
        // clap requires one of the two.
        (None, None) => bail!("give a job id or --key"),
    }
    Ok(())
}

/// `skiplock reschedule`.
#[derive(Debug, Args)]
pub struct RescheduleArgs {
    /// Job ids (waiting jobs; running and finished ones are left as they are).
    #[arg(required_unless_present = "key", conflicts_with = "key")]
    pub ids: Vec<i64>,
    /// Instead of ids: the waiting jobs with this unique key.
    #[arg(long)]
    pub key: Option<String>,
    /// Only jobs of this kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only jobs in this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// New run time, RFC 3339 (a past one means now).
    #[arg(long, conflicts_with = "in_")]
    pub run_at: Option<String>,
    /// New run time: this long from now (e.g. 30s, 5m).
    #[arg(long = "in", id = "in_")]
    pub in_: Option<String>,
    /// New priority (smaller runs first).
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i16>,
    /// New attempt limit.
    #[arg(long, allow_negative_numbers = true)]
    pub max_attempts: Option<i32>,
}

/// Reschedules waiting jobs; prints how many and their ids.
pub async fn reschedule(url: Option<&str>, a: RescheduleArgs) -> anyhow::Result<()> {
    let when = run_at(a.run_at.as_deref(), a.in_.as_deref())?;
    if when.is_none() && a.priority.is_none() && a.max_attempts.is_none() {
        bail!("nothing to change: give --run-at, --in, --priority or --max-attempts");
    }
    if let Some(n) = a.max_attempts.filter(|n| *n < 1) {
        bail!("invalid --max-attempts {n}: must be at least 1");
    }
    let pool = connect_migrated(url).await?;
    let r = jobs::Reschedule {
        ids: a.key.is_none().then_some(a.ids.as_slice()),
        key: a.key.as_deref(),
        kind: a.kind.as_deref(),
        queue: a.queue.as_deref(),
        run_at: when,
        priority: a.priority,
        max_attempts: a.max_attempts,
    };
    let moved = jobs::reschedule(&pool, &r).await?;
    let ids: Vec<String> = moved.iter().map(i64::to_string).collect();
    say!(
        "{} waiting job(s) rescheduled: {}",
        moved.len(),
        ids.join(" ")
    );
    Ok(())
}

/// Retries a job.
pub async fn retry(url: Option<&str>, a: IdArg) -> anyhow::Result<()> {
    let pool = connect_migrated(url).await?;
    jobs::retry_job(&pool, a.id).await?;
    say!("job {} is available again", a.id);
    Ok(())
}

/// `skiplock stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Prints counts per queue and state, and kinds nobody handles.
pub async fn stats(url: Option<&str>, a: StatsArgs) -> anyhow::Result<()> {
    let pool = connect_migrated(url).await?;
    let rows = jobs::queue_stats(&pool).await?;
    let unhandled = jobs::unhandled_kinds(&pool, 120.0, None).await?;
    let workers = jobs::live_workers(&pool, 120.0).await?;
    let control: Vec<_> = skiplock::store::control::list(&pool)
        .await?
        .into_iter()
        .filter(|q| {
            q.paused
                || q.concurrency.is_some()
                || q.key_concurrency.is_some()
                || q.key_rate.is_some()
        })
        .collect();
    if a.json {
        return print_json(&serde_json::json!({
            "queues": rows, "unhandled_kinds": unhandled, "live_workers": workers,
            "queue_control": control
        }));
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.queue.clone(),
                r.state.to_string(),
                r.count.to_string(),
                ts(r.oldest_scheduled_at),
            ]
        })
        .collect();
    print_table(&["QUEUE", "STATE", "COUNT", "OLDEST_SCHEDULED_AT"], &table);
    for q in &control {
        say!("queue {}: {}", q.queue, super::queue::describe(q));
    }
    say!("live workers: {workers}");
    if !unhandled.is_empty() {
        let list: Vec<String> = unhandled
            .iter()
            .map(|u| format!("{} ({})", u.kind, u.count))
            .collect();
        say!(
            "available jobs of kinds no live worker handles: {}",
            list.join(", ")
        );
    }
    Ok(())
}

/// `skiplock signal`.
#[derive(Debug, Args)]
pub struct SignalArgs {
    /// Job id.
    pub id: i64,
    /// The signal's name (what the job's `wait_for` waits for).
    pub name: String,
    /// The signal's payload, any JSON value (e.g. '{"by": "ops"}'); none: null.
    #[arg(long)]
    pub payload: Option<String>,
}

/// Sends a signal to a job (`skiplock.signal`, through `skiplock::signal`).
pub async fn signal(url: Option<&str>, a: SignalArgs) -> anyhow::Result<()> {
    // Checked before connecting: a typo in the payload is named without a database.
    let payload: serde_json::Value = match &a.payload {
        None => serde_json::Value::Null,
        Some(s) => serde_json::from_str(s).map_err(|e| {
            anyhow::anyhow!(
                "invalid --payload: {e} (expected JSON, e.g. '{{\"by\": \"ops\"}}' or '\"yes\"')"
            )
        })?,
    };
    if let Some(path) = skiplock::queue::enqueue::find_nul(&payload) {
        bail!(
            "invalid --payload: a NUL character (\\u0000) at {path}, which no stored payload can hold"
        );
    }
    let pool = connect_migrated(url).await?;
    let kept = skiplock::signal(&pool, a.id, &a.name, &payload).await?;
    if !kept {
        // The sender's key scope sent this job a signal of this name before: the first one is
        // kept and this one dropped (docs/steps.md, "Signals"); a script must not take it for
        // delivered.
        bail!(
            "signal {:?} not sent: job {} already has a signal of that name from this login's key scope (the first is kept)",
            a.name,
            a.id
        );
    }
    say!("signal {:?} sent to job {}", a.name, a.id);
    Ok(())
}

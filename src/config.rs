//! Settings, read once from the environment (and a `.env` file) and validated once.
//!
//! Settings are values: the library takes them as arguments (`Worker::builder(pool).settings(
//! QueueSettings)`, `.maintenance(MaintenanceSettings)`, `skiplock_workflows::register_all(builder,
//! WorkflowSettings)`) and never reads the environment on its own. The `from_env`
//! functions here and in each section's module are called at the edge only: by
//! `cli::settings::Settings::from_env` (everything `skiplock worker` uses, parsed before
//! anything starts) and by the other commands of `crates/skiplock-cli/src/` for the sections they need.
//!
//! Every setting has a default except `DATABASE_URL`; `.env-template` documents each one.
//! Durations are written like `30s`, `5m`, `48h`, `7d`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};

/// Default fallback poll interval: NOTIFY wakes workers at once; polling catches the rest.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Default per-job timeout.
pub const DEFAULT_JOB_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Default age of a heartbeat after which a running job is rescued.
pub const DEFAULT_RESCUE_AFTER: Duration = Duration::from_secs(60);
/// Default time running jobs get to finish on shutdown.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// Default concurrency of each queue when `SKIPLOCK_QUEUES` is not set.
pub const DEFAULT_QUEUE_CONCURRENCY: usize = 10;
/// Default unit of the retry backoff: attempt⁴ × this.
pub const DEFAULT_BACKOFF_UNIT: Duration = Duration::from_secs(1);
/// Default cap of the retry backoff.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(24 * 3600);
/// Default minimum time between two claims of a busy queue (lets claims batch).
pub const DEFAULT_FETCH_COOLDOWN: Duration = Duration::from_millis(2);
/// Jobs a queue's producer may hold claimed beyond its free slots (`SKIPLOCK_CLAIM_AHEAD`).
pub const DEFAULT_CLAIM_AHEAD: usize = 500;
/// Default of [`QueueSettings::claim_lookback`].
pub const DEFAULT_CLAIM_LOOKBACK: Duration = Duration::from_secs(1);
/// Default time the first acknowledgement of a batch waits for company.
pub const DEFAULT_ACK_DELAY: Duration = Duration::from_millis(2);
/// Default size of the database connection pool of one process's handlers.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// Default size of the runtime's own pool (claims, acks, heartbeats, NOTIFY listener,
/// rescuer), kept apart from the handlers' so busy handlers never starve them.
pub const DEFAULT_RUNTIME_CONNECTIONS: u32 = 4;
/// Default `statement_timeout` of worker sessions.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `lock_timeout` of worker sessions.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// Default cap on queues served at once by a worker that discovers its queues.
pub const DEFAULT_MAX_QUEUES: usize = 100;
/// Longest `statement_timeout` / `lock_timeout` accepted (Postgres takes milliseconds in
/// an int).
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Parses a duration written like `30s`, `5m`, `48h`, `7d`, `250ms` or `0s`.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration (write e.g. 30s, 5m, 48h)".into());
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("invalid duration {t:?}: {e} (write e.g. 30s, 5m, 48h)"))
}

/// The most jobs one queue may run at once in one process.
pub const MAX_QUEUE_CONCURRENCY: usize = 10_000;
/// The most queues one process may be given explicitly.
pub const MAX_QUEUES: usize = 1000;
/// The longest queue name (the SQL API's limit).
pub const MAX_QUEUE_NAME: usize = 200;

/// Parses `default=10,fetch=4` into queue → concurrency, with every count and name in range.
pub fn parse_queues(s: &str) -> std::result::Result<BTreeMap<String, usize>, String> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, n) = match part.split_once('=') {
            Some((name, n)) => (name.trim(), n.trim()),
            None => (part, ""),
        };
        if name.is_empty() {
            return Err(format!("queue entry {part:?} has no name"));
        }
        let n = if n.is_empty() {
            DEFAULT_QUEUE_CONCURRENCY
        } else {
            n.parse::<u128>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    format!("queue {name:?}: concurrency {n:?} is not a positive whole number")
                })?
                .min(usize::MAX as u128) as usize
        };
        out.insert(name.to_string(), n);
    }
    if out.is_empty() {
        return Err("no queues given (write e.g. default=10,fetch=4)".into());
    }
    check_queues(&out)?;
    Ok(out)
}

/// Checks queue names, their number and each concurrency against the limits above.
pub fn check_queues(q: &BTreeMap<String, usize>) -> std::result::Result<(), String> {
    if q.len() > MAX_QUEUES {
        return Err(format!("{} queues given (at most {MAX_QUEUES})", q.len()));
    }
    for (name, n) in q {
        if name.is_empty() || name.chars().count() > MAX_QUEUE_NAME {
            return Err(format!(
                "queue name must be 1 to {MAX_QUEUE_NAME} characters"
            ));
        }
        if *n == 0 || *n > MAX_QUEUE_CONCURRENCY {
            return Err(format!(
                "queue {name:?}: concurrency {n} is out of range (1 to {MAX_QUEUE_CONCURRENCY})"
            ));
        }
    }
    Ok(())
}

/// Loads `.env` from the working directory (or the nearest parent that has one). Variables
/// already set in the environment win. A malformed `.env` is an error naming the file, line
/// and column, never the line's text: a `.env` holds passwords.
pub fn load_dotenv() -> Result<()> {
    let Some(path) = find_dotenv() else {
        return Ok(());
    };
    match dotenvy::from_path(&path) {
        Ok(()) => Ok(()),
        Err(dotenvy::Error::LineParse(line, index)) => {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // The line the broken entry starts on; the column when the problem is on that
            // same line (an unclosed quote is only noticed at the end of the file).
            let at = match text.find(&line) {
                Some(start) => {
                    let (l, _) = line_col(&text, start);
                    let first = line.find('\n').unwrap_or(line.len());
                    if index < first {
                        let (_, c) = line_col(&text, start + index);
                        format!("line {l}, column {c}")
                    } else {
                        format!("line {l}")
                    }
                }
                None => "a line".to_string(),
            };
            Err(Error::config(
                ".env",
                format!(
                    "{}: {at}: cannot parse it (write NAME=value, one per line, and close every quote)",
                    path.display()
                ),
            ))
        }
        Err(e) if e.not_found() => Ok(()),
        Err(dotenvy::Error::Io(e)) => Err(Error::config(
            ".env",
            format!("{}: cannot read it: {}", path.display(), e.kind()),
        )),
        Err(_) => Err(Error::config(
            ".env",
            format!("{}: cannot load it", path.display()),
        )),
    }
}

/// The `.env` dotenvy would load: in the working directory or its nearest ancestor.
fn find_dotenv() -> Option<std::path::PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors()
        .map(|d| d.join(".env"))
        .find(|p| p.is_file())
}

/// The 1-based line and column (in characters) of byte `offset` in `text`, for error
/// messages that point into a file without quoting it.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.bytes().filter(|b| *b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    (line, before[line_start..].chars().count() + 1)
}

/// `line L, column C` of byte `offset` in `text`.
pub fn position(text: &str, offset: usize) -> String {
    let (l, c) = line_col(text, offset);
    format!("line {l}, column {c}")
}

/// A TOML error as `line L, column C: what is wrong`, without any of the file's text.
///
/// A config setting may point at any file the process can read (`/etc/shadow`, a file of
/// secrets), so an error must not echo it: the parser's own rendering quotes the offending
/// line, and its message quotes keys and values (`unknown field \`x\``, `invalid type:
/// string "x"`). By serde's convention the part after "expected" is the program's own
/// vocabulary (`expected one of \`default\`, \`allow\``) and is kept; before it, everything
/// from the first quote on is dropped. `missing field \`name\`` names the program's field.
pub fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim();
    let what = if msg.starts_with("missing field") {
        msg.to_string()
    } else {
        let (head, tail) = match msg.find("expected") {
            Some(i) => msg.split_at(i),
            None => (msg, ""),
        };
        let head = match head.find(['`', '"', '\'']) {
            Some(q) => head[..q].trim_end().trim_end_matches(':').trim_end(),
            None => head.trim_end().trim_end_matches(',').trim_end(),
        };
        match (head.is_empty(), tail.is_empty()) {
            (true, _) => tail.to_string(),
            (false, true) => head.to_string(),
            (false, false) => format!("{head}, {tail}"),
        }
    };
    match e.span() {
        Some(span) => format!("{}: {what}", position(text, span.start)),
        None => what,
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Like `var`, but a value that is not UTF-8 is an error instead of silently unset.
fn checked_var(name: &str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::config(name, "is not valid UTF-8")),
    }
}

/// `d` the way settings are written (`250ms`, `30s`, `5m`, `48h`, `7d`), for messages.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

const MS: Duration = Duration::from_millis(1);
const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
const HOUR: u64 = 3600;
const DAY: u64 = 86_400;

/// The longest duration any setting accepts unless [`duration_range`] says less.
pub const MAX_DURATION: Duration = secs(3650 * DAY);

/// The range `(min, max)` the duration setting `name` accepts. One table for every
/// setting, so each is range-checked where it is read ([`env_duration`]) and where Rust
/// callers build settings by hand (`validate`), and no value can overflow a timer, a
/// timestamp or a SQL interval later. Settings not listed: 0s to [`MAX_DURATION`].
pub fn duration_range(name: &str) -> (Duration, Duration) {
    match name {
        "SKIPLOCK_POLL_INTERVAL" => (Duration::from_millis(10), secs(HOUR)),
        "SKIPLOCK_JOB_TIMEOUT" => (MS, secs(30 * DAY)),
        "SKIPLOCK_RESCUE_AFTER" => (Duration::from_millis(200), secs(7 * DAY)),
        "SKIPLOCK_SHUTDOWN_GRACE" => (Duration::ZERO, secs(DAY)),
        "SKIPLOCK_BACKOFF_UNIT" => (Duration::ZERO, secs(DAY)),
        "SKIPLOCK_BACKOFF_MAX" => (Duration::ZERO, secs(365 * DAY)),
        "SKIPLOCK_FETCH_COOLDOWN" | "SKIPLOCK_ACK_DELAY" => (Duration::ZERO, secs(1)),
        // A claim re-reads this much of each lane it found empty (src/worker/cursor.rs).
        "SKIPLOCK_CLAIM_LOOKBACK" => (Duration::ZERO, secs(HOUR)),
        "SKIPLOCK_PACKET_TIMEOUT" => (MS, secs(7 * DAY)),
        "SKIPLOCK_POLITENESS" => (Duration::ZERO, secs(DAY)),
        "SKIPLOCK_FETCH_TIMEOUT" => (MS, secs(HOUR)),
        "SKIPLOCK_PACK_QUIET" => (Duration::ZERO, secs(30 * DAY)),
        "SKIPLOCK_PACK_MAX_WAIT" => (MS, secs(365 * DAY)),
        "SKIPLOCK_REAPER_MAX_AGE" => (secs(1), MAX_DURATION),
        // The period of the `reap` and `retain` periodic jobs (periodic intervals are at least 1s).
        "SKIPLOCK_REAPER_INTERVAL" => (secs(1), secs(DAY)),
        "SKIPLOCK_WEB_STATEMENT_TIMEOUT" => (Duration::ZERO, MAX_SESSION_TIMEOUT),
        // How long a client may take to send a request's headers
        // (crates/skiplock-console/src/http/server.rs).
        "SKIPLOCK_WEB_READ_TIMEOUT" | "SKIPLOCK_METRICS_READ_TIMEOUT" => (MS, secs(HOUR)),
        // How long a console login lasts (crates/skiplock-console/src/web/auth.rs).
        "SKIPLOCK_WEB_SESSION_TTL" => (secs(1), secs(30 * DAY)),
        _ => (Duration::ZERO, MAX_DURATION),
    }
}

/// Checks `d` against [`duration_range`] of `name`; the error names the setting and bound.
pub fn check_duration(name: &str, d: Duration) -> Result<Duration> {
    let (min, max) = duration_range(name);
    if d < min {
        return Err(Error::config(
            name,
            if min == MS {
                "must be more than 0s".to_string()
            } else {
                format!("must be at least {}", format_duration(min))
            },
        ));
    }
    if d > max {
        return Err(Error::config(
            name,
            format!("must be at most {}", format_duration(max)),
        ));
    }
    Ok(d)
}

/// Reads a duration setting, or its default, and checks its range ([`duration_range`]).
pub fn env_duration(name: &str, default: Duration) -> Result<Duration> {
    match checked_var(name)? {
        None => check_duration(name, default),
        Some(v) => check_duration(
            name,
            parse_duration(&v).map_err(|m| Error::config(name, m))?,
        ),
    }
}

/// Reads an optional duration setting (unset or empty: `None`).
pub fn env_opt_duration(name: &str) -> Result<Option<Duration>> {
    match checked_var(name)? {
        None => Ok(None),
        Some(v) => parse_duration(&v)
            .map(Some)
            .map_err(|m| Error::config(name, m)),
    }
}

/// Whether `skiplock worker` registers the diagnostic kinds `noop`, `sleep` and `fail`
/// (`SKIPLOCK_DIAGNOSTIC_KINDS`, default on: the tour, the scripts and the benchmarks use
/// them). Off in production: any enqueuer can otherwise occupy a slot of any queue it may
/// enqueue into for up to `SKIPLOCK_JOB_TIMEOUT` per attempt with one `sleep` job.
pub fn diagnostic_kinds() -> Result<bool> {
    env_bool("SKIPLOCK_DIAGNOSTIC_KINDS", true)
}

/// Reads a boolean setting (`true/false/1/0/yes/no/on/off`), or its default.
pub fn env_bool(name: &str, default: bool) -> Result<bool> {
    match checked_var(name)? {
        None => Ok(default),
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(Error::config(
                name,
                format!("{v:?} is not a boolean (true or false)"),
            )),
        },
    }
}

/// The largest value a whole-number setting accepts unless [`number_range`] says less.
pub const MAX_NUMBER: usize = 1_000_000;

/// The range `(min, max)` the whole-number setting `name` accepts; like [`duration_range`].
pub fn number_range(name: &str) -> (usize, usize) {
    match name {
        "SKIPLOCK_MAX_CONNECTIONS" => (2, 1000),
        "SKIPLOCK_PACKET_CONCURRENCY" => (1, 1000),
        "SKIPLOCK_FETCH_MAX_BYTES" => (1, 1 << 30),
        "SKIPLOCK_WEB_CONNECTIONS" => (1, 100),
        "SKIPLOCK_CLAIM_AHEAD" => (0, 10_000),
        // Queues the overview and /metrics list one by one (docs/console.md, "Many queues").
        "SKIPLOCK_TOP_QUEUES" => (1, 10_000),
        _ => (1, MAX_NUMBER),
    }
}

/// Checks `n` against [`number_range`] of `name`.
pub fn check_number(name: &str, n: usize) -> Result<usize> {
    let (min, max) = number_range(name);
    if n < min {
        return Err(Error::config(name, format!("must be at least {min}")));
    }
    if n > max {
        return Err(Error::config(name, format!("must be at most {max}")));
    }
    Ok(n)
}

/// Reads a positive whole-number setting, or its default, and checks its range
/// ([`number_range`]).
pub fn env_usize(name: &str, default: usize) -> Result<usize> {
    match checked_var(name)? {
        None => check_number(name, default),
        Some(v) => {
            let n = v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0 || number_range(name).0 == 0)
                .ok_or_else(|| {
                    Error::config(name, format!("{v:?} is not a positive whole number"))
                })?;
            check_number(name, n)
        }
    }
}

/// Reads a string setting, or its default.
pub fn env_string(name: &str, default: &str) -> String {
    var(name).unwrap_or_else(|| default.to_string())
}

/// Reads an optional string setting.
pub fn env_opt(name: &str) -> Option<String> {
    var(name)
}

/// The database URL: `--database-url`, else `DATABASE_URL`. The only setting without a default.
pub fn database_url(flag: Option<&str>) -> Result<String> {
    let env = checked_var("DATABASE_URL")?;
    flag.map(str::to_string).or(env).ok_or_else(|| {
        Error::config(
            "DATABASE_URL",
            "not set; set it in the environment or .env, or pass --database-url",
        )
    })
}

/// Removes the passwords (userinfo and `?password=`) from a database URL so it can be
/// logged or printed; see `crate::redact::redact_url`.
pub fn redact_url(url: &str) -> String {
    crate::redact::redact_url(url)
}

/// Session limits of a worker's connections (applied by `crate::db::session`; a plain
/// value here so that settings do not depend on the code that connects).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// `statement_timeout` (zero: none).
    pub statement_timeout: Duration,
    /// `lock_timeout` (zero: none).
    pub lock_timeout: Duration,
}

impl SessionLimits {
    /// No limits (the one-shot commands' sessions).
    pub const NONE: SessionLimits = SessionLimits {
        statement_timeout: Duration::ZERO,
        lock_timeout: Duration::ZERO,
    };
}

/// How skiplock's connections reach the database (`SKIPLOCK_POOL_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolMode {
    /// Each connection keeps its server session (direct, or PgBouncer's session mode).
    #[default]
    Session,
    /// A server connection is lent for one transaction at a time (PgBouncer's transaction
    /// mode): every statement runs in a transaction of its own, none is prepared by name.
    Transaction,
}

impl std::str::FromStr for PoolMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "session" => Ok(PoolMode::Session),
            "transaction" => Ok(PoolMode::Transaction),
            other => Err(format!(
                "{other:?} is not a pool mode (session or transaction)"
            )),
        }
    }
}

/// `SKIPLOCK_POOL_MODE`: how every skiplock process reaches the database (default: session).
pub fn pool_mode() -> Result<PoolMode> {
    match checked_var("SKIPLOCK_POOL_MODE")? {
        None => Ok(PoolMode::Session),
        Some(v) => v
            .parse()
            .map_err(|m| Error::config("SKIPLOCK_POOL_MODE", m)),
    }
}

/// Settings of the core queue runtime (the worker pool).
#[derive(Debug, Clone)]
pub struct QueueSettings {
    /// Fallback poll interval (`SKIPLOCK_POLL_INTERVAL`, default 1s).
    pub poll_interval: Duration,
    /// Explicit queues and their concurrency (`SKIPLOCK_QUEUES`); `None` serves every queue.
    pub queues: Option<BTreeMap<String, usize>>,
    /// Per-job timeout unless the handler sets its own (`SKIPLOCK_JOB_TIMEOUT`, default 5m).
    pub job_timeout: Duration,
    /// Heartbeat age after which a running job is rescued (`SKIPLOCK_RESCUE_AFTER`, 60s).
    pub rescue_after: Duration,
    /// Grace period for running jobs on shutdown (`SKIPLOCK_SHUTDOWN_GRACE`, 30s).
    pub shutdown_grace: Duration,
    /// Backoff unit: retry n waits n⁴ × unit, with jitter (`SKIPLOCK_BACKOFF_UNIT`, 1s).
    pub backoff_unit: Duration,
    /// Backoff cap (`SKIPLOCK_BACKOFF_MAX`, 24h).
    pub backoff_max: Duration,
    /// Connections per process (`SKIPLOCK_MAX_CONNECTIONS`, 10).
    pub max_connections: u32,
    /// Minimum time between two claims of a busy queue without a buffer, so that a claim
    /// takes every slot freed meanwhile instead of one statement per finished job; counted
    /// from the last claim's start or answer, and half the slots free are claimed at once
    /// (`worker::producer::next_claim`; `SKIPLOCK_FETCH_COOLDOWN`, 2ms).
    pub fetch_cooldown: Duration,
    /// Jobs each queue's producer may claim beyond its free slots, at most: the buffer holds
    /// about 100 ms of work per slot, and the queue's concurrency until a run time is known
    /// (`worker::buffer::claim_ahead`; `SKIPLOCK_CLAIM_AHEAD`, 500; 0: off). The next batch is claimed while the
    /// current one runs, so slots are not left empty for a claim's round trip; buffered jobs
    /// are heartbeated, returned at shutdown and rescued after a crash like running ones. Under
    /// a queue concurrency limit the limited claim gives the buffer at most half the room the
    /// limit leaves, and nothing under a key's limits (`skiplock._claim_limited`).
    pub claim_ahead: usize,
    /// How long the first ack of a batch waits for more before the batch is written
    /// (`SKIPLOCK_ACK_DELAY`, 2ms).
    pub ack_delay: Duration,
    /// How long a starting worker waits for the database (`SKIPLOCK_CONNECT_TIMEOUT`);
    /// `None` (the default) waits as long as it takes.
    pub connect_timeout: Option<Duration>,
    /// Connections of the runtime's own pool (`SKIPLOCK_RUNTIME_CONNECTIONS`, 4), on top of
    /// `max_connections` for handlers.
    pub runtime_connections: u32,
    /// `statement_timeout` of every worker session (`SKIPLOCK_STATEMENT_TIMEOUT`, 60s; 0s: none).
    pub statement_timeout: Duration,
    /// `lock_timeout` of every worker session (`SKIPLOCK_LOCK_TIMEOUT`, 10s; 0s: none).
    pub lock_timeout: Duration,
    /// Most queues a worker serving every queue runs producers for at once
    /// (`SKIPLOCK_MAX_QUEUES`, 100).
    pub max_queues: usize,
    /// How far before its last claim a producer's next claim reads a lane it found empty
    /// (`SKIPLOCK_CLAIM_LOOKBACK`, 1s): a job whose transaction commits later than this after
    /// its `scheduled_at` waits for the producer's next claim from the start of every lane
    /// (`worker::cursor`; docs/internals.md, "Claims when Postgres cannot vacuum").
    pub claim_lookback: Duration,
    /// How the worker reaches the database (`SKIPLOCK_POOL_MODE`, session).
    pub pool_mode: PoolMode,
    /// Where the worker LISTENs when its pool mode is `transaction` (`SKIPLOCK_LISTEN_URL`):
    /// a URL that reaches the server itself or a session-mode pool. `None` there: no LISTEN,
    /// the worker polls every `poll_interval`.
    pub listen_url: Option<String>,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            poll_interval: DEFAULT_POLL_INTERVAL,
            queues: None,
            job_timeout: DEFAULT_JOB_TIMEOUT,
            rescue_after: DEFAULT_RESCUE_AFTER,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            backoff_unit: DEFAULT_BACKOFF_UNIT,
            backoff_max: DEFAULT_BACKOFF_MAX,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            fetch_cooldown: DEFAULT_FETCH_COOLDOWN,
            claim_ahead: DEFAULT_CLAIM_AHEAD,
            ack_delay: DEFAULT_ACK_DELAY,
            connect_timeout: None,
            runtime_connections: DEFAULT_RUNTIME_CONNECTIONS,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            max_queues: DEFAULT_MAX_QUEUES,
            claim_lookback: DEFAULT_CLAIM_LOOKBACK,
            pool_mode: PoolMode::Session,
            listen_url: None,
        }
    }
}

impl QueueSettings {
    /// Reads the queue settings from the environment, validating each.
    pub fn from_env() -> Result<Self> {
        let d = QueueSettings::default();
        let queues = match checked_var("SKIPLOCK_QUEUES")? {
            None => None,
            Some(v) => Some(parse_queues(&v).map_err(|m| Error::config("SKIPLOCK_QUEUES", m))?),
        };
        let s = QueueSettings {
            poll_interval: env_duration("SKIPLOCK_POLL_INTERVAL", d.poll_interval)?,
            queues,
            job_timeout: env_duration("SKIPLOCK_JOB_TIMEOUT", d.job_timeout)?,
            rescue_after: env_duration("SKIPLOCK_RESCUE_AFTER", d.rescue_after)?,
            shutdown_grace: env_duration("SKIPLOCK_SHUTDOWN_GRACE", d.shutdown_grace)?,
            backoff_unit: env_duration("SKIPLOCK_BACKOFF_UNIT", d.backoff_unit)?,
            backoff_max: env_duration("SKIPLOCK_BACKOFF_MAX", d.backoff_max)?,
            max_connections: env_usize("SKIPLOCK_MAX_CONNECTIONS", d.max_connections as usize)?
                .try_into()
                .unwrap_or(u32::MAX),
            fetch_cooldown: env_duration("SKIPLOCK_FETCH_COOLDOWN", d.fetch_cooldown)?,
            claim_ahead: env_usize("SKIPLOCK_CLAIM_AHEAD", d.claim_ahead)?,
            ack_delay: env_duration("SKIPLOCK_ACK_DELAY", d.ack_delay)?,
            connect_timeout: env_opt_duration("SKIPLOCK_CONNECT_TIMEOUT")?,
            runtime_connections: env_usize(
                "SKIPLOCK_RUNTIME_CONNECTIONS",
                d.runtime_connections as usize,
            )?
            .min(u32::MAX as usize) as u32,
            statement_timeout: env_duration("SKIPLOCK_STATEMENT_TIMEOUT", d.statement_timeout)?,
            lock_timeout: env_duration("SKIPLOCK_LOCK_TIMEOUT", d.lock_timeout)?,
            max_queues: env_usize("SKIPLOCK_MAX_QUEUES", d.max_queues)?,
            claim_lookback: env_duration("SKIPLOCK_CLAIM_LOOKBACK", d.claim_lookback)?,
            pool_mode: pool_mode()?,
            listen_url: checked_var("SKIPLOCK_LISTEN_URL")?,
        };
        s.validate()?;
        Ok(s)
    }

    /// The session limits of this worker's connections.
    pub fn session_limits(&self) -> SessionLimits {
        SessionLimits {
            statement_timeout: self.statement_timeout,
            lock_timeout: self.lock_timeout,
        }
    }

    /// Checks values that parse but make no sense, and every range ([`duration_range`],
    /// [`number_range`], [`MAX_QUEUE_CONCURRENCY`]).
    pub fn validate(&self) -> Result<()> {
        if let Some(url) = &self.listen_url {
            crate::db::parse_url_of("SKIPLOCK_LISTEN_URL", url)?;
        }
        for (name, d) in [
            ("SKIPLOCK_POLL_INTERVAL", self.poll_interval),
            ("SKIPLOCK_JOB_TIMEOUT", self.job_timeout),
            ("SKIPLOCK_RESCUE_AFTER", self.rescue_after),
            ("SKIPLOCK_SHUTDOWN_GRACE", self.shutdown_grace),
            ("SKIPLOCK_BACKOFF_UNIT", self.backoff_unit),
            ("SKIPLOCK_BACKOFF_MAX", self.backoff_max),
            ("SKIPLOCK_FETCH_COOLDOWN", self.fetch_cooldown),
            ("SKIPLOCK_ACK_DELAY", self.ack_delay),
            ("SKIPLOCK_CLAIM_LOOKBACK", self.claim_lookback),
        ] {
            check_duration(name, d)?;
        }
        check_number("SKIPLOCK_MAX_CONNECTIONS", self.max_connections as usize)?;
        check_number("SKIPLOCK_CLAIM_AHEAD", self.claim_ahead)?;
        if let Some(q) = &self.queues {
            check_queues(q).map_err(|m| Error::config("SKIPLOCK_QUEUES", m))?;
        }
        if !(2..=1000).contains(&self.runtime_connections) {
            return Err(Error::config(
                "SKIPLOCK_RUNTIME_CONNECTIONS",
                "must be between 2 and 1000 (one is the NOTIFY listener's)",
            ));
        }
        if self.statement_timeout > MAX_SESSION_TIMEOUT {
            return Err(Error::config(
                "SKIPLOCK_STATEMENT_TIMEOUT",
                "must be at most 24h (0s: none)",
            ));
        }
        if self.lock_timeout > MAX_SESSION_TIMEOUT {
            return Err(Error::config(
                "SKIPLOCK_LOCK_TIMEOUT",
                "must be at most 24h (0s: none)",
            ));
        }
        if !(1..=10_000).contains(&self.max_queues) {
            return Err(Error::config(
                "SKIPLOCK_MAX_QUEUES",
                "must be between 1 and 10000",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_the_usual_units() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(
            parse_duration("48h").unwrap(),
            Duration::from_secs(48 * 3600)
        );
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86400)
        );
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert!(parse_duration("abc").unwrap_err().contains("abc"));
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn pool_modes_parse_by_name_and_anything_else_is_named_in_the_error() {
        assert_eq!("session".parse::<PoolMode>(), Ok(PoolMode::Session));
        assert_eq!(
            " Transaction ".parse::<PoolMode>(),
            Ok(PoolMode::Transaction)
        );
        let e = "statement".parse::<PoolMode>().unwrap_err();
        assert!(e.contains("\"statement\" is not a pool mode"), "{e}");
    }

    #[test]
    fn queues_parse_with_and_without_counts() {
        let q = parse_queues("default=10, fetch=4,pack").unwrap();
        assert_eq!(q["default"], 10);
        assert_eq!(q["fetch"], 4);
        assert_eq!(q["pack"], DEFAULT_QUEUE_CONCURRENCY);
        assert!(parse_queues("default=0").is_err());
        assert!(parse_queues("=3").is_err());
        assert!(parse_queues("a=x").unwrap_err().contains("\"x\""));
        assert!(parse_queues(" , ").is_err());
    }

    #[test]
    fn worker_session_settings_are_range_checked() {
        let ok = QueueSettings::default();
        assert!(ok.validate().is_ok());
        let err = |s: QueueSettings| s.validate().unwrap_err().to_string();
        assert!(
            err(QueueSettings {
                runtime_connections: 1,
                ..ok.clone()
            })
            .contains("SKIPLOCK_RUNTIME_CONNECTIONS: must be between 2 and 1000")
        );
        assert!(
            err(QueueSettings {
                statement_timeout: Duration::from_secs(30 * 86400),
                ..ok.clone()
            })
            .contains("SKIPLOCK_STATEMENT_TIMEOUT: must be at most 24h")
        );
        assert!(
            err(QueueSettings {
                lock_timeout: Duration::from_secs(30 * 86400),
                ..ok.clone()
            })
            .contains("SKIPLOCK_LOCK_TIMEOUT: must be at most 24h")
        );
        assert!(
            err(QueueSettings {
                max_queues: 20_000,
                ..ok.clone()
            })
            .contains("SKIPLOCK_MAX_QUEUES: must be between 1 and 10000")
        );
        assert!(
            QueueSettings {
                statement_timeout: Duration::ZERO,
                lock_timeout: Duration::ZERO,
                ..ok
            }
            .validate()
            .is_ok(),
            "0s means no timeout"
        );
    }

    #[test]
    fn toml_errors_point_at_the_place_without_quoting_the_file() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct F {
            name: String,
            n: Option<i16>,
        }
        let cases = [
            (
                "root:$6$hunter2hash:19000:0:99999:7:::\n",
                "line 1, column 39: key with no value, expected `=`",
            ),
            (
                "name = \"x\"\nhunter2 = 5\n",
                "line 2, column 1: unknown field, expected `name` or `n`",
            ),
            (
                "name = \"x\"\nn = \"hunter2\"\n",
                "line 2, column 5: invalid type: string, expected i16",
            ),
            (
                "name = \"x\"\nn = 99999\n",
                "line 2, column 5: invalid value: integer, expected i16",
            ),
            (
                "name = hunter2\n",
                "line 1, column 8: string values must be quoted, expected literal string",
            ),
            ("n = 1\n", "line 1, column 1: missing field `name`"),
            (
                "name = 'a'\nname = 'b'\n",
                "line 2, column 1: duplicate key",
            ),
        ];
        for (text, want) in cases {
            let e = toml::from_str::<F>(text).unwrap_err();
            assert_eq!(toml_error(text, &e), want, "{text:?}");
        }
        assert_eq!(line_col("ab\ncdé\nx", 7), (2, 4));
        assert_eq!(line_col("", 5), (1, 1));
    }

    #[test]
    fn every_setting_is_range_checked() {
        assert_eq!(format_duration(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::ZERO), "0ms");
        let msg = |r: Result<Duration>| r.unwrap_err().to_string();
        assert_eq!(
            msg(check_duration(
                "SKIPLOCK_POLL_INTERVAL",
                Duration::from_millis(1)
            )),
            "invalid setting SKIPLOCK_POLL_INTERVAL: must be at least 10ms"
        );
        assert_eq!(
            msg(check_duration(
                "SKIPLOCK_POLL_INTERVAL",
                Duration::from_secs(7200)
            )),
            "invalid setting SKIPLOCK_POLL_INTERVAL: must be at most 1h"
        );
        assert_eq!(
            msg(check_duration("SKIPLOCK_JOB_TIMEOUT", Duration::ZERO)),
            "invalid setting SKIPLOCK_JOB_TIMEOUT: must be more than 0s"
        );
        assert_eq!(
            msg(check_duration("SKIPLOCK_SOMETHING_NEW", Duration::MAX)),
            "invalid setting SKIPLOCK_SOMETHING_NEW: must be at most 3650d"
        );
        assert!(check_duration("SKIPLOCK_RETAIN_FAILED", Duration::from_secs(86_400)).is_ok());
        assert_eq!(
            check_number("SKIPLOCK_MAX_CONNECTIONS", 1_000_000)
                .unwrap_err()
                .to_string(),
            "invalid setting SKIPLOCK_MAX_CONNECTIONS: must be at most 1000"
        );
        assert!(check_number("SKIPLOCK_PACKET_CONCURRENCY", 0).is_err());
        // A count past u64 or usize, once a panic (and a worker that never went idle).
        for q in [
            "default=2305843009213693952",
            "default=99999999999999999999999999999",
        ] {
            let e = parse_queues(q).unwrap_err();
            assert!(
                e.starts_with("queue \"default\": concurrency ")
                    && e.ends_with(" is out of range (1 to 10000)"),
                "{e}"
            );
        }
        assert!(parse_queues(&format!("{}=1", "q".repeat(201))).is_err());
        let many: Vec<String> = (0..1001).map(|i| format!("q{i}")).collect();
        assert!(
            parse_queues(&many.join(","))
                .unwrap_err()
                .contains("at most 1000")
        );
        let s = QueueSettings {
            queues: Some([("default".to_string(), 20_000)].into()),
            ..QueueSettings::default()
        };
        assert!(s.validate().is_err());
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("postgres://bob:s3cret@db:5432/x?password=s3cret"),
            "postgres://bob:***@db:5432/x?password=***"
        );
        assert_eq!(redact_url("postgres://db/x"), "postgres://db/x");
        assert!(!redact_url("post gres://:s3cret@").contains("s3cret"));
    }
}

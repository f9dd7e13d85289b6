//! Settings, read once from the environment (and a `.env` file) and validated once.
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

/// Parses `default=10,fetch=4` into queue → concurrency.
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
            n.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                format!("queue {name:?}: concurrency {n:?} is not a positive whole number")
            })?
        };
        out.insert(name.to_string(), n);
    }
    if out.is_empty() {
        return Err("no queues given (write e.g. default=10,fetch=4)".into());
    }
    Ok(out)
}

/// Loads `.env` from the working directory if there is one. Variables already set in the
/// environment win. A malformed `.env` is an error, not silently ignored.
pub fn load_dotenv() -> Result<()> {
    match dotenvy::dotenv() {
        Ok(_) => Ok(()),
        Err(e) if e.not_found() => Ok(()),
        // One line: the parser quotes the offending line, newline included.
        Err(e) => Err(Error::config(
            ".env",
            e.to_string().replace('\n', "\\n").replace('\r', "\\r"),
        )),
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

/// Reads a duration setting, or its default.
pub fn env_duration(name: &str, default: Duration) -> Result<Duration> {
    match checked_var(name)? {
        None => Ok(default),
        Some(v) => parse_duration(&v).map_err(|m| Error::config(name, m)),
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

/// Reads a positive whole-number setting, or its default.
pub fn env_usize(name: &str, default: usize) -> Result<usize> {
    match checked_var(name)? {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| Error::config(name, format!("{v:?} is not a positive whole number"))),
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

/// Removes the password from a database URL so it can be logged or printed.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "<unparseable database URL>".to_string(),
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
    /// Minimum time between two claims of a busy queue, so that a claim takes every slot
    /// freed meanwhile instead of one statement per finished job (`SKIPLOCK_FETCH_COOLDOWN`, 2ms).
    pub fetch_cooldown: Duration,
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
            ack_delay: DEFAULT_ACK_DELAY,
            connect_timeout: None,
            runtime_connections: DEFAULT_RUNTIME_CONNECTIONS,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            max_queues: DEFAULT_MAX_QUEUES,
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
                as u32,
            fetch_cooldown: env_duration("SKIPLOCK_FETCH_COOLDOWN", d.fetch_cooldown)?,
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
        };
        s.validate()?;
        Ok(s)
    }

    /// The session limits of this worker's connections.
    pub fn session_limits(&self) -> crate::db::session::SessionLimits {
        crate::db::session::SessionLimits {
            statement_timeout: self.statement_timeout,
            lock_timeout: self.lock_timeout,
        }
    }

    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<()> {
        if self.poll_interval < Duration::from_millis(10) {
            return Err(Error::config(
                "SKIPLOCK_POLL_INTERVAL",
                "must be at least 10ms",
            ));
        }
        if self.rescue_after < Duration::from_millis(200) {
            return Err(Error::config(
                "SKIPLOCK_RESCUE_AFTER",
                "must be at least 200ms",
            ));
        }
        if self.job_timeout.is_zero() {
            return Err(Error::config(
                "SKIPLOCK_JOB_TIMEOUT",
                "must be more than 0s",
            ));
        }
        if self.fetch_cooldown > Duration::from_secs(1) {
            return Err(Error::config(
                "SKIPLOCK_FETCH_COOLDOWN",
                "must be at most 1s",
            ));
        }
        if self.ack_delay > Duration::from_secs(1) {
            return Err(Error::config("SKIPLOCK_ACK_DELAY", "must be at most 1s"));
        }
        if self.max_connections < 2 {
            return Err(Error::config(
                "SKIPLOCK_MAX_CONNECTIONS",
                "must be at least 2",
            ));
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
    fn passwords_are_redacted() {
        let r = redact_url("postgres://bob:s3cret@db:5432/x");
        assert!(!r.contains("s3cret"));
        assert!(r.contains("bob"));
        assert_eq!(redact_url("postgres://db/x"), "postgres://db/x");
        assert!(!redact_url("post gres://:s3cret@").contains("s3cret"));
    }
}

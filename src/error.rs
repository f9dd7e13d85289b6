//! The library's error type. The binary turns it into one line on stderr and an exit code;
//! library users match on the variants.

/// Everything that can go wrong inside skiplock's library code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A query failed or the database could not be reached.
    #[error("database error: {0}")]
    Database(sqlx::Error),
    /// The database cannot serve us right now (down, starting, read-only after a failover);
    /// the worker waits and retries, one-shot commands report it.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Applying the schema migrations failed.
    #[error("migration failed: {0}")]
    Migrate(sqlx::migrate::MigrateError),
    /// The database has no skiplock schema (or one with migrations missing).
    #[error("the database is not migrated ({0}); run `skiplock migrate` first")]
    NotMigrated(String),
    /// The database's SQL API is not the one this binary was built for (see
    /// `crate::store::schema`): refused at start by every worker and CLI command, and by
    /// `migrate` when the database is newer (no downgrades).
    #[error("{0}")]
    Schema(SchemaMismatch),
    /// The SQL API refused the call (a `RAISE EXCEPTION 'skiplock: …'`): bad input, a refused
    /// transition, a missing job. Permanent: retrying the same call fails the same way, unlike
    /// [`Error::Database`] errors that mean the database is unavailable.
    #[error("{}", .message.strip_prefix("skiplock: ").unwrap_or(.message))]
    Refused {
        /// The SQLSTATE the function raised (e.g. `22023` bad input, `P0002` no such row,
        /// `23505` a unique key held by another kind).
        sqlstate: String,
        /// The server's message as psql shows it (`skiplock: …`); `Display` drops the prefix.
        message: String,
    },
    /// A setting (environment variable, .env entry, flag or config file) is invalid.
    #[error("invalid setting {name}: {message}")]
    Config {
        /// Which setting, e.g. `SKIPLOCK_POLL_INTERVAL`.
        name: String,
        /// What is wrong with it.
        message: String,
    },
    /// Input from a user (CLI argument, API call) was rejected.
    #[error("{0}")]
    Invalid(String),
    /// A job or record does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// An I/O error outside the database (files, processes, object storage).
    #[error("{0}")]
    Io(std::io::Error),
    /// A durable step's closure failed (docs/steps.md): the attempt fails as the handler's own
    /// error would (a step that returned [`crate::worker::JobError::discard`] discards the job).
    #[error("step {name} failed: {message}")]
    Step {
        /// The step's name.
        name: String,
        /// Its error.
        message: String,
    },
    /// The attempt ends here without using it up (`JobContext::sleep_until`,
    /// `JobContext::wait_for`; docs/steps.md): the handler should return at once, with this
    /// error or anything else; the job is due again at `until`.
    #[error("the attempt ends here; the job resumes at {until}")]
    Suspended {
        /// When the job is due again.
        until: chrono::DateTime<chrono::Utc>,
    },
    /// The login lacks a privilege one of skiplock's statements needs (SQLSTATE 42501): the
    /// message names the role to grant it (docs/roles.md).
    #[error(
        "{message} (42501): the login {} needs the role {role}: GRANT {role} TO {}; (docs/roles.md)",
        login.as_deref().unwrap_or("of DATABASE_URL"),
        login.as_deref().unwrap_or("<login>")
    )]
    MissingGrant {
        /// The skiplock role the statement's caller needs (`skiplock_worker`,
        /// `skiplock_enqueuer`, …).
        role: String,
        /// The login, when known.
        login: Option<String>,
        /// The server's message (`permission denied for table workers`).
        message: String,
    },
    /// Anything else, with a message naming it.
    #[error("{0}")]
    Other(String),
}

// The wrapped errors are converted by hand, not with `#[from]`: their text is already part of
// this error's message, and marking them as its source too would print it again in every
// error chain (`error: database error: X: X: X`).
/// Why a database's skiplock schema does not match this binary (its SQL API version is
/// `crate::store::schema::API_VERSION`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaMismatch {
    /// The database's API is older (version 0: none recorded, e.g. release 0.1.0):
    /// `skiplock migrate` upgrades it.
    Older {
        /// The version recorded in the database.
        db: u32,
        /// This binary's version.
        binary: u32,
    },
    /// The database was migrated by a newer skiplock: this binary neither runs against it nor
    /// migrates it back.
    Newer {
        /// The version recorded in the database.
        db: u32,
        /// This binary's version.
        binary: u32,
    },
    /// Same version, other SQL (a development build migrated it): migrate again.
    Changed {
        /// The version both claim.
        version: u32,
    },
}

impl std::fmt::Display for SchemaMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SchemaMismatch::Older { db, binary } => write!(
                f,
                "schema is at API version {db}, this binary needs {binary}: run `skiplock migrate`"
            ),
            SchemaMismatch::Newer { db, binary } => write!(
                f,
                "schema was migrated by a newer skiplock (API version {db}); this binary knows {binary}: use that skiplock or a newer one (no downgrades)"
            ),
            SchemaMismatch::Changed { version } => write!(
                f,
                "schema has another build's SQL API (both say API version {version}): run `skiplock migrate`"
            ),
        }
    }
}

/// Every driver error goes through here: a refusal raised by the SQL API (its message starts
/// with `skiplock: `) becomes [`Error::Refused`] with its SQLSTATE; anything else (the
/// connection, a timeout, a constraint of a plain statement) stays [`Error::Database`].
impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(d) = &e
            && d.message().starts_with("skiplock: ")
        {
            return Error::Refused {
                sqlstate: d.code().map(|c| c.into_owned()).unwrap_or_default(),
                message: d.message().to_string(),
            };
        }
        if let sqlx::Error::Database(d) = &e
            && pooled_statement_lost(d.code().as_deref(), d.message())
        {
            return Error::Config {
                name: "SKIPLOCK_POOL_MODE".into(),
                message: format!(
                    "the server answered `{}` ({}): the URL goes through a pooler in transaction \
                     mode (PgBouncer pool_mode = transaction), which hands a client's statements \
                     to other server connections; set SKIPLOCK_POOL_MODE=transaction \
                     (docs/operations.md, \"Behind PgBouncer\")",
                    d.message(),
                    d.code().unwrap_or_default()
                ),
            };
        }
        Error::Database(e)
    }
}

/// `e` named as a missing grant of `role` to `login` when the server refused it for a missing
/// privilege (42501, [`Error::MissingGrant`]); any other error as it is. A refusal of the SQL
/// API (`skiplock: …`, e.g. a limit only the owner sets) says its own reason and is kept.
pub fn missing_grant(e: Error, role: &str, login: Option<&str>) -> Error {
    match e {
        Error::Database(sqlx::Error::Database(d)) if d.code().as_deref() == Some("42501") => {
            Error::MissingGrant {
                role: role.to_string(),
                login: login.map(str::to_string),
                message: d.message().to_string(),
            }
        }
        other => other,
    }
}

/// Whether a server error says one of sqlx's named prepared statements (`sqlx_s_N`) is missing
/// on the connection (26000) or already taken there (42P05): what a pooler in transaction mode
/// does to a client that prepares statements in session mode, since the prepare and the
/// execute land on different server connections (src/store/pool.rs). Nothing else makes them:
/// sqlx names each statement once per connection.
pub fn pooled_statement_lost(code: Option<&str>, message: &str) -> bool {
    matches!(code, Some("26000" | "42P05")) && message.contains("\"sqlx_s_")
}

impl From<sqlx::migrate::MigrateError> for Error {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        Error::Migrate(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

/// `Result` with skiplock's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds a [`Error::Config`] for the named setting.
    pub fn config(name: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            name: name.into(),
            message: message.into(),
        }
    }

    /// The message the server sent with an error, if this is one (for a refusal, as psql
    /// shows it: `skiplock: …`).
    pub fn db_message(&self) -> Option<&str> {
        match self {
            Error::Refused { message, .. } => Some(message),
            Error::Database(sqlx::Error::Database(e)) => Some(e.message()),
            _ => None,
        }
    }

    /// The SQLSTATE of a refusal by the SQL API, e.g. `22023` for bad input.
    pub fn refused_sqlstate(&self) -> Option<&str> {
        match self {
            Error::Refused { sqlstate, .. } => Some(sqlstate),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sqlxs_named_statements_lost_or_taken_name_the_pool_mode() {
        let taken = r#"prepared statement "sqlx_s_1" already exists"#;
        let lost = r#"prepared statement "sqlx_s_12" does not exist"#;
        assert!(pooled_statement_lost(Some("42P05"), taken));
        assert!(pooled_statement_lost(Some("26000"), lost));
        assert!(!pooled_statement_lost(
            Some("42P05"),
            r#"prepared statement "mine" already exists"#
        ));
        assert!(!pooled_statement_lost(Some("42601"), taken));
        assert!(!pooled_statement_lost(None, lost));
    }
}

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
    /// The database has no (or an older) skiplock schema.
    #[error("the database is not migrated ({0}); run `skiplock migrate` first")]
    NotMigrated(String),
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
    /// Anything else, with a message naming it.
    #[error("{0}")]
    Other(String),
}

// The wrapped errors are converted by hand, not with `#[from]`: their text is already part of
// this error's message, and marking them as its source too would print it again in every
// error chain (`error: database error: X: X: X`).
impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::Database(e)
    }
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

    /// The message a Postgres `RAISE EXCEPTION` carried, if this is one: the SQL API's
    /// errors are already written for people, so the CLI prints them as they are.
    pub fn db_message(&self) -> Option<&str> {
        match self {
            Error::Database(sqlx::Error::Database(e)) => Some(e.message()),
            _ => None,
        }
    }
}

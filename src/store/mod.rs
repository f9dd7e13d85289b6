//! The store: every SQL statement skiplock runs, and nothing else. The worker, the
//! maintenance services, the workflows, the CLI and the dev tools call these functions; no
//! other module uses `sqlx` (apart from [`crate::db`], which connects and classifies outages).
//!
//! Rules a newcomer can rely on:
//!
//! - **One function per statement, named after it.** The statement lives in
//!   `sql/<area>/<name>.sql` and the function that runs it shares the name, e.g.
//!   [`claim::claim`] runs `sql/queue/claim.sql`, [`steps::record`] runs
//!   `sql/steps/record.sql`. A module is an entity or a service, so names within it read as
//!   verbs (`steps::record`, `jobs::cancel_job`), with `_many` when the statement takes
//!   arrays (`heartbeat_many`, `ack_many`). Areas: `queue` ([`jobs`], [`claim`], [`ack`],
//!   [`heartbeat`], [`rescue`]), [`bulk`] (cancel and retry a filtered set), `maintenance`,
//!   [`metrics`] (what a scrape reads), `schema`. (The dev tools' statements are
//!   crates/skiplock-devtools', the console's crates/skiplock-console's, the workflows'
//!   crates/skiplock-workflows': they are not part of the library.)
//! - **Typed in, typed out.** More than about three parameters come as a struct; every row is
//!   a named `FromRow` struct (no tuples); states are enums mapped to the database's enum
//!   types ([`types`]); times are read through [`time::DbTime`] so no stored value can panic.
//! - **No string protocols.** SQL functions answer with enum types or composites, never a
//!   string Rust would parse.
//! - **Typed errors.** A refusal raised by the SQL API is [`crate::Error::Refused`] with its
//!   SQLSTATE; connection trouble stays [`crate::Error::Database`] (see
//!   [`crate::db::outage`] for which of those mean "retry later").
//! - **Shared names.** Kinds, queues, key prefixes and channels the SQL API also spells are
//!   the constants of [`crate::names`] (below the store: the job model's checks use them too); a test checks the SQL files use exactly those.
//! - **A versioned SQL API.** [`schema`] installs it and records its version; every process
//!   checks that version at start ([`schema::ensure_ready`]).

pub mod ack;
pub mod bulk;
pub mod claim;
pub mod control;
pub mod doctor;
pub mod flows;
pub mod heartbeat;
pub mod jobs;
pub mod maintenance;
pub mod metrics;
pub mod notify;
pub mod rescue;
pub mod schema;
pub mod session;
pub mod steps;
pub(crate) mod testing;
pub mod types;

pub mod pool;
pub use pool::{Pool, PoolMode};
// Public (with `internals`) for the statements of crates/skiplock-console, which run as the
// core's do (unnamed in transaction mode).
pub use pool::{query, query_as, query_scalar};
/// A transaction on the skiplock database.
pub type Transaction<'c> = sqlx::Transaction<'c, sqlx::Postgres>;
/// Anything a statement can run on: `&Pool`, `&mut *tx`, `&mut Connection`.
pub use sqlx::PgExecutor as Executor;

// `sql!` (src/sql_text.rs), named by path as `store::sql`.
pub(crate) use crate::sql;

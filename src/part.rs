//! Optional parts: a crate that adds tables, SQL functions, reserved names, handlers and
//! gauges to skiplock (skiplock-workflows' fetch, pack and packet pipeline are three)
//! registers itself through one trait, [`Part`]. `skiplock migrate` installs the schema of
//! the parts a program lists ([`migrate`]), a worker runs them ([`install`]), and the metrics
//! endpoint reads their gauges; the core names none of them (docs/layout.md, "Parts").

use crate::error::Result;
use crate::names::{self, ReservedName};
use crate::store::Pool;
pub use crate::store::metrics::Gauge;
use crate::store::schema::{self, PartSchema};
use crate::worker::WorkerBuilder;
use futures::future::BoxFuture;

/// An optional part of skiplock.
pub trait Part: Send + Sync {
    /// Its schema: name, migrations, SQL API files and grants.
    fn schema(&self) -> &'static PartSchema;

    /// The names only its own functions may enqueue under: the Rust twin of the rows its SQL
    /// API file writes to `skiplock.reserved_names`, so an enqueue is refused before the
    /// round trip (the database refuses it anyway).
    fn reserved(&self) -> &'static [ReservedName] {
        &[]
    }

    /// Adds its handlers, services and start-up work to a worker being built ([`install`]
    /// adds the check of its schema first).
    fn register(&self, builder: WorkerBuilder) -> Result<WorkerBuilder>;

    /// Its gauges, read for one metrics scrape on the scrape's connection (a read-only
    /// transaction under a short statement timeout: `store::metrics::begin`); none by default.
    fn gauges<'a>(
        &'a self,
        _conn: &'a mut sqlx::PgConnection,
    ) -> BoxFuture<'a, Result<Vec<Gauge>>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// Migrates the core and `parts` ([`schema::migrate_parts`]) and registers their reserved
/// names with this process's checks.
pub async fn migrate(pool: &Pool, parts: &[&dyn Part]) -> Result<()> {
    let schemas: Vec<&PartSchema> = parts.iter().map(|p| p.schema()).collect();
    for p in parts {
        names::register(p.reserved());
    }
    schema::migrate_parts(pool, &schemas).await
}

/// Adds `part` to a worker: its reserved names to this process's checks, its schema check as
/// a start-up hook (a worker refuses, in one line, a database migrated without the part or
/// by another build, before the part's own start-up work runs), then what the part registers.
pub fn install(builder: WorkerBuilder, part: &dyn Part) -> Result<WorkerBuilder> {
    names::register(part.reserved());
    let schema = part.schema();
    let builder = builder.on_start(Box::new(move |pool: Pool| {
        Box::pin(async move { schema::ensure_part(&pool, schema).await })
    }));
    part.register(builder)
}

/// [`install`] for each of `parts`, in order.
pub fn install_all(mut builder: WorkerBuilder, parts: &[&dyn Part]) -> Result<WorkerBuilder> {
    for p in parts {
        builder = install(builder, *p)?;
    }
    Ok(builder)
}

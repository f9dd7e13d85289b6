//! The three workflows as optional parts of skiplock ([`Part`]): each one's schema (its
//! migrations in this crate's `migrations/<part>/`, its SQL API file and grants in `sql/api/`),
//! its reserved names ([`crate::names`]), its handlers and start-up work, and the packet
//! pipeline's gauge (packets per state).

use skiplock::part::Part;
use skiplock::store::schema::PartSchema;

use crate::error::Result;
#[allow(unused_imports)]
use crate::store::sql;
use crate::worker::WorkerBuilder;

/// The fetch workflow's schema: pages, hosts, crawls.
#[cfg(feature = "fetch")]
pub static FETCH: PartSchema = PartSchema {
    name: "fetch",
    migrations: &FETCH_MIGRATIONS,
    table: "skiplock.migrations_fetch",
    api: &[("sql/api/20_fetch.sql", sql!("api", "20_fetch"))],
    grants: Some(("sql/api/92_fetch_roles.sql", sql!("api", "92_fetch_roles"))),
};
#[cfg(feature = "fetch")]
static FETCH_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/fetch");

/// The pack workflow's schema: artifacts and their records.
#[cfg(feature = "pack")]
pub static PACK: PartSchema = PartSchema {
    name: "pack",
    migrations: &PACK_MIGRATIONS,
    table: "skiplock.migrations_pack",
    api: &[("sql/api/30_pack.sql", sql!("api", "30_pack"))],
    grants: Some(("sql/api/93_pack_roles.sql", sql!("api", "93_pack_roles"))),
};
#[cfg(feature = "pack")]
static PACK_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/pack");

/// The packet pipeline's schema: packets, their states and their history.
#[cfg(feature = "packets")]
pub static PACKETS: PartSchema = PartSchema {
    name: "packets",
    migrations: &PACKETS_MIGRATIONS,
    table: "skiplock.migrations_packets",
    api: &[("sql/api/40_packets.sql", sql!("api", "40_packets"))],
    grants: Some((
        "sql/api/94_packets_roles.sql",
        sql!("api", "94_packets_roles"),
    )),
};
#[cfg(feature = "packets")]
static PACKETS_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/packets");

/// The schemas of the workflows this build has, in the order they are installed (the pack's
/// tables refer to the fetch's).
pub fn schemas() -> Vec<&'static PartSchema> {
    vec![
        #[cfg(feature = "fetch")]
        &FETCH,
        #[cfg(feature = "pack")]
        &PACK,
        #[cfg(feature = "packets")]
        &PACKETS,
    ]
}

/// The fetch workflow as a part, with its settings.
#[cfg(feature = "fetch")]
pub struct Fetch(pub crate::fetch::FetchSettings);

#[cfg(feature = "fetch")]
impl Part for Fetch {
    fn schema(&self) -> &'static PartSchema {
        &FETCH
    }
    fn reserved(&self) -> &'static [skiplock::names::ReservedName] {
        crate::names::FETCH_RESERVED
    }
    fn register(&self, builder: WorkerBuilder) -> Result<WorkerBuilder> {
        crate::fetch::register_with(builder, self.0.clone())
    }
}

/// The pack workflow as a part, with its settings.
#[cfg(feature = "pack")]
pub struct Pack(pub crate::pack::PackSettings);

#[cfg(feature = "pack")]
impl Part for Pack {
    fn schema(&self) -> &'static PartSchema {
        &PACK
    }
    fn reserved(&self) -> &'static [skiplock::names::ReservedName] {
        crate::names::PACK_RESERVED
    }
    fn register(&self, builder: WorkerBuilder) -> Result<WorkerBuilder> {
        crate::pack::register_with(builder, self.0.clone())
    }
}

/// The packet pipeline as a part, with its settings.
#[cfg(feature = "packets")]
pub struct Packets(pub crate::packets::PacketSettings);

#[cfg(feature = "packets")]
impl Part for Packets {
    fn schema(&self) -> &'static PartSchema {
        &PACKETS
    }
    fn reserved(&self) -> &'static [skiplock::names::ReservedName] {
        crate::names::PACKETS_RESERVED
    }
    fn register(&self, builder: WorkerBuilder) -> Result<WorkerBuilder> {
        Ok(crate::packets::register_with(builder, self.0.clone()))
    }
    /// `skiplock_packets{state}`: packets per state, every state (0 for none).
    fn gauges<'a>(
        &'a self,
        conn: &'a mut sqlx::PgConnection,
    ) -> futures::future::BoxFuture<'a, Result<Vec<skiplock::part::Gauge>>> {
        Box::pin(async move {
            let counts = crate::store::packets::states(conn).await?;
            Ok(crate::packets::transitions::PacketState::ALL
                .into_iter()
                .map(|state| skiplock::part::Gauge {
                    name: PACKETS_GAUGE,
                    help: "Packets per state.",
                    labels: vec![("state", state.as_str().to_string())],
                    value: counts
                        .iter()
                        .filter(|c| c.state == state)
                        .map(|c| c.packets as f64)
                        .sum(),
                })
                .collect())
        })
    }
}

/// The packet pipeline's gauge: packets per state.
pub const PACKETS_GAUGE: &str = "skiplock_packets";

/// The settings of every built-in workflow this build has.
#[derive(Debug, Clone)]
pub struct WorkflowSettings {
    /// `fetch`'s (`SKIPLOCK_POLITENESS`, `SKIPLOCK_SCHEDULES`, …).
    #[cfg(feature = "fetch")]
    pub fetch: crate::fetch::FetchSettings,
    /// `pack`'s (`SKIPLOCK_PACK_QUIET`, `SKIPLOCK_STORE`, …).
    #[cfg(feature = "pack")]
    pub pack: crate::pack::PackSettings,
    /// `process-packet`'s (`SKIPLOCK_PACKET_ROOTS`, `SKIPLOCK_PACKET_CONCURRENCY`, …).
    #[cfg(feature = "packets")]
    pub packets: crate::packets::PacketSettings,
}

impl WorkflowSettings {
    /// Reads and validates every workflow setting (for the program's edge: `skiplock
    /// worker`; the library itself never reads the environment).
    pub fn from_env() -> Result<Self> {
        Ok(WorkflowSettings {
            #[cfg(feature = "fetch")]
            fetch: crate::fetch::FetchSettings::from_env()?,
            #[cfg(feature = "pack")]
            pack: crate::pack::PackSettings::from_env()?,
            #[cfg(feature = "packets")]
            packets: crate::packets::PacketSettings::from_env()?,
        })
    }

    /// Every workflow of this build as a part, with these settings.
    pub fn parts(self) -> Vec<Box<dyn Part>> {
        vec![
            #[cfg(feature = "fetch")]
            boxed(Fetch(self.fetch)),
            #[cfg(feature = "pack")]
            boxed(Pack(self.pack)),
            #[cfg(feature = "packets")]
            boxed(Packets(self.packets)),
        ]
    }
}

#[allow(dead_code)]
fn boxed(p: impl Part + 'static) -> Box<dyn Part> {
    Box::new(p)
}

/// The workflows of this build as parts for a metrics scrape alone (the console's
/// `/metrics`): only their gauges are read, so their settings are the defaults.
pub fn for_metrics() -> Vec<Box<dyn Part>> {
    vec![
        #[cfg(feature = "packets")]
        boxed(Packets(crate::packets::PacketSettings::default())),
    ]
}

/// Adds every built-in workflow to a worker with `settings` (`skiplock::part::install`: its
/// schema check, reserved names, handlers, services and start-up work).
pub fn register_all(builder: WorkerBuilder, settings: WorkflowSettings) -> Result<WorkerBuilder> {
    let parts = settings.parts();
    let parts: Vec<&dyn Part> = parts.iter().map(|p| p.as_ref()).collect();
    skiplock::part::install_all(builder, &parts)
}

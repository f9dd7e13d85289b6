//! The benchmark's parts for limits: drains under limits that never bind (the price of the limited
//! claim against the plain drain of the same run), and a crawl of many local hosts under
//! politeness (pages/s against the ideal: every host starts one fetch per interval).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use tokio_util::sync::CancellationToken;

use super::meter::Meter;
use super::{BenchOptions, DrainRun, drain, fill_noop, store};
use skiplock::Pool as PgPool;
use skiplock::admin::{self as control, KeyLimit, Rate};
use skiplock::config::QueueSettings;
use skiplock::error::{Error, Result};
use skiplock::worker::Worker;
use skiplock_workflows::fetch::{self, FetchSettings, schedule::Schedule};

/// The queue the drains use.
const QUEUE: &str = "default";
/// Limit keys of the key-rate drain.
pub const KEYS: usize = 1000;
/// Hosts of the crawl (one local HTTP server each).
pub const CRAWL_HOSTS: usize = 100;
/// Pages per host: the root and the pages it links to.
pub const CRAWL_PAGES: usize = 20;
/// The crawl's politeness (`SKIPLOCK_POLITENESS`).
pub const CRAWL_POLITENESS: Duration = Duration::from_millis(200);
/// The crawl worker's fetch slots: one per host (a host runs one fetch at a time), so the
/// slots never bind, only politeness and each fetch's own time do.
const CRAWL_SLOTS: usize = CRAWL_HOSTS;

/// The crawl's ideal pages/s: every host starts one fetch per politeness interval.
pub fn crawl_ideal() -> f64 {
    CRAWL_HOSTS as f64 / CRAWL_POLITENESS.as_secs_f64()
}

/// The per-key rate of the key-rate drain: a million starts per second per key, which
/// `jobs` jobs over [`KEYS`] keys never reach.
fn never_binding_rate() -> KeyLimit {
    KeyLimit {
        concurrency: None,
        rate: Some(Rate {
            count: 1_000_000,
            period: Duration::from_secs(1),
        }),
    }
}

/// The drain of `jobs` noop jobs over [`KEYS`] limit keys with a per-key rate that never
/// binds: every claim goes through the limited claim and moves each key's rate state.
pub(crate) async fn key_rate_drain(
    url: &str,
    o: &BenchOptions,
    monitor: &PgPool,
    meter: &Meter<'_>,
) -> Result<DrainRun> {
    control::set_key_limit(monitor, QUEUE, never_binding_rate()).await?;
    store::fill_keyed(monitor, o.jobs, KEYS).await?;
    store::analyze_jobs(monitor).await?;
    let r = drain::in_process(url, o, o.jobs, meter).await;
    control::set_key_limit(monitor, QUEUE, KeyLimit::default()).await?;
    r
}

/// The drain of `jobs` noop jobs over [`KEYS`] limit keys in a fair queue
/// (`skiplock.set_queue_fairness`): every claim goes through the limited claim and picks
/// round-robin over the keys (`skiplock._fair_pick`).
pub(crate) async fn fair_drain(
    url: &str,
    o: &BenchOptions,
    monitor: &PgPool,
    meter: &Meter<'_>,
) -> Result<DrainRun> {
    control::set_queue_fairness(monitor, QUEUE, true).await?;
    store::fill_keyed(monitor, o.jobs, KEYS).await?;
    store::analyze_jobs(monitor).await?;
    let r = drain::in_process(url, o, o.jobs, meter).await;
    control::set_queue_fairness(monitor, QUEUE, false).await?;
    r
}

/// A queue concurrency limit the drain's one worker never reaches: the jobs it can hold
/// `running` at once are its slots, as many finished ones whose acks are not written yet, and
/// its buffer; the limited claim gives the buffer only half the room the limit leaves, so the
/// limit is twice that. (Before the limited claim filled buffers this was twice the slots,
/// which the slots and the acks in flight already reached in a fast drain.)
pub(crate) fn never_binding_queue_limit(slots: usize, claim_ahead: usize) -> i32 {
    let held = slots.saturating_mul(2).saturating_add(claim_ahead);
    i32::try_from(held.saturating_mul(2).max(1)).unwrap_or(i32::MAX)
}

/// The drain of `jobs` noop jobs with a queue concurrency limit that never binds
/// ([`never_binding_queue_limit`]): every claim goes through the limited claim and counts
/// running jobs.
pub(crate) async fn queue_limit_drain(
    url: &str,
    o: &BenchOptions,
    monitor: &PgPool,
    meter: &Meter<'_>,
) -> Result<DrainRun> {
    let n = never_binding_queue_limit(o.concurrency, super::worker_settings(o).claim_ahead);
    control::set_queue_limit(monitor, QUEUE, Some(n)).await?;
    fill_noop(monitor, o.jobs).await?;
    let r = drain::in_process(url, o, o.jobs, meter).await;
    control::set_queue_limit(monitor, QUEUE, None).await?;
    r
}

/// A page of the crawl's sites: the root links to `/p1` … `/p19`; no robots.txt.
async fn page(uri: Uri) -> Response {
    match uri.path() {
        "/robots.txt" => StatusCode::NOT_FOUND.into_response(),
        "/" => {
            let links: String = (1..CRAWL_PAGES)
                .map(|i| format!("<a href=\"/p{i}\">p{i}</a> "))
                .collect();
            Html(format!(
                "<html><head><title>Root</title></head><body><h1>Root</h1><p>{links}</p></body></html>"
            ))
            .into_response()
        }
        p => Html(format!(
            "<html><head><title>Page {p}</title></head><body><h1>{p}</h1><p>Text of {p}.</p></body></html>"
        ))
        .into_response(),
    }
}

/// Crawls [`CRAWL_HOSTS`] local sites of [`CRAWL_PAGES`] pages each (`request_fetch` of
/// each root with `full`) with one in-process worker at [`CRAWL_POLITENESS`]; pages/s from
/// the worker's start until every page is stored.
pub(crate) async fn crawl(url: &str, o: &BenchOptions, monitor: &PgPool) -> Result<f64> {
    store::truncate_fetch(monitor).await?;
    let servers = CancellationToken::new();
    let _stop_servers = servers.clone().drop_guard();
    let mut roots = Vec::with_capacity(CRAWL_HOSTS);
    for _ in 0..CRAWL_HOSTS {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Error::Other(format!("bench: cannot open a local site: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Other(format!("bench: local site address: {e}")))?;
        let stop = servers.clone();
        tokio::spawn(async move {
            let app = Router::new().fallback(page);
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
        });
        roots.push(format!("http://{addr}/"));
    }
    let p = store::pool(url, o.connections).await?;
    for r in &roots {
        fetch::request_fetch(&p, r, false, true).await?;
    }
    let settings = FetchSettings::new(Schedule::default(), CRAWL_POLITENESS, true);
    let qs = QueueSettings {
        queues: Some(BTreeMap::from([(fetch::QUEUE.to_string(), CRAWL_SLOTS)])),
        max_connections: o.connections,
        ..o.worker.clone()
    };
    let worker = fetch::register_with(
        Worker::builder(p.clone())
            .settings(qs)
            .without_maintenance(),
        settings,
    )?
    .build();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let started = Instant::now();
    let handle = tokio::spawn(async move { worker.run(async move { s.cancelled().await }).await });
    let total = (CRAWL_HOSTS * CRAWL_PAGES) as i64;
    // Generous: 20 intervals are the ideal; a crawl that takes this long is broken.
    let limit = Duration::from_secs(300);
    let result = loop {
        let n = store::pages_fetched(monitor).await?;
        if n >= total {
            break Ok(total as f64 / started.elapsed().as_secs_f64());
        }
        if started.elapsed() > limit || handle.is_finished() {
            break Err(Error::Other(format!(
                "bench: the crawl stored {n} of {total} pages in {}s",
                started.elapsed().as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.cancel();
    handle.await.map_err(|e| Error::Other(e.to_string()))??;
    p.close().await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ideal_crawl_is_hosts_per_interval() {
        assert_eq!(crawl_ideal(), 500.0);
        let r = never_binding_rate().rate.unwrap();
        assert!(r.count as f64 / r.period.as_secs_f64() >= 1_000_000.0);
    }

    #[test]
    fn the_never_binding_queue_limit_leaves_room_for_slots_acks_and_a_full_buffer() {
        // The bench's defaults: 200 slots, claim-ahead 200.
        assert_eq!(never_binding_queue_limit(200, 200), 1200);
        let (slots, ahead) = (200usize, 200usize);
        let held = 2 * slots + ahead;
        // With all of it running, half the room left still covers a full buffer.
        let room = (never_binding_queue_limit(slots, ahead) as usize - held) / 2;
        assert!(room >= ahead);
        assert_eq!(never_binding_queue_limit(0, 0), 1);
    }
}

//! Fetch throughput across many hosts when politeness is not the limit
//! (`SKIPLOCK_POLITENESS=0s`): H local HTTP servers (one host each) serving small HTML
//! pages, P pages per host requested with `skiplock.request_fetch`, one in-process worker
//! with `fetch=C` slots. Prints pages per second from the first claim to the last page.
//!
//! ```sh
//! cargo run --example fetch_bench -- [HOSTS=20] [PAGES_PER_HOST=25] [CONCURRENCY=16]
//! ```
//! Uses `SKIPLOCK_TEST_DATABASE_URL` (default postgres://postgres@127.0.0.1:5432/postgres)
//! to create and drop a scratch database.

use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse};
use skiplock::config::QueueSettings;
use skiplock::worker::Worker;
use skiplock_workflows::fetch::schedule::Schedule;
use skiplock_workflows::fetch::{self, FetchSettings};
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;

async fn page(uri: axum::http::Uri) -> axum::response::Response {
    if uri.path() == "/robots.txt" {
        return StatusCode::NOT_FOUND.into_response();
    }
    let p = uri.path();
    Html(format!(
        "<html><head><title>Page {p}</title></head><body><h1>{p}</h1><p>Some text for {p}.</p></body></html>"
    ))
    .into_response()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let hosts = args.first().copied().unwrap_or(20);
    let per_host = args.get(1).copied().unwrap_or(25);
    let concurrency = args.get(2).copied().unwrap_or(16);

    let admin_url = std::env::var("SKIPLOCK_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let name = format!("skiplock_fetchbench_{:08x}", rand::random::<u32>());
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&admin_url)
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await?;
    let mut u = url::Url::parse(&admin_url)?;
    u.set_path(&format!("/{name}"));
    let result = run(u.as_str(), hosts, per_host, concurrency).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&admin)
    .await?;
    result
}

async fn run(
    db_url: &str,
    hosts: usize,
    per_host: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    let pool: skiplock::Pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(db_url)
        .await?
        .into();
    skiplock::store::schema::migrate_parts(&pool, &skiplock_workflows::schemas()).await?;

    let mut bases = Vec::new();
    for _ in 0..hosts {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        bases.push(format!("http://{}", listener.local_addr()?));
        let app = Router::new().fallback(page);
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
    let t = Instant::now();
    for p in 0..per_host {
        for b in &bases {
            fetch::request_fetch(&pool, &format!("{b}/p{p}"), false, false).await?;
        }
    }
    let total = hosts * per_host;
    println!(
        "requested {total} pages on {hosts} hosts in {:?}",
        t.elapsed()
    );

    let mut settings = QueueSettings {
        poll_interval: Duration::from_millis(50),
        max_connections: 8,
        ..QueueSettings::default()
    };
    settings.queues = Some([("fetch".to_string(), concurrency)].into());
    let fs = FetchSettings::new(Schedule::default(), Duration::ZERO, true);
    let worker =
        fetch::register_with(Worker::builder(pool.clone()).settings(settings), fs)?.build();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let start = Instant::now();
    let handle = tokio::spawn(async move { worker.run(async move { s.cancelled().await }).await });
    loop {
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM skiplock.jobs WHERE kind = 'fetch' AND state IN ('available', 'running')",
        )
        .fetch_one(&pool)
        .await?;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = start.elapsed();
    stop.cancel();
    handle.await??;
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM skiplock.pages WHERE http_status = 200")
            .fetch_one(&pool)
            .await?;
    println!(
        "fetched {stored}/{total} pages with fetch={concurrency} in {elapsed:.2?}: {:.0} pages/s",
        stored as f64 / elapsed.as_secs_f64()
    );
    pool.close().await;
    Ok(())
}

//! The guestbook rows: reading and writing `skiplock.pages` and the robots.txt cache in
//! `skiplock.hosts`, and the requests a fetch makes for other pages (crawl links, redirect
//! targets). Every statement lives in `sql/fetch/`.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};

use super::robots::Cached;
use crate::error::Result;

/// What a fetch needs to know about a page before deciding.
#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct Known {
    /// When it is due (`None`: never scheduled).
    #[sqlx(try_from = "crate::dbtime::DbTimeOpt")]
    pub next_fetch: Option<DateTime<Utc>>,
    /// Validator for the conditional GET.
    pub etag: Option<String>,
    /// Validator for the conditional GET.
    pub last_modified: Option<String>,
    /// Same-host links found at the last fetch.
    pub links: Vec<String>,
}

/// Loads page `url`'s row, if any.
pub async fn load(pool: &PgPool, url: &str) -> Result<Option<Known>> {
    Ok(
        sqlx::query_as(include_str!("../../../sql/fetch/load_page.sql"))
            .bind(url)
            .fetch_optional(pool)
            .await?,
    )
}

/// The content of a successful fetch.
#[derive(Debug, Clone)]
pub struct Content<'a> {
    /// Normalised URL.
    pub url: &'a str,
    /// Host key.
    pub host: &'a str,
    /// Request target.
    pub path: &'a str,
    /// When it was fetched.
    pub fetched_at: DateTime<Utc>,
    /// When it is due again.
    pub next_fetch: DateTime<Utc>,
    /// HTTP status.
    pub status: i32,
    /// Validator.
    pub etag: Option<&'a str>,
    /// Validator.
    pub last_modified: Option<&'a str>,
    /// SHA-256 of the extracted content.
    pub content_hash: &'a str,
    /// Extracted title.
    pub title: &'a str,
    /// Extracted headings.
    pub headings: &'a str,
    /// Extracted visible text.
    pub body: &'a str,
    /// Same-host links.
    pub links: &'a [String],
    /// A remark (e.g. body truncated).
    pub note: Option<&'a str>,
}

/// Stores a fetched page; returns whether its content changed (new pages count).
pub async fn save<'e, E: PgExecutor<'e>>(exec: E, c: &Content<'_>) -> Result<bool> {
    Ok(
        sqlx::query_scalar(include_str!("../../../sql/fetch/save_page.sql"))
            .bind(c.url)
            .bind(c.host)
            .bind(c.path)
            .bind(c.fetched_at)
            .bind(c.next_fetch)
            .bind(c.status)
            .bind(c.etag)
            .bind(c.last_modified)
            .bind(c.content_hash)
            .bind(c.title)
            .bind(c.headings)
            .bind(c.body)
            .bind(c.links)
            .bind(c.note)
            .fetch_one(exec)
            .await?,
    )
}

/// Records a request that stored no content (robots.txt, 4xx, redirect, not HTML).
#[allow(clippy::too_many_arguments)]
pub async fn record_status(
    pool: &PgPool,
    url: &str,
    host: &str,
    path: &str,
    status: Option<i32>,
    note: &str,
    next_fetch: DateTime<Utc>,
    fetched_at: Option<DateTime<Utc>>,
) -> Result<()> {
    sqlx::query(include_str!("../../../sql/fetch/record_status.sql"))
        .bind(url)
        .bind(host)
        .bind(path)
        .bind(status)
        .bind(note)
        .bind(next_fetch)
        .bind(fetched_at)
        .execute(pool)
        .await?;
    Ok(())
}

/// A 304: moves only `last_fetched` and `next_fetch`.
pub async fn touch(
    pool: &PgPool,
    url: &str,
    fetched_at: DateTime<Utc>,
    next_fetch: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(include_str!("../../../sql/fetch/touch_page.sql"))
        .bind(url)
        .bind(fetched_at)
        .bind(next_fetch)
        .execute(pool)
        .await?;
    Ok(())
}

type RobotsRow = (Option<String>, Option<i32>, crate::dbtime::DbTimeOpt);

/// Host `host`'s cached robots.txt.
pub async fn load_robots(pool: &PgPool, host: &str) -> Result<Cached> {
    let row: Option<RobotsRow> = sqlx::query_as(include_str!("../../../sql/fetch/load_robots.sql"))
        .bind(host)
        .fetch_optional(pool)
        .await?;
    let (txt, status, fetched_at) = row.unwrap_or((None, None, crate::dbtime::DbTimeOpt(None)));
    Ok(Cached {
        txt,
        status,
        fetched_at: fetched_at.0,
    })
}

/// Caches host `host`'s robots.txt.
pub async fn save_robots(pool: &PgPool, host: &str, txt: Option<&str>, status: i32) -> Result<()> {
    sqlx::query(include_str!("../../../sql/fetch/save_robots.sql"))
        .bind(host)
        .bind(txt)
        .bind(status)
        .execute(pool)
        .await?;
    Ok(())
}

/// Requests the pages of crawl `crawl` it has not requested yet; returns how many.
pub async fn crawl_request(pool: &PgPool, crawl: i64, urls: &[String], force: bool) -> Result<i32> {
    if urls.is_empty() {
        return Ok(0);
    }
    Ok(
        sqlx::query_scalar(include_str!("../../../sql/fetch/crawl_request.sql"))
            .bind(crawl)
            .bind(urls)
            .bind(force)
            .fetch_one(pool)
            .await?,
    )
}

/// Requests a redirect target, `hops` redirects from the original request.
pub async fn request_hop(pool: &PgPool, url: &str, force: bool, hops: i32) -> Result<i64> {
    Ok(
        sqlx::query_scalar(include_str!("../../../sql/fetch/request_hop.sql"))
            .bind(url)
            .bind(force)
            .bind(hops)
            .fetch_one(pool)
            .await?,
    )
}

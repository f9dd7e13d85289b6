//! The fetch workflow's statements (`sql/fetch/`): the guestbook rows in `skiplock.pages`,
//! the robots.txt cache in `skiplock.hosts`, and the requests a fetch makes for other pages
//! (crawl links, redirect targets). Politeness is the fetch queue's per-host rate limit
//! (`store::control`), enforced at claim time.

use chrono::{DateTime, Utc};

use super::{Executor, sql};
use crate::error::Result;

/// Requests a fetch through the SQL API (`skiplock.request_fetch`); returns the job id.
pub async fn request<'e, E: Executor<'e>>(
    exec: E,
    url: &str,
    force: bool,
    full: bool,
) -> Result<i64> {
    Ok(super::query_scalar(sql!("fetch", "request"))
        .bind(url)
        .bind(force)
        .bind(full)
        .fetch_one(exec)
        .await?)
}

/// Sets the fetch queue's politeness (`skiplock.set_politeness`): per host key one fetch at
/// a time and one start per `period` (more than 0, at most a day). The worker role writes
/// the fetch queue's row only through this function (`sql/api/90_roles.sql`).
pub async fn set_politeness<'e, E: Executor<'e>>(
    exec: E,
    period: std::time::Duration,
) -> Result<()> {
    super::query(sql!("fetch", "set_politeness"))
        .bind(period.as_secs_f64())
        .execute(exec)
        .await?;
    Ok(())
}

/// A fetch job's politeness key: the `limit_key` it has and the one its URL must have.
#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct JobHostKey {
    /// The job's `limit_key` (`None`: none).
    pub limit_key: Option<String>,
    /// The host key `skiplock._request_fetch` gives its URL (`None`: a URL the SQL refuses).
    pub expected: Option<String>,
}

/// The `limit_key` of fetch job `id` and the one its `url` must have (`skiplock._fetch_host_key`);
/// both `None` when there is no such job.
pub async fn job_host_key<'e, E: Executor<'e>>(exec: E, id: i64, url: &str) -> Result<JobHostKey> {
    Ok(
        super::query_as::<JobHostKey>(sql!("fetch", "job_limit_key"))
            .bind(id)
            .bind(url)
            .fetch_optional(exec)
            .await?
            .unwrap_or_default(),
    )
}

/// What a fetch needs to know about a page before deciding.
#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct Known {
    /// When it is due (`None`: never scheduled).
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub next_fetch: Option<DateTime<Utc>>,
    /// Validator for the conditional GET.
    pub etag: Option<String>,
    /// Validator for the conditional GET.
    pub last_modified: Option<String>,
    /// Same-host links found at the last fetch.
    pub links: Vec<String>,
}

/// Loads page `url`'s row, if any.
pub async fn load_page<'e, E: Executor<'e>>(exec: E, url: &str) -> Result<Option<Known>> {
    Ok(super::query_as(sql!("fetch", "load_page"))
        .bind(url)
        .fetch_optional(exec)
        .await?)
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
pub async fn save_page<'e, E: Executor<'e>>(exec: E, c: &Content<'_>) -> Result<bool> {
    Ok(super::query_scalar(sql!("fetch", "save_page"))
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
        .await?)
}

/// A request that stored no content (robots.txt, 4xx, redirect, not HTML).
#[derive(Debug, Clone, Copy)]
pub struct PageStatus<'a> {
    /// Normalised URL.
    pub url: &'a str,
    /// Host key.
    pub host: &'a str,
    /// Request target.
    pub path: &'a str,
    /// HTTP status (`None`: no request was sent).
    pub status: Option<i32>,
    /// Why nothing was stored.
    pub note: &'a str,
    /// When it is due again.
    pub next_fetch: DateTime<Utc>,
    /// When it was fetched (`None` keeps the old value).
    pub fetched_at: Option<DateTime<Utc>>,
}

/// Records a request that stored no content; the page's content is kept.
pub async fn record_status<'e, E: Executor<'e>>(exec: E, s: PageStatus<'_>) -> Result<()> {
    super::query(sql!("fetch", "record_status"))
        .bind(s.url)
        .bind(s.host)
        .bind(s.path)
        .bind(s.status)
        .bind(s.note)
        .bind(s.next_fetch)
        .bind(s.fetched_at)
        .execute(exec)
        .await?;
    Ok(())
}

/// A 304: moves only `last_fetched` and `next_fetch`.
pub async fn touch_page<'e, E: Executor<'e>>(
    exec: E,
    url: &str,
    fetched_at: DateTime<Utc>,
    next_fetch: DateTime<Utc>,
) -> Result<()> {
    super::query(sql!("fetch", "touch_page"))
        .bind(url)
        .bind(fetched_at)
        .bind(next_fetch)
        .execute(exec)
        .await?;
    Ok(())
}

/// A host's cached robots.txt.
#[derive(Debug, Clone, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct RobotsRow {
    /// The file, when the host served one (2xx).
    pub robots_txt: Option<String>,
    /// The HTTP status of the robots.txt request.
    pub robots_status: Option<i32>,
    /// When it was fetched.
    #[sqlx(try_from = "crate::time::DbTimeOpt")]
    pub robots_fetched_at: Option<DateTime<Utc>>,
}

/// Host `host`'s cached robots.txt (all empty when the host is unknown).
pub async fn load_robots<'e, E: Executor<'e>>(exec: E, host: &str) -> Result<RobotsRow> {
    let row: Option<RobotsRow> = super::query_as(sql!("fetch", "load_robots"))
        .bind(host)
        .fetch_optional(exec)
        .await?;
    Ok(row.unwrap_or_default())
}

/// Caches host `host`'s robots.txt.
pub async fn save_robots<'e, E: Executor<'e>>(
    exec: E,
    host: &str,
    txt: Option<&str>,
    status: i32,
) -> Result<()> {
    super::query(sql!("fetch", "save_robots"))
        .bind(host)
        .bind(txt)
        .bind(status)
        .execute(exec)
        .await?;
    Ok(())
}

/// Requests the pages of crawl `crawl` it has not requested yet; returns how many.
pub async fn crawl_request<'e, E: Executor<'e>>(
    exec: E,
    crawl: i64,
    urls: &[String],
    force: bool,
) -> Result<i32> {
    if urls.is_empty() {
        return Ok(0);
    }
    Ok(super::query_scalar(sql!("fetch", "crawl_request"))
        .bind(crawl)
        .bind(urls)
        .bind(force)
        .fetch_one(exec)
        .await?)
}

/// Requests a redirect target, `hops` redirects from the original request.
pub async fn request_hop<'e, E: Executor<'e>>(
    exec: E,
    url: &str,
    force: bool,
    hops: i32,
) -> Result<i64> {
    Ok(super::query_scalar(sql!("fetch", "request_hop"))
        .bind(url)
        .bind(force)
        .bind(hops)
        .fetch_one(exec)
        .await?)
}

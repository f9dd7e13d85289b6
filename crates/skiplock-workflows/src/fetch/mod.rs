//! Workflow `fetch`: polite, scheduled page fetching (the crawler's "entree").
//!
//! A `fetch` job (queue `fetch`, args `{"url", "force", "full"}`) fetches a page only when
//! it is due by the schedule file (or forced), at most one request per host per
//! `SKIPLOCK_POLITENESS` across every worker process, honouring robots.txt, and stores the
//! extracted title, headings and text in `skiplock.pages`. Request one with
//! `skiplock fetch URL` or `SELECT skiplock.request_fetch('https://…')`. See `docs/fetch.md`.

pub mod address;
pub mod extract;
pub mod http;
pub mod normalize;
pub mod robots;
pub mod schedule;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use url::Url;

use crate::config::{env_bool, env_duration, env_string, env_usize};
use crate::error::{Error, Result};
use crate::names;
use crate::store::fetch::PageStatus;
use crate::store::{self, Pool};
use crate::worker::{Handler, HandlerResult, JobContext, JobError, Outcome, WorkerBuilder};
use normalize::{host_key, normalize, target};
use robots::Cached;
use schedule::{Schedule, is_due, next_fetch};

/// The job kind.
pub const KIND: &str = names::FETCH_KIND;
/// The queue fetch jobs go to.
pub const QUEUE: &str = names::FETCH_QUEUE;

/// Settings of the fetch workflow (see `.env-template`).
#[derive(Debug, Clone)]
pub struct FetchSettings {
    /// At most one request per host per this (`SKIPLOCK_POLITENESS`, 2s; 0s turns the
    /// host coordination off).
    pub politeness: Duration,
    /// `SKIPLOCK_USER_AGENT`.
    pub user_agent: String,
    /// Whole-request timeout (`SKIPLOCK_FETCH_TIMEOUT`, 30s).
    pub timeout: Duration,
    /// Body cap in bytes (`SKIPLOCK_FETCH_MAX_BYTES`, 5 MiB); longer bodies are cut.
    pub max_bytes: usize,
    /// Redirects followed from one request (`SKIPLOCK_FETCH_MAX_REDIRECTS`, 5).
    pub max_redirects: i32,
    /// Allow loopback, private and link-local addresses (`SKIPLOCK_FETCH_ALLOW_PRIVATE`).
    pub allow_private: bool,
    /// The schedule file (`SKIPLOCK_SCHEDULES`).
    pub schedule: Schedule,
}

/// The default User-Agent: names skiplock so site owners know who calls.
pub const DEFAULT_USER_AGENT: &str =
    "skiplock/0.1 (polite crawler; one request per host per interval)";

impl FetchSettings {
    /// Reads the settings and the schedule file; a bad value or file is an error naming it.
    pub fn from_env() -> Result<Self> {
        let max_redirects = match crate::config::env_opt("SKIPLOCK_FETCH_MAX_REDIRECTS") {
            None => 5,
            Some(v) => v
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|n| (0..=50).contains(n))
                .ok_or_else(|| {
                    Error::config(
                        "SKIPLOCK_FETCH_MAX_REDIRECTS",
                        format!("{v:?} is not a whole number from 0 to 50"),
                    )
                })?,
        };
        let s = FetchSettings {
            politeness: env_duration("SKIPLOCK_POLITENESS", Duration::from_secs(2))?,
            user_agent: env_string("SKIPLOCK_USER_AGENT", DEFAULT_USER_AGENT),
            timeout: env_duration("SKIPLOCK_FETCH_TIMEOUT", Duration::from_secs(30))?,
            max_bytes: env_usize("SKIPLOCK_FETCH_MAX_BYTES", 5 * 1024 * 1024)?,
            max_redirects,
            allow_private: env_bool("SKIPLOCK_FETCH_ALLOW_PRIVATE", false)?,
            schedule: Schedule::from_env()?,
        };
        if s.timeout.is_zero() {
            return Err(Error::config(
                "SKIPLOCK_FETCH_TIMEOUT",
                "must be more than 0s",
            ));
        }
        Ok(s)
    }

    /// Settings for tests and embedding: defaults, private addresses allowed as given.
    pub fn new(schedule: Schedule, politeness: Duration, allow_private: bool) -> Self {
        FetchSettings {
            politeness,
            user_agent: DEFAULT_USER_AGENT.into(),
            timeout: Duration::from_secs(30),
            max_bytes: 5 * 1024 * 1024,
            max_redirects: 5,
            allow_private,
            schedule,
        }
    }
}

/// Registers the `fetch` handler with `settings` (`skiplock worker` reads them with
/// [`FetchSettings::from_env`]; a bad schedule file stops it there, at start-up).
pub fn register_with(builder: WorkerBuilder, settings: FetchSettings) -> Result<WorkerBuilder> {
    let politeness = settings.politeness;
    Ok(builder
        .register(FetchHandler::new(settings)?)
        .on_start(politeness_hook(politeness)))
}

/// The fetch queue's per-key limit for `politeness`: per host key (fetch jobs carry theirs
/// as limit_key) one start per `politeness`, and one fetch at a time, so a slow answer never
/// has a second request sent to the same host while it is in flight; none for 0s (no host
/// coordination).
pub fn politeness_limit(politeness: Duration) -> store::control::KeyLimit {
    if politeness.is_zero() {
        return store::control::KeyLimit::default();
    }
    store::control::KeyLimit {
        concurrency: Some(1),
        rate: Some(store::control::Rate {
            count: 1,
            period: politeness,
        }),
    }
}

/// The start-up hook that makes `SKIPLOCK_POLITENESS` the fetch queue's per-host limits
/// (`skiplock.set_politeness`, the limits of [`politeness_limit`]): a fetch whose host had a
/// start less than `politeness` ago, or has a fetch running, is not claimed at all (no
/// attempt, no worker slot, no snooze) and is claimed as soon as the host allows. The
/// spacing is start to start (claim to claim). The last worker to start sets the value: set
/// the same everywhere. 0s sets nothing: the worker role may set a politeness but never
/// remove one (the fetch queue's row is the owner's, `sql/api/90_roles.sql`); to clear an
/// earlier one the owner runs `skiplock queue limit fetch` (docs/fetch.md).
fn politeness_hook(politeness: Duration) -> crate::worker::StartHook {
    Box::new(move |pool: Pool| {
        Box::pin(async move {
            if politeness.is_zero() {
                tracing::info!(
                    "SKIPLOCK_POLITENESS=0s: the fetch queue's politeness is left as it is (the owner clears it with `skiplock queue limit fetch`)"
                );
                return Ok(());
            }
            store::fetch::set_politeness(&pool, politeness).await
        })
    })
}

/// Requests a fetch through the SQL API (`skiplock.request_fetch`); returns the job id.
pub async fn request_fetch(pool: &Pool, url: &str, force: bool, full: bool) -> Result<i64> {
    store::fetch::request(pool, url, force, full).await
}

/// A fetch job's arguments.
#[derive(Debug, Clone, Deserialize)]
pub struct FetchArgs {
    /// The page.
    pub url: String,
    /// Fetch even if not due (the hall pass).
    #[serde(default)]
    pub force: bool,
    /// Walk same-host links too (set with `crawl`).
    #[serde(default)]
    pub full: bool,
    /// The full crawl this request belongs to.
    #[serde(default)]
    pub crawl: Option<i64>,
    /// Redirects followed to get here.
    #[serde(default)]
    pub hops: i32,
}

/// The `fetch` handler.
pub struct FetchHandler {
    settings: Arc<FetchSettings>,
    client: reqwest::Client,
}

impl FetchHandler {
    /// Builds the handler and its HTTP client.
    pub fn new(settings: FetchSettings) -> Result<Self> {
        let client = http::client(
            &settings.user_agent,
            settings.timeout,
            settings.allow_private,
        )?;
        Ok(FetchHandler {
            settings: Arc::new(settings),
            client,
        })
    }
}

impl Handler for FetchHandler {
    type Args = FetchArgs;

    fn kind(&self) -> &'static str {
        KIND
    }

    fn timeout(&self) -> Option<Duration> {
        // robots.txt and the page, plus the database work around them.
        Some(self.settings.timeout * 2 + Duration::from_secs(30))
    }

    async fn run(&self, ctx: JobContext, args: FetchArgs) -> HandlerResult {
        Fetch {
            s: &self.settings,
            client: &self.client,
            pool: &ctx.pool,
        }
        .run(&ctx, args)
        .await
    }
}

/// One fetch job's run.
struct Fetch<'a> {
    s: &'a FetchSettings,
    client: &'a reqwest::Client,
    pool: &'a Pool,
}

fn sha256_hex(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    hex::encode(h.finalize())
}

/// Why a fetch job of `queue` with `limit_key` may not fetch a URL whose host key is
/// `expected` (as `skiplock._fetch_host_key` spells it; `None`: the SQL refuses the URL), if
/// it may not: politeness is the fetch queue's per-key limit on the host key, so a job
/// elsewhere, or under another key (or none), would skip it. `skiplock._request_fetch` always
/// writes both right; the generic enqueue refuses kind `fetch` (`skiplock._reserved_job`); this
/// catches a row a trusted role wrote by hand.
pub fn misplaced(queue: &str, limit_key: Option<&str>, expected: Option<&str>) -> Option<String> {
    let host = expected.unwrap_or("(none: the SQL API refuses this URL)");
    (queue != QUEUE || expected.is_none() || limit_key != expected).then(|| {
        format!(
            "a fetch job of host {host} must be in queue {QUEUE} with limit_key {host} (per-host politeness), not in queue {queue} with limit_key {}: request fetches with skiplock.request_fetch",
            limit_key.unwrap_or("NULL")
        )
    })
}

impl Fetch<'_> {
    async fn run(&self, ctx: &JobContext, args: FetchArgs) -> HandlerResult {
        let url = normalize(&args.url).map_err(JobError::discard)?;
        let host = host_key(&url);
        let key = store::fetch::job_host_key(self.pool, ctx.id, &args.url).await?;
        if let Some(why) = misplaced(
            &ctx.queue,
            key.limit_key.as_deref(),
            key.expected.as_deref(),
        ) {
            return Err(JobError::discard(why));
        }
        let path = target(&url);
        if !self.s.schedule.is_allowed(&host) {
            return Err(JobError::discard(format!(
                "host {host} is not allowed by the schedule file's allow list"
            )));
        }
        self.check_address(&url).await?;
        let known = store::fetch::load_page(self.pool, url.as_str())
            .await?
            .unwrap_or_default();
        let now = Utc::now();
        let due = is_due(known.next_fetch, now, args.force);
        if !due.fetch() {
            let until = known.next_fetch.unwrap_or(now);
            let requested = self.walk(&args, &known.links).await?;
            return Ok(Outcome::CompleteWith(json!({
                "fetched": false,
                "skipped": format!("not due until {}", until.to_rfc3339()),
                "next_fetch": until,
                "requested": requested,
            })));
        }
        let freq = self.s.schedule.frequency_for(&host, url.path());

        // robots.txt first. Its request uses this claim's start under the host's rate limit,
        // so once it is stored the job goes back to wait for the host's next start.
        let mut robots = Cached::from(store::fetch::load_robots(self.pool, &host).await?);
        if robots.is_stale(now) {
            let got = http::get(
                self.client,
                &robots::robots_url(&url),
                None,
                None,
                512 * 1024,
            )
            .await;
            let r =
                got.map_err(|e| JobError::retry(format!("fetching robots.txt of {host}: {e}")))?;
            if r.status >= 500 {
                return Err(JobError::retry(format!(
                    "robots.txt of {host}: HTTP {}",
                    r.status
                )));
            }
            let txt = (200..300)
                .contains(&r.status)
                .then(|| String::from_utf8_lossy(&r.body).into_owned());
            store::fetch::save_robots(self.pool, &host, txt.as_deref(), r.status as i32).await?;
            if !self.s.politeness.is_zero() {
                return Ok(Outcome::Snooze(Duration::ZERO));
            }
            robots = Cached::from(store::fetch::load_robots(self.pool, &host).await?);
        }
        if !robots::allowed(&robots, &self.s.user_agent, &url) {
            let note = "disallowed by robots.txt";
            let s = PageStatus {
                url: url.as_str(),
                host: &host,
                path: &path,
                status: None,
                note,
                next_fetch: next_fetch(now, freq),
                fetched_at: None,
            };
            store::fetch::record_status(self.pool, s).await?;
            return Ok(Outcome::CompleteWith(
                json!({"fetched": false, "skipped": note}),
            ));
        }

        let got = http::get(
            self.client,
            &url,
            known.etag.as_deref(),
            known.last_modified.as_deref(),
            self.s.max_bytes,
        )
        .await;
        let r = got.map_err(|e| JobError::retry(format!("fetching {url}: {e}")))?;
        let fetched_at = Utc::now();
        let next = next_fetch(fetched_at, freq);
        self.store(&args, &url, &host, &path, &known, r, fetched_at, next)
            .await
    }

    /// Refuses hosts at loopback, private or link-local addresses (resolved, not just
    /// literal) unless allowed; such a request can never succeed, so it is not retried.
    async fn check_address(&self, url: &Url) -> Result<(), JobError> {
        if self.s.allow_private {
            return Ok(());
        }
        let host = url.host_str().unwrap_or_default();
        let port = url.port_or_known_default().unwrap_or(80);
        let bad = match normalize::literal_ip(url) {
            Some(ip) => address::is_internal(ip).then_some(ip),
            None => http::internal_address(host, port)
                .await
                .map_err(|e| JobError::retry(format!("resolving {host}: {e}")))?,
        };
        match bad {
            Some(ip) => Err(JobError::discard(format!(
                "refusing to fetch {url}: {host} is at internal address {ip} ({}; set SKIPLOCK_FETCH_ALLOW_PRIVATE=true to allow)",
                address::non_global_reason(ip).unwrap_or("not global")
            ))),
            None => Ok(()),
        }
    }

    /// In a full crawl, requests `links` (each once per crawl).
    async fn walk(&self, args: &FetchArgs, links: &[String]) -> Result<i32> {
        match (args.full, args.crawl) {
            (true, Some(crawl)) => {
                store::fetch::crawl_request(self.pool, crawl, links, args.force).await
            }
            _ => Ok(0),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn store(
        &self,
        args: &FetchArgs,
        url: &Url,
        host: &str,
        path: &str,
        known: &store::fetch::Known,
        r: http::Response,
        fetched_at: DateTime<Utc>,
        next: DateTime<Utc>,
    ) -> HandlerResult {
        let status = r.status;
        let record = |note: String| async move {
            let s = PageStatus {
                url: url.as_str(),
                host,
                path,
                status: Some(status as i32),
                note: &note,
                next_fetch: next,
                fetched_at: Some(fetched_at),
            };
            store::fetch::record_status(self.pool, s)
                .await
                .map(|_| note)
        };
        if status >= 500 {
            return Err(JobError::retry(format!("{url}: HTTP {status}")));
        }
        if status == 304 {
            store::fetch::touch_page(self.pool, url.as_str(), fetched_at, next).await?;
            let requested = self.walk(args, &known.links).await?;
            return Ok(Outcome::CompleteWith(
                json!({"fetched": true, "status": 304, "changed": false, "requested": requested}),
            ));
        }
        if (300..400).contains(&status) {
            let target = r
                .location
                .as_deref()
                .and_then(|l| normalize::resolve_link(url, l));
            let note = match target {
                None => record(format!("HTTP {status} without a usable Location")).await?,
                Some(t) if host_key(&t) != host => {
                    record(format!("redirects to {t} (another host; not followed)")).await?
                }
                Some(t) if args.hops >= self.s.max_redirects => {
                    record(format!(
                        "redirects to {t}; redirect limit ({}) reached",
                        self.s.max_redirects
                    ))
                    .await?
                }
                Some(t) => {
                    match (args.full, args.crawl) {
                        (true, Some(c)) => {
                            store::fetch::crawl_request(self.pool, c, &[t.to_string()], args.force)
                                .await?;
                        }
                        _ => {
                            store::fetch::request_hop(
                                self.pool,
                                t.as_str(),
                                args.force,
                                args.hops + 1,
                            )
                            .await?;
                        }
                    }
                    record(format!("redirects to {t} (requested)")).await?
                }
            };
            return Ok(Outcome::CompleteWith(
                json!({"fetched": true, "status": status, "note": note}),
            ));
        }
        if !(200..400).contains(&status) {
            let note = record(format!("HTTP {status}")).await?;
            return Ok(Outcome::CompleteWith(
                json!({"fetched": true, "status": status, "note": note}),
            ));
        }
        let ctype = r
            .content_type
            .as_deref()
            .unwrap_or("text/html")
            .to_ascii_lowercase();
        let text = String::from_utf8_lossy(&r.body);
        let (title, headings, body, links) = if ctype.contains("html") {
            let e = extract::extract(&text, url);
            let links: Vec<String> = e
                .links
                .iter()
                .filter(|l| host_key(l) == host)
                .map(|l| l.to_string())
                .collect();
            (e.title, e.headings, e.body, links)
        } else if ctype.starts_with("text/plain") {
            (String::new(), String::new(), text.into_owned(), Vec::new())
        } else {
            let note = record(format!("not HTML ({ctype}); nothing stored")).await?;
            return Ok(Outcome::CompleteWith(
                json!({"fetched": true, "status": status, "note": note}),
            ));
        };
        let hash = sha256_hex(&[&title, &headings, &body]);
        let note = r
            .truncated
            .then(|| format!("body cut at {} bytes", self.s.max_bytes));
        let mut tx = self.pool.begin().await.map_err(Error::from)?;
        let changed = store::fetch::save_page(
            &mut *tx,
            &store::fetch::Content {
                url: url.as_str(),
                host,
                path,
                fetched_at,
                next_fetch: next,
                status: status as i32,
                etag: r.etag.as_deref(),
                last_modified: r.last_modified.as_deref(),
                content_hash: &hash,
                title: &title,
                headings: &headings,
                body: &body,
                links: &links,
                note: note.as_deref(),
            },
        )
        .await?;
        // A changed page resets its host's pack timer, when this build packs (the pack queue
        // is reserved to its functions: `skiplock._reserved_job`).
        #[cfg(feature = "pack")]
        if changed {
            store::pack::timer_reset(&mut *tx, host).await?;
        }
        tx.commit().await.map_err(Error::from)?;
        let requested = self.walk(args, &links).await?;
        Ok(Outcome::CompleteWith(json!({
            "fetched": true,
            "status": status,
            "changed": changed,
            "links": links.len(),
            "requested": requested,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn politeness_is_one_start_per_interval_and_one_fetch_at_a_time_per_host() {
        let l = politeness_limit(Duration::from_millis(2500));
        assert_eq!(l.concurrency, Some(1));
        assert_eq!(
            l.rate,
            Some(store::control::Rate {
                count: 1,
                period: Duration::from_millis(2500)
            })
        );
        assert_eq!(
            politeness_limit(Duration::ZERO),
            store::control::KeyLimit::default(),
            "0s turns host coordination off"
        );
    }
}

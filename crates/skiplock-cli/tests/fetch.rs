//! The fetch workflow end to end, against small HTTP servers started by each test on
//! 127.0.0.1 (port 0): due / not due / forced, schedule precedence and the bad-file error,
//! a full crawl that fetches each page once, politeness across two worker processes,
//! robots.txt, 304, retries on 5xx but not on 4xx, invalid URLs and internal addresses.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::Value;
use skiplock_workflows::fetch::schedule::Schedule;
use skiplock_workflows::fetch::{self, FetchSettings};
use sqlx::PgPool;
use support::*;

/// One page of a test site.
#[derive(Clone, Default)]
struct Page {
    status: u16,
    body: String,
    content_type: &'static str,
    etag: Option<&'static str>,
    /// Answer 500 this many times first.
    fail_first: usize,
    /// A redirect's Location.
    location: Option<&'static str>,
    /// Answer this long after the request arrived (a slow host).
    delay: Duration,
}

fn html(title: &str, links: &[&str]) -> Page {
    let a: String = links
        .iter()
        .map(|l| format!("<a href=\"{l}\">{l}</a> "))
        .collect();
    Page {
        status: 200,
        body: format!(
            "<html><head><title>{title}</title></head><body><h1>{title}</h1><p>{a}</p></body></html>"
        ),
        content_type: "text/html; charset=utf-8",
        ..Page::default()
    }
}

#[derive(Default)]
struct Site {
    pages: Mutex<HashMap<String, Page>>,
    /// (path, when, If-None-Match) of every request, in arrival order.
    log: Mutex<Vec<(String, Instant, Option<String>)>>,
    /// Requests being answered now, and the most ever at once.
    in_flight: Mutex<(usize, usize)>,
}

struct Server {
    site: Arc<Site>,
    /// `127.0.0.1:PORT`, the host key.
    host: String,
}

impl Server {
    async fn start(pages: &[(&str, Page)]) -> Server {
        let site = Arc::new(Site::default());
        site.pages
            .lock()
            .unwrap()
            .extend(pages.iter().map(|(p, pg)| (p.to_string(), pg.clone())));
        let app = Router::new().fallback(serve).with_state(site.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Server { site, host }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.host)
    }

    fn hits(&self, path: &str) -> usize {
        self.site
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _, _)| p == path)
            .count()
    }

    fn times(&self) -> Vec<Instant> {
        self.site
            .log
            .lock()
            .unwrap()
            .iter()
            .map(|(_, t, _)| *t)
            .collect()
    }
}

async fn serve(State(site): State<Arc<Site>>, req: Request) -> Response {
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let inm = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    site.log
        .lock()
        .unwrap()
        .push((path.clone(), Instant::now(), inm.clone()));
    let delay = site
        .pages
        .lock()
        .unwrap()
        .get(&path)
        .map(|p| p.delay)
        .unwrap_or_default();
    if !delay.is_zero() {
        {
            let mut f = site.in_flight.lock().unwrap();
            f.0 += 1;
            f.1 = f.1.max(f.0);
        }
        tokio::time::sleep(delay).await;
        site.in_flight.lock().unwrap().0 -= 1;
    }
    let mut pages = site.pages.lock().unwrap();
    let Some(page) = pages.get_mut(&path) else {
        return Response::builder()
            .status(404)
            .body(Body::from("not found"))
            .unwrap();
    };
    if page.fail_first > 0 {
        page.fail_first -= 1;
        return Response::builder()
            .status(500)
            .body(Body::from("oops"))
            .unwrap();
    }
    if let (Some(e), Some(i)) = (page.etag, inm.as_deref())
        && e == i
    {
        return Response::builder().status(304).body(Body::empty()).unwrap();
    }
    let mut r = Response::builder()
        .status(StatusCode::from_u16(page.status).unwrap())
        .header(header::CONTENT_TYPE, page.content_type);
    if let Some(e) = page.etag {
        r = r.header(header::ETAG, HeaderValue::from_static(e));
    }
    if let Some(l) = page.location {
        r = r.header(header::LOCATION, HeaderValue::from_static(l));
    }
    r.body(Body::from(page.body.clone())).unwrap()
}

fn settings(schedule: Schedule, politeness_ms: u64) -> FetchSettings {
    FetchSettings::new(schedule, Duration::from_millis(politeness_ms), true)
}

fn start(pool: &PgPool, s: FetchSettings) -> RunningWorker {
    start_worker(pool, fast_settings(), |b| {
        fetch::register_with(b, s).expect("register fetch")
    })
}

async fn request(pool: &skiplock::Pool, url: &str, force: bool, full: bool) -> i64 {
    fetch::request_fetch(pool, url, force, full)
        .await
        .expect("request_fetch")
}

/// Waits until job `id` is finished; returns (state, result, errors).
async fn finished(pool: &PgPool, id: i64) -> (String, Value, Value) {
    wait_for(
        &format!("fetch job {id} to finish"),
        Duration::from_secs(60),
        || async move {
            let row: (String, Option<Value>, Value) = sqlx::query_as(
                "SELECT state::text, result, errors FROM skiplock.jobs WHERE id = $1",
            )
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap();
            (row.0 != "available" && row.0 != "running")
                .then(|| (row.0, row.1.unwrap_or(Value::Null), row.2))
        },
    )
    .await
}

/// Waits until no fetch job is pending (timer-reset jobs stay: nothing handles them here).
async fn fetches_finished(pool: &PgPool) {
    wait_for("all fetch jobs finished", Duration::from_secs(60), || async {
        let n = count(pool, "SELECT count(*) FROM skiplock.jobs WHERE kind = 'fetch' AND state IN ('available', 'running')").await;
        (n == 0).then_some(())
    })
    .await
}

async fn page_field(pool: &PgPool, url: &str, field: &str) -> Option<String> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT {field}::text FROM skiplock.pages WHERE url = $1"
    )))
    .bind(url)
    .fetch_optional(pool)
    .await
    .unwrap()
    .flatten()
}

#[tokio::test]
async fn due_not_due_and_forced() {
    let db = TestDb::new().await;
    let srv = Server::start(&[("/", html("Home", &[]))]).await;
    let w = start(&db.pool, settings(Schedule::default(), 50));
    let url = srv.url("/");

    let (state, result, _) = finished(&db.pool, request(&db.pool, &url, false, false).await).await;
    assert_eq!(state, "completed", "{result}");
    assert_eq!(result["fetched"], true);
    assert_eq!(srv.hits("/"), 1);
    assert_eq!(
        page_field(&db.pool, &url, "title").await.as_deref(),
        Some("Home")
    );
    assert_eq!(
        page_field(&db.pool, &url, "host").await.as_deref(),
        Some(srv.host.as_str())
    );
    // Monthly by default, computed when fetched.
    let days: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM next_fetch - last_fetched)::float8 / 86400 FROM skiplock.pages",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!((days - 30.0).abs() < 1e-6, "{days}");
    // Content changed (new page): one timer-reset for the host, in queue pack.
    let host: String = sqlx::query_scalar(
        "SELECT args->>'host' FROM skiplock.jobs WHERE kind = 'timer-reset' AND queue = 'pack'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(host, srv.host);

    // Not due: completes without fetching and says why.
    let (state, result, _) = finished(&db.pool, request(&db.pool, &url, false, false).await).await;
    assert_eq!(state, "completed");
    assert_eq!(result["fetched"], false);
    assert!(
        result["skipped"]
            .as_str()
            .unwrap()
            .starts_with("not due until "),
        "{result}"
    );
    assert_eq!(srv.hits("/"), 1);

    // Forced: fetched although not due. Same content: no second timer-reset.
    let (_, result, _) = finished(&db.pool, request(&db.pool, &url, true, false).await).await;
    assert_eq!(result["fetched"], true, "{result}");
    assert_eq!(result["changed"], false, "{result}");
    assert_eq!(srv.hits("/"), 2);
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE kind = 'timer-reset'"
        )
        .await,
        1
    );

    // Due once next_fetch has passed.
    sqlx::query("UPDATE skiplock.pages SET next_fetch = now() - interval '1 second'")
        .execute(&db.pool)
        .await
        .unwrap();
    let (_, result, _) = finished(&db.pool, request(&db.pool, &url, false, false).await).await;
    assert_eq!(result["fetched"], true, "{result}");
    assert_eq!(srv.hits("/"), 3);
    // robots.txt was asked for once (cached for a day).
    assert_eq!(srv.hits("/robots.txt"), 1);
    w.stop().await.unwrap();
}

#[tokio::test]
async fn schedule_rules_set_next_fetch_and_a_bad_file_stops_the_worker() {
    let db = TestDb::new().await;
    let srv = Server::start(&[
        ("/a", html("A", &[])),
        ("/news/1", html("N", &[])),
        ("/news/old/1", html("O", &[])),
    ])
    .await;
    let file = format!(
        "default = \"annually\"\n[hosts.\"{h}\"]\ndefault = \"daily\"\npaths = {{ \"/news/\" = \"hourly\", \"/news/old/\" = \"quarterly\" }}\n",
        h = srv.host
    );
    let w = start(&db.pool, settings(Schedule::parse(&file).unwrap(), 20));
    for (path, hours) in [("/a", 24.0), ("/news/1", 1.0), ("/news/old/1", 90.0 * 24.0)] {
        let (state, r, _) = finished(
            &db.pool,
            request(&db.pool, &srv.url(path), false, false).await,
        )
        .await;
        assert_eq!(state, "completed", "{r}");
        let h: f64 = sqlx::query_scalar(
            "SELECT extract(epoch FROM next_fetch - last_fetched)::float8 / 3600 FROM skiplock.pages WHERE url = $1",
        )
        .bind(srv.url(path))
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!((h - hours).abs() < 1e-6, "{path}: {h} h");
    }
    w.stop().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("schedules.toml");
    std::fs::write(
        &bad,
        "default = \"daily\"\n[hosts.\"a.com\"]\ndefault = \"fortnightly\"\n",
    )
    .unwrap();
    let out = cmd(&db.url)
        .arg("worker")
        .env("SKIPLOCK_SCHEDULES", &bad)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("SKIPLOCK_SCHEDULES")
            && err.contains("line 3, column 11: unknown variant")
            && !err.contains("fortnightly"),
        "{err}"
    );
}

#[tokio::test]
async fn full_crawl_fetches_each_page_exactly_once() {
    let db = TestDb::new().await;
    let srv = Server::start(&[
        (
            "/",
            html("Home", &["/a", "/b", "/b#frag", "mailto:x@example.com"]),
        ),
        ("/a", html("A", &["/", "/b", "/c", "/a"])),
        ("/b", html("B", &["/a", "/c#x", "http://other.invalid/"])),
        ("/c", html("C", &["/", "/a?"])),
        ("/a?", html("A?", &["/c"])),
    ])
    .await;
    let w = start(&db.pool, settings(Schedule::default(), 20));
    // force + full: even forced, a crawl never loops.
    request(&db.pool, &srv.url("/"), true, true).await;
    fetches_finished(&db.pool).await;
    for p in ["/", "/a", "/b", "/c", "/a?", "/robots.txt"] {
        assert_eq!(srv.hits(p), 1, "{p}");
    }
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.pages").await,
        5
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE kind = 'fetch' AND state <> 'completed'"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE kind = 'fetch'"
        )
        .await,
        5
    );

    // A second full crawl without force: nothing is due, nothing is fetched, but the walk
    // still covers every stored link, each once.
    request(&db.pool, &srv.url("/"), false, true).await;
    fetches_finished(&db.pool).await;
    assert_eq!(srv.hits("/a"), 1);
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE kind = 'fetch'"
        )
        .await,
        10
    );
    w.stop().await.unwrap();
}

fn page_refs(v: &[(String, Page)]) -> Vec<(&str, Page)> {
    v.iter().map(|(p, pg)| (p.as_str(), pg.clone())).collect()
}

#[tokio::test]
async fn politeness_holds_across_two_worker_processes() {
    let db = TestDb::new().await;
    // Host `slow` answers each request after 400 ms, longer than the 300 ms politeness: the
    // host's one-fetch-at-a-time limit binds. Host `fast` answers at once: its rate binds.
    let slow_pages: Vec<(String, Page)> = (0..6)
        .map(|i| {
            let mut p = html(&format!("P{i}"), &[]);
            p.delay = Duration::from_millis(400);
            (format!("/p{i}"), p)
        })
        .collect();
    let fast_pages: Vec<(String, Page)> = (0..6)
        .map(|i| (format!("/p{i}"), html(&format!("P{i}"), &[])))
        .collect();
    let mut slow_all = page_refs(&slow_pages);
    // Its robots.txt (none: 404) is slow too.
    slow_all.push((
        "/robots.txt",
        Page {
            status: 404,
            delay: Duration::from_millis(400),
            ..Page::default()
        },
    ));
    let slow = Server::start(&slow_all).await;
    let fast = Server::start(&page_refs(&fast_pages)).await;
    for (p, _) in &slow_pages {
        request(&db.pool, &slow.url(p), false, false).await;
        request(&db.pool, &fast.url(p), false, false).await;
    }
    let env = [
        ("SKIPLOCK_POLITENESS", "300ms"),
        ("SKIPLOCK_FETCH_ALLOW_PRIVATE", "true"),
        ("SKIPLOCK_SCHEDULES", "/nonexistent/schedules.toml"),
        ("SKIPLOCK_POLL_INTERVAL", "50ms"),
    ];
    let mut a = spawn_worker_process(&db.url, &["--queues", "fetch=4"], &env);
    let mut b = spawn_worker_process(&db.url, &["--queues", "fetch=4"], &env);
    wait_for("all 12 pages fetched", Duration::from_secs(60), || async {
        let n = count(
            &db.pool,
            "SELECT count(*) FROM skiplock.pages WHERE http_status = 200",
        )
        .await;
        (n == 12).then_some(())
    })
    .await;
    sigterm(&a);
    sigterm(&b);
    let _ = a.wait();
    let _ = b.wait();
    for srv in [&slow, &fast] {
        assert_eq!(srv.times().len(), 7, "robots.txt and 6 pages, each once");
    }
    // Never two requests in flight at one host, whatever its answers take: so the requests
    // to the slow host arrive at least 300 ms apart (each one only after the previous
    // answer, which takes 400 ms).
    assert_eq!(
        slow.site.in_flight.lock().unwrap().1,
        1,
        "one request at a time"
    );
    let mut t = slow.times();
    t.sort();
    for w in t.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap >= Duration::from_millis(300),
            "requests to {} only {gap:?} apart",
            slow.host
        );
    }
    // Start to start: the fetches of one host start at least 300 ms apart on the database's
    // clock (a fetch's start is its claim, recorded as attempted_at; the request leaves
    // right after it).
    for srv in [&slow, &fast] {
        let close: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (
                 SELECT lead(attempted_at) OVER (ORDER BY attempted_at) - attempted_at AS gap
                 FROM skiplock.jobs WHERE kind = 'fetch' AND limit_key = $1) g
             WHERE g.gap < interval '300 ms'",
        )
        .bind(&srv.host)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(close, 0, "starts of {} closer than 300 ms", srv.host);
    }
    // Waiting costs no attempts: every job completed on its first attempt.
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM skiplock.jobs WHERE kind = 'fetch' AND state = 'completed' AND attempt = 1").await,
        12
    );
}

#[tokio::test]
async fn robots_txt_disallow_is_honoured() {
    let db = TestDb::new().await;
    let robots = Page {
        status: 200,
        body: "User-agent: *\nDisallow: /private\n".into(),
        content_type: "text/plain",
        ..Page::default()
    };
    let srv = Server::start(&[
        ("/robots.txt", robots),
        ("/private/x", html("X", &[])),
        ("/public", html("P", &[])),
    ])
    .await;
    let w = start(&db.pool, settings(Schedule::default(), 20));
    let (state, r, _) = finished(
        &db.pool,
        request(&db.pool, &srv.url("/private/x"), true, false).await,
    )
    .await;
    assert_eq!(state, "completed");
    assert_eq!(r["skipped"], "disallowed by robots.txt");
    assert_eq!(srv.hits("/private/x"), 0);
    assert_eq!(
        page_field(&db.pool, &srv.url("/private/x"), "note")
            .await
            .as_deref(),
        Some("disallowed by robots.txt")
    );
    let (_, r, _) = finished(
        &db.pool,
        request(&db.pool, &srv.url("/public"), false, false).await,
    )
    .await;
    assert_eq!(r["fetched"], true, "{r}");
    assert_eq!(srv.hits("/public"), 1);
    assert_eq!(srv.hits("/robots.txt"), 1);
    w.stop().await.unwrap();
}

#[tokio::test]
async fn not_modified_moves_only_the_dates() {
    let db = TestDb::new().await;
    let mut page = html("Tagged", &[]);
    page.etag = Some("\"v1\"");
    let srv = Server::start(&[("/t", page)]).await;
    let w = start(&db.pool, settings(Schedule::default(), 20));
    let url = srv.url("/t");
    finished(&db.pool, request(&db.pool, &url, false, false).await).await;
    let first = page_field(&db.pool, &url, "last_fetched").await.unwrap();
    assert_eq!(
        page_field(&db.pool, &url, "etag").await.as_deref(),
        Some("\"v1\"")
    );
    let (_, r, _) = finished(&db.pool, request(&db.pool, &url, true, false).await).await;
    assert_eq!(r["status"], 304, "{r}");
    let log = srv.site.log.lock().unwrap().clone();
    assert_eq!(
        log.last().unwrap().2.as_deref(),
        Some("\"v1\""),
        "conditional GET sends the ETag"
    );
    drop(log);
    assert_ne!(
        page_field(&db.pool, &url, "last_fetched").await.unwrap(),
        first
    );
    assert_eq!(
        page_field(&db.pool, &url, "title").await.as_deref(),
        Some("Tagged")
    );
    assert_eq!(
        page_field(&db.pool, &url, "http_status").await.as_deref(),
        Some("200")
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE kind = 'timer-reset'"
        )
        .await,
        1
    );
    w.stop().await.unwrap();
}

#[tokio::test]
async fn server_errors_are_retried_client_errors_are_not() {
    let db = TestDb::new().await;
    let mut flaky = html("Flaky", &[]);
    flaky.fail_first = 2;
    let srv = Server::start(&[("/flaky", flaky)]).await;
    let w = start(&db.pool, settings(Schedule::default(), 20));
    let (state, r, errors) = finished(
        &db.pool,
        request(&db.pool, &srv.url("/flaky"), false, false).await,
    )
    .await;
    assert_eq!(state, "completed", "{r}");
    assert_eq!(errors.as_array().unwrap().len(), 2, "{errors}");
    assert!(
        errors[0]["error"].as_str().unwrap().contains("HTTP 500"),
        "{errors}"
    );
    assert_eq!(srv.hits("/flaky"), 3);
    assert_eq!(
        page_field(&db.pool, &srv.url("/flaky"), "title")
            .await
            .as_deref(),
        Some("Flaky")
    );

    let (state, r, errors) = finished(
        &db.pool,
        request(&db.pool, &srv.url("/missing"), false, false).await,
    )
    .await;
    assert_eq!(state, "completed", "{r}");
    assert_eq!(r["status"], 404);
    assert_eq!(errors.as_array().unwrap().len(), 0);
    assert_eq!(srv.hits("/missing"), 1);
    assert_eq!(
        page_field(&db.pool, &srv.url("/missing"), "http_status")
            .await
            .as_deref(),
        Some("404")
    );
    w.stop().await.unwrap();
}

#[tokio::test]
async fn internal_addresses_are_refused_unless_allowed() {
    let db = TestDb::new().await;
    let srv = Server::start(&[("/", html("Home", &[]))]).await;
    let w = start(
        &db.pool,
        FetchSettings::new(Schedule::default(), Duration::from_millis(20), false),
    );
    // A literal loopback address, and a name that resolves to one.
    let port = srv.host.rsplit(':').next().unwrap();
    for url in [srv.url("/"), format!("http://localhost:{port}/")] {
        let (state, _, errors) =
            finished(&db.pool, request(&db.pool, &url, false, false).await).await;
        assert_eq!(state, "discarded", "{url}");
        let e = errors[0]["error"].as_str().unwrap();
        assert!(e.contains("internal address"), "{e}");
    }
    assert_eq!(srv.site.log.lock().unwrap().len(), 0);
    w.stop().await.unwrap();
}

#[tokio::test]
async fn invalid_urls_are_refused_by_sql_and_cli_and_requests_are_deduplicated() {
    let db = TestDb::new().await;
    for (url, msg) in [
        ("ftp://example.com/x", "only http and https"),
        ("http://", "has no host"),
        ("not a url", "invalid URL"),
    ] {
        let e = sqlx::query_scalar::<_, i64>("SELECT skiplock.request_fetch($1)")
            .bind(url)
            .fetch_one(&db.pool)
            .await
            .unwrap_err();
        assert!(e.to_string().contains(msg), "SQL {url}: {e}");
        let (code, _, err) = run_cmd(&db.url, &["fetch", url]);
        assert_eq!(code, 1, "CLI {url}: {err}");
        assert!(
            err.contains("invalid URL") && err.trim().lines().count() == 1,
            "CLI {url}: {err}"
        );
    }
    // One pending job per URL, however the URL is spelled.
    let a = request(&db.pool, "HTTP://Example.com:80/x#top", false, false).await;
    let b = request(&db.pool, "http://example.com/x", true, false).await;
    assert_eq!(a, b);
    let (code, out, err) = run_cmd(&db.url, &["fetch", "http://example.com/x"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), a.to_string());
    // The merged request kept the hall pass.
    let force: bool =
        sqlx::query_scalar("SELECT (args->>'force')::boolean FROM skiplock.jobs WHERE id = $1")
            .bind(a)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(force);
    // The allow list is checked by the CLI.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.toml");
    std::fs::write(&file, "allow = [\"example.com\"]\n").unwrap();
    let out = cmd(&db.url)
        .args(["fetch", "http://other.org/"])
        .env("SKIPLOCK_SCHEDULES", &file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not allowed"));
}

#[tokio::test]
async fn a_long_line_for_one_host_leaves_the_workers_free() {
    let db = TestDb::new().await;
    let pages: Vec<(String, Page)> = (0..20)
        .map(|i| (format!("/p{i}"), html(&format!("P{i}"), &[])))
        .collect();
    let refs: Vec<(&str, Page)> = pages
        .iter()
        .map(|(p, pg)| (p.as_str(), pg.clone()))
        .collect();
    let busy = Server::start(&refs).await;
    let other = Server::start(&[("/", html("Other", &[]))]).await;
    for (p, _) in &pages {
        request(&db.pool, &busy.url(p), false, false).await;
    }
    // Two worker slots only; the busy host needs at least 20 × 1 s for its line, far longer
    // than any stall of this machine.
    let mut qs = fast_settings();
    qs.queues = Some([("fetch".to_string(), 2)].into());
    let s = settings(Schedule::default(), 1000);
    let w = start_worker(&db.pool, qs, |b| fetch::register_with(b, s).unwrap());
    wait_for(
        "the busy host's first page",
        Duration::from_secs(60),
        || async { (busy.hits("/p0") + busy.hits("/p1") > 0).then_some(()) },
    )
    .await;
    let id = request(&db.pool, &other.url("/"), false, false).await;
    let (state, r, _) = finished(&db.pool, id).await;
    assert_eq!(state, "completed", "{r}");
    assert_eq!(other.hits("/"), 1);
    let done = busy.site.log.lock().unwrap().len();
    assert!(
        done < 21,
        "the other host waited behind the whole line ({done} requests)"
    );
    // The waiting pages were never claimed (the host's rate limit holds them back at claim
    // time): they hold no worker slot and spent no attempt; at most one runs at a time.
    let host = busy.host.clone();
    let (waiting, unclaimed, running, keyed): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE state <> 'completed'),
                count(*) FILTER (WHERE state = 'available' AND attempt = 0),
                count(*) FILTER (WHERE state = 'running'),
                count(*) FILTER (WHERE limit_key = $1)
         FROM skiplock.jobs WHERE kind = 'fetch' AND args->>'url' LIKE 'http://' || $1 || '/%'",
    )
    .bind(&host)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(waiting > 0, "the line was still waiting");
    assert!(
        running <= 1,
        "{running} fetches of one host running at once"
    );
    assert_eq!(
        unclaimed,
        waiting - running,
        "every waiting page is unclaimed, with no attempt spent"
    );
    assert_eq!(
        keyed, 20,
        "every page of the host carries the host as limit_key"
    );
    w.stop().await.unwrap();
}

fn redirect(to: &'static str) -> Page {
    Page {
        status: 301,
        location: Some(to),
        content_type: "text/html",
        ..Page::default()
    }
}

#[tokio::test]
async fn redirects_are_fetches_of_their_own_up_to_the_limit() {
    let db = TestDb::new().await;
    let srv = Server::start(&[
        ("/old", redirect("/new")),
        ("/new", html("New", &[])),
        ("/ping", redirect("/pong")),
        ("/pong", redirect("/ping")),
        ("/away", redirect("http://other.invalid/")),
    ])
    .await;
    let w = start(&db.pool, settings(Schedule::default(), 20));
    request(&db.pool, &srv.url("/old"), false, false).await;
    // A redirect loop, forced so every hop is fetched: stopped by the hop limit (5).
    request(&db.pool, &srv.url("/ping"), true, false).await;
    request(&db.pool, &srv.url("/away"), false, false).await;
    fetches_finished(&db.pool).await;
    assert_eq!(srv.hits("/new"), 1);
    assert_eq!(
        page_field(&db.pool, &srv.url("/new"), "title")
            .await
            .as_deref(),
        Some("New")
    );
    let note = page_field(&db.pool, &srv.url("/old"), "note")
        .await
        .unwrap();
    assert!(
        note.contains("redirects to") && note.contains("/new"),
        "{note}"
    );
    assert_eq!(
        srv.hits("/ping") + srv.hits("/pong"),
        6,
        "the original request and 5 hops"
    );
    let notes = count(
        &db.pool,
        "SELECT count(*) FROM skiplock.pages WHERE note LIKE '%redirect limit (5) reached'",
    )
    .await;
    assert_eq!(notes, 1);
    let away = page_field(&db.pool, &srv.url("/away"), "note")
        .await
        .unwrap();
    assert!(away.contains("another host; not followed"), "{away}");
    w.stop().await.unwrap();
}

#[tokio::test]
async fn sql_and_worker_normalise_urls_alike() {
    let db = TestDb::new().await;
    for raw in [
        "http://Example.COM",
        "http://example.com:80/a/../b",
        "https://example.com:443/a/./b/",
        "http://example.com/a/b/..",
        "http://example.com/./",
        "http://example.com/../../x?q=1#frag",
        "http://example.com:8080/a/b/../../c/./d.html?x=y",
    ] {
        let sql: String = sqlx::query_scalar("SELECT skiplock._normalize_url($1)")
            .bind(raw)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        let rust = skiplock_workflows::fetch::normalize::normalize(raw).unwrap();
        assert_eq!(sql, rust.as_str(), "{raw}");
    }
    // The host key the fetch queue's rate limit counts under (limit_key, set by SQL) is the
    // worker's host_key.
    for raw in [
        "http://Example.COM/a",
        "https://example.com:443/x",
        "https://EXAMPLE.com:8443",
        "http://example.com:80/a/../b",
        "http://127.0.0.1:3000/a?b=c",
        "http://[::1]:8080/x",
        "http://[::1]/",
        "http://a.b.example.org:65535/?q#f",
    ] {
        let sql: String =
            sqlx::query_scalar("SELECT skiplock._url_host_key(skiplock._normalize_url($1))")
                .bind(raw)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        let rust = skiplock_workflows::fetch::normalize::host_key(
            &skiplock_workflows::fetch::normalize::normalize(raw).unwrap(),
        );
        assert_eq!(sql, rust, "{raw}");
        let id: i64 = sqlx::query_scalar("SELECT skiplock.request_fetch($1)")
            .bind(raw)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        let key: Option<String> =
            sqlx::query_scalar("SELECT limit_key FROM skiplock.jobs WHERE id = $1")
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(key.as_deref(), Some(rust.as_str()), "{raw}");
    }
    // So the SQL function and the CLI find the same pending job.
    let a: i64 = sqlx::query_scalar("SELECT skiplock.request_fetch('http://example.com/a/../b')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let (code, out, err) = run_cmd(&db.url, &["fetch", "http://example.com/b"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), a.to_string());
}

/// A fetch job that is not where the per-host politeness applies to it (another queue, or a
/// limit_key other than its URL's host key, or none) is discarded with the reason and never
/// fetched: only a trusted role can write one (skiplock.enqueue refuses kind `fetch`), and
/// without this check ten of them fetched one host ten times in a second. And a page with one
/// link over the URL cap still has its other links requested (without the guard its fetch
/// failed on every attempt on the crawl's index).
#[tokio::test]
async fn a_fetch_job_outside_its_hosts_politeness_is_discarded_and_an_overlong_link_skipped() {
    let db = TestDb::new().await;
    let long = format!("/{}", "x".repeat(3000));
    let srv = Server::start(&[
        ("/", html("Home", &[long.as_str(), "/a"])),
        ("/a", html("A", &[])),
    ])
    .await;
    let w = start(&db.pool, settings(Schedule::default(), 20));
    let url = srv.url("/");
    let mut misplaced = Vec::new();
    for (queue, key) in [
        ("fetch", Some("wrong.example")),
        ("fetch", None),
        ("default", Some(srv.host.as_str())),
    ] {
        let id: i64 = sqlx::query_scalar(
            "SELECT skiplock._enqueue('fetch', jsonb_build_object('url', $1::text, 'force', true), $2, now(), 0::smallint, 1, NULL, 'keep', $3)",
        )
        .bind(&url)
        .bind(queue)
        .bind(key)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        misplaced.push(id);
    }
    for id in misplaced {
        let (state, _, errors) = finished(&db.pool, id).await;
        assert_eq!(state, "discarded", "{errors}");
        assert!(
            errors.to_string().contains("per-host politeness"),
            "{errors}"
        );
    }
    assert_eq!(srv.times().len(), 0, "nothing was fetched");

    let root = request(&db.pool, &url, false, true).await;
    let (state, result, errors) = finished(&db.pool, root).await;
    assert_eq!(state, "completed", "{errors}");
    assert_eq!(result["fetched"], true, "{result}");
    fetches_finished(&db.pool).await;
    assert_eq!(srv.hits("/a"), 1);
    assert_eq!(srv.hits(&long), 0);
    w.stop().await.unwrap();
}

//! The fetch workflow's guards against a real Postgres and a local HTTP server: addresses
//! that are not globally routable are refused (including those that only embed a loopback
//! or private IPv4 address: NAT64, 6to4, IPv4-compatible and -mapped; and names that resolve
//! to loopback), and the limits hold: the body cap, the request timeout, the allow list for
//! a request made from SQL.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::IntoResponse;
use serde_json::Value;
use skiplock_workflows::fetch::schedule::Schedule;
use skiplock_workflows::fetch::{self, FetchSettings};
use sqlx::PgPool;
use support::*;

const LIMIT: Duration = Duration::from_secs(60);

/// A server answering every path with `body` (text/plain), or never answering when `hang`;
/// it counts the requests it got.
struct Server {
    host: String,
    hits: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct App {
    hits: Arc<AtomicUsize>,
    body: Arc<String>,
    hang: bool,
}

async fn serve(State(app): State<App>) -> axum::response::Response {
    app.hits.fetch_add(1, Ordering::SeqCst);
    if app.hang {
        // Never answers: only the client's timeout ends this request.
        std::future::pending::<()>().await;
    }
    (
        [(axum::http::header::CONTENT_TYPE, "text/plain")],
        app.body.as_str().to_string(),
    )
        .into_response()
}

impl Server {
    async fn start(body: String, hang: bool) -> Server {
        let hits = Arc::new(AtomicUsize::new(0));
        let app = Router::new().fallback(serve).with_state(App {
            hits: hits.clone(),
            body: Arc::new(body),
            hang,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Server { host, hits }
    }

    fn port(&self) -> &str {
        self.host.rsplit(':').next().unwrap()
    }
}

fn start(pool: &PgPool, s: FetchSettings) -> RunningWorker {
    start_worker(pool, fast_settings(), |b| {
        fetch::register_with(b, s).expect("register fetch")
    })
}

async fn request(pool: &PgPool, url: &str) -> i64 {
    sqlx::query_scalar("SELECT skiplock.request_fetch($1, true)")
        .bind(url)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("request_fetch({url}): {e}"))
}

/// Waits until job `id` is finished; returns (state, result, errors).
async fn finished(pool: &PgPool, id: i64) -> (String, Value, Value) {
    wait_for(&format!("fetch job {id} to finish"), LIMIT, || async move {
        let row: (String, Option<Value>, Value) =
            sqlx::query_as("SELECT state::text, result, errors FROM skiplock.jobs WHERE id = $1")
                .bind(id)
                .fetch_one(pool)
                .await
                .unwrap();
        (row.0 != "available" && row.0 != "running")
            .then(|| (row.0, row.1.unwrap_or(Value::Null), row.2))
    })
    .await
}

/// Names /etc/hosts maps to a loopback address, besides `localhost` (always tested).
fn loopback_names_in_etc_hosts() -> Vec<String> {
    let text = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let mut names = vec!["localhost".to_string()];
    for line in text.lines() {
        let mut words = line.split('#').next().unwrap_or("").split_whitespace();
        let Some(Ok(ip)) = words.next().map(str::parse::<std::net::IpAddr>) else {
            continue;
        };
        if ip.is_loopback() {
            for w in words {
                if !names.iter().any(|n| n.eq_ignore_ascii_case(w)) && !w.contains(':') {
                    names.push(w.to_string());
                }
            }
        }
    }
    names
}

#[tokio::test]
async fn addresses_embedding_loopback_or_reserved_ranges_are_refused_without_a_request() {
    let db = workflows_db().await;
    let srv = Server::start("hello".into(), false).await;
    let mut s = FetchSettings::new(Schedule::default(), Duration::ZERO, false);
    // Were the guard to let one through, the attempt would fail fast, not hang.
    s.timeout = Duration::from_secs(3);
    let w = start(&db.pool, s);
    let port = srv.port();
    let mut urls: Vec<String> = [
        "127.0.0.1",
        "[::ffff:127.0.0.1]",
        "[::127.0.0.1]",
        "[64:ff9b::7f00:1]",
        "[64:ff9b::a9fe:a9fe]",
        "[64:ff9b:1::7f00:1]",
        "[2002:7f00:1::1]",
        "[2001:db8::1]",
        "[fec0::1]",
        "198.18.0.1",
        "192.0.0.8",
        "240.0.0.1",
        "100.64.0.1",
        "0.0.0.0",
    ]
    .iter()
    .map(|h| format!("http://{h}:{port}/"))
    .collect();
    let names = loopback_names_in_etc_hosts();
    urls.extend(names.iter().map(|n| format!("http://{n}:{port}/")));
    for url in &urls {
        let (state, _, errors) = finished(&db.pool, request(&db.pool, url).await).await;
        assert_eq!(state, "discarded", "{url}: {errors}");
        assert_eq!(
            errors.as_array().unwrap().len(),
            1,
            "{url}: refused at once"
        );
        let e = errors[0]["error"].as_str().unwrap();
        assert!(
            e.contains("internal address") && e.contains("SKIPLOCK_FETCH_ALLOW_PRIVATE"),
            "{url}: {e}"
        );
    }
    assert_eq!(srv.hits.load(Ordering::SeqCst), 0, "no request reached it");
    w.stop().await.unwrap();
}

#[tokio::test]
async fn a_body_past_the_cap_is_cut_and_the_page_says_so() {
    let db = workflows_db().await;
    let srv = Server::start("x".repeat(100_000), false).await;
    let mut s = FetchSettings::new(Schedule::default(), Duration::ZERO, true);
    s.max_bytes = 1000;
    let w = start(&db.pool, s);
    let url = format!("http://{}/big", srv.host);
    let (state, r, _) = finished(&db.pool, request(&db.pool, &url).await).await;
    assert_eq!(state, "completed", "{r}");
    let (len, note): (i32, Option<String>) =
        sqlx::query_as("SELECT length(body), note FROM skiplock.pages WHERE url = $1")
            .bind(&url)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(len, 1000);
    assert_eq!(note.as_deref(), Some("body cut at 1000 bytes"));
    w.stop().await.unwrap();
}

#[tokio::test]
async fn a_server_that_never_answers_is_cut_off_by_the_request_timeout_and_retried() {
    let db = workflows_db().await;
    let srv = Server::start(String::new(), true).await;
    let mut s = FetchSettings::new(Schedule::default(), Duration::ZERO, true);
    s.timeout = Duration::from_secs(1);
    let w = start(&db.pool, s);
    let url = format!("http://{}/slow", srv.host);
    let id = request(&db.pool, &url).await;
    // The server never answers (until the test ends), so only the timeout can end the try.
    let errors: Value = wait_for("the first timed-out attempt", LIMIT, || async {
        let (state, errors): (String, Value) =
            sqlx::query_as("SELECT state::text, errors FROM skiplock.jobs WHERE id = $1")
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        (!errors.as_array().unwrap().is_empty() && state != "discarded").then_some(errors)
    })
    .await;
    let e = errors[0]["error"].as_str().unwrap();
    assert!(e.contains("timed out"), "{e}");
    assert!(srv.hits.load(Ordering::SeqCst) >= 1);
    w.stop().await.unwrap();
}

#[tokio::test]
async fn a_request_from_sql_for_a_host_outside_the_allow_list_is_discarded_unfetched() {
    let db = workflows_db().await;
    let srv = Server::start("hello".into(), false).await;
    let schedule = Schedule::parse("allow = [\"example.com\"]\n").unwrap();
    // Private addresses allowed, so only the allow list can refuse this host.
    let w = start(&db.pool, FetchSettings::new(schedule, Duration::ZERO, true));
    let url = format!("http://{}/", srv.host);
    // SQL cannot see the schedule file: the request is accepted...
    let id = request(&db.pool, &url).await;
    // ...and the worker discards it, without a request.
    let (state, _, errors) = finished(&db.pool, id).await;
    assert_eq!(state, "discarded");
    let e = errors[0]["error"].as_str().unwrap();
    assert_eq!(
        e,
        format!(
            "host {} is not allowed by the schedule file's allow list",
            srv.host
        )
    );
    assert_eq!(srv.hits.load(Ordering::SeqCst), 0);
    w.stop().await.unwrap();
}

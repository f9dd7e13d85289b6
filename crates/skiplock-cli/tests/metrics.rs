//! `/metrics` in Prometheus text format: a real `skiplock worker` process with
//! `SKIPLOCK_METRICS_LISTEN` runs jobs (some failing), a real `skiplock web` console serves
//! the database's view, and both scrapes are parsed with a Prometheus text parser and
//! checked series by series against what ran and what the database holds.

mod support;

use std::process::Stdio;
use std::time::Duration;

use prometheus_parse::{Sample, Scrape, Value};
use support::*;

const LIMIT: Duration = Duration::from_secs(90);
const TOKEN: &str = "metrics-test-token-0123456789";

/// Checks the text is well-formed exposition format beyond what the (lenient) parser
/// enforces: every sample line is `name{labels} value` with a valid name and a number, and
/// every sample belongs to a family declared with `# TYPE`.
fn check_format(text: &str) {
    let mut typed: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let name = parts.next().unwrap();
            let kind = parts.next().unwrap_or("");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "bad TYPE line {line:?}"
            );
            typed.push(name.to_string());
            continue;
        }
        if line.starts_with('#') {
            assert!(line.starts_with("# HELP "), "unknown comment {line:?}");
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
        let name = series.split('{').next().unwrap();
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                && !name.starts_with(|c: char| c.is_ascii_digit()),
            "bad metric name in {line:?}"
        );
        if series.contains('{') {
            assert!(series.ends_with('}'), "unclosed labels in {line:?}");
        }
        assert!(
            value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value),
            "bad value in {line:?}"
        );
        let family = typed.iter().any(|t| {
            name == t
                || name
                    .strip_prefix(t.as_str())
                    .is_some_and(|s| ["_bucket", "_sum", "_count"].contains(&s))
        });
        assert!(family, "sample without a # TYPE line: {line:?}");
        assert!(name.starts_with("skiplock_"), "unprefixed series {line:?}");
    }
}

/// Parses a scrape (after [`check_format`]).
fn parse(text: &str) -> Vec<Sample> {
    check_format(text);
    Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("valid Prometheus text")
        .samples
}

/// The value of the one sample `name` with exactly these `labels` (a subset match would
/// hide a wrong label), or `None`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<f64> = samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| {
            labels.len() == s.labels.iter().count()
                && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
        })
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            other => panic!("{name} is not a plain value: {other:?}"),
        })
        .collect();
    assert!(found.len() <= 1, "{name} {labels:?} appears twice");
    found.first().copied()
}

/// Total observations of the histogram `name` with `labels` (its `_count`).
fn observations(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    value(samples, &format!("{name}_count"), labels).unwrap_or(0.0)
}

async fn get(client: &reqwest::Client, url: &str, bearer: Option<&str>) -> (u16, String) {
    let mut r = client.get(url);
    if let Some(t) = bearer {
        r = r.bearer_auth(t);
    }
    let resp = r.send().await.expect("scrape");
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.text().await.unwrap();
    if status == 200 {
        assert!(ctype.starts_with("text/plain"), "content type {ctype}");
    }
    (status, body)
}

async fn enqueue(db: &TestDb, kind: &str, queue: &str, max_attempts: i32) -> i64 {
    sqlx::query_scalar("SELECT skiplock.enqueue($1, '{}', $2, max_attempts => $3)")
        .bind(kind)
        .bind(queue)
        .bind(max_attempts)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_and_console_metrics_count_what_ran_and_what_waits() {
    let db = TestDb::new().await;
    for _ in 0..5 {
        enqueue(&db, "noop", "alpha", 25).await;
    }
    // One failure that is discarded at once, one that is retried (an hour later: it stays
    // scheduled for the whole test).
    let discarded = enqueue(&db, "fail", "alpha", 1).await;
    let retried = enqueue(&db, "fail", "alpha", 3).await;
    // A queue no worker serves: its jobs wait.
    for _ in 0..3 {
        enqueue(&db, "noop", "parked", 25).await;
    }
    let packet: i64 = sqlx::query_scalar("SELECT skiplock.submit_packet('/srv/packets/m1', 'm1')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(packet > 0);

    let mut c = cmd(&db.url);
    c.args(["worker", "--queues", "alpha=4"])
        .env("SKIPLOCK_METRICS_LISTEN", "127.0.0.1:0")
        .env("SKIPLOCK_BACKOFF_UNIT", "1h")
        .env("SKIPLOCK_POLL_INTERVAL", "200ms");
    let worker = Served::start(c, LIMIT);
    let http = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
    let worker_url = format!("{}/metrics", worker.base);

    // The counters move right after each ack is written: wait on the scrape itself.
    let completed = &[
        ("kind", "noop"),
        ("queue", "alpha"),
        ("outcome", "completed"),
    ];
    let samples = wait_for(
        "the worker to count 5 completed and 2 failed attempts",
        LIMIT,
        || async {
            // Pacing only (wait_for polls every 20 ms): no timing is asserted.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let (status, body) = get(&http, &worker_url, None).await;
            assert_eq!(status, 200, "{body}");
            let s = parse(&body);
            let done = value(&s, "skiplock_jobs_finished_total", completed) == Some(5.0);
            let failed =
                observations(&s, "skiplock_job_duration_seconds", &[("kind", "fail")]) == 2.0;
            (done && failed).then_some(s)
        },
    )
    .await;
    let finished = |kind: &str, outcome: &str| {
        value(
            &samples,
            "skiplock_jobs_finished_total",
            &[("kind", kind), ("queue", "alpha"), ("outcome", outcome)],
        )
        .unwrap_or_else(|| panic!("no {kind}/{outcome} series"))
    };
    assert_eq!(finished("noop", "completed"), 5.0);
    assert_eq!(finished("noop", "retried"), 0.0);
    assert_eq!(finished("noop", "lost"), 0.0);
    assert_eq!(finished("fail", "discarded"), 1.0);
    assert_eq!(finished("fail", "retried"), 1.0);
    assert_eq!(finished("fail", "completed"), 0.0);
    // The database agrees with the counters.
    assert_eq!(
        wait_job(&db.pool, discarded, "discarded", |r| r.state.as_str()
            == "discarded")
        .await
        .attempt,
        1
    );
    let r = wait_job(&db.pool, retried, "retried later", |r| {
        r.state.as_str() == "available"
    })
    .await;
    assert_eq!(r.attempt, 1);
    // Durations: one observation per attempt, by kind.
    assert_eq!(
        observations(
            &samples,
            "skiplock_job_duration_seconds",
            &[("kind", "noop")]
        ),
        5.0
    );
    assert_eq!(
        observations(
            &samples,
            "skiplock_job_duration_seconds",
            &[("kind", "fail")]
        ),
        2.0
    );
    // Claims and acks: every attempt of this queue was claimed and acked in some batch
    // (maintenance's periodic jobs may add a few).
    let claimed = value(&samples, "skiplock_claim_batch_size_sum", &[]).expect("claim batches");
    let acked = value(&samples, "skiplock_ack_batch_size_sum", &[]).expect("ack batches");
    assert!(claimed >= 7.0, "claimed {claimed}");
    assert!(acked >= 7.0, "acked {acked}");
    assert!(observations(&samples, "skiplock_ack_batch_size", &[]) >= 1.0);
    // The database's view, read at scrape time.
    assert_eq!(
        value(&samples, "skiplock_metrics_database_up", &[]),
        Some(1.0)
    );
    let depth = |s: &[Sample], q: &str, state: &str| {
        value(s, "skiplock_queue_depth", &[("queue", q), ("state", state)])
    };
    assert_eq!(depth(&samples, "parked", "available"), Some(3.0));
    assert_eq!(depth(&samples, "parked", "running"), Some(0.0));
    assert_eq!(depth(&samples, "alpha", "scheduled"), Some(1.0));
    assert_eq!(depth(&samples, "alpha", "available"), Some(0.0));
    let oldest = value(
        &samples,
        "skiplock_queue_oldest_wait_seconds",
        &[("queue", "parked")],
    )
    .expect("oldest wait of parked");
    assert!(oldest >= 0.0);
    let packets: f64 = samples
        .iter()
        .filter(|s| s.metric == "skiplock_packets")
        .map(|s| match s.value {
            Value::Gauge(v) => v,
            _ => panic!("skiplock_packets is a gauge"),
        })
        .sum();
    assert_eq!(packets, 1.0, "one packet, in whatever state");

    assert_eq!(
        value(&samples, "skiplock_queue_paused", &[("queue", "parked")]),
        Some(0.0)
    );

    // Queue control: a paused queue and its limits (a queue with no jobs, so nothing above
    // changes).
    skiplock::store::control::pause(&db.pool, "frozen")
        .await
        .unwrap();
    skiplock::store::control::set_queue_limit(&db.pool, "frozen", Some(3))
        .await
        .unwrap();
    skiplock::store::control::set_key_limit(
        &db.pool,
        "frozen",
        skiplock::store::control::KeyLimit {
            concurrency: None,
            rate: Some(skiplock::store::control::Rate {
                count: 2,
                period: Duration::from_secs(1),
            }),
        },
    )
    .await
    .unwrap();

    // The console: the same database view, no worker counters, behind the console's auth.
    let op = Operator::new(&db).await;
    let mut c = cmd(&op.url);
    c.args(["web", "--listen", "127.0.0.1:0"])
        .env_remove("SKIPLOCK_WEB_TOKEN")
        .env_remove("SKIPLOCK_WEB_LISTEN");
    let console = Served::start(c, LIMIT);
    let (status, body) = get(&http, &format!("{}/metrics", console.base), None).await;
    assert_eq!(status, 200, "{body}");
    let s = parse(&body);
    assert_eq!(value(&s, "skiplock_metrics_database_up", &[]), Some(1.0));
    assert_eq!(depth(&s, "parked", "available"), Some(3.0));
    assert_eq!(depth(&s, "alpha", "scheduled"), Some(1.0));
    let limit = |s: &[Sample], q: &str, l: &str| {
        value(s, "skiplock_queue_limit", &[("queue", q), ("limit", l)])
    };
    assert_eq!(
        value(&s, "skiplock_queue_paused", &[("queue", "frozen")]),
        Some(1.0)
    );
    assert_eq!(
        value(&s, "skiplock_queue_paused", &[("queue", "parked")]),
        Some(0.0)
    );
    assert_eq!(limit(&s, "frozen", "concurrency"), Some(3.0));
    assert_eq!(limit(&s, "frozen", "key_starts_per_second"), Some(2.0));
    assert_eq!(limit(&s, "frozen", "key_concurrency"), None);
    assert_eq!(limit(&s, "parked", "concurrency"), None);
    assert!(
        !s.iter()
            .any(|x| x.metric.starts_with("skiplock_jobs_finished"))
    );
    drop(console);

    // With a token (non-loopback), a scrape needs `Authorization: Bearer <token>`.
    let mut c = cmd(&op.url);
    c.args(["web", "--listen", "0.0.0.0:0"])
        .env("SKIPLOCK_WEB_TOKEN", TOKEN)
        .env_remove("SKIPLOCK_WEB_LISTEN");
    let console = Served::start(c, LIMIT);
    let url = format!("{}/metrics", console.base);
    let (status, body) = get(&http, &url, None).await;
    assert_eq!(status, 401);
    assert!(!body.contains("skiplock_queue_depth"));
    let (status, _) = get(&http, &url, Some("not-the-token-at-all")).await;
    assert_eq!(status, 401);
    let (status, body) = get(&http, &url, Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(depth(&parse(&body), "parked", "available"), Some(3.0));

    sigterm(&worker.child);
}

#[test]
fn a_non_loopback_metrics_address_is_refused_without_the_setting() {
    // Refused before the database is contacted: no database needed.
    let (code, _out, err) = {
        let out = cmd("postgres://nobody@127.0.0.1:1/none")
            .args(["worker"])
            .env("SKIPLOCK_METRICS_LISTEN", "0.0.0.0:0")
            .env_remove("SKIPLOCK_METRICS_ALLOW_REMOTE")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_ne!(code, 0);
    assert!(err.contains("SKIPLOCK_METRICS_ALLOW_REMOTE"), "{err}");
    // A malformed address is a clear error too, never a panic.
    let out = cmd("postgres://nobody@127.0.0.1:1/none")
        .args(["worker"])
        .env("SKIPLOCK_METRICS_LISTEN", "not an address")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(err.contains("SKIPLOCK_METRICS_LISTEN"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescues_and_lost_acks_are_counted() {
    let db = TestDb::new().await;
    // A worker that dies holding a job (one attempt: the rescue discards it).
    let victim: i64 = sqlx::query_scalar(
        "SELECT skiplock.enqueue('sleep', '{\"ms\": 600000}', 'victim', max_attempts => 1)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let mut dying = spawn_worker_process(&db.url, &["--queues", "victim=1"], &[]);
    wait_job(&db.pool, victim, "the victim job running", |r| {
        r.state.as_str() == "running"
    })
    .await;
    sigkill(&dying);
    let _ = dying.wait();

    // The scraped worker serves another queue; its rescuer returns the dead worker's job.
    let mut c = cmd(&db.url);
    c.args(["worker", "--queues", "other=2"])
        .env("SKIPLOCK_METRICS_LISTEN", "127.0.0.1:0")
        .env("SKIPLOCK_RESCUE_AFTER", "1s");
    let worker = Served::start(c, LIMIT);
    let http = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
    let url = format!("{}/metrics", worker.base);
    let scrape = || async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (status, body) = get(&http, &url, None).await;
        assert_eq!(status, 200, "{body}");
        parse(&body)
    };
    let rescued = &[("kind", "sleep"), ("state", "discarded")];
    wait_for("the rescue to be counted", LIMIT, || async {
        (value(&scrape().await, "skiplock_rescued_jobs_total", rescued) == Some(1.0)).then_some(())
    })
    .await;
    let row = wait_job(&db.pool, victim, "the victim discarded", |r| {
        r.state.as_str() == "discarded"
    })
    .await;
    assert_eq!(row.attempt, 1);

    // A job cancelled while it runs: its handler is told, returns, and its ack is fenced off.
    let cancelled: i64 =
        sqlx::query_scalar("SELECT skiplock.enqueue('sleep', '{\"ms\": 600000}', 'other')")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    wait_job(&db.pool, cancelled, "the job running", |r| {
        r.state.as_str() == "running"
    })
    .await;
    sqlx::query("SELECT skiplock.cancel($1)")
        .bind(cancelled)
        .execute(&db.pool)
        .await
        .unwrap();
    let lost = &[("kind", "sleep"), ("queue", "other"), ("outcome", "lost")];
    let s = wait_for(
        "the fenced-off ack to be counted as lost",
        LIMIT,
        || async {
            let s = scrape().await;
            (value(&s, "skiplock_jobs_finished_total", lost) == Some(1.0)).then_some(s)
        },
    )
    .await;
    for outcome in ["completed", "retried", "cancelled", "discarded"] {
        assert_eq!(
            value(
                &s,
                "skiplock_jobs_finished_total",
                &[("kind", "sleep"), ("queue", "other"), ("outcome", outcome)]
            ),
            Some(0.0),
            "{outcome}"
        );
    }
    assert_eq!(state_of(&db, cancelled).await, "cancelled");
    sigterm(&worker.child);
}

/// A site answering `/` with a page, everything else (robots.txt included) with 404; logs
/// the status of every answer.
async fn site() -> (String, std::sync::Arc<std::sync::Mutex<Vec<u16>>>) {
    use axum::extract::{Request, State};
    use axum::response::{IntoResponse, Response};
    type Log = std::sync::Arc<std::sync::Mutex<Vec<u16>>>;
    async fn answer(State(log): State<Log>, req: Request) -> Response {
        let (status, body) = if req.uri().path() == "/" {
            (
                200,
                "<html><head><title>m</title></head><body>metrics</body></html>",
            )
        } else {
            (404, "no")
        };
        log.lock().unwrap().push(status);
        (
            axum::http::StatusCode::from_u16(status).unwrap(),
            [("content-type", "text/html")],
            body,
        )
            .into_response()
    }
    let log: Log = Default::default();
    let app = axum::Router::new().fallback(answer).with_state(log.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("127.0.0.1:{}", addr.port()), log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_by_status_and_packs_are_counted() {
    let db = TestDb::new().await;
    let (host, log) = site().await;
    for path in ["/", "/gone"] {
        sqlx::query("SELECT skiplock.request_fetch($1, force => true)")
            .bind(format!("http://{host}{path}"))
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let store = tempfile::tempdir().unwrap();
    let mut c = cmd(&db.url);
    c.arg("worker")
        .env("SKIPLOCK_METRICS_LISTEN", "127.0.0.1:0")
        .env("SKIPLOCK_FETCH_ALLOW_PRIVATE", "true")
        .env("SKIPLOCK_SCHEDULES", "/nonexistent/schedules.toml")
        .env("SKIPLOCK_POLITENESS", "100ms")
        .env("SKIPLOCK_PACK_QUIET", "500ms")
        .env("SKIPLOCK_STORE", store.path())
        .env("SKIPLOCK_POLL_INTERVAL", "200ms");
    let worker = Served::start(c, LIMIT);
    let http = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
    let url = format!("{}/metrics", worker.base);
    // Both pages fetched (the 404 is recorded, not retried) and a pack written; then the
    // counters equal what the site served and what the database recorded.
    wait_for(
        "both pages fetched, the host packed, and the counters caught up",
        LIMIT,
        || async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let fetched = count(
                &db.pool,
                "SELECT count(*) FROM skiplock.pages WHERE last_fetched IS NOT NULL",
            )
            .await;
            let packs = count(
                &db.pool,
                "SELECT coalesce(sum(pack_count), 0)::bigint FROM skiplock.packs",
            )
            .await;
            let (status, body) = get(&http, &url, None).await;
            assert_eq!(status, 200, "{body}");
            let s = parse(&body);
            let served = log.lock().unwrap().clone();
            let by = |code: u16| served.iter().filter(|c| **c == code).count() as f64;
            let counted = |code: &str| {
                value(&s, "skiplock_fetches_total", &[("status", code)]).unwrap_or(0.0)
            };
            let packs_counted = value(&s, "skiplock_packs_total", &[]).unwrap_or(0.0);
            let ok = fetched == 2
            && packs >= 1
            && counted("200") == by(200)
            && counted("404") == by(404)
            && by(200) >= 1.0
            && by(404) >= 2.0 // /gone and robots.txt
            && packs_counted == packs as f64
            && observations(&s, "skiplock_pack_duration_seconds", &[]) == packs_counted;
            ok.then_some(())
        },
    )
    .await;
    sigterm(&worker.child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_endpoint_answers_only_its_own_names_and_closes_slow_connections() {
    let db = TestDb::new().await;
    enqueue(&db, "noop", "secret-tenant", 1).await;
    let mut c = cmd(&db.url);
    c.args(["worker", "--queues", "elsewhere=1"])
        .env("SKIPLOCK_METRICS_LISTEN", "127.0.0.1:0")
        .env("SKIPLOCK_METRICS_READ_TIMEOUT", "1s")
        .env_remove("SKIPLOCK_METRICS_HOSTS");
    let worker = Served::start(c, LIMIT);
    let port = worker.base.rsplit(':').next().unwrap().to_string();
    let http = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
    let url = format!("{}/metrics", worker.base);
    // A DNS-rebinding page's scrape: refused, no queue name in the answer.
    let r = http
        .get(&url)
        .header("host", format!("rebind.attacker.example:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 421);
    assert!(!r.text().await.unwrap().contains("secret-tenant"));
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let r = http.get(&url).header("host", &host).send().await.unwrap();
        assert_eq!(r.status(), 200, "{host}");
        assert!(r.text().await.unwrap().contains("secret-tenant"));
    }
    // Slowloris: a half-sent request head is closed (generous deadline, no timing asserted).
    let addr = worker.base.trim_start_matches("http://").to_string();
    assert!(
        closes_a_slow_connection(
            &addr,
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a",
            LIMIT
        )
        .await,
        "a half-sent request head kept its connection open"
    );
    sigterm(&worker.child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_queue_series_are_bounded_and_the_rest_added_up() {
    let db = TestDb::new().await;
    // 300 queues with one job each, three with ten, and 40 paused queues without jobs.
    sqlx::query(
        "SELECT skiplock.enqueue('noop', '{}', 'small-' || lpad(g::text, 4, '0'))
         FROM generate_series(1, 300) g",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    for big in ["big-1", "big-2", "big-3"] {
        for _ in 0..10 {
            enqueue(&db, "noop", big, 25).await;
        }
    }
    for i in 0..40 {
        skiplock::store::control::pause(&db.pool, &format!("held-{i:02}"))
            .await
            .unwrap();
    }
    let op = Operator::new(&db).await;
    let mut c = cmd(&op.url);
    c.args(["web", "--listen", "127.0.0.1:0"])
        .env_remove("SKIPLOCK_WEB_TOKEN")
        .env_remove("SKIPLOCK_WEB_LISTEN")
        .env("SKIPLOCK_TOP_QUEUES", "42");
    let console = Served::start(c, LIMIT);
    let http = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
    let (status, body) = get(&http, &format!("{}/metrics", console.base), None).await;
    assert_eq!(status, 200, "{body}");
    let s = parse(&body);
    let series = |name: &str| s.iter().filter(|x| x.metric == name).count();
    // 42 listed: the 40 paused ones first, then the two deepest.
    assert_eq!(series("skiplock_queue_paused"), 42);
    assert_eq!(
        series("skiplock_queue_depth"),
        2 * 3,
        "paused queues without jobs have none"
    );
    assert_eq!(series("skiplock_queue_oldest_wait_seconds"), 2);
    assert_eq!(
        value(
            &s,
            "skiplock_queue_depth",
            &[("queue", "big-1"), ("state", "available")]
        ),
        Some(10.0)
    );
    assert_eq!(
        value(
            &s,
            "skiplock_queue_depth",
            &[("queue", "big-3"), ("state", "available")]
        ),
        None
    );
    assert_eq!(
        value(&s, "skiplock_queue_paused", &[("queue", "held-07")]),
        Some(1.0)
    );
    // The other 301 queues (big-3 and the small ones) in one set of series.
    assert_eq!(value(&s, "skiplock_other_queues", &[]), Some(301.0));
    assert_eq!(
        value(&s, "skiplock_other_queues_depth", &[("state", "available")]),
        Some(310.0)
    );
    assert_eq!(value(&s, "skiplock_other_queues_paused", &[]), Some(0.0));
    assert!(
        body.lines().count() < 200,
        "{} lines for 343 queues",
        body.lines().count()
    );
}

/// The horizon's gauges (docs/operations.md, "Keeping the database healthy"): a session of the
/// scraping login left idle in transaction shows in `skiplock_vacuum_horizon_age_seconds` (the
/// largest age of any holder the login may see, so at least this one's), and the dead tuples
/// of skiplock's tables have their gauge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_horizons_age_and_the_dead_tuples_are_gauges() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let mut holder = <sqlx::PgConnection as sqlx::Connection>::connect(&op.url)
        .await
        .unwrap();
    for sql in [
        "BEGIN ISOLATION LEVEL REPEATABLE READ",
        "SELECT count(*) FROM skiplock.jobs",
    ] {
        sqlx::query(sql).execute(&mut holder).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut c = cmd(&op.url);
    c.args(["web", "--listen", "127.0.0.1:0"])
        .env_remove("SKIPLOCK_WEB_TOKEN")
        .env_remove("SKIPLOCK_WEB_LISTEN");
    let console = Served::start(c, LIMIT);
    let http = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
    let (status, body) = get(&http, &format!("{}/metrics", console.base), None).await;
    assert_eq!(status, 200, "{body}");
    let s = parse(&body);
    let age = value(&s, "skiplock_vacuum_horizon_age_seconds", &[]).expect(&body);
    assert!(age >= 1.0, "{age}\n{body}");
    assert!(
        value(&s, "skiplock_vacuum_horizon_xid_age", &[]).is_some(),
        "{body}"
    );
    assert!(value(&s, "skiplock_dead_tuples", &[]).is_some(), "{body}");
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
}

fn job(queue: &str) -> skiplock::queue::NewJob {
    skiplock::queue::NewJob::new("drain", serde_json::json!({})).queue(queue)
}

/// `n` jobs through the public API's `enqueue_many` (which counts refusals; the store's does not).
async fn api_many(pool: &skiplock::Pool, queue: &str, n: usize) -> skiplock::Result<Vec<i64>> {
    let args = vec![serde_json::json!({}); n];
    skiplock::enqueue_many(
        pool,
        skiplock::store::jobs::ManyJobs {
            kind: "drain",
            args: &args,
            queue,
            ..Default::default()
        },
    )
    .await
}

/// Each refused enqueue statement counts once in `skiplock_enqueue_refused_total{queue}`
/// (docs/operations.md, "Metrics"), `enqueue_many`'s as one; accepted ones do not count.
#[tokio::test]
async fn refusals_are_counted_by_queue() {
    let handle = skiplock_console::metrics::install().expect("the Prometheus recorder");
    let counted = |queue: &str| -> u64 {
        let text = handle.render();
        let prefix = format!("skiplock_enqueue_refused_total{{queue=\"{queue}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    let db = TestDb::new().await;
    set_queue_admission(&db, "counted_refusals", Some(2)).await;
    api_many(&db.pool, "counted_refusals", 2).await.unwrap();
    assert_eq!(counted("counted_refusals"), 0);
    assert!(skiplock::client::admission::is_queue_full(
        &skiplock::enqueue_job(&db.pool, &job("counted_refusals"))
            .await
            .unwrap_err()
    ));
    assert!(skiplock::client::admission::is_queue_full(
        &api_many(&db.pool, "counted_refusals", 3).await.unwrap_err()
    ));
    assert_eq!(counted("counted_refusals"), 2);
    // Another error is not a refusal for a full queue.
    set_queue_admission(&db, "counted_refusals", None).await;
    skiplock::enqueue_job(&db.pool, &job("counted_refusals"))
        .await
        .unwrap();
    assert_eq!(counted("counted_refusals"), 2);
}

//! The operator console (`skiplock web`) in a real browser: headless Chromium driven through
//! chromedriver (WebDriver, fantoccini) against a real console process and database, plus
//! plain HTTP requests for what a browser would never send (no token, no CSRF token).
//!
//! Needs the Debian packages `chromium` and `chromium-driver`. Without them each browser test
//! prints SKIPPED and passes, unless `SKIPLOCK_TEST_REQUIRE_BROWSER=1` (set by `.ci/run`,
//! which installs them), where a missing browser is a failure.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use support::*;

const LIMIT: Duration = Duration::from_secs(60);
const TOKEN: &str = "test-token-0123456789abcdef";

// ---------------------------------------------------------------------------------------
// The console process
// ---------------------------------------------------------------------------------------

/// Starts `skiplock web` against `url` on `listen` (port 0: any free port) with `token`.
fn start_console(url: &str, listen: &str, token: Option<&str>) -> Served {
    start_console_with(url, listen, token, &[])
}

/// [`start_console`] with more settings.
fn start_console_with(
    url: &str,
    listen: &str,
    token: Option<&str>,
    settings: &[(&str, &str)],
) -> Served {
    let mut c = cmd(url);
    c.args(["web", "--listen", listen])
        .env_remove("SKIPLOCK_WEB_TOKEN")
        .env_remove("SKIPLOCK_WEB_READ_TOKEN")
        .env_remove("SKIPLOCK_WEB_HOSTS")
        .env_remove("SKIPLOCK_WEB_HTTPS")
        .env_remove("SKIPLOCK_TOP_QUEUES")
        .env_remove("SKIPLOCK_WEB_LISTEN");
    if let Some(t) = token {
        c.env("SKIPLOCK_WEB_TOKEN", t);
    }
    for (k, v) in settings {
        c.env(k, v);
    }
    Served::start(c, LIMIT)
}

/// The console's port.
fn port_of(s: &Served) -> u16 {
    s.base.rsplit(':').next().unwrap().parse().unwrap()
}

// ---------------------------------------------------------------------------------------
// The browser
// ---------------------------------------------------------------------------------------

fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

/// Chromium's binary (the real one when Debian's wrapper script is in front of it) and
/// chromedriver, or why a browser test cannot run here.
fn browser_binaries() -> Result<(PathBuf, PathBuf), String> {
    let chrome = ["/usr/lib/chromium/chromium"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .or_else(|| which(&["chromium", "chromium-browser", "google-chrome"]))
        .ok_or("no chromium on this machine (apt-get install chromium chromium-driver)")?;
    let driver = which(&["chromedriver"])
        .or_else(|| Some(PathBuf::from("/usr/lib/chromium/chromedriver")).filter(|p| p.is_file()))
        .ok_or("no chromedriver on this machine (apt-get install chromium-driver)")?;
    Ok((chrome, driver))
}

/// Whether a missing browser fails the test (CI) or skips it (a developer's machine).
fn browser_required() -> bool {
    std::env::var("SKIPLOCK_TEST_REQUIRE_BROWSER").is_ok_and(|v| v == "1")
}

/// Browser tests run one at a time: each Chromium takes most of a core while it starts.
fn browser_lock() -> &'static tokio::sync::Mutex<()> {
    static L: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    L.get_or_init(|| tokio::sync::Mutex::new(()))
}

/// chromedriver (killed when dropped) and a headless Chromium session on it.
struct Browser {
    driver: Child,
    client: Option<Client>,
    _profile: tempfile::TempDir,
    _guard: tokio::sync::MutexGuard<'static, ()>,
}

impl Browser {
    /// A fresh browser, or `None` (after printing SKIPPED) where none is installed.
    async fn start(test: &str) -> Option<Browser> {
        let (chrome, driver_bin) = match browser_binaries() {
            Ok(b) => b,
            Err(why) if browser_required() => {
                panic!("{why}, but SKIPLOCK_TEST_REQUIRE_BROWSER=1")
            }
            Err(why) => {
                eprintln!("SKIPPED {test}: {why}");
                return None;
            }
        };
        let guard = browser_lock().lock().await;
        let port = free_port();
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver_url = format!("http://127.0.0.1:{port}");
        wait_for("chromedriver to answer", LIMIT, || async {
            reqwest::get(format!("{driver_url}/status"))
                .await
                .ok()
                .filter(|r| r.status().is_success())
                .map(|_| ())
        })
        .await;
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({
            "goog:chromeOptions": {
                "binary": chrome,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--window-size=1400,1000",
                    format!("--user-data-dir={}", profile.path().display()),
                ]
            }
        });
        let serde_json::Value::Object(caps) = caps else {
            unreachable!()
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&driver_url)
            .await
            .expect("a Chromium session through chromedriver");
        Some(Browser {
            driver,
            client: Some(client),
            _profile: profile,
            _guard: guard,
        })
    }

    fn c(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    /// Waits (up to a minute) for an element.
    async fn el(&self, css: &str) -> fantoccini::elements::Element {
        self.c()
            .wait()
            .at_most(LIMIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
    }

    /// The text of an element (waiting for it).
    async fn text(&self, css: &str) -> String {
        self.el(css).await.text().await.unwrap()
    }

    /// Waits until `css`'s text contains `want`.
    async fn text_contains(&self, css: &str, want: &str) {
        let mut last = String::new();
        let deadline = tokio::time::Instant::now() + LIMIT;
        while tokio::time::Instant::now() < deadline {
            if let Ok(e) = self.c().find(Locator::Css(css)).await
                && let Ok(t) = e.text().await
            {
                if t.contains(want) {
                    return;
                }
                last = t;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{css} never contained {want:?}; last text: {last:?}");
    }

    async fn close(mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.close().await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

// ---------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------

/// Enqueues `n` jobs of `kind` in `queue` and returns their ids.
async fn enqueue(db: &TestDb, kind: &str, queue: &str, n: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            sqlx::query_scalar("SELECT skiplock.enqueue($1, jsonb_build_object('n', $3::int), $2)")
                .bind(kind)
                .bind(queue)
                .bind(i as i32)
                .fetch_one(&db.pool)
                .await
                .unwrap(),
        );
    }
    ids
}

/// Marks jobs finished in `state` with `error` (as a worker would have left them).
async fn finish(db: &TestDb, ids: &[i64], state: &str, error: Option<&str>) {
    sqlx::query(
        "UPDATE skiplock.jobs SET state = $2::skiplock.job_state, attempt = 1, attempted_at = now(),
                finalized_at = now(),
                errors = CASE WHEN $3::text IS NULL THEN '[]'::jsonb
                              ELSE jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', $3::text)) END
         WHERE id = ANY($1)",
    )
    .bind(ids)
    .bind(state)
    .bind(error)
    .execute(&db.pool)
    .await
    .unwrap();
}

/// A packet moved (as a worker would) to `ready_for_review`.
async fn packet_ready(db: &TestDb, name: &str) -> i64 {
    let id: i64 = sqlx::query_scalar("SELECT skiplock.submit_packet('/srv/packets/' || $1, $1)")
        .bind(name)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    // The worker's two moves, made here by the test's superuser login.
    for to in ["processing", "ready_for_review"] {
        sqlx::query("UPDATE skiplock.packets SET state = $2::skiplock.packet_state WHERE id = $1")
            .bind(id)
            .bind(to)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    id
}

/// An HTTP client that keeps cookies and never follows redirects (tests look at them).
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(LIMIT)
        .build()
        .unwrap()
}

/// The body of a GET that must answer 200.
async fn body_of(h: &reqwest::Client, url: &str) -> String {
    let r = h.get(url).send().await.unwrap();
    let status = r.status();
    let body = r.text().await.unwrap();
    assert_eq!(status, 200, "{url}: {body}");
    body
}

/// The CSRF token in a page's forms.
fn csrf_in(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF token")
        + "name=\"csrf\" value=\"".len();
    page[at..at + 64].to_string()
}

// ---------------------------------------------------------------------------------------
// Browser tests
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_renders_the_seeded_counts() {
    let Some(b) = Browser::start("the_overview_renders_the_seeded_counts").await else {
        return;
    };
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let waiting = enqueue(&db, "noop", "alpha", 6).await;
    finish(&db, &waiting[..2], "completed", None).await;
    finish(&db, &waiting[2..3], "discarded", Some("boom")).await;
    enqueue(&db, "noop", "beta", 4).await;
    sqlx::query(
        "INSERT INTO skiplock.workers (id, host, pid, queues, kinds) \
         VALUES ('console-test:4242:ab', 'console-test-host', 4242, ARRAY['alpha'], ARRAY['noop'])",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let console = start_console(&op.url, "127.0.0.1:0", None);

    b.c().goto(&console.url("/")).await.unwrap();
    let cell = |q: &str, state: &str| format!("tr[data-queue=\"{q}\"] td[data-state=\"{state}\"]");
    assert_eq!(b.text(&cell("alpha", "available")).await, "3");
    assert_eq!(b.text(&cell("alpha", "completed")).await, "2");
    assert_eq!(b.text(&cell("alpha", "discarded")).await, "1");
    assert_eq!(b.text(&cell("beta", "available")).await, "4");
    assert_eq!(b.text(&cell("beta", "completed")).await, "0");
    // The chart's minute holds the finished jobs (label of the SVG), and the live worker.
    let label = b
        .el("svg.chart")
        .await
        .attr("aria-label")
        .await
        .unwrap()
        .unwrap();
    assert!(label.contains("2 completed, 1 failed"), "{label}");
    b.text_contains("#workers", "console-test-host").await;
    b.text_contains("#workers", "4242").await;
    b.close().await;
}

/// The overview shows a queue's admission limit with its other limits (docs/operations.md,
/// "Admission control").
#[tokio::test]
async fn the_overview_shows_a_queue_s_admission_limit() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    enqueue(&db, "noop", "limited", 2).await;
    enqueue(&db, "noop", "open", 1).await;
    sqlx::query("SELECT skiplock.set_queue_admission('limited', 5)")
        .execute(&db.pool)
        .await
        .unwrap();
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let page = body_of(&reqwest::Client::new(), &console.url("/")).await;
    let row = |q: &str| {
        let at = page
            .find(&format!("data-queue=\"{q}\""))
            .unwrap_or_else(|| panic!("no row for {q}: {page}"));
        page[at..at + page[at..].find("</tr>").unwrap()].to_string()
    };
    assert!(
        row("limited").contains("at most 5 waiting"),
        "{}",
        row("limited")
    );
    assert!(!row("open").contains("at most"), "{}", row("open"));
}

/// The doctor's page (docs/console.md): the findings of `skiplock doctor`, run as the
/// operator's login, with their evidence; a healthy database has nothing to report.
#[tokio::test]
async fn the_doctor_page_shows_what_skiplock_doctor_finds() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let h = reqwest::Client::new();
    let page = body_of(&h, &console.url("/doctor")).await;
    assert!(!page.contains("data-check=\"paused_queue\""), "{page}");
    sqlx::query("SELECT skiplock.pause_queue('mail')")
        .execute(&db.pool)
        .await
        .unwrap();
    let page = body_of(&h, &console.url("/doctor")).await;
    let at = page
        .find("data-check=\"paused_queue\"")
        .unwrap_or_else(|| panic!("no paused-queue finding: {page}"));
    let row = &page[at..at + page[at..].find("</tr>").unwrap()];
    assert!(row.contains("mail"), "{row}");
}

/// The ids of the jobs the list on the page shows, in order.
async fn listed(b: &Browser) -> Vec<String> {
    let mut ids = Vec::new();
    for row in b
        .c()
        .find_all(Locator::Css("#jobs tbody tr[data-id]"))
        .await
        .unwrap()
    {
        ids.push(row.attr("data-id").await.unwrap().unwrap_or_default());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_filters_the_list_and_the_job_page_shows_tags_meta_and_an_unstarted_claim() {
    let Some(b) = Browser::start("a_tag_filters_the_list").await else {
        return;
    };
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let tagged = skiplock::store::jobs::enqueue(
        &db.pool,
        &skiplock::queue::NewJob::new("report", json!({"n": 1}))
            .queue("reports")
            .tag("eu west")
            .tag("billing")
            .meta(json!({"tenant": "acme"})),
    )
    .await
    .unwrap()
    .id;
    let ids = enqueue(&db, "report", "reports", 3).await;
    // Claimed ahead into a worker's buffer: running, not started.
    sqlx::query(
        "UPDATE skiplock.jobs SET state = 'running', attempt = 1, attempted_at = NULL, \
         heartbeat_at = now(), attempted_by = 'w:1:buffer' WHERE id = $1",
    )
    .bind(ids[0])
    .execute(&db.pool)
    .await
    .unwrap();
    let console = start_console(&op.url, "127.0.0.1:0", None);

    b.c().goto(&console.url("/jobs")).await.unwrap();
    b.el("#f-tag").await.send_keys("eu west").await.unwrap();
    b.el("#f-apply").await.click().await.unwrap();
    b.text_contains("#jobs", "report").await;
    assert_eq!(
        listed(&b).await,
        [tagged.to_string()],
        "only the tagged job"
    );
    b.el(&format!("#jobs a[href=\"/jobs/{tagged}\"]"))
        .await
        .click()
        .await
        .unwrap();
    b.text_contains("#tags", "billing").await;
    b.text_contains("#tags", "eu west").await;
    b.text_contains("#meta", "acme").await;
    // A tag on the job page lists that tag's jobs.
    b.el("#tags a.tag:last-child").await.click().await.unwrap();
    b.text_contains("#jobs", "report").await;
    assert!(
        b.c()
            .current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with("/jobs?tag=eu+west")
    );

    // Meta: the jobs whose meta contains the object typed; the bulk form acts on the same set.
    b.c().goto(&console.url("/jobs")).await.unwrap();
    b.el("#f-meta")
        .await
        .send_keys(r#"{"tenant": "acme"}"#)
        .await
        .unwrap();
    b.el("#f-apply").await.click().await.unwrap();
    b.text_contains("#bulk", r#"meta containing {"tenant":"acme"}"#)
        .await;
    assert_eq!(
        listed(&b).await,
        [tagged.to_string()],
        "only the job with that meta"
    );
    b.c()
        .goto(&console.url("/jobs?meta=%5B1%5D"))
        .await
        .unwrap();
    b.text_contains("body", "meta must be a JSON object").await;

    b.c()
        .goto(&console.url(&format!("/jobs/{}", ids[0])))
        .await
        .unwrap();
    b.text_contains("#attempted-at", "not started: in a worker's buffer")
        .await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_is_found_by_filter_its_error_shown_and_retry_makes_it_available() {
    let Some(b) = Browser::start("a_failed_job_is_found_by_filter").await else {
        return;
    };
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let ids = enqueue(&db, "report", "reports", 5).await;
    finish(&db, &ids[..2], "completed", None).await;
    finish(
        &db,
        &ids[2..3],
        "discarded",
        Some("printer on fire (code 42)"),
    )
    .await;
    finish(&db, &ids[3..4], "discarded", Some("paper jam")).await;
    let failed = ids[2];
    let console = start_console(&op.url, "127.0.0.1:0", None);

    b.c().goto(&console.url("/jobs")).await.unwrap();
    b.el("#f-state")
        .await
        .select_by_value("discarded")
        .await
        .unwrap();
    b.el("#f-q").await.send_keys("ON FIRE").await.unwrap();
    b.el("#f-apply").await.click().await.unwrap();
    b.text_contains("#jobs", "printer on fire").await;
    let rows = b
        .c()
        .find_all(Locator::Css("#jobs tbody tr[data-id]"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "only the matching job");
    assert_eq!(
        rows[0].attr("data-id").await.unwrap().as_deref(),
        Some(failed.to_string().as_str())
    );
    b.el(&format!("#jobs a[href=\"/jobs/{failed}\"]"))
        .await
        .click()
        .await
        .unwrap();
    b.text_contains("#errors", "printer on fire (code 42)")
        .await;
    assert_eq!(b.text("#job-state").await, "discarded");
    // The same POST from this page's own script but without the form's CSRF token (the
    // browser sends its cookies): refused, and nothing changes.
    let status = b
        .c()
        .execute_async(
            "const done = arguments[arguments.length - 1];
             fetch(location.pathname + '/retry', {method: 'POST', credentials: 'same-origin',
                   headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'x=1'})
               .then(r => done(r.status), e => done(String(e)));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(status, json!(403));
    assert_eq!(state_of(&db, failed).await, "discarded");
    b.el("#retry").await.click().await.unwrap();
    b.text_contains("#flash", "available again").await;
    assert_eq!(b.text("#job-state").await, "available");
    assert_eq!(state_of(&db, failed).await, "available");
    assert_eq!(
        state_of(&db, ids[3]).await,
        "discarded",
        "the other one is untouched"
    );
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_page_links_its_dependencies_dependents_and_flow_and_the_flow_page_counts_it() {
    let Some(b) = Browser::start("a_job_page_links_its_dependencies").await else {
        return;
    };
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let flow = skiplock::Flow::new()
        .job(
            "fetch",
            skiplock::queue::NewJob::new("fetch-page", json!({})),
        )
        .job_after(
            "extract",
            skiplock::queue::NewJob::new("extract", json!({})),
            ["fetch"],
        )
        .job_after(
            "publish",
            skiplock::queue::NewJob::new("publish", json!({})),
            ["extract"],
        );
    let ids = skiplock::enqueue_flow(&db.pool, &flow).await.unwrap();
    let (fetch, extract) = (ids.id("fetch").unwrap(), ids.id("extract").unwrap());
    finish(&db, &[fetch], "completed", None).await;
    skiplock::store::flows::settle_dependencies(&db.pool, 10)
        .await
        .unwrap();
    let console = start_console(&op.url, "127.0.0.1:0", None);

    b.c()
        .goto(&console.url(&format!("/jobs/{extract}")))
        .await
        .unwrap();
    b.text_contains("#job-state", "available").await;
    b.text_contains("#dependencies", "fetch-page").await;
    b.text_contains("#dependencies", "completed").await;
    b.text_contains("#dependents", "publish").await;
    b.text_contains("#dependents", "waiting").await;
    b.el("#flow-link").await.click().await.unwrap();
    b.text_contains("#flow-total", "3").await;
    b.text_contains("#flow-completed", "1").await;
    b.text_contains("#flow-waiting", "1").await;
    b.text_contains("#flow-jobs", "publish").await;
    // A waiting job cannot be retried from its page (it would run before its dependencies).
    b.el(&format!(
        "#flow-jobs a[href=\"/jobs/{}\"]",
        ids.id("publish").unwrap()
    ))
    .await
    .click()
    .await
    .unwrap();
    b.text_contains("#job-state", "waiting").await;
    assert!(
        b.el("#retry")
            .await
            .attr("disabled")
            .await
            .unwrap()
            .is_some()
    );
    // The overview counts the waiting job apart from the available one.
    b.c().goto(&console.url("/")).await.unwrap();
    let cell = |state: &str| format!("tr[data-queue=\"default\"] td[data-state=\"{state}\"]");
    assert_eq!(b.text(&cell("waiting")).await, "1");
    assert_eq!(b.text(&cell("available")).await, "1");
    b.close().await;
}

/// A job page lists the first 100 of a job's dependents and says how many more there are
/// (an enqueuer gave one job 100,000 dependents in 0.8 s, and its page grew to 14 MB); a flow
/// page of a job whose dependents go on past the walk's bound (`flow_members.max_jobs`) says
/// its counts stop there.
#[tokio::test]
async fn a_job_page_lists_a_hundred_dependents_and_a_flow_page_says_where_its_walk_stopped() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let root = enqueue(&db, "noop", "default", 1).await[0];
    let children = skiplock::store::jobs::enqueue_many(
        &db.pool,
        skiplock::store::jobs::ManyJobs {
            kind: "noop",
            args: &vec![json!({}); 250],
            queue: "default",
            depends_on: &[root],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    sqlx::query("UPDATE skiplock.settings SET value = 40 WHERE name = 'flow_members.max_jobs'")
        .execute(&db.pool)
        .await
        .unwrap();
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let h = http();
    let page = body_of(&h, &console.url(&format!("/jobs/{root}"))).await;
    let listed = page
        .split("id=\"dependents\"")
        .nth(1)
        .unwrap()
        .split("</table>")
        .next()
        .unwrap()
        .matches("<tr>")
        .count();
    assert_eq!(listed, 100);
    assert!(page.contains("Dependents (250)"), "{page}");
    assert!(page.contains("and 150 more"), "{page}");
    assert!(!page.contains(&format!("/jobs/{}\"", children[100])));
    let child = body_of(&h, &console.url(&format!("/jobs/{}", children[0]))).await;
    assert!(!child.contains("more</p>"), "{child}");
    let flow = body_of(&h, &console.url(&format!("/flows/{root}"))).await;
    assert!(flow.contains("id=\"flow-walk-stopped\""), "{flow}");
    assert!(flow.contains("<dd id=\"flow-total\">40</dd>"), "{flow}");
    let whole = body_of(&h, &console.url(&format!("/flows/{}", children[0]))).await;
    assert!(!whole.contains("flow-walk-stopped"), "{whole}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_packet_is_taken_and_completed_from_the_board_and_its_history_shows_both_moves() {
    let Some(b) = Browser::start("a_packet_is_taken_and_completed").await else {
        return;
    };
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let id = packet_ready(&db, "reel-7").await;
    let console = start_console(&op.url, "127.0.0.1:0", None);

    b.c().goto(&console.url("/packets")).await.unwrap();
    b.text_contains("#col-ready_for_review", "reel-7").await;
    b.el(&format!("#take-{id}")).await.click().await.unwrap();
    b.text_contains("#col-in_review", "reel-7").await;
    b.el(&format!("#complete-{id}"))
        .await
        .click()
        .await
        .unwrap();
    b.text_contains("#done", "reel-7").await;

    b.c()
        .goto(&console.url(&format!("/packets/{id}")))
        .await
        .unwrap();
    assert_eq!(b.text("#packet-state").await, "done");
    let history = b.text("#history").await;
    assert!(history.contains("ready_for_review in_review"), "{history}");
    assert!(history.contains("in_review done"), "{history}");
    assert!(
        history.contains(&op.name),
        "the operator's login signs both moves: {history}"
    );

    let moves: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT coalesce(from_state::text, '-'), to_state::text, actor FROM skiplock.packet_events \
         WHERE packet_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let tail: Vec<_> = moves.iter().rev().take(2).rev().cloned().collect();
    assert_eq!(
        tail,
        vec![
            (
                "ready_for_review".into(),
                "in_review".into(),
                op.name.clone()
            ),
            ("in_review".into(), "done".into(), op.name.clone()),
        ]
    );
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_with_a_token_lets_a_browser_in_only_after_logging_in() {
    let Some(b) = Browser::start("a_console_with_a_token").await else {
        return;
    };
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    enqueue(&db, "noop", "gamma", 2).await;
    let console = start_console(&op.url, "0.0.0.0:0", Some(TOKEN));

    b.c().goto(&console.url("/jobs?queue=gamma")).await.unwrap();
    // Refused without the token: the login form instead of the page.
    b.el("#token").await;
    assert!(b.c().find(Locator::Css("#jobs")).await.is_err());
    b.el("#token")
        .await
        .send_keys("wrong-token-wrong-token")
        .await
        .unwrap();
    b.el("#login").await.click().await.unwrap();
    b.text_contains("#flash", "not the console's token").await;
    b.el("#token").await.send_keys(TOKEN).await.unwrap();
    b.el("#login").await.click().await.unwrap();
    // Back where it was going, logged in.
    b.text_contains("#jobs", "gamma").await;
    let cookies = b.c().get_all_cookies().await.unwrap();
    let session = cookies
        .iter()
        .find(|c| c.name() == "skiplock_session")
        .expect("the login cookie");
    assert_eq!(session.http_only(), Some(true));
    assert_eq!(format!("{:?}", session.same_site()), "Some(Strict)");
    assert!(
        !session.value().contains(TOKEN),
        "the cookie is not the token"
    );
    b.close().await;
}

// ---------------------------------------------------------------------------------------
// HTTP tests: what no page of the console would send
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_request_without_the_token_to_a_non_loopback_console_is_refused() {
    // Without a token, a non-loopback address is refused before anything else.
    let (code, out, err) = run_cmd(
        "postgres://nobody@127.0.0.1:1/none",
        &["web", "--listen", "0.0.0.0:0"],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0") && err.contains("SKIPLOCK_WEB_TOKEN"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // A weak token is refused too, without being printed.
    let out = cmd("postgres://nobody@127.0.0.1:1/none")
        .args(["web", "--listen", "0.0.0.0:0"])
        .env("SKIPLOCK_WEB_TOKEN", "hunter2")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("SKIPLOCK_WEB_TOKEN") && !err.contains("hunter2"),
        "{err}"
    );

    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let ids = enqueue(&db, "noop", "default", 1).await;
    finish(&db, &ids, "discarded", Some("x")).await;
    let console = start_console(&op.url, "0.0.0.0:0", Some(TOKEN));
    let h = http();
    for path in [
        "/",
        "/jobs",
        &format!("/jobs/{}", ids[0]),
        "/packets",
        "/crawl",
    ] {
        let r = h.get(console.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        let body = r.text().await.unwrap();
        assert!(
            body.contains("id=\"token\"") && !body.contains("id=\"jobs\""),
            "{path}"
        );
    }
    // A POST without the token changes nothing, even with a valid CSRF pair.
    let login = h.get(console.url("/login")).send().await.unwrap();
    let csrf = csrf_in(&login.text().await.unwrap());
    let r = h
        .post(console.url(&format!("/jobs/{}/retry", ids[0])))
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(state_of(&db, ids[0]).await, "discarded");
    // A wrong bearer token or a forged cookie is refused; the right one is let in.
    let r = h
        .get(console.url("/jobs"))
        .bearer_auth("wrong-token-wrong-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = reqwest::Client::new()
        .get(console.url("/jobs"))
        .header("cookie", format!("skiplock_session={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = h
        .get(console.url("/jobs"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Logging in with the form sets the cookie; then every page opens.
    let r = h
        .post(console.url("/login"))
        .form(&[("csrf", csrf.as_str()), ("token", TOKEN), ("next", "/jobs")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let set = r
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert_eq!(r.headers().get("location").unwrap(), "/jobs");
    assert_eq!(h.get(console.url("/")).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn a_post_without_the_csrf_token_is_refused() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let ids = enqueue(&db, "noop", "default", 1).await;
    finish(&db, &ids, "discarded", Some("x")).await;
    let id = ids[0];
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let h = http();
    let page = body_of(&h, &console.url(&format!("/jobs/{id}"))).await;
    let csrf = csrf_in(&page);
    let retry = console.url(&format!("/jobs/{id}/retry"));
    let cases: Vec<(&str, reqwest::RequestBuilder)> = vec![
        ("no token", h.post(&retry).form(&[("x", "1")])),
        ("empty token", h.post(&retry).form(&[("csrf", "")])),
        (
            "another token",
            h.post(&retry).form(&[("csrf", "ab".repeat(32))]),
        ),
        (
            "the token without its cookie",
            reqwest::Client::new()
                .post(&retry)
                .form(&[("csrf", csrf.as_str())]),
        ),
        (
            "from another site",
            h.post(&retry)
                .header("origin", "http://evil.example")
                .form(&[("csrf", csrf.as_str())]),
        ),
    ];
    for (what, req) in cases {
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 403, "{what}");
        assert_eq!(state_of(&db, id).await, "discarded", "{what}");
    }
    // Other methods are not served; GET changes nothing.
    let r = h
        .delete(console.url(&format!("/jobs/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(h.get(&retry).send().await.unwrap().status(), 405);
    // With the token from the page, the same POST works.
    let r = h
        .post(&retry)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(state_of(&db, id).await, "available");
}

/// The whole console as a login holding only `skiplock_operator`: every page and every
/// button works, and the same login cannot change or delete rows by itself.
#[tokio::test]
async fn the_operator_role_can_use_every_page_and_button_and_nothing_more() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let ids = enqueue(&db, "noop", "ops", 6).await;
    finish(&db, &ids[..2], "discarded", Some("boom")).await;
    let packet_a = packet_ready(&db, "a").await;
    let packet_b = packet_ready(&db, "b").await;
    sqlx::raw_sql(
        "INSERT INTO skiplock.hosts (host) VALUES ('example.test');
         INSERT INTO skiplock.pages (url, host, path, http_status, last_fetched)
             VALUES ('http://example.test/', 'example.test', '/', 200, now());
         INSERT INTO skiplock.packs (host, packed_at, pages, bytes, object_key, store)
             VALUES ('example.test', now(), 1, 4096, 'packs/example.test.sqlite', './data/store');
         INSERT INTO skiplock.workers (id, host, pid) VALUES ('w:1:x', 'box', 1);",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // A job waiting for another: the job page's dependencies and the flow page.
    let waiting = skiplock::store::jobs::enqueue(
        &db.pool,
        &skiplock::queue::NewJob::new("noop", json!({}))
            .queue("flows")
            .depends_on([ids[4]]),
    )
    .await
    .unwrap()
    .id;
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let h = http();
    let mut csrf = String::new();
    for path in [
        "/".to_string(),
        "/jobs".into(),
        "/jobs?state=discarded&kind=noop&queue=ops&q=boom".into(),
        format!("/jobs?before={}", ids[3]),
        format!("/jobs?after={}", ids[0]),
        format!("/jobs/{}", ids[0]),
        format!("/jobs/{waiting}"),
        format!("/flows/{}", ids[4]),
        "/packets".into(),
        format!("/packets/{packet_a}"),
        "/crawl".into(),
        "/crawl/host?host=example.test".into(),
    ] {
        let r = h.get(console.url(&path)).send().await.unwrap();
        let status = r.status();
        let body = r.text().await.unwrap();
        assert_eq!(status, 200, "{path}: {body}");
        if body.contains("name=\"csrf\"") {
            csrf = csrf_in(&body);
        }
    }
    let post = |path: String, form: Vec<(&'static str, String)>| {
        let mut form = form;
        form.push(("csrf", csrf.clone()));
        let h = h.clone();
        let url = console.url(&path);
        async move {
            let r = h.post(url).form(&form).send().await.unwrap();
            let status = r.status();
            let location = r
                .headers()
                .get("location")
                .map(|l| l.to_str().unwrap().to_string())
                .unwrap_or_default();
            let body = r.text().await.unwrap();
            assert_eq!(status, 303, "{path}: {body}");
            location
        }
    };
    post(format!("/jobs/{}/retry", ids[0]), vec![]).await;
    assert_eq!(state_of(&db, ids[0]).await, "available");
    post(format!("/jobs/{}/cancel", ids[2]), vec![]).await;
    assert_eq!(state_of(&db, ids[2]).await, "cancelled");
    let bulk = |action: &str| {
        vec![
            ("action", action.to_string()),
            ("confirm", "yes".into()),
            ("queue", "ops".into()),
            ("state", String::new()),
        ]
    };
    post("/jobs/bulk".into(), bulk("retry")).await;
    assert_eq!(state_of(&db, ids[1]).await, "available");
    assert_eq!(state_of(&db, ids[2]).await, "available");
    post("/jobs/bulk".into(), bulk("cancel")).await;
    let cancelled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM skiplock.jobs WHERE queue = 'ops' AND state = 'cancelled'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(cancelled, 6);
    post(format!("/packets/{packet_a}/take"), vec![]).await;
    post(format!("/packets/{packet_a}/complete"), vec![]).await;
    post(format!("/packets/{packet_b}/take"), vec![]).await;
    post(
        format!("/packets/{packet_b}/retry"),
        vec![("reason", "frames 3-5 blurred".into())],
    )
    .await;
    let states: Vec<String> = sqlx::query_scalar(
        "SELECT state::text FROM skiplock.packets WHERE id = ANY($1) ORDER BY id",
    )
    .bind([packet_a, packet_b])
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(states, ["done", "queued"]);
    let note: String = sqlx::query_scalar(
        "SELECT note FROM skiplock.packet_events WHERE packet_id = $1 ORDER BY id DESC LIMIT 1",
    )
    .bind(packet_b)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(note, "retry: frames 3-5 blurred");
    post(
        "/crawl/pack-now".into(),
        vec![("host", "example.test".into())],
    )
    .await;
    let timer: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM skiplock.jobs WHERE kind = 'do-the-packing' AND args->>'host' = 'example.test' \
         AND state = 'available' AND scheduled_at <= now()",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(timer, 1);

    // Queue control: Pause, then Resume, from the overview's buttons.
    let overview = body_of(&h, &console.url("/")).await;
    assert!(overview.contains("action=\"/queues/pause\""), "{overview}");
    // The message comes back through the one-shot id in the redirect (src/web/flash.rs).
    let back = post("/queues/pause".into(), vec![("queue", "ops".into())]).await;
    let paused: Vec<bool> =
        sqlx::query_scalar("SELECT paused FROM skiplock.queues WHERE queue = 'ops'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(paused, [true]);
    let overview = body_of(&h, &console.url(&back)).await;
    assert!(overview.contains("Queue ops is paused"), "{overview}");
    assert!(overview.contains("action=\"/queues/resume\""), "{overview}");
    post("/queues/resume".into(), vec![("queue", "ops".into())]).await;
    let paused: Vec<bool> =
        sqlx::query_scalar("SELECT paused FROM skiplock.queues WHERE queue = 'ops'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(
        paused.is_empty(),
        "resumed, the queue has no control row left"
    );

    // A refused move is a page naming why (409), not a crash, and changes nothing.
    let r = h
        .post(console.url(&format!("/packets/{packet_a}/take")))
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("cannot go from done to in_review")
    );

    // Exactly these functions, and no table privilege but SELECT.
    let callable: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT p.proname::text FROM pg_proc p
         WHERE p.pronamespace = 'skiplock'::regnamespace
           AND has_function_privilege('skiplock_operator', p.oid, 'EXECUTE') ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        callable,
        [
            "_job_matches",
            "_like_pattern",
            "cancel",
            "cancel_by_key",
            "cancel_jobs",
            "complete_packet",
            "dependency_counts",
            "dependency_results",
            "dependents",
            "finished_channel",
            "flow_members",
            "flow_progress",
            "hold_key",
            "pack_now",
            "pause_queue",
            "reschedule",
            "resume_queue",
            "retry",
            "retry_jobs",
            "retry_packet",
            "signal",
            "take_packet"
        ]
    );
    let writable: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class c
         WHERE c.relnamespace = 'skiplock'::regnamespace AND c.relkind IN ('r', 'v')
           AND has_table_privilege('skiplock_operator', c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(writable, 0);

    // The same login, by itself: reads, but writes nothing except through the functions.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&op.url)
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(n >= 6);
    for sql in [
        "DELETE FROM skiplock.jobs",
        "UPDATE skiplock.jobs SET state = 'completed'",
        "INSERT INTO skiplock.jobs (kind) VALUES ('evil')",
        "TRUNCATE skiplock.jobs",
        "DELETE FROM skiplock.packets",
        "UPDATE skiplock.packets SET state = 'done'",
        "DELETE FROM skiplock.packet_events",
        "DELETE FROM skiplock.workers",
        "UPDATE skiplock.settings SET value = 1",
        "SELECT skiplock.enqueue('evil')",
        "SELECT skiplock.enqueue_many('evil', ARRAY['{}'::jsonb])",
        "SELECT skiplock._enqueue('evil', '{}', 'q', now(), 0::smallint, 1, NULL, 'keep')",
        "SELECT skiplock.request_fetch('http://example.test/')",
        "SELECT skiplock.submit_packet('/tmp/x')",
        "SELECT skiplock._packet_requeue(1, 1, 'x')",
    ] {
        let e = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&pool)
            .await
            .expect_err(sql)
            .to_string();
        assert!(e.contains("permission denied"), "{sql}: {e}");
    }
    pool.close().await;
}

/// Bulk retry and cancel follow the per-job rules: only finished jobs are retried, only
/// unfinished ones cancelled, a job whose unique key is held waits, and a call does at most
/// `max_rows`.
#[tokio::test]
async fn bulk_retry_and_cancel_follow_the_per_job_rules() {
    let db = TestDb::new().await;
    let p = &db.pool;
    let ids = enqueue(&db, "report", "bulk", 5).await;
    finish(&db, &ids[..3], "discarded", Some("Timeout after 30s")).await;
    finish(&db, &ids[3..4], "completed", None).await;
    // Two finished jobs with one key while a third waits with it: neither is retried.
    let keyed: Vec<i64> = sqlx::query_scalar(
        "SELECT skiplock.enqueue('report', '{}', 'bulk', unique_key => 'day-1') FROM generate_series(1, 1)",
    )
    .fetch_all(p)
    .await
    .unwrap();
    finish(&db, &keyed, "discarded", Some("timeout")).await;
    let waiting: i64 = sqlx::query_scalar(
        "SELECT skiplock.enqueue('report', '{}', 'bulk', unique_key => 'day-1')",
    )
    .fetch_one(p)
    .await
    .unwrap();
    let retried: i64 = sqlx::query_scalar(
        "SELECT skiplock.retry_jobs('discarded', 'report', 'bulk', 'timeout', max_rows => 2)",
    )
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(retried, 2, "at most max_rows");
    let retried: i64 =
        sqlx::query_scalar("SELECT skiplock.retry_jobs('discarded', search => 'TIMEOUT')")
            .fetch_one(p)
            .await
            .unwrap();
    assert_eq!(
        retried, 1,
        "the third; the keyed one waits behind job {waiting}"
    );
    assert_eq!(state_of(&db, keyed[0]).await, "discarded");
    assert_eq!(state_of(&db, ids[3]).await, "completed");
    // LIKE wildcards are matched literally.
    let none: i64 = sqlx::query_scalar("SELECT skiplock.retry_jobs(search => '%')")
        .fetch_one(p)
        .await
        .unwrap();
    assert_eq!(none, 0);
    let cancelled: i64 = sqlx::query_scalar("SELECT skiplock.cancel_jobs(queue => 'bulk')")
        .fetch_one(p)
        .await
        .unwrap();
    assert_eq!(
        cancelled, 5,
        "the 3 retried, the one never finished, the waiting keyed one"
    );
    for (sql, want) in [
        (
            "SELECT skiplock.retry_jobs('running')",
            "retry_jobs takes jobs in state completed, discarded, cancelled, not running",
        ),
        (
            "SELECT skiplock.cancel_jobs('completed')",
            "cancel_jobs takes jobs in state available, running, waiting, not completed",
        ),
        (
            "SELECT skiplock.cancel_jobs(max_rows => 0)",
            "max_rows must be 1 to 100000, got 0",
        ),
        (
            "SELECT skiplock.retry_jobs(max_rows => NULL)",
            "max_rows must be 1 to 100000, got NULL",
        ),
    ] {
        let e = sqlx::query(sql)
            .execute(p)
            .await
            .expect_err(sql)
            .to_string();
        assert!(e.contains(want), "{sql}: {e}");
    }
}

/// The job list pages by id with its filter kept, newest first, both ways.
#[tokio::test]
async fn the_job_list_pages_by_id_and_keeps_its_filter() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let ids = enqueue(&db, "page", "paging", 120).await;
    enqueue(&db, "other", "paging", 5).await;
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let h = http();
    let ids_on = |body: &str| -> Vec<i64> {
        body.split("<tr data-id=\"")
            .skip(1)
            .map(|s| s.split('"').next().unwrap().parse().unwrap())
            .collect()
    };
    let link = |body: &str, id: &str| -> Option<String> {
        let at = body.find(&format!("id=\"{id}\""))?;
        let before = &body[..at];
        let start = before.rfind("href=\"")? + 6;
        Some(
            before[start..]
                .split('"')
                .next()?
                .replace("&amp;", "&")
                .replace("&#38;", "&"),
        )
    };
    let mut seen = Vec::new();
    let mut url = console.url("/jobs?kind=page");
    let mut pages = 0;
    loop {
        let body = body_of(&h, &url).await;
        let page = ids_on(&body);
        assert!(
            page.windows(2).all(|w| w[0] > w[1]),
            "newest first: {page:?}"
        );
        seen.extend(page);
        pages += 1;
        match link(&body, "older") {
            Some(next) => {
                assert!(next.contains("kind=page"), "{next}");
                url = console.url(&next);
            }
            None => break,
        }
        // Back one page shows the page before it.
        if pages == 2 {
            let back = link(&body, "newer").unwrap_or_else(|| {
                panic!(
                    "no newer link: {}",
                    &body[body.find("class=\"pager\"").unwrap()..][..400]
                )
            });
            let b = body_of(&h, &console.url(&back)).await;
            assert_eq!(ids_on(&b).len(), 50);
            assert_eq!(ids_on(&b)[0], *ids.last().unwrap());
        }
    }
    let mut want = ids.clone();
    want.reverse();
    assert_eq!(
        seen, want,
        "every matching job once, in order, in {pages} pages"
    );
    assert_eq!(pages, 3);
    // Bad input is a clear 400, never a crash.
    for bad in [
        "/jobs?state=done",
        "/jobs?before=abc",
        "/jobs?kind=%00",
        "/jobs/abc",
        "/packets/-1",
    ] {
        let r = h.get(console.url(bad)).send().await.unwrap();
        assert_eq!(r.status(), 400, "{bad}");
    }
    assert_eq!(
        h.get(console.url("/jobs/999999"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        h.get(console.url("/nope")).send().await.unwrap().status(),
        404
    );
}

/// Every asset the pages use is served from the binary.
#[tokio::test]
async fn the_assets_are_embedded() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let body = http()
        .get(console.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for attr in ["href=\"/assets/", "src=\"/assets/"] {
        let at = body.find(attr).unwrap() + attr.len() - "/assets/".len();
        let path = body[at..].split('"').next().unwrap();
        let r = http().get(console.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert!(
            r.headers()["cache-control"]
                .to_str()
                .unwrap()
                .contains("immutable")
        );
        assert!(!r.text().await.unwrap().is_empty());
    }
    assert!(
        !body.contains("src=\"http") && !body.contains("href=\"http"),
        "nothing from another server"
    );
}

// ---------------------------------------------------------------------------------------
// Hardening: host names, bounded pages, logins, sessions, read-only, messages, timeouts
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_dns_rebinding_page_can_neither_read_nor_change_the_console() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let ids = enqueue(&db, "noop", "default", 1).await;
    let id = ids[0];
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let port = port_of(&console);
    let h = http();
    let evil = format!("rebind.attacker.example:{port}");
    // The browser's view after the attacker's name points at 127.0.0.1: every page, and
    // /metrics, is refused.
    for path in [
        format!("/jobs/{id}"),
        "/".into(),
        "/metrics".into(),
        "/login".into(),
    ] {
        let r = h
            .get(console.url(&path))
            .header("host", &evil)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 421, "{path}");
        let body = r.text().await.unwrap();
        assert!(
            !body.contains("\"n\"") && !body.contains("name=\"csrf\""),
            "{path}: {body}"
        );
    }
    // The console's own names are answered.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let r = h
            .get(console.url("/"))
            .header("host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{host}");
    }
    // The rebinding POST (with a CSRF pair a same-origin script could have read): refused,
    // and the job stays as it was.
    let page = body_of(&h, &console.url(&format!("/jobs/{id}"))).await;
    let csrf = csrf_in(&page);
    let cancel = console.url(&format!("/jobs/{id}/cancel"));
    let r = h
        .post(&cancel)
        .header("host", &evil)
        .header("origin", format!("http://{evil}"))
        .header("sec-fetch-site", "same-origin")
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 421);
    assert_eq!(state_of(&db, id).await, "available");
    // An Origin that is not one of the console's names is refused even with its own Host.
    let r = h
        .post(&cancel)
        .header("origin", format!("http://{evil}"))
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(state_of(&db, id).await, "available");
    // The same POST from the console's own origin works.
    let r = h
        .post(&cancel)
        .header("origin", format!("http://localhost:{port}"))
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(state_of(&db, id).await, "cancelled");
    drop(console);

    // On every interface with a token: IP literals and the listed public names only.
    let console = start_console_with(
        &op.url,
        "0.0.0.0:0",
        Some(TOKEN),
        &[("SKIPLOCK_WEB_HOSTS", "console.example.com")],
    );
    let port = port_of(&console);
    for (host, status) in [
        (format!("127.0.0.1:{port}"), 200),
        ("console.example.com".to_string(), 200),
        (format!("rebind.attacker.example:{port}"), 421),
        ("attacker.example".to_string(), 421),
    ] {
        let r = h
            .get(console.url("/"))
            .header("host", &host)
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{host}");
    }
}

/// `n` queues `prefix-0001…` with one available job each, in one statement.
async fn many_queues(db: &TestDb, prefix: &str, n: i32) {
    sqlx::query(
        "SELECT skiplock.enqueue('noop', '{}', $1 || '-' || lpad(g::text, 4, '0'))
         FROM generate_series(1, $2) g",
    )
    .bind(prefix)
    .bind(n)
    .execute(&db.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn the_overview_lists_the_deepest_queues_and_adds_up_the_rest() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    many_queues(&db, "small", 300).await;
    for big in ["big-1", "big-2", "big-3"] {
        enqueue(&db, "noop", big, 10).await;
    }
    // A paused queue with no jobs is listed first: its Resume button stays at hand.
    skiplock::store::control::pause(&db.pool, "held")
        .await
        .unwrap();
    let console = start_console_with(
        &op.url,
        "127.0.0.1:0",
        None,
        &[("SKIPLOCK_TOP_QUEUES", "3")],
    );
    let page = body_of(&http(), &console.url("/")).await;
    let listed: Vec<&str> = page
        .split("<tr data-queue=\"")
        .skip(1)
        .map(|r| r.split('"').next().unwrap())
        .collect();
    assert_eq!(
        listed,
        ["big-1", "big-2", "held"],
        "by name, paused first then deepest"
    );
    assert_eq!(page.matches("<tr data-queue=").count(), 3);
    // One line for the other 301 queues (big-3 and the 300 small ones), with their jobs.
    let rest = page
        .split("id=\"other-queues\"")
        .nth(1)
        .expect("the line adding up the rest");
    let rest = rest.split("</tr>").next().unwrap();
    assert!(rest.contains("data-queues=\"301\""), "{rest}");
    assert!(
        rest.contains("data-state=\"available\">310<"),
        "300 small + 10 of big-3: {rest}"
    );
    // The totals still count every queue.
    let foot = page.split("<tfoot>").nth(1).unwrap();
    assert!(foot.contains(">330<"), "{foot}");
}

#[tokio::test]
async fn invisible_characters_are_shown_escaped_and_buttons_still_name_the_queue() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let queue = "q\u{202e}lave\u{200b}";
    let ids = enqueue(&db, "kind\u{2066}x", queue, 1).await;
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let h = http();
    let overview = body_of(&h, &console.url("/")).await;
    let job = body_of(&h, &console.url(&format!("/jobs/{}", ids[0]))).await;
    for (what, page) in [("overview", &overview), ("job", &job)] {
        assert!(page.contains("q\\u{202e}lave\\u{200b}"), "{what}: {page}");
        let shown: String = page
            .split("<input")
            .map(|part| part.split_once('>').map_or(part, |(_, after)| after))
            .collect();
        for c in ['\u{202e}', '\u{200b}', '\u{2066}'] {
            assert!(!shown.contains(c), "{what} shows {c:?} raw");
        }
    }
    assert!(job.contains("kind\\u{2066}x"), "{job}");
    // The Pause button posts the queue's real name (not its escape).
    let csrf = csrf_in(&overview);
    let r = h
        .post(console.url("/queues/pause"))
        .form(&[
            ("csrf", csrf.as_str()),
            ("queue", {
                let at = overview.find("name=\"queue\" value=\"").unwrap() + 20;
                &overview[at..at + overview[at..].find('"').unwrap()]
            }),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let paused: Vec<String> = sqlx::query_scalar("SELECT queue FROM skiplock.queues WHERE paused")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(paused, [queue]);
}

#[tokio::test]
async fn a_job_whose_meta_cannot_be_read_is_shown_and_a_nul_in_the_meta_filter_is_refused() {
    // A meta serde_json cannot read, written past enqueue's check: its page answered 500.
    // Now it shows the meta as stored and why it cannot be read; the list shows the job.
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let deep = format!("{{\"m\": {}1{}}}", "[".repeat(300), "]".repeat(300));
    let mut ids = Vec::new();
    for meta in [r#"{"m": 1e400}"#, deep.as_str()] {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO skiplock.jobs (kind, args, meta) VALUES ('noop', '{}', $1::text::jsonb) RETURNING id",
        )
        .bind(meta)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        ids.push(id);
    }
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let h = http();
    let page = body_of(&h, &console.url(&format!("/jobs/{}", ids[0]))).await;
    assert!(
        page.contains("{&#34;m&#34;: 1000") || page.contains("{&quot;m&quot;: 1000"),
        "{page}"
    );
    assert!(page.contains("(unreadable: number out of range"), "{page}");
    let page = body_of(&h, &console.url(&format!("/jobs/{}", ids[1]))).await;
    assert!(
        page.contains("(unreadable: recursion limit exceeded"),
        "{page}"
    );
    let list = body_of(&h, &console.url("/jobs")).await;
    for id in &ids {
        assert!(list.contains(&format!("<tr data-id=\"{id}\"")), "{list}");
    }
    // The JSON escape of NUL in the meta filter: 400 naming it, not a database error.
    for meta in [r#"{"a":"\u0000"}"#, r#"{"a":"x\u0000y"}"#] {
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("meta", meta)
            .finish();
        let r = h
            .get(console.url(&format!("/jobs?{query}")))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body = r.text().await.unwrap();
        assert_eq!(status, 400, "{meta}: {body}");
        assert!(body.contains("NUL character"), "{body}");
        assert!(!body.contains("database error"), "{body}");
    }
}

#[tokio::test]
async fn characters_that_show_nothing_are_shown_escaped_on_the_pages() {
    // Hangul fillers and tag characters show as nothing: a kind `b\u{3164}` looked like `b`.
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let ids = enqueue(&db, "b\u{3164}\u{e0041}", "q\u{115f}", 1).await;
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let h = http();
    let job = body_of(&h, &console.url(&format!("/jobs/{}", ids[0]))).await;
    let list = body_of(&h, &console.url("/jobs")).await;
    for (what, page) in [("job", &job), ("list", &list)] {
        assert!(page.contains("b\\u{3164}\\u{e0041}"), "{what}: {page}");
        // Form values (the filter's inputs and suggestions) carry the real text.
        let mut parts = page.split("value=\"");
        let shown: String = parts
            .next()
            .into_iter()
            .chain(parts.map(|part| part.split_once('"').map_or(part, |(_, after)| after)))
            .collect();
        for c in ['\u{3164}', '\u{e0041}', '\u{115f}'] {
            assert!(!shown.contains(c), "{what} shows {c:?} raw");
        }
    }
}

#[tokio::test]
async fn wrong_tokens_lock_a_client_out_and_weak_tokens_are_refused_at_start() {
    for weak in ["aaaaaaaaaaaaaaaaaaaa", "abababababababababab"] {
        let out = cmd("postgres://nobody@127.0.0.1:1/none")
            .args(["web", "--listen", "127.0.0.1:0"])
            .env("SKIPLOCK_WEB_TOKEN", weak)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("SKIPLOCK_WEB_TOKEN")
                && err.contains("distinct characters")
                && !err.contains(weak),
            "{err}"
        );
    }
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let console = start_console(&op.url, "127.0.0.1:0", Some(TOKEN));
    let h = http();
    let login = body_of(&h, &console.url("/login")).await;
    let csrf = csrf_in(&login);
    let attempt = |token: &str| {
        h.post(console.url("/login"))
            .form(&[("csrf", csrf.as_str()), ("token", token), ("next", "/")])
            .send()
    };
    for i in 0..5 {
        let r = attempt(&format!("wrong-token-number-{i}-xyz"))
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "attempt {i}");
    }
    // Locked out: even the right token is not looked at, and no session is made.
    let r = attempt(TOKEN).await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().get("retry-after").is_some());
    assert!(r.headers().get("set-cookie").is_none());
    let r = h
        .get(console.url("/jobs"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        429,
        "a bearer token is a login of its own, limited alike"
    );
    let r = h
        .get(console.url("/jobs"))
        .bearer_auth("wrong-token-wrong-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
}

/// Logs in with `token` through the form; returns the Set-Cookie header of the session.
async fn log_in(h: &reqwest::Client, console: &Served, token: &str) -> String {
    let login = body_of(h, &console.url("/login")).await;
    let csrf = csrf_in(&login);
    let r = h
        .post(console.url("/login"))
        .form(&[("csrf", csrf.as_str()), ("token", token), ("next", "/")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    r.headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.contains("skiplock_session="))
        .expect("a session cookie")
}

#[tokio::test]
async fn a_session_is_random_ends_at_logout_and_is_secure_behind_https() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let console = start_console(&op.url, "127.0.0.1:0", Some(TOKEN));
    let h = http();
    let first = log_in(&h, &console, TOKEN).await;
    let second = log_in(&http(), &console, TOKEN).await;
    let value = |c: &str| c.split(';').next().unwrap().to_string();
    assert_ne!(value(&first), value(&second), "each login its own session");
    let copy = value(&first);
    let with_copy = |path: &str| {
        reqwest::Client::new()
            .get(console.url(path))
            .header("cookie", copy.clone())
            .send()
    };
    assert_eq!(with_copy("/jobs").await.unwrap().status(), 200);
    // Log out: the session ends on the server, so a kept copy of the cookie opens nothing.
    let page = body_of(&h, &console.url("/")).await;
    let r = h
        .post(console.url("/logout"))
        .form(&[("csrf", csrf_in(&page))])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(with_copy("/jobs").await.unwrap().status(), 401);
    drop(console);

    // Behind a TLS proxy: Secure, __Host- prefixed cookies.
    let console = start_console_with(
        &op.url,
        "127.0.0.1:0",
        Some(TOKEN),
        &[("SKIPLOCK_WEB_HTTPS", "true")],
    );
    let r = http().get(console.url("/login")).send().await.unwrap();
    let csrf_cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        csrf_cookie.starts_with("__Host-skiplock_csrf=") && csrf_cookie.contains("; Secure"),
        "{csrf_cookie}"
    );
    let nonce = value(&csrf_cookie);
    let page = r.text().await.unwrap();
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(console.url("/login"))
        .header("cookie", nonce)
        .form(&[("csrf", csrf_in(&page).as_str()), ("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let session = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        session.starts_with("__Host-skiplock_session=")
            && session.contains("; Secure")
            && session.contains("Path=/")
            && !session.contains("Domain"),
        "{session}"
    );
}

#[tokio::test]
async fn a_read_only_login_reads_every_page_and_presses_no_button() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let ids = enqueue(&db, "noop", "ro", 2).await;
    finish(&db, &ids[..1], "discarded", Some("boom")).await;
    let packet = packet_ready(&db, "ro").await;
    const READ: &str = "read-only-token-9876543210";
    let console = start_console_with(
        &op.url,
        "127.0.0.1:0",
        Some(TOKEN),
        &[("SKIPLOCK_WEB_READ_TOKEN", READ)],
    );
    // A scraper's bearer read token: /metrics and pages, nothing else.
    let r = http()
        .get(console.url("/metrics"))
        .bearer_auth(READ)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = http();
    log_in(&h, &console, READ).await;
    let page = body_of(&h, &console.url("/")).await;
    assert!(page.contains("read-only login"), "{page}");
    let csrf = csrf_in(&page);
    for path in ["/jobs", "/packets", "/crawl", &format!("/jobs/{}", ids[0])] {
        body_of(&h, &console.url(path)).await;
    }
    let posts: Vec<(String, Vec<(&str, String)>)> = vec![
        ("/queues/pause".into(), vec![("queue", "ro".into())]),
        ("/queues/resume".into(), vec![("queue", "ro".into())]),
        (format!("/jobs/{}/retry", ids[0]), vec![]),
        (format!("/jobs/{}/cancel", ids[1]), vec![]),
        (
            "/jobs/bulk".into(),
            vec![
                ("action", "cancel".into()),
                ("confirm", "yes".into()),
                ("queue", "ro".into()),
            ],
        ),
        (format!("/packets/{packet}/take"), vec![]),
        (format!("/packets/{packet}/complete"), vec![]),
        (
            format!("/packets/{packet}/retry"),
            vec![("reason", "x".into())],
        ),
        (
            "/crawl/pack-now".into(),
            vec![("host", "example.com".into())],
        ),
    ];
    for (path, mut form) in posts {
        form.push(("csrf", csrf.clone()));
        let r = h.post(console.url(&path)).form(&form).send().await.unwrap();
        assert_eq!(r.status(), 403, "{path}");
    }
    for bearer in [READ] {
        let r = http()
            .post(console.url("/queues/pause"))
            .bearer_auth(bearer)
            .form(&[("queue", "ro")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
    }
    assert_eq!(state_of(&db, ids[0]).await, "discarded");
    assert_eq!(state_of(&db, ids[1]).await, "available");
    let paused: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.queues")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(paused, 0);
    let state: String =
        sqlx::query_scalar("SELECT state::text FROM skiplock.packets WHERE id = $1")
            .bind(packet)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(state, "ready_for_review");
    // The write token's login presses buttons as before.
    let w = http();
    log_in(&w, &console, TOKEN).await;
    let page = body_of(&w, &console.url("/")).await;
    let r = w
        .post(console.url(&format!("/jobs/{}/retry", ids[0])))
        .form(&[("csrf", csrf_in(&page))])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(state_of(&db, ids[0]).await, "available");
}

#[tokio::test]
async fn a_link_cannot_make_the_console_say_anything() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let ids = enqueue(&db, "noop", "default", 1).await;
    finish(&db, &ids, "discarded", Some("x")).await;
    let id = ids[0];
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let h = http();
    for path in [
        "/?paused=default.%20SECURITY%20NOTICE:%20visit%20http://evil.example".to_string(),
        "/?resumed=SECURITY%20NOTICE".into(),
        format!("/jobs/{id}?done=retried"),
        "/jobs?done=bulk-retry&n=99999".into(),
        "/crawl?packed=SECURITY%20NOTICE".into(),
        "/?flash=00112233445566778899aabbccddeeff".into(),
    ] {
        let page = body_of(&h, &console.url(&path)).await;
        assert!(!page.contains("id=\"flash\""), "{path}: {page}");
        assert!(!page.contains("SECURITY NOTICE") && !page.contains("available again"));
    }
    // A real press shows its message once, in this browser only.
    let page = body_of(&h, &console.url(&format!("/jobs/{id}"))).await;
    let r = h
        .post(console.url(&format!("/jobs/{id}/retry")))
        .form(&[("csrf", csrf_in(&page))])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let to = r.headers()["location"].to_str().unwrap().to_string();
    assert!(to.contains("flash="), "{to}");
    let elsewhere = body_of(&http(), &console.url(&to)).await;
    assert!(!elsewhere.contains("id=\"flash\""), "another browser");
    let page = body_of(&h, &console.url(&to)).await;
    assert!(page.contains("is available again"), "{page}");
    let again = body_of(&h, &console.url(&to)).await;
    assert!(!again.contains("id=\"flash\""), "shown once");
}

#[tokio::test]
async fn a_connection_that_sends_its_headers_slowly_is_closed() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let console = start_console_with(
        &op.url,
        "127.0.0.1:0",
        Some(TOKEN),
        &[("SKIPLOCK_WEB_READ_TIMEOUT", "1s")],
    );
    let addr = console.base.trim_start_matches("http://").to_string();
    // Generous deadline: the point is that it closes at all (it used to stay open).
    assert!(
        closes_a_slow_connection(
            &addr,
            "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a",
            LIMIT
        )
        .await,
        "a half-sent request head kept its connection open"
    );
    assert!(
        closes_a_slow_connection(&addr, "", LIMIT).await,
        "a silent connection stayed open"
    );
    // Normal requests are served as before.
    assert_eq!(
        http()
            .get(console.url("/login"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

/// A job page shows what the job's durable steps recorded (docs/steps.md, "Inspecting"): each
/// step with its attempt, result (cut) and note, the cursor, and the signal it waits for.
#[tokio::test]
async fn a_job_page_shows_its_steps_its_cursor_and_the_signal_it_waits_for() {
    let db = TestDb::new().await;
    let op = Operator::new(&db).await;
    let id = enqueue(&db, "noop", "default", 1).await[0];
    let plain = enqueue(&db, "noop", "default", 1).await[0];
    let long = "x".repeat(1000);
    sqlx::query(
        "INSERT INTO skiplock.job_steps (job_id, seq, kind, name, attempt, result, note) VALUES
           ($1, 0, 'cursor', '', 2, '1500', NULL),
           ($1, 1, 'step', 'charge<b>', 1, '{\"charge_id\": \"ch_1\"}', NULL),
           ($1, 2, 'step', 'long', 2, to_jsonb($2::text), 'recorded by attempt 2 before steps 3..=3'),
           ($1, 3, 'wait', 'approved', 2, '{\"until\": \"2030-01-02T03:04:05Z\", \"scopes\": null}', NULL)",
    )
    .bind(id)
    .bind(&long)
    .execute(&*db.pool)
    .await
    .unwrap();
    let console = start_console(&op.url, "127.0.0.1:0", None);
    let h = http();
    let page = body_of(&h, &console.url(&format!("/jobs/{id}"))).await;
    assert!(page.contains("Steps (3)"), "{page}");
    assert!(page.contains("<code id=\"cursor\">1500</code>"), "{page}");
    assert!(
        page.contains("charge&#60;b&#62;"),
        "names are escaped: {page}"
    );
    assert!(!page.contains("charge<b>"), "{page}");
    assert!(page.contains("ch_1"), "{page}");
    assert!(
        page.contains("recorded by attempt 2 before steps 3..=3"),
        "{page}"
    );
    assert!(
        page.contains(&format!("&#34;{}…", "x".repeat(299))),
        "a long result is cut to 300 characters"
    );
    assert!(!page.contains(&long), "a long result is cut");
    let waits = page.split("id=\"waits\"").nth(1).expect("pending waits");
    let waits = waits.split("</p>").next().unwrap();
    assert!(
        waits.contains("approved") && waits.contains("2030-01-02"),
        "{waits}"
    );
    // A job without records has no steps section.
    let page = body_of(&h, &console.url(&format!("/jobs/{plain}"))).await;
    assert!(!page.contains("id=\"steps\""), "{page}");
}

//! Overview: per queue, jobs by state and the oldest waiting job's age; completed and
//! failed jobs per minute over the last hour (an SVG chart); live workers.

use askama::Template;
use axum::Extension;
use axum::extract::{Form, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::{Layout, PageError, html, q, see_other_with};
use crate::store::web as store;
use crate::web::request::CsrfNonce;
use crate::web::{AppState, LIVE_WORKER_SECS, REFRESH_SECS, chart, format};

/// One count in the queue table.
pub struct Cell {
    /// The job state it counts (its link filters by it); `scheduled` links to `available`.
    pub state: &'static str,
    /// The count.
    pub n: i64,
    /// The count as shown.
    pub text: String,
}

fn cell(state: &'static str, n: i64) -> Cell {
    Cell {
        state,
        n,
        text: format::count(n),
    }
}

/// One queue's row.
pub struct QueueRow {
    /// Queue name.
    pub queue: String,
    /// The name for a query string.
    pub queue_q: String,
    /// Counts by state.
    pub cells: Vec<Cell>,
    /// Age of the oldest due waiting job.
    pub oldest: String,
    /// Whether the queue is paused (its button says Resume, else Pause).
    pub paused: bool,
    /// Its limits as text ("concurrency 2, per key 1, rate 1/500ms, at most 1000 waiting"),
    /// empty: none.
    pub limits: String,
}

/// The line adding up the queues past the first N (`SKIPLOCK_TOP_QUEUES`).
pub struct RestRow {
    /// How many queues it adds up, as shown.
    pub queues: String,
    /// Their counts by state, added up.
    pub cells: Vec<Cell>,
    /// Age of the oldest due waiting job among them.
    pub oldest: String,
}

/// One worker's row.
pub struct WorkerRow {
    /// Worker id.
    pub id: String,
    /// Host.
    pub host: String,
    /// PID.
    pub pid: i32,
    /// Queues it serves.
    pub queues: String,
    /// Uptime.
    pub uptime: String,
    /// Last heartbeat (time).
    pub heartbeat_at: String,
    /// Last heartbeat (age).
    pub heartbeat_age: String,
}

#[derive(Template)]
#[template(path = "overview.html", config = "src/web/askama.toml")]
struct OverviewPage {
    layout: Layout,
    queues: Vec<QueueRow>,
    rest: Option<RestRow>,
    totals: Vec<Cell>,
    chart: String,
    completed_hour: String,
    failed_hour: String,
    workers: Vec<WorkerRow>,
    live_window: String,
}

fn cells(c: &store::QueueCounts) -> Vec<Cell> {
    vec![
        cell("waiting", c.waiting),
        cell("available", c.available),
        cell("available", c.scheduled),
        cell("running", c.running),
        cell("completed", c.completed),
        cell("discarded", c.discarded),
        cell("cancelled", c.cancelled),
    ]
}

/// The message after a Pause / Resume button (a one-shot id, src/web/flash.rs).
#[derive(Debug, Default, Deserialize)]
pub struct OverviewQuery {
    /// The message's id.
    pub flash: Option<String>,
}

/// A queue's limits as one line (empty: none).
fn limits_text(c: &store::QueueCounts) -> String {
    use crate::store::control::{describe_limits, rate_of};
    let mut parts = describe_limits(
        c.concurrency,
        c.key_concurrency,
        rate_of(c.key_rate, c.key_period_secs),
    );
    if let Some(n) = c.max_waiting {
        parts.push(format!("at most {n} waiting"));
    }
    parts.join(", ")
}

/// `GET /`.
pub async fn page(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Query(oq): Query<OverviewQuery>,
) -> Result<Response, PageError> {
    let (counts, minutes, workers) = tokio::try_join!(
        store::queue_counts(&st.pool, st.top_queues),
        store::throughput(&st.pool),
        store::live_workers(&st.pool, LIVE_WORKER_SECS),
    )
    .map_err(|e| PageError::from(e).framed(&st, &nonce))?;
    let mut total = store::QueueCounts {
        queue: None,
        waiting: 0,
        available: 0,
        scheduled: 0,
        running: 0,
        completed: 0,
        discarded: 0,
        cancelled: 0,
        oldest_wait_secs: None,
        paused: false,
        concurrency: None,
        key_concurrency: None,
        key_rate: None,
        max_waiting: None,
        key_period_secs: None,
        queues: 0,
    };
    for c in &counts {
        total.waiting += c.waiting;
        total.available += c.available;
        total.scheduled += c.scheduled;
        total.running += c.running;
        total.completed += c.completed;
        total.discarded += c.discarded;
        total.cancelled += c.cancelled;
        total.queues += c.queues;
    }
    let bars: Vec<chart::Bar> = minutes
        .iter()
        .map(|m| chart::Bar {
            minute: m.minute,
            completed: m.completed,
            failed: m.failed,
        })
        .collect();
    let mut layout = Layout::new(&st, &nonce, "Overview", "overview");
    layout.refresh = REFRESH_SECS;
    layout.take_flash(&st, &nonce, oq.flash.as_deref());
    html(&OverviewPage {
        layout,
        queues: counts
            .iter()
            .filter_map(|c| {
                let name = c.queue.as_deref()?;
                Some(QueueRow {
                    queue: name.to_string(),
                    queue_q: q(name),
                    cells: cells(c),
                    oldest: format::age_opt(c.oldest_wait_secs),
                    paused: c.paused,
                    limits: limits_text(c),
                })
            })
            .collect(),
        rest: counts.iter().find(|c| c.queue.is_none()).map(|c| RestRow {
            queues: format::count(c.queues),
            cells: cells(c),
            oldest: format::age_opt(c.oldest_wait_secs),
        }),
        totals: cells(&total),
        chart: chart::throughput_svg(&bars),
        completed_hour: format::count(minutes.iter().map(|m| m.completed).sum()),
        failed_hour: format::count(minutes.iter().map(|m| m.failed).sum()),
        workers: workers
            .into_iter()
            .map(|w| WorkerRow {
                queues: if w.queues.is_empty() {
                    "every queue with due jobs".to_string()
                } else {
                    w.queues.join(", ")
                },
                uptime: format::age(w.uptime_secs),
                heartbeat_at: format::time(Some(w.heartbeat_at)),
                heartbeat_age: format::age(w.heartbeat_age_secs),
                id: w.id,
                host: w.host,
                pid: w.pid,
            })
            .collect(),
        live_window: format::age(LIVE_WORKER_SECS),
    })
}

/// The Pause / Resume buttons' form.
#[derive(Debug, Deserialize)]
pub struct QueueForm {
    /// The queue.
    pub queue: Option<String>,
}

/// Pauses (`pause`) or resumes the form's queue, then back to the overview with a message.
async fn pause_or_resume(
    st: AppState,
    nonce: CsrfNonce,
    form: QueueForm,
    pause: bool,
) -> Result<Response, PageError> {
    let queue = form.queue.unwrap_or_default();
    if let Err(e) = crate::store::control::check_queue(&queue) {
        return Err(PageError::refused(StatusCode::BAD_REQUEST, e.to_string())
            .back("/")
            .framed(&st, &nonce));
    }
    let done = if pause {
        crate::store::control::pause(&st.pool, &queue).await
    } else {
        crate::store::control::resume(&st.pool, &queue).await
    };
    done.map_err(|e| PageError::from(e).back("/").framed(&st, &nonce))?;
    let said = if pause {
        format!("Queue {queue} is paused: no worker claims from it (running jobs finish).")
    } else {
        format!("Queue {queue} is resumed.")
    };
    Ok(see_other_with(&st, &nonce, "/", said))
}

/// `POST /queues/pause` (`skiplock.pause_queue`).
pub async fn pause(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Form(form): Form<QueueForm>,
) -> Result<Response, PageError> {
    pause_or_resume(st, nonce, form, true).await
}

/// `POST /queues/resume` (`skiplock.resume_queue`).
pub async fn resume(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Form(form): Form<QueueForm>,
) -> Result<Response, PageError> {
    pause_or_resume(st, nonce, form, false).await
}

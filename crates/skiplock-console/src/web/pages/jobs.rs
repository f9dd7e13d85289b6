//! Jobs: the filtered list (state, kind, queue, text in args or errors, a tag, a JSON object
//! the meta contains) with keyset paging
//! by id, one job's page (args, result, every error, timestamps) with Retry and Cancel, and
//! bulk Retry / Cancel of the filtered set (`skiplock.retry_jobs` / `cancel_jobs`).

use askama::Template;
use axum::Extension;
use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use super::{Layout, PageError, html, q, see_other_with};
use crate::queue::JobState;
use crate::queue::flow::{COUNTED_DEPENDENCIES, LISTED_DEPENDENCIES, not_listed};
use crate::store::flows;
use crate::store::web::{self as store, JobFilter, Page};
use crate::web::request::CsrfNonce;
use crate::web::{AppState, BULK_MAX, PAGE_SIZE, format};

/// Longest kind or queue name (as the SQL API allows).
const MAX_NAME: usize = 200;
/// Longest search text.
const MAX_SEARCH: usize = 1000;
/// Longest tag (as the SQL API allows: skiplock._tags).
const MAX_TAG: usize = 100;
/// Longest meta filter (JSON text).
const MAX_META: usize = 2000;

/// The list's query string.
#[derive(Debug, Default, Deserialize)]
pub struct JobsQuery {
    /// Job state.
    pub state: Option<String>,
    /// Job kind (exact).
    pub kind: Option<String>,
    /// Queue (exact).
    pub queue: Option<String>,
    /// Text in args or errors.
    pub q: Option<String>,
    /// One of the job's tags.
    pub tag: Option<String>,
    /// A JSON object the job's meta contains (jsonb `@>`), e.g. `{"tenant": "acme"}`.
    pub meta: Option<String>,
    /// Older than this id.
    pub before: Option<String>,
    /// Newer than this id.
    pub after: Option<String>,
    /// The message after a bulk press (a one-shot id, src/web/flash.rs).
    pub flash: Option<String>,
}

fn text_field(what: &str, v: Option<&str>, max: usize) -> Result<Option<String>, String> {
    match v {
        None | Some("") => Ok(None),
        Some(s) if s.contains('\0') => Err(format!("{what} contains a NUL character")),
        Some(s) if s.chars().count() > max => {
            Err(format!("{what} is longer than {max} characters"))
        }
        Some(s) => Ok(Some(s.to_string())),
    }
}

/// A meta filter: a JSON object (what `skiplock jobs --meta` and the bulk functions take).
fn meta_field(v: Option<&str>) -> Result<Option<Value>, String> {
    let Some(text) = text_field("meta", v.map(str::trim), MAX_META)? else {
        return Ok(None);
    };
    match serde_json::from_str::<Value>(&text) {
        // A `\u0000` escape: Postgres's jsonb cannot hold NUL and would refuse the query.
        Ok(v @ Value::Object(_)) => match crate::queue::enqueue::find_nul(&v) {
            Some(path) => Err(format!(
                "meta contains a NUL character (\\u0000) at {path}, which no stored meta can hold"
            )),
            None => Ok(Some(v)),
        },
        Ok(_) => Err(r#"meta must be a JSON object, e.g. {"tenant": "acme"}"#.into()),
        Err(e) => Err(format!("meta is not JSON: {e}")),
    }
}

/// The filter a query string asks for; empty fields mean "any". Refuses, in one line, an
/// unknown state, a NUL character (Postgres text cannot hold it), absurd lengths and a meta
/// that is not a JSON object.
pub fn parse_filter(
    state: Option<&str>,
    kind: Option<&str>,
    queue: Option<&str>,
    search: Option<&str>,
    tag: Option<&str>,
    meta: Option<&str>,
) -> Result<JobFilter, String> {
    let state = match state.map(str::trim) {
        None | Some("") => None,
        Some(s) => Some(s.parse::<JobState>()?),
    };
    Ok(JobFilter {
        state,
        kind: text_field("kind", kind, MAX_NAME)?,
        queue: text_field("queue", queue, MAX_NAME)?,
        search: text_field("search text", search, MAX_SEARCH)?,
        tag: text_field("tag", tag, MAX_TAG)?,
        meta: meta_field(meta)?,
    })
}

/// The page a query string asks for: `before` (older), `after` (newer) or the first.
pub fn parse_page(before: Option<&str>, after: Option<&str>) -> Result<Page, String> {
    let id = |what: &str, v: &str| {
        v.trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{what} must be a job id (a positive whole number)"))
    };
    match (
        before.filter(|s| !s.is_empty()),
        after.filter(|s| !s.is_empty()),
    ) {
        (Some(_), Some(_)) => Err("give either before or after, not both".into()),
        (Some(b), None) => Ok(Page::Older(id("before", b)?)),
        (None, Some(a)) => Ok(Page::Newer(id("after", a)?)),
        (None, None) => Ok(Page::First),
    }
}

/// `/jobs?…` for `f`, plus `extra` (`before=…`, `after=…`).
pub fn list_url(f: &JobFilter, extra: &[(&str, String)]) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(s) = f.state {
        parts.push(format!("state={}", s.as_str()));
    }
    for (k, v) in [
        ("kind", &f.kind),
        ("queue", &f.queue),
        ("q", &f.search),
        ("tag", &f.tag),
        ("meta", &f.meta.as_ref().map(Value::to_string)),
    ] {
        if let Some(v) = v {
            parts.push(format!("{k}={}", q(v)));
        }
    }
    for (k, v) in extra {
        parts.push(format!("{k}={}", q(v)));
    }
    if parts.is_empty() {
        "/jobs".to_string()
    } else {
        format!("/jobs?{}", parts.join("&"))
    }
}

/// The filter in words, for the bulk form.
fn describe(f: &JobFilter) -> String {
    let mut p = Vec::new();
    if let Some(s) = f.state {
        p.push(format!("state {s}"));
    }
    if let Some(k) = &f.kind {
        p.push(format!("kind {k}"));
    }
    if let Some(qq) = &f.queue {
        p.push(format!("queue {qq}"));
    }
    if let Some(s) = &f.search {
        p.push(format!("text \"{s}\""));
    }
    if let Some(t) = &f.tag {
        p.push(format!("tag {t}"));
    }
    if let Some(m) = &f.meta {
        p.push(format!("meta containing {m}"));
    }
    if p.is_empty() {
        "no filter (every job)".into()
    } else {
        p.join(", ")
    }
}

/// A list row.
pub struct JobView {
    /// Id.
    pub id: i64,
    /// State.
    pub state: String,
    /// Kind.
    pub kind: String,
    /// Queue.
    pub queue: String,
    /// Attempts.
    pub attempt: i32,
    /// Attempt limit.
    pub max_attempts: i32,
    /// Due.
    pub scheduled_at: String,
    /// Finished.
    pub finalized_at: String,
    /// Args (cut short).
    pub args: String,
    /// Last error (cut short).
    pub last_error: String,
}

#[derive(Template)]
#[template(path = "jobs.html", config = "src/web/askama.toml")]
struct JobsPage {
    layout: Layout,
    states: Vec<String>,
    filter_state: String,
    filter_kind: String,
    filter_queue: String,
    filter_q: String,
    filter_tag: String,
    filter_meta: String,
    filter_text: String,
    kinds: Vec<String>,
    queue_names: Vec<String>,
    jobs: Vec<JobView>,
    newer_url: Option<String>,
    older_url: Option<String>,
    page_size: i64,
    bulk_max: String,
    bulk_retry: bool,
    bulk_cancel: bool,
}

fn bad_request(st: &AppState, nonce: &CsrfNonce, m: String) -> PageError {
    PageError::refused(StatusCode::BAD_REQUEST, m)
        .back("/jobs")
        .framed(st, nonce)
}

/// `GET /jobs`.
pub async fn list(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Query(qs): Query<JobsQuery>,
) -> Result<Response, PageError> {
    let f = parse_filter(
        qs.state.as_deref(),
        qs.kind.as_deref(),
        qs.queue.as_deref(),
        qs.q.as_deref(),
        qs.tag.as_deref(),
        qs.meta.as_deref(),
    )
    .map_err(|m| bad_request(&st, &nonce, m))?;
    let page = parse_page(qs.before.as_deref(), qs.after.as_deref())
        .map_err(|m| bad_request(&st, &nonce, m))?;
    let framed = |e: crate::Error| PageError::from(e).framed(&st, &nonce);
    let (mut rows, choices) = tokio::try_join!(
        store::jobs_page(&st.pool, &f, page, PAGE_SIZE + 1),
        store::filter_choices(&st.pool),
    )
    .map_err(framed)?;
    let more = rows.len() as i64 > PAGE_SIZE;
    let (has_newer, has_older) = match page {
        Page::First => (false, more),
        Page::Older(_) => (true, more),
        Page::Newer(_) => (more, true),
    };
    if more {
        match page {
            // Newest first; the extra row of a "newer" page is the newest, at the front.
            Page::Newer(_) => {
                rows.remove(0);
            }
            _ => rows.truncate(PAGE_SIZE as usize),
        }
    }
    let newer_url = match (has_newer, rows.first()) {
        (true, Some(r)) => Some(list_url(&f, &[("after", r.id.to_string())])),
        // A "newer" page that came back empty: start again from the newest.
        (true, None) => Some(list_url(&f, &[])),
        _ => None,
    };
    let older_url = match (has_older, rows.last()) {
        (true, Some(r)) => Some(list_url(&f, &[("before", r.id.to_string())])),
        _ => None,
    };
    let mut layout = Layout::new(&st, &nonce, "Jobs", "jobs");
    layout.take_flash(&st, &nonce, qs.flash.as_deref());
    let (mut kinds, mut queue_names) = (Vec::new(), Vec::new());
    for c in choices {
        if c.what == "kind" {
            kinds.push(c.name);
        } else {
            queue_names.push(c.name);
        }
    }
    html(&JobsPage {
        layout,
        states: JobState::ALL
            .iter()
            .map(|s| s.as_str().to_string())
            .collect(),
        filter_state: f.state.map(|s| s.as_str().to_string()).unwrap_or_default(),
        filter_kind: f.kind.clone().unwrap_or_default(),
        filter_queue: f.queue.clone().unwrap_or_default(),
        filter_q: f.search.clone().unwrap_or_default(),
        filter_tag: f.tag.clone().unwrap_or_default(),
        filter_meta: f.meta.as_ref().map(Value::to_string).unwrap_or_default(),
        filter_text: describe(&f),
        kinds,
        queue_names,
        jobs: rows
            .into_iter()
            .map(|r| JobView {
                id: r.id,
                state: r.state,
                kind: r.kind,
                queue: r.queue,
                attempt: r.attempt,
                max_attempts: r.max_attempts,
                scheduled_at: format::time(Some(r.scheduled_at)),
                finalized_at: format::time(r.finalized_at),
                args: r.args_preview,
                last_error: r.last_error.unwrap_or_default(),
            })
            .collect(),
        newer_url,
        older_url,
        page_size: PAGE_SIZE,
        bulk_max: format::count(BULK_MAX.into()),
        bulk_retry: f.state.is_none_or(JobState::is_finished),
        bulk_cancel: f.state.is_none_or(|s| !s.is_finished()),
    })
}

/// One entry of a job's `errors`.
pub struct ErrorView {
    /// The attempt it belongs to.
    pub attempt: String,
    /// When.
    pub at: String,
    /// The message.
    pub error: String,
}

/// A job's `errors` column as rows; anything that is not the usual
/// `[{attempt, at, error}]` (a plain SQL write can put anything there) is shown as JSON.
pub fn error_views(errors: &Value) -> Vec<ErrorView> {
    let text = |v: Option<&Value>| match v {
        None | Some(Value::Null) => "-".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    match errors {
        Value::Array(items) => items
            .iter()
            .map(|e| match e {
                Value::Object(o) => ErrorView {
                    attempt: text(o.get("attempt")),
                    at: match o
                        .get("at")
                        .and_then(Value::as_str)
                        .map(chrono::DateTime::parse_from_rfc3339)
                    {
                        Some(Ok(t)) => format::time(Some(t.with_timezone(&chrono::Utc))),
                        _ => text(o.get("at")),
                    },
                    error: text(o.get("error")),
                },
                other => ErrorView {
                    attempt: "-".into(),
                    at: "-".into(),
                    error: other.to_string(),
                },
            })
            .collect(),
        Value::Null => Vec::new(),
        other => vec![ErrorView {
            attempt: "-".into(),
            at: "-".into(),
            error: other.to_string(),
        }],
    }
}

#[derive(Template)]
#[template(path = "job.html", config = "src/web/askama.toml")]
struct JobPage {
    layout: Layout,
    id: i64,
    state: String,
    kind: String,
    queue: String,
    queue_q: String,
    attempt: i32,
    max_attempts: i32,
    priority: i16,
    unique_key: String,
    /// Each tag and its list link's query value.
    tags: Vec<(String, String)>,
    meta: String,
    attempted_by: String,
    created_at: String,
    scheduled_at: String,
    attempted_at: String,
    heartbeat_at: String,
    finalized_at: String,
    args: String,
    result: String,
    errors: Vec<ErrorView>,
    can_retry: bool,
    can_cancel: bool,
    /// The jobs it waits for, the first [`LISTED_DEPENDENCIES`]: (id, name or `-`, kind, state).
    dependencies: Vec<(i64, String, String, String)>,
    /// How many it waits for (counted up to [`COUNTED_DEPENDENCIES`]).
    dependency_count: i64,
    /// What is said of those not listed ("and 150 more").
    dependencies_more: Option<String>,
    /// The jobs that wait for it, the first [`LISTED_DEPENDENCIES`]: (id, kind, state).
    dependents: Vec<(i64, String, String)>,
    /// How many wait for it (counted up to [`COUNTED_DEPENDENCIES`]).
    dependent_count: i64,
    /// What is said of those not listed.
    dependents_more: Option<String>,
    /// Its flow's page, if it is part of one.
    flow: Option<i64>,
    /// What its durable steps recorded (docs/steps.md, "Inspecting"), the cursor apart.
    steps: Vec<StepView>,
    /// Its cursor, as the last checkpoint saved it.
    cursor: Option<String>,
    /// The signals it waits for and until when: (name, until).
    waits: Vec<(String, String)>,
}

/// One record of a job's durable steps on its page.
pub struct StepView {
    seq: i32,
    kind: String,
    name: String,
    attempt: i32,
    /// The result, compact and cut (a result may be 64 KiB, and a job holds 1000).
    result: String,
    note: String,
    at: String,
}

/// The most characters of a step's result the job page shows.
const STEP_RESULT_CHARS: usize = 300;

/// A job's records as its page shows them: the steps, the cursor, the pending waits.
fn step_views(
    records: Vec<crate::admin::StepRecord>,
) -> (Vec<StepView>, Option<String>, Vec<(String, String)>) {
    let compact = |r: &Option<crate::queue::StoredJson>| -> String {
        let text = match r.as_ref().map(|r| r.readable()) {
            None => "null".to_string(),
            Some(Ok(v)) => v.to_string(),
            Some(Err(u)) => u.text.to_string(),
        };
        match text.char_indices().nth(STEP_RESULT_CHARS) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text,
        }
    };
    let (mut steps, mut cursor, mut waits) = (Vec::new(), None, Vec::new());
    for r in records {
        if r.kind == "cursor" {
            cursor = Some(compact(&r.result));
            continue;
        }
        let value = r.result.as_ref().and_then(|v| v.value());
        if r.kind == "wait" && value.is_some_and(|v| v.get("outcome").is_none()) {
            let until = value
                .and_then(|v| v.get("until"))
                .and_then(|u| serde_json::from_value(u.clone()).ok());
            waits.push((r.name.clone(), format::time(until)));
        }
        steps.push(StepView {
            seq: r.seq,
            result: compact(&r.result),
            kind: r.kind,
            name: r.name,
            attempt: r.attempt,
            note: r.note.unwrap_or_default(),
            at: format::time(Some(r.recorded_at)),
        });
    }
    (steps, cursor, waits)
}

/// The message after a button (a one-shot id, src/web/flash.rs).
#[derive(Debug, Default, Deserialize)]
pub struct DoneQuery {
    /// The message's id.
    pub flash: Option<String>,
}

/// `GET /jobs/{id}`.
pub async fn show(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Path(id): Path<String>,
    Query(dq): Query<DoneQuery>,
) -> Result<Response, PageError> {
    let id = job_id(&st, &nonce, &id)?;
    let j = store::job(&st.pool, id)
        .await
        .map_err(|e| PageError::from(e).framed(&st, &nonce))?
        .ok_or_else(|| {
            PageError::not_found(format!("job {id}"))
                .back("/jobs")
                .framed(&st, &nonce)
        })?;
    let fail = |e: crate::Error| PageError::from(e).framed(&st, &nonce);
    // Bounded: any enqueuer may make 100,000 jobs a call wait for this one.
    let counts = flows::dependency_counts(&st.pool, id, COUNTED_DEPENDENCIES)
        .await
        .map_err(fail)?;
    let dependencies: Vec<_> = flows::first_dependency_results(&st.pool, id, LISTED_DEPENDENCIES)
        .await
        .map_err(fail)?
        .into_iter()
        .map(|d| {
            (
                d.id,
                d.name.unwrap_or_else(|| "-".into()),
                d.kind.unwrap_or_else(|| "-".into()),
                d.state.map_or("deleted", JobState::as_str).to_string(),
            )
        })
        .collect();
    let dependents: Vec<_> = flows::first_dependents(&st.pool, id, LISTED_DEPENDENCIES)
        .await
        .map_err(fail)?
        .into_iter()
        .map(|d| (d.id, d.kind, d.state.to_string()))
        .collect();
    let flow = flows::flow_of(&st.pool, id).await.map_err(fail)?;
    let (steps, cursor, waits) =
        step_views(crate::admin::job_steps(&st.pool, id).await.map_err(fail)?);
    let mut layout = Layout::new(&st, &nonce, format!("Job {id}"), "jobs");
    layout.take_flash(&st, &nonce, dq.flash.as_deref());
    html(&JobPage {
        layout,
        id,
        // A waiting job would run before its dependencies: skiplock.retry refuses it.
        can_retry: !matches!(j.state, JobState::Running | JobState::Waiting),
        can_cancel: matches!(
            j.state,
            JobState::Available | JobState::Running | JobState::Waiting
        ),
        dependencies_more: not_listed(dependencies.len(), counts.dependencies),
        dependency_count: counts.dependencies,
        dependencies,
        dependents_more: not_listed(dependents.len(), counts.dependents),
        dependent_count: counts.dependents,
        dependents,
        flow,
        steps,
        cursor,
        waits,
        queue_q: q(&j.queue),
        kind: j.kind,
        queue: j.queue,
        attempt: j.attempt,
        max_attempts: j.max_attempts,
        priority: j.priority,
        unique_key: j.unique_key.unwrap_or_else(|| "-".into()),
        tags: j.tags.iter().map(|t| (t.clone(), q(t))).collect(),
        meta: if j.meta.is_empty_object() {
            "-".into()
        } else {
            j.meta.describe()
        },
        attempted_by: j.attempted_by.unwrap_or_else(|| "-".into()),
        created_at: format::time(Some(j.created_at)),
        scheduled_at: format::time(Some(j.scheduled_at)),
        attempted_at: match (j.state, j.attempted_at) {
            // Claimed ahead, waiting in the worker's buffer (docs/internals.md, "When a job
            // started").
            (crate::queue::JobState::Running, None) => "not started: in a worker's buffer".into(),
            (_, t) => format::time(t),
        },
        heartbeat_at: format::time(j.heartbeat_at),
        finalized_at: format::time(j.finalized_at),
        args: format::args(&j.args),
        result: j
            .result
            .as_ref()
            .map(format::stored_json)
            .unwrap_or_else(|| "-".into()),
        errors: match j.errors.readable() {
            Ok(v) => error_views(v),
            Err(_) => vec![ErrorView {
                attempt: "-".into(),
                at: "-".into(),
                error: j.errors.describe(),
            }],
        },
        state: j.state.to_string(),
    })
}

fn job_id(st: &AppState, nonce: &CsrfNonce, raw: &str) -> Result<i64, PageError> {
    raw.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
        PageError::refused(StatusCode::BAD_REQUEST, format!("{raw:?} is not a job id"))
            .back("/jobs")
            .framed(st, nonce)
    })
}

/// `POST /jobs/{id}/retry`.
pub async fn retry(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let id = job_id(&st, &nonce, &id)?;
    store::retry_job(&st.pool, id).await.map_err(|e| {
        PageError::from(e)
            .back(format!("/jobs/{id}"))
            .framed(&st, &nonce)
    })?;
    Ok(see_other_with(
        &st,
        &nonce,
        &format!("/jobs/{id}"),
        format!("Job {id} is available again."),
    ))
}

/// `POST /jobs/{id}/cancel`.
pub async fn cancel(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let id = job_id(&st, &nonce, &id)?;
    store::cancel_job(&st.pool, id).await.map_err(|e| {
        PageError::from(e)
            .back(format!("/jobs/{id}"))
            .framed(&st, &nonce)
    })?;
    Ok(see_other_with(
        &st,
        &nonce,
        &format!("/jobs/{id}"),
        format!("Job {id} is cancelled."),
    ))
}

/// The bulk form.
#[derive(Debug, Deserialize)]
pub struct BulkForm {
    /// `retry` or `cancel`.
    pub action: Option<String>,
    /// The confirmation checkbox.
    pub confirm: Option<String>,
    /// Filter: state.
    pub state: Option<String>,
    /// Filter: kind.
    pub kind: Option<String>,
    /// Filter: queue.
    pub queue: Option<String>,
    /// Filter: text.
    pub q: Option<String>,
    /// Filter: tag.
    pub tag: Option<String>,
    /// Filter: meta (a JSON object).
    pub meta: Option<String>,
}

/// `POST /jobs/bulk`.
pub async fn bulk(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Form(form): Form<BulkForm>,
) -> Result<Response, PageError> {
    let f = parse_filter(
        form.state.as_deref(),
        form.kind.as_deref(),
        form.queue.as_deref(),
        form.q.as_deref(),
        form.tag.as_deref(),
        form.meta.as_deref(),
    )
    .map_err(|m| bad_request(&st, &nonce, m))?;
    if form.confirm.as_deref() != Some("yes") {
        return Err(bad_request(
            &st,
            &nonce,
            "tick \"I mean every matching job\" to apply a bulk action".into(),
        ));
    }
    let back = list_url(&f, &[]);
    let framed = |e: crate::Error| PageError::from(e).back(back.clone()).framed(&st, &nonce);
    let (done, n) = match form.action.as_deref() {
        Some("retry") => (
            "Retried",
            store::retry_jobs(&st.pool, &f, BULK_MAX)
                .await
                .map_err(framed)?,
        ),
        Some("cancel") => (
            "Cancelled",
            store::cancel_jobs(&st.pool, &f, BULK_MAX)
                .await
                .map_err(framed)?,
        ),
        _ => {
            return Err(bad_request(
                &st,
                &nonce,
                "the bulk action must be retry or cancel".into(),
            ));
        }
    };
    let said = format!(
        "{done} {} jobs (at most {} per press; press again for more).",
        format::count(n),
        format::count(BULK_MAX.into())
    );
    Ok(see_other_with(&st, &nonce, &list_url(&f, &[]), said))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_filter_is_what_the_query_string_says_and_bad_input_is_named() {
        assert_eq!(
            parse_filter(None, Some(""), Some(""), Some(""), None, Some(" ")).unwrap(),
            JobFilter::default()
        );
        let f = parse_filter(
            Some("discarded"),
            Some("fail"),
            Some("q 1"),
            Some("50%"),
            None,
            None,
        )
        .unwrap();
        assert_eq!(f.state, Some(JobState::Discarded));
        assert_eq!(f.kind.as_deref(), Some("fail"));
        assert_eq!(f.search.as_deref(), Some("50%"));
        assert!(
            parse_filter(Some("done"), None, None, None, None, None)
                .unwrap_err()
                .contains("\"done\"")
        );
        assert!(
            parse_filter(None, Some("a\0b"), None, None, None, None)
                .unwrap_err()
                .contains("NUL")
        );
        assert!(
            parse_filter(None, None, Some(&"q".repeat(201)), None, None, None)
                .unwrap_err()
                .contains("200")
        );
        assert!(parse_filter(None, None, None, Some(&"s".repeat(1001)), None, None).is_err());
        assert!(parse_filter(None, Some(&"k".repeat(200)), None, None, None, None).is_ok());
        // The JSON escape of NUL, not only a raw NUL: Postgres's jsonb cannot hold either.
        for meta in [
            r#"{"a": "\u0000"}"#,
            r#"{"a": {"b": ["x\u0000y"]}}"#,
            r#"{"\u0000": 1}"#,
        ] {
            let e = parse_filter(None, None, None, None, None, Some(meta)).unwrap_err();
            assert!(e.contains("NUL character (\\u0000) at $."), "{meta}: {e}");
        }
        let meta = |m: &str| parse_filter(None, None, None, None, None, Some(m));
        assert_eq!(
            meta(r#" {"tenant": "acme"} "#).unwrap().meta,
            Some(json!({"tenant": "acme"}))
        );
        assert!(meta("[1]").unwrap_err().contains("JSON object"));
        assert!(meta("{tenant").unwrap_err().contains("not JSON"));
        assert!(
            meta(&format!("{{\"k\": \"{}\"}}", "v".repeat(2000)))
                .unwrap_err()
                .contains("2000")
        );
    }

    #[test]
    fn pages_and_links_keep_the_filter() {
        assert_eq!(parse_page(None, None).unwrap(), Page::First);
        assert_eq!(parse_page(Some("42"), None).unwrap(), Page::Older(42));
        assert_eq!(parse_page(Some(""), Some("7")).unwrap(), Page::Newer(7));
        assert!(parse_page(Some("1"), Some("2")).is_err());
        assert!(parse_page(Some("-1"), None).is_err());
        assert!(parse_page(Some("x"), None).is_err());
        assert!(parse_page(Some("99999999999999999999"), None).is_err());
        let f = parse_filter(
            Some("failed".replace("failed", "discarded").as_str()),
            Some("a&b"),
            None,
            Some("x y"),
            Some("eu west"),
            Some(r#"{"tenant": "a b"}"#),
        )
        .unwrap();
        assert_eq!(
            list_url(&f, &[("before", "10".into())]),
            "/jobs?state=discarded&kind=a%26b&q=x+y&tag=eu+west&meta=%7B%22tenant%22%3A%22a+b%22%7D&before=10"
        );
        assert_eq!(list_url(&JobFilter::default(), &[]), "/jobs");
    }

    #[test]
    fn errors_show_whatever_the_column_holds() {
        let e = error_views(&json!([
            {"attempt": 1, "at": "2026-12-01T00:00:00Z", "error": "boom"},
            {"error": {"nested": true}},
            "plain"
        ]));
        assert_eq!(e.len(), 3);
        assert_eq!((e[0].attempt.as_str(), e[0].error.as_str()), ("1", "boom"));
        assert_eq!(
            (e[1].attempt.as_str(), e[1].error.as_str()),
            ("-", "{\"nested\":true}")
        );
        assert_eq!(e[2].error, "\"plain\"");
        assert!(error_views(&json!(null)).is_empty());
        assert_eq!(error_views(&json!({"x": 1})).len(), 1);
    }
}

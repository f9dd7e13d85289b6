//! A flow's page (docs/flows.md, "Seeing a flow"): its progress (jobs per state) and its jobs
//! with their names, states and how many dependencies each still waits for.

use askama::Template;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::{Layout, PageError, html};
use crate::store::flows;
use crate::web::request::CsrfNonce;
use crate::web::{AppState, PAGE_SIZE};

/// One job of the flow, as the page shows it.
pub struct MemberView {
    /// Its local name, or `-`.
    pub name: String,
    /// Its id.
    pub id: i64,
    /// Its kind.
    pub kind: String,
    /// Its state.
    pub state: String,
    /// How many dependencies it still waits for.
    pub pending: i32,
}

#[derive(Template)]
#[template(path = "flow.html", config = "src/web/askama.toml")]
struct FlowPage {
    layout: Layout,
    id: i64,
    total: i64,
    waiting: i64,
    available: i64,
    running: i64,
    completed: i64,
    discarded: i64,
    cancelled: i64,
    members: Vec<MemberView>,
    truncated: bool,
    /// The walk from a job that is not a recorded flow stopped at its bound
    /// (`flow_members.max_jobs`): the counts are of the jobs it reached.
    walk_stopped: bool,
}

/// `GET /flows/{id}`: `id` is a flow's id (what `skiplock.enqueue_flow` returned) or any
/// job's (that job and its dependents).
pub async fn show(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Path(raw): Path<String>,
) -> Result<Response, PageError> {
    let id = raw.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
        PageError::refused(StatusCode::BAD_REQUEST, format!("{raw:?} is not a flow id"))
            .back("/jobs")
            .framed(&st, &nonce)
    })?;
    let fail = |e: crate::Error| PageError::from(e).framed(&st, &nonce);
    let p = flows::flow_progress(&st.pool, id).await.map_err(fail)?;
    if p.total == 0 {
        return Err(PageError::not_found(format!("flow {id}"))
            .back("/jobs")
            .framed(&st, &nonce));
    }
    // A fan-out of 100,000 jobs is counted above, listed only in part.
    let limit = PAGE_SIZE * 10;
    let mut members = flows::flow_members(&st.pool, id, limit + 1)
        .await
        .map_err(fail)?;
    let truncated = members.len() as i64 > limit;
    members.truncate(limit as usize);
    html(&FlowPage {
        layout: Layout::new(&st, &nonce, format!("Flow {id}"), "jobs"),
        id,
        total: p.total,
        waiting: p.waiting,
        available: p.available,
        running: p.running,
        completed: p.completed,
        discarded: p.discarded,
        cancelled: p.cancelled,
        walk_stopped: p.truncated,
        members: members
            .into_iter()
            .map(|m| MemberView {
                name: m.name.unwrap_or_else(|| "-".into()),
                id: m.id,
                kind: m.kind,
                state: m.state.to_string(),
                pending: m.pending,
            })
            .collect(),
        truncated,
    })
}

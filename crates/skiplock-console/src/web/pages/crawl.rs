//! Crawl: hosts with their page counts, last and next fetch and politeness slot; a host's
//! pages with their status codes; packs with artifact key, size, pages and the pending
//! timer, and Pack now (`skiplock.pack_now`).

use askama::Template;
use axum::Extension;
use axum::extract::{Form, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::{Layout, PageError, html, q, see_other_with};
use crate::store::web as store;
use crate::web::request::CsrfNonce;
use crate::web::{AppState, REFRESH_SECS, format};

/// Hosts shown at most.
const MAX_HOSTS: i64 = 500;
/// Pages per page of a host.
const HOST_PAGE: i64 = 100;

/// A host row.
pub struct HostView {
    /// Host.
    pub host: String,
    /// For a query string.
    pub host_q: String,
    /// Pages known.
    pub pages: String,
    /// Pages fetched.
    pub fetched: String,
    /// Last fetch.
    pub last_fetched: String,
    /// Next fetch due.
    pub next_fetch: String,
    /// Politeness: the next fetch start allowed ("now" when one may start now).
    pub next_start: String,
}

/// A pack row.
pub struct PackView {
    /// Host.
    pub host: String,
    /// Artifact key.
    pub object_key: String,
    /// Size.
    pub size: String,
    /// Pages.
    pub pages: String,
    /// Packed at.
    pub packed_at: String,
    /// Packs so far.
    pub pack_count: String,
    /// Pending timer.
    pub timer_at: String,
}

#[derive(Template)]
#[template(path = "crawl.html", config = "src/web/askama.toml")]
struct CrawlPage {
    layout: Layout,
    hosts: Vec<HostView>,
    hosts_cut: bool,
    packs: Vec<PackView>,
}

/// The pack-now message.
#[derive(Debug, Default, Deserialize)]
pub struct CrawlQuery {
    /// The message's id (src/web/flash.rs).
    pub flash: Option<String>,
}

/// `GET /crawl`.
pub async fn page(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Query(cq): Query<CrawlQuery>,
) -> Result<Response, PageError> {
    let (hosts, packs) = tokio::try_join!(
        store::hosts(&st.pool, MAX_HOSTS + 1),
        store::packs(&st.pool, MAX_HOSTS),
    )
    .map_err(|e| PageError::from(e).framed(&st, &nonce))?;
    let hosts_cut = hosts.len() as i64 > MAX_HOSTS;
    let mut layout = Layout::new(&st, &nonce, "Crawl", "crawl");
    layout.refresh = REFRESH_SECS;
    layout.take_flash(&st, &nonce, cq.flash.as_deref());
    html(&CrawlPage {
        layout,
        hosts_cut,
        hosts: hosts
            .into_iter()
            .take(MAX_HOSTS as usize)
            .map(|h| HostView {
                host_q: q(&h.host),
                pages: format::count(h.pages),
                fetched: format::count(h.fetched),
                last_fetched: format::time(h.last_fetched),
                next_fetch: format::time(h.next_fetch),
                next_start: match h.next_start {
                    Some(t) => format::time(Some(t)),
                    None => "now".to_string(),
                },
                host: h.host,
            })
            .collect(),
        packs: packs
            .into_iter()
            .map(|p| PackView {
                object_key: p.object_key.unwrap_or_else(|| "-".into()),
                size: p.bytes.map(format::bytes).unwrap_or_else(|| "-".into()),
                pages: p.pages.map(format::count).unwrap_or_else(|| "-".into()),
                packed_at: format::time(p.packed_at),
                pack_count: p
                    .pack_count
                    .map(format::count)
                    .unwrap_or_else(|| "0".into()),
                timer_at: format::time(p.timer_at),
                host: p.host,
            })
            .collect(),
    })
}

/// A page of a host's pages.
pub struct PageView {
    /// Id.
    pub id: i64,
    /// URL.
    pub url: String,
    /// Last status code.
    pub status: String,
    /// Title.
    pub title: String,
    /// Last fetch.
    pub last_fetched: String,
    /// Next fetch.
    pub next_fetch: String,
    /// Note.
    pub note: String,
}

#[derive(Template)]
#[template(path = "host.html", config = "src/web/askama.toml")]
struct HostPage {
    layout: Layout,
    host: String,
    pages: Vec<PageView>,
    next_url: Option<String>,
}

/// `/crawl/host?host=…&after=…`.
#[derive(Debug, Default, Deserialize)]
pub struct HostQuery {
    /// The host.
    pub host: Option<String>,
    /// Pages with an id above this.
    pub after: Option<String>,
}

/// `GET /crawl/host`.
pub async fn host(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Query(hq): Query<HostQuery>,
) -> Result<Response, PageError> {
    let bad = |m: String| {
        PageError::refused(StatusCode::BAD_REQUEST, m)
            .back("/crawl")
            .framed(&st, &nonce)
    };
    let host = hq
        .host
        .filter(|h| !h.is_empty() && h.len() <= 300 && !h.contains('\0'))
        .ok_or_else(|| bad("host must be 1 to 300 characters".into()))?;
    let after = match hq.after.as_deref().filter(|a| !a.is_empty()) {
        None => None,
        Some(a) => Some(
            a.parse::<i64>()
                .map_err(|_| bad("after must be a page id".into()))?,
        ),
    };
    let mut rows = store::host_pages(&st.pool, &host, after, HOST_PAGE + 1)
        .await
        .map_err(|e| PageError::from(e).framed(&st, &nonce))?;
    let more = rows.len() as i64 > HOST_PAGE;
    rows.truncate(HOST_PAGE as usize);
    let next_url = match (more, rows.last()) {
        (true, Some(r)) => Some(format!("/crawl/host?host={}&after={}", q(&host), r.id)),
        _ => None,
    };
    html(&HostPage {
        layout: Layout::new(&st, &nonce, format!("Pages of {host}"), "crawl"),
        pages: rows
            .into_iter()
            .map(|p| PageView {
                id: p.id,
                url: p.url,
                status: p
                    .http_status
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "-".into()),
                title: p.title.unwrap_or_default(),
                last_fetched: format::time(p.last_fetched),
                next_fetch: format::time(p.next_fetch),
                note: p.note.unwrap_or_default(),
            })
            .collect(),
        host,
        next_url,
    })
}

/// The Pack now form.
#[derive(Debug, Default, Deserialize)]
pub struct PackForm {
    /// The host.
    pub host: Option<String>,
}

/// `POST /crawl/pack-now`.
pub async fn pack_now(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Form(form): Form<PackForm>,
) -> Result<Response, PageError> {
    let host = form.host.unwrap_or_default();
    if host.contains('\0') {
        return Err(PageError::refused(
            StatusCode::BAD_REQUEST,
            "the host contains a NUL character",
        )
        .back("/crawl")
        .framed(&st, &nonce));
    }
    store::pack_now(&st.pool, &host)
        .await
        .map_err(|e| PageError::from(e).back("/crawl").framed(&st, &nonce))?;
    Ok(see_other_with(
        &st,
        &nonce,
        "/crawl",
        format!(
            "{} will be packed now (its do-the-packing job is due).",
            host.trim()
        ),
    ))
}

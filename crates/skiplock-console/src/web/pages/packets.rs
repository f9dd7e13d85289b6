//! Packets board: packets grouped by whose move it is (machine: queued, processing;
//! people: ready_for_review, in_review, error), each with its history, and the operator's
//! buttons (Take, Complete, Retry with a reason) through the SQL API's functions, so the
//! transition table and its trigger decide exactly as for the CLI.

use std::collections::HashMap;

use askama::Template;
use axum::Extension;
use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::{Layout, PageError, html, see_other};
use crate::store::web::{self as store, PacketCounts, PacketEventLine, PacketLine};
use crate::web::request::CsrfNonce;
use crate::web::{AppState, BOARD_PER_STATE, format};
use crate::workflows::packets::transitions::{Mover, PacketState, mover};

/// Longest retry reason.
const MAX_REASON: usize = 1000;

/// One move in a history.
pub struct EventView {
    /// When.
    pub at: String,
    /// From (`submitted` for the first).
    pub from: String,
    /// To.
    pub to: String,
    /// Who.
    pub actor: String,
    /// Why.
    pub note: String,
}

/// A packet card.
pub struct PacketView {
    /// Id.
    pub id: i64,
    /// Label.
    pub name: String,
    /// Folder.
    pub source: String,
    /// State.
    pub state: String,
    /// Why processing failed.
    pub error: Option<String>,
    /// Last change.
    pub updated_at: String,
    /// Whether Take applies.
    pub can_take: bool,
    /// Whether Complete applies.
    pub can_complete: bool,
    /// Whether Retry applies.
    pub can_retry: bool,
    /// Its history, oldest first.
    pub history: Vec<EventView>,
}

/// One column of the board.
pub struct Column {
    /// State name.
    pub state: &'static str,
    /// Heading.
    pub label: &'static str,
    /// Packets in the state.
    pub count: i64,
    /// The first of them.
    pub packets: Vec<PacketView>,
    /// How many more are not shown.
    pub more: i64,
}

/// Which operator buttons apply in `state`: (take, complete, retry), from the transition
/// table itself (the moves whose mover is an operator).
pub fn buttons(state: PacketState) -> (bool, bool, bool) {
    let op = |to| mover(state, to) == Some(Mover::Operator);
    (
        op(PacketState::InReview),
        op(PacketState::Done),
        op(PacketState::Queued),
    )
}

fn view(p: PacketLine, events: &mut HashMap<i64, Vec<PacketEventLine>>) -> PacketView {
    let (can_take, can_complete, can_retry) = p
        .state
        .parse::<PacketState>()
        .map(buttons)
        .unwrap_or((false, false, false));
    PacketView {
        history: events
            .remove(&p.id)
            .unwrap_or_default()
            .into_iter()
            .map(|e| EventView {
                at: format::time(Some(e.at)),
                from: e.from_state.unwrap_or_else(|| "submitted".into()),
                to: e.to_state,
                actor: e.actor,
                note: e.note.unwrap_or_default(),
            })
            .collect(),
        id: p.id,
        name: p.name.unwrap_or_default(),
        source: p.source,
        state: p.state,
        error: p.error,
        updated_at: format::time(Some(p.updated_at)),
        can_take,
        can_complete,
        can_retry,
    }
}

fn by_packet(events: Vec<PacketEventLine>) -> HashMap<i64, Vec<PacketEventLine>> {
    let mut m: HashMap<i64, Vec<PacketEventLine>> = HashMap::new();
    for e in events {
        m.entry(e.packet_id).or_default().push(e);
    }
    m
}

#[derive(Template)]
#[template(path = "packets.html", config = "src/web/askama.toml")]
struct BoardPage {
    layout: Layout,
    counts: PacketCounts,
    machine: Vec<Column>,
    people: Vec<Column>,
    done: Vec<PacketView>,
}

/// The message after a move (`?done=…` is not used: the board shows the new state).
fn column(
    state: PacketState,
    label: &'static str,
    count: i64,
    packets: &mut Vec<PacketView>,
) -> Column {
    let mine: Vec<PacketView> = packets
        .extract_if(.., |p| p.state == state.as_str())
        .collect();
    Column {
        state: state.as_str(),
        label,
        count,
        more: (count - mine.len() as i64).max(0),
        packets: mine,
    }
}

/// `GET /packets`.
pub async fn board(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
) -> Result<Response, PageError> {
    let framed = |e: crate::Error| PageError::from(e).framed(&st, &nonce);
    let (open, done, counts) = tokio::try_join!(
        store::open_packets(&st.pool, BOARD_PER_STATE),
        store::done_packets(&st.pool, 20),
        store::packet_counts(&st.pool),
    )
    .map_err(framed)?;
    let ids: Vec<i64> = open.iter().map(|p| p.id).collect();
    let mut events = by_packet(store::packet_events(&st.pool, &ids).await.map_err(framed)?);
    let mut cards: Vec<PacketView> = open.into_iter().map(|p| view(p, &mut events)).collect();
    use PacketState::*;
    let machine = vec![
        column(Queued, "queued", counts.queued, &mut cards),
        column(Processing, "processing", counts.processing, &mut cards),
    ];
    let people = vec![
        column(
            ReadyForReview,
            "ready for review",
            counts.ready_for_review,
            &mut cards,
        ),
        column(InReview, "in review", counts.in_review, &mut cards),
        column(Error, "error", counts.error, &mut cards),
    ];
    html(&BoardPage {
        layout: Layout::new(&st, &nonce, "Packets", "packets"),
        counts,
        machine,
        people,
        done: done
            .into_iter()
            .map(|p| view(p, &mut HashMap::new()))
            .collect(),
    })
}

#[derive(Template)]
#[template(path = "packet.html", config = "src/web/askama.toml")]
struct PacketPage {
    layout: Layout,
    p: PacketView,
    created_at: String,
    job_id: Option<i64>,
    result: String,
}

fn packet_id(st: &AppState, nonce: &CsrfNonce, raw: &str) -> Result<i64, PageError> {
    raw.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
        PageError::refused(
            StatusCode::BAD_REQUEST,
            format!("{raw:?} is not a packet id"),
        )
        .back("/packets")
        .framed(st, nonce)
    })
}

/// `GET /packets/{id}`.
pub async fn show(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let id = packet_id(&st, &nonce, &id)?;
    let framed = |e: crate::Error| PageError::from(e).framed(&st, &nonce);
    let ids = [id];
    let (p, result, events) = tokio::try_join!(
        store::packet(&st.pool, id),
        store::packet_result(&st.pool, id),
        store::packet_events(&st.pool, &ids),
    )
    .map_err(framed)?;
    let p = p.ok_or_else(|| {
        PageError::not_found(format!("packet {id}"))
            .back("/packets")
            .framed(&st, &nonce)
    })?;
    let created_at = format::time(Some(p.created_at));
    let job_id = p.job_id;
    html(&PacketPage {
        layout: Layout::new(&st, &nonce, format!("Packet {id}"), "packets"),
        p: view(p, &mut by_packet(events)),
        created_at,
        job_id,
        result: result
            .and_then(|r| r.result)
            .as_ref()
            .map(format::json)
            .unwrap_or_else(|| "-".into()),
    })
}

/// A packet button's form.
#[derive(Debug, Default, Deserialize)]
pub struct MoveForm {
    /// Retry's reason.
    pub reason: Option<String>,
    /// `page`: back to the packet's page (else the board).
    pub back: Option<String>,
}

fn back_to(id: i64, form: &MoveForm) -> String {
    if form.back.as_deref() == Some("page") {
        format!("/packets/{id}")
    } else {
        format!("/packets#packet-{id}")
    }
}

async fn act(
    st: AppState,
    nonce: CsrfNonce,
    raw: String,
    form: MoveForm,
    what: &'static str,
) -> Result<Response, PageError> {
    let id = packet_id(&st, &nonce, &raw)?;
    let back = back_to(id, &form);
    let framed = |e: crate::Error| PageError::from(e).back(back.clone()).framed(&st, &nonce);
    match what {
        "take" => store::take_packet(&st.pool, id, None)
            .await
            .map_err(framed)?,
        "complete" => store::complete_packet(&st.pool, id, None)
            .await
            .map_err(framed)?,
        _ => {
            let reason = form.reason.as_deref().map(str::trim).unwrap_or("");
            if reason.is_empty() || reason.contains('\0') || reason.chars().count() > MAX_REASON {
                return Err(PageError::refused(
                    StatusCode::BAD_REQUEST,
                    format!("a retry needs a reason of 1 to {MAX_REASON} characters (it goes into the packet's history)"),
                )
                .back(back.clone())
                .framed(&st, &nonce));
            }
            store::retry_packet(&st.pool, id, Some(reason), None)
                .await
                .map_err(framed)?;
        }
    }
    Ok(see_other(&back))
}

/// `POST /packets/{id}/take`.
pub async fn take(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Path(id): Path<String>,
    Form(form): Form<MoveForm>,
) -> Result<Response, PageError> {
    act(st, nonce, id, form, "take").await
}

/// `POST /packets/{id}/complete`.
pub async fn complete(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Path(id): Path<String>,
    Form(form): Form<MoveForm>,
) -> Result<Response, PageError> {
    act(st, nonce, id, form, "complete").await
}

/// `POST /packets/{id}/retry`.
pub async fn retry(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Path(id): Path<String>,
    Form(form): Form<MoveForm>,
) -> Result<Response, PageError> {
    act(st, nonce, id, form, "retry").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_offers_exactly_the_operators_moves_of_the_table() {
        use PacketState::*;
        assert_eq!(buttons(Queued), (false, false, false));
        assert_eq!(buttons(Processing), (false, false, false));
        assert_eq!(buttons(ReadyForReview), (true, false, false));
        assert_eq!(buttons(InReview), (false, true, true));
        assert_eq!(buttons(Error), (false, false, true));
        assert_eq!(buttons(Done), (false, false, false));
    }
}

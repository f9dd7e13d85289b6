//! The doctor's page (docs/operations.md, "Keeping the database healthy"): what `skiplock
//! doctor` finds, worst first, each finding with its evidence, its cost and the fix. The same
//! read-only checks ([`skiplock::doctor::examine`]) as the command, run as the console's login.

use askama::Template;
use axum::Extension;
use axum::extract::State;
use axum::response::Response;

use super::{Layout, PageError, html};
use crate::web::AppState;
use crate::web::request::CsrfNonce;

/// One finding as the page shows it.
pub struct FindingView {
    /// `info`, `warning` or `ACTION`.
    pub severity: &'static str,
    /// The CSS class of the severity.
    pub class: &'static str,
    /// What it is about.
    pub area: &'static str,
    /// The check's stable name.
    pub check: &'static str,
    /// One line: what was found.
    pub summary: String,
    /// The facts behind it, as `name: value`.
    pub evidence: Vec<(String, String)>,
    /// What it costs while it lasts.
    pub cost: String,
    /// What to do.
    pub fix: String,
}

#[derive(Template)]
#[template(path = "doctor.html", config = "src/web/askama.toml")]
struct DoctorPage {
    layout: Layout,
    /// 0 all well, 1 warnings, 2 something needs action (as the command's exit status).
    status: u8,
    findings: Vec<FindingView>,
    horizon: String,
    dead_tuples: i64,
}

/// `GET /doctor`.
pub async fn page(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
) -> Result<Response, PageError> {
    let report = skiplock::doctor::examine(&st.pool, &st.doctor)
        .await
        .map_err(|e| PageError::from(e).framed(&st, &nonce))?;
    let findings = report
        .findings
        .iter()
        .map(|f| FindingView {
            severity: f.severity.label(),
            class: match f.severity {
                skiplock::doctor::Severity::Info => "info",
                skiplock::doctor::Severity::Warning => "warning",
                skiplock::doctor::Severity::Action => "action",
            },
            area: f.area.label(),
            check: f.check,
            summary: f.summary.clone(),
            evidence: f
                .evidence
                .iter()
                .map(|e| (e.name.clone(), e.value.clone()))
                .collect(),
            cost: f.cost.clone(),
            fix: f.fix.clone(),
        })
        .collect();
    html(&DoctorPage {
        layout: Layout::new(&st, &nonce, "Doctor".to_string(), "doctor"),
        status: report.exit_code,
        findings,
        horizon: skiplock::doctor::format_age(report.horizon_seconds),
        dead_tuples: report.dead_tuples,
    })
}

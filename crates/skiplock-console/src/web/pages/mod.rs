//! The console's pages: one module each, with the view structs their templates render.
//! Handlers turn rows from [`crate::store::web`] into display strings (times, ages, sizes)
//! here, so the templates only place text; askama escapes every value.

pub mod crawl;
pub mod doctor;
pub mod flows;
pub mod jobs;
pub mod login;
pub mod overview;
pub mod packets;

use askama::Template;
use axum::http::StatusCode;
use axum::http::header::LOCATION;
use axum::response::{Html, IntoResponse, Response};

use super::AppState;
use super::request::CsrfNonce;
use crate::error::Error;

/// What the frame around every page needs.
pub struct Layout {
    /// The page title.
    pub title: String,
    /// Which nav entry is lit.
    pub nav: &'static str,
    /// The CSRF token for this browser's forms.
    pub csrf: String,
    /// The database login.
    pub db_user: String,
    /// Whether to offer "Log out" (a token is set).
    pub logout: bool,
    /// A read-only login: no buttons are offered (every POST would be refused).
    pub read_only: bool,
    /// Stylesheet and script URLs.
    pub css: String,
    /// See `css`.
    pub js: String,
    /// skiplock's version.
    pub version: &'static str,
    /// When the page was rendered.
    pub now: String,
    /// Seconds between automatic refreshes (0: none).
    pub refresh: u32,
    /// A success message.
    pub flash_ok: Option<String>,
    /// An error message.
    pub flash_err: Option<String>,
}

impl Layout {
    /// The frame for page `title` under nav entry `nav`.
    pub fn new(
        st: &AppState,
        nonce: &CsrfNonce,
        title: impl Into<String>,
        nav: &'static str,
    ) -> Layout {
        Layout {
            title: title.into(),
            nav,
            csrf: st.auth.csrf_token(&nonce.0),
            db_user: st.db_user.to_string(),
            logout: st.auth.required(),
            read_only: nonce.1 == crate::web::auth::Access::Read,
            css: super::assets::css_url(),
            js: super::assets::js_url(),
            version: env!("CARGO_PKG_VERSION"),
            now: super::format::time(Some(chrono::Utc::now())),
            refresh: 0,
            flash_ok: None,
            flash_err: None,
        }
    }
}

impl Layout {
    /// Shows the one-shot message `id` (the `flash` query parameter) if it is this
    /// browser's (src/web/flash.rs).
    pub fn take_flash(&mut self, st: &AppState, nonce: &CsrfNonce, id: Option<&str>) {
        self.flash_ok = st.flash.take(&nonce.0, id);
    }
}

/// 303 to `to` carrying the one-shot message `text` for this browser (src/web/flash.rs):
/// the URL holds only a random id, so no link can make a page say something.
pub fn see_other_with(st: &AppState, nonce: &CsrfNonce, to: &str, text: String) -> Response {
    let id = st.flash.put(&nonce.0, text);
    let sep = if to.contains('?') { '&' } else { '?' };
    see_other(&format!("{to}{sep}flash={id}"))
}

/// A page that could not be shown or an action that was refused, rendered as a page with the
/// reason. Database errors are shown with passwords scrubbed.
pub struct PageError {
    status: StatusCode,
    heading: &'static str,
    message: String,
    back: String,
    layout: Option<Box<Layout>>,
}

#[derive(Template)]
#[template(path = "error.html", config = "src/web/askama.toml")]
struct ErrorPage<'a> {
    layout: &'a Layout,
    heading: &'a str,
    message: &'a str,
    back: &'a str,
}

impl PageError {
    /// A refusal (bad input, a move the rules forbid): 400 or 409 with the reason.
    pub fn refused(status: StatusCode, message: impl Into<String>) -> PageError {
        PageError {
            status,
            heading: "Refused",
            message: message.into(),
            back: "/".into(),
            layout: None,
        }
    }

    /// 404 for `what`.
    pub fn not_found(what: impl Into<String>) -> PageError {
        PageError {
            status: StatusCode::NOT_FOUND,
            heading: "Not found",
            message: format!("{} does not exist", what.into()),
            back: "/".into(),
            layout: None,
        }
    }

    /// Where "back" leads.
    pub fn back(mut self, to: impl Into<String>) -> PageError {
        self.back = to.into();
        self
    }

    /// Renders inside the console's frame (nav, login name).
    pub fn framed(mut self, st: &AppState, nonce: &CsrfNonce) -> PageError {
        self.layout = Some(Box::new(Layout::new(st, nonce, self.heading, "")));
        self
    }
}

impl From<Error> for PageError {
    fn from(e: Error) -> PageError {
        match e {
            Error::Invalid(m) => PageError::refused(StatusCode::CONFLICT, m),
            Error::NotFound(m) => PageError::not_found(m),
            other => {
                tracing::warn!(error = %other, "console page failed");
                if crate::db::outage::is_unavailable(&other) {
                    crate::db::hosts::console_failed();
                }
                PageError {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    heading: "Error",
                    message: crate::redact::scrub(&other.to_string()),
                    back: "/".into(),
                    layout: None,
                }
            }
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let layout = self.layout.map(|b| *b).unwrap_or_else(|| Layout {
            title: self.heading.to_string(),
            nav: "",
            csrf: String::new(),
            db_user: "-".into(),
            logout: false,
            read_only: false,
            css: super::assets::css_url(),
            js: super::assets::js_url(),
            version: env!("CARGO_PKG_VERSION"),
            now: super::format::time(Some(chrono::Utc::now())),
            refresh: 0,
            flash_ok: None,
            flash_err: None,
        });
        let page = ErrorPage {
            layout: &layout,
            heading: self.heading,
            message: &self.message,
            back: &self.back,
        };
        match page.render() {
            Ok(html) => (self.status, Html(html)).into_response(),
            Err(_) => (self.status, self.message).into_response(),
        }
    }
}

/// Renders a template into a 200 response.
pub fn html(t: &impl Template) -> Result<Response, PageError> {
    t.render()
        .map(|s| Html(s).into_response())
        .map_err(|e| PageError::from(Error::Other(format!("rendering the page: {e}"))))
}

/// 303 See Other to `to` (after a POST, so a reload does not repeat it).
pub fn see_other(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(LOCATION, to.to_string())]).into_response()
}

/// A query-string value, percent-encoded.
pub fn q(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// 404 for every other path.
pub async fn not_found() -> PageError {
    PageError::not_found("this page")
}

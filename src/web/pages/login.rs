//! The login form (only when `SKIPLOCK_WEB_TOKEN` is set): trades the token for the session
//! cookie; and logging out.

use askama::Template;
use axum::Extension;
use axum::extract::{Form, Query, State};
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use super::see_other;
use crate::web::AppState;
use crate::web::auth::{self, SESSION_COOKIE};
use crate::web::guard::CsrfNonce;

#[derive(Template)]
#[template(path = "login.html", config = "src/web/askama.toml")]
struct LoginPage<'a> {
    css: String,
    csrf: String,
    next: String,
    message: Option<&'a str>,
}

/// The login page with `status` (401 when it stands in for a refused page).
pub fn render(
    st: &AppState,
    nonce: &str,
    next: Option<&str>,
    message: Option<&str>,
    status: StatusCode,
) -> Response {
    let page = LoginPage {
        css: crate::web::assets::css_url(),
        csrf: st.auth.csrf_token(nonce),
        next: auth::safe_next(next),
        message,
    };
    match page.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(_) => (status, "log in with the console's token").into_response(),
    }
}

/// `?next=…`.
#[derive(Debug, Default, Deserialize)]
pub struct NextQuery {
    /// Where to go after logging in.
    pub next: Option<String>,
}

/// `GET /login`.
pub async fn form(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Query(nq): Query<NextQuery>,
) -> Response {
    if !st.auth.required() {
        return see_other("/");
    }
    render(&st, &nonce.0, nq.next.as_deref(), None, StatusCode::OK)
}

/// The login form's fields.
#[derive(Debug, Default, Deserialize)]
pub struct LoginForm {
    /// The token.
    pub token: Option<String>,
    /// Where to go next.
    pub next: Option<String>,
}

/// `POST /login`.
pub async fn submit(
    State(st): State<AppState>,
    Extension(nonce): Extension<CsrfNonce>,
    Form(f): Form<LoginForm>,
) -> Response {
    let Some(session) = st.auth.session_value() else {
        return see_other("/");
    };
    if !st.auth.token_matches(f.token.as_deref().unwrap_or("")) {
        tracing::warn!("console login refused: wrong token");
        return render(
            &st,
            &nonce.0,
            f.next.as_deref(),
            Some("That is not the console's token."),
            StatusCode::UNAUTHORIZED,
        );
    }
    let mut resp = see_other(&auth::safe_next(f.next.as_deref()));
    if let Ok(v) = HeaderValue::from_str(&auth::set_cookie(SESSION_COOKIE, &session, false)) {
        resp.headers_mut().append(SET_COOKIE, v);
    }
    resp
}

/// `POST /logout`.
pub async fn logout() -> Response {
    let mut resp = see_other("/login");
    if let Ok(v) = HeaderValue::from_str(&auth::set_cookie(SESSION_COOKIE, "", true)) {
        resp.headers_mut().append(SET_COOKIE, v);
    }
    resp
}

//! The login form (only when `SKIPLOCK_WEB_TOKEN` or `SKIPLOCK_WEB_READ_TOKEN` is set):
//! trades a token for a fresh server-side session (src/web/auth.rs), at most
//! [`auth::LOGIN_FAILURES`] wrong tokens per client address and lockout; and logging out,
//! which ends the session on the server.

use askama::Template;
use axum::Extension;
use axum::extract::{Form, Query, State};
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use super::see_other;
use crate::web::AppState;
use crate::web::auth;
use crate::web::request::{ClientIp, CsrfNonce};

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
    Extension(ClientIp(ip)): Extension<ClientIp>,
    Form(f): Form<LoginForm>,
) -> Response {
    if !st.auth.required() {
        return see_other("/");
    }
    // A locked-out address is refused without looking at the token, so guessing costs
    // LOGIN_LOCKOUT per LOGIN_FAILURES tries.
    if let Some(left) = st.auth.limiter.locked(ip) {
        return crate::web::request::too_many(Some(left));
    }
    let Some(access) = st.auth.token_access(f.token.as_deref().unwrap_or("")) else {
        st.auth.limiter.failed(ip);
        tracing::warn!(client = %ip, "console login refused: wrong token");
        return render(
            &st,
            &nonce.0,
            f.next.as_deref(),
            Some("That is not the console's token."),
            StatusCode::UNAUTHORIZED,
        );
    };
    st.auth.limiter.succeeded(ip);
    let session = st.auth.open_session(access, ip);
    let mut resp = see_other(&auth::safe_next(f.next.as_deref()));
    if let Ok(v) = HeaderValue::from_str(&st.auth.set_cookie(
        st.auth.session_cookie(),
        &session,
        false,
    )) {
        resp.headers_mut().append(SET_COOKIE, v);
    }
    resp
}

/// `POST /logout`: the session ends on the server too, so a copy of the cookie opens
/// nothing afterwards.
pub async fn logout(State(st): State<AppState>, headers: HeaderMap) -> Response {
    st.auth.close_session(&headers);
    let mut resp = see_other("/login");
    if let Ok(v) = HeaderValue::from_str(&st.auth.set_cookie(st.auth.session_cookie(), "", true)) {
        resp.headers_mut().append(SET_COOKIE, v);
    }
    resp
}

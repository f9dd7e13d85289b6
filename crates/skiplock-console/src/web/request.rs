//! What the console's guard (`guard.rs`) learned about a request and hands to the pages, and
//! the refusals it and the login page answer with: below both, so the guard can render the
//! login form and the login page can refuse a locked-out address without either importing
//! the other.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};

use super::auth::{self, Access};

/// The browser's CSRF nonce for this request (from its cookie, or a fresh one the response
/// sets); pages put [`auth::Auth::csrf_token`] of it into their forms. With it, what the
/// request may do (a read-only login's pages offer no buttons).
#[derive(Debug, Clone)]
pub struct CsrfNonce(pub String, pub Access);

/// The client's address (the login limit counts per address).
#[derive(Debug, Clone, Copy)]
pub struct ClientIp(pub std::net::IpAddr);

/// A refusal page with `message`.
pub fn refused(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<!doctype html><meta charset=\"utf-8\"><title>Refused · skiplock</title>\
         <link rel=\"stylesheet\" href=\"{}\"><main><h1>Refused</h1>\
         <div class=\"flash err\" id=\"error\">{}</div><p><a href=\"/\">Overview</a></p></main>",
        super::assets::css_url(),
        message
    );
    (status, Html(body)).into_response()
}

/// 429 for a client address locked out by the login limit.
pub fn too_many(left: Option<std::time::Duration>) -> Response {
    let secs = left.map_or(auth::LOGIN_LOCKOUT.as_secs(), |d| d.as_secs() + 1);
    let mut r = refused(
        StatusCode::TOO_MANY_REQUESTS,
        &format!("refused: too many wrong tokens from this address; try again in {secs} s"),
    );
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        r.headers_mut().insert(axum::http::header::RETRY_AFTER, v);
    }
    r
}

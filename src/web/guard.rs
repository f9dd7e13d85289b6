//! The one middleware every request passes: method check, the token, the CSRF nonce cookie,
//! the CSRF check of every POST (the form body is read here, so no handler can forget it),
//! and the security headers of every response.

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY, SET_COOKIE, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};

use super::AppState;
use super::auth::{self, CSRF_COOKIE, CSRF_FIELD};
use super::pages::login;

/// The largest form body accepted (the biggest form is a retry reason).
const MAX_FORM: usize = 64 * 1024;

/// The browser's CSRF nonce for this request (from its cookie, or a fresh one the response
/// sets); pages put [`auth::Auth::csrf_token`] of it into their forms.
#[derive(Debug, Clone)]
pub struct CsrfNonce(pub String);

fn refused(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<!doctype html><meta charset=\"utf-8\"><title>Refused · skiplock</title>\
         <link rel=\"stylesheet\" href=\"{}\"><main><h1>Refused</h1>\
         <div class=\"flash err\" id=\"error\">{}</div><p><a href=\"/\">Overview</a></p></main>",
        super::assets::css_url(),
        message
    );
    (status, Html(body)).into_response()
}

/// The form field `name` of an `application/x-www-form-urlencoded` body.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    url::form_urlencoded::parse(body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// See the module docs.
pub async fn guard(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    if method != Method::GET && method != Method::HEAD && method != Method::POST {
        return refused(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and POST are served",
        );
    }
    let path = req.uri().path().to_string();
    let from_cookie = auth::cookie(req.headers(), CSRF_COOKIE)
        .filter(|n| auth::valid_nonce(n))
        .map(str::to_string);
    let fresh = from_cookie.is_none();
    let nonce = from_cookie.clone().unwrap_or_else(auth::new_nonce);
    let public = path == "/login" || path.starts_with("/assets/");

    let mut resp = if st.auth.required() && !public && !st.auth.authorized(req.headers()) {
        // Refused: the login form, with this page to come back to.
        let next_path = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .filter(|_| method == Method::GET);
        login::render(
            &st,
            &nonce,
            next_path.as_deref(),
            Some("This console needs its token."),
            StatusCode::UNAUTHORIZED,
        )
    } else if method == Method::POST {
        if auth::cross_site(req.headers()) {
            refused(
                StatusCode::FORBIDDEN,
                "refused: this request came from another site",
            )
        } else {
            let (parts, body) = req.into_parts();
            match to_bytes(body, MAX_FORM).await {
                Err(_) => refused(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "refused: the form is larger than 64 KiB",
                ),
                Ok(bytes) => {
                    let field = form_field(&bytes, CSRF_FIELD);
                    if !st.auth.csrf_ok(from_cookie.as_deref(), field.as_deref()) {
                        refused(
                            StatusCode::FORBIDDEN,
                            "refused: this form has no valid CSRF token (it is stale or did not come from this console); reload the page and try again",
                        )
                    } else {
                        let mut req = Request::from_parts(parts, Body::from(bytes));
                        req.extensions_mut().insert(CsrfNonce(nonce.clone()));
                        next.run(req).await
                    }
                }
            }
        }
    } else {
        let mut req = req;
        req.extensions_mut().insert(CsrfNonce(nonce.clone()));
        next.run(req).await
    };

    let h = resp.headers_mut();
    if fresh && let Ok(v) = HeaderValue::from_str(&auth::set_cookie(CSRF_COOKIE, &nonce, false)) {
        h.append(SET_COOKIE, v);
    }
    h.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !path.starts_with("/assets/") {
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

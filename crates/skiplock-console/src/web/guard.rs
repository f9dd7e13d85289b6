//! The one middleware every request passes: method check, the `Host` check (DNS
//! rebinding, [`super::hosts`]), the token or session (with the login limit), read-only
//! logins kept off every button, the CSRF nonce cookie, the CSRF check of every POST (the
//! form body is read here, so no handler can forget it), and the security headers of every
//! response.

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY, SET_COOKIE, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use super::AppState;
use super::auth::{self, Access, CSRF_FIELD, Identity};
use super::pages::login;
use super::request::{ClientIp, CsrfNonce, refused, too_many};

/// The largest form body accepted (the biggest form is a retry reason).
const MAX_FORM: usize = 64 * 1024;

/// The paths a POST may reach with a read-only login: logging in and out.
fn read_only_may_post(path: &str) -> bool {
    path == "/login" || path == "/logout"
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
    // Before anything else, even the login form: a request for a name that is not the
    // console's own may come from a DNS-rebinding page (src/web/hosts.rs).
    let host = req
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    if !host.as_deref().is_some_and(|h| st.hosts.host_ok(h)) {
        return refused(
            StatusCode::MISDIRECTED_REQUEST,
            &st.hosts.refusal(host.as_deref()),
        );
    }
    let path = req.uri().path().to_string();
    let ip = super::server::peer(&req).ip();
    let from_cookie = auth::cookie(req.headers(), st.auth.csrf_cookie())
        .filter(|n| auth::valid_nonce(n))
        .map(str::to_string);
    let fresh = from_cookie.is_none();
    let nonce = from_cookie.clone().unwrap_or_else(auth::new_nonce);
    let public = path == "/login" || path.starts_with("/assets/");
    let identity = st.auth.identify(req.headers());
    let locked = st.auth.limiter.locked(ip);
    let bearer = matches!(identity, Identity::Bearer(_) | Identity::WrongBearer);
    if identity == Identity::WrongBearer && locked.is_none() {
        tracing::warn!(client = %ip, "console request refused: wrong bearer token");
        st.auth.limiter.failed(ip);
    }
    // A bearer token is a login attempt of its own: while the address is locked out it is
    // not looked at, right or wrong (else the lockout would still answer every guess).
    let access = match identity {
        Identity::Known(a) => Some(a),
        Identity::Bearer(a) if locked.is_none() => Some(a),
        _ => None,
    };

    let mut resp = if st.auth.required() && !public && access.is_none() {
        if bearer && locked.is_some() {
            too_many(locked)
        } else {
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
        }
    } else if method == Method::POST && access == Some(Access::Read) && !read_only_may_post(&path) {
        refused(
            StatusCode::FORBIDDEN,
            "refused: this is a read-only login (SKIPLOCK_WEB_READ_TOKEN); log in with SKIPLOCK_WEB_TOKEN to press buttons",
        )
    } else if method == Method::POST {
        if auth::cross_site(req.headers(), &st.hosts) {
            refused(
                StatusCode::FORBIDDEN,
                "refused: this request came from another site",
            )
        } else {
            let (parts, body) = req.into_parts();
            match tokio::time::timeout(st.read_timeout, to_bytes(body, MAX_FORM)).await {
                Err(_) => refused(
                    StatusCode::REQUEST_TIMEOUT,
                    "refused: the form's body did not arrive in time",
                ),
                Ok(Err(_)) => refused(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "refused: the form is larger than 64 KiB",
                ),
                Ok(Ok(bytes)) => {
                    let field = form_field(&bytes, CSRF_FIELD);
                    if !st.auth.csrf_ok(from_cookie.as_deref(), field.as_deref()) {
                        refused(
                            StatusCode::FORBIDDEN,
                            "refused: this form has no valid CSRF token (it is stale or did not come from this console); reload the page and try again",
                        )
                    } else {
                        let mut req = Request::from_parts(parts, Body::from(bytes));
                        req.extensions_mut()
                            .insert(CsrfNonce(nonce.clone(), access.unwrap_or(Access::Read)));
                        req.extensions_mut().insert(ClientIp(ip));
                        next.run(req).await
                    }
                }
            }
        }
    } else {
        let mut req = req;
        req.extensions_mut()
            .insert(CsrfNonce(nonce.clone(), access.unwrap_or(Access::Read)));
        req.extensions_mut().insert(ClientIp(ip));
        next.run(req).await
    };

    let h = resp.headers_mut();
    if fresh
        && let Ok(v) =
            HeaderValue::from_str(&st.auth.set_cookie(st.auth.csrf_cookie(), &nonce, false))
    {
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

//! The console's stylesheet and script, compiled into the binary (no CDN: the console works
//! offline and behind any firewall). Served with a content hash in the URL, so a browser may
//! cache them for good and a new binary's assets are fetched anew.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The stylesheet.
pub const CSS: &str = include_str!("assets/console.css");
/// The refresh / confirm script.
pub const JS: &str = include_str!("assets/console.js");

/// A short content hash for cache-busting URLs.
fn short_hash(s: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(s.as_bytes())[..6])
}

/// The stylesheet's URL.
pub fn css_url() -> String {
    format!("/assets/console-{}.css", short_hash(CSS))
}

/// The script's URL.
pub fn js_url() -> String {
    format!("/assets/console-{}.js", short_hash(JS))
}

/// `GET /assets/{file}`.
pub async fn serve(Path(file): Path<String>) -> Response {
    let (body, mime) = if file == css_url().trim_start_matches("/assets/") {
        (CSS, "text/css; charset=utf-8")
    } else if file == js_url().trim_start_matches("/assets/") {
        (JS, "text/javascript; charset=utf-8")
    } else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    (
        [
            (header::CONTENT_TYPE, mime),
            (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
        ],
        body,
    )
        .into_response()
}

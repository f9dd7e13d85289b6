//! The HTTP side of a fetch: one shared client (User-Agent, timeouts, no proxies, no
//! automatic redirects: each hop is a fetch of its own, with its own politeness slot) whose
//! DNS resolver drops internal addresses, and a conditional GET with a capped body.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{
    CONTENT_TYPE, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED, LOCATION,
};
use url::Url;

use super::normalize::is_internal;
use crate::error::{Error, Result};

/// Resolves names with the system resolver and, unless private addresses are allowed,
/// keeps only public ones, so not even a redirect or a DNS change can reach internal
/// services.
struct GuardedResolver {
    allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = addrs
                .into_iter()
                .filter(|a| allow_private || !is_internal(a.ip()))
                .collect();
            if kept.is_empty() {
                return Err(format!("{host} resolves only to internal addresses (refused)").into());
            }
            let it: Addrs = Box::new(kept.into_iter());
            Ok(it)
        })
    }
}

/// Resolves `host` (a name or literal) and returns the first internal address among its
/// addresses, if any: the handler refuses such hosts up front, without a retry.
pub async fn internal_address(host: &str, port: u16) -> std::io::Result<Option<std::net::IpAddr>> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok(tokio::net::lookup_host((host, port))
        .await?
        .map(|a| a.ip())
        .find(|ip| is_internal(*ip)))
}

/// Builds the shared client.
pub fn client(user_agent: &str, timeout: Duration, allow_private: bool) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .user_agent(user_agent)
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver { allow_private }))
        .build()
        .map_err(|e| Error::Other(format!("building the HTTP client: {e}")))
}

/// A response, as much of it as a fetch needs.
#[derive(Debug, Clone)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// `ETag`, for the next conditional GET.
    pub etag: Option<String>,
    /// `Last-Modified`, for the next conditional GET.
    pub last_modified: Option<String>,
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// `Location` of a redirect.
    pub location: Option<String>,
    /// The body, at most the cap.
    pub body: Vec<u8>,
    /// Whether the body was cut at the cap.
    pub truncated: bool,
}

fn header(r: &reqwest::Response, name: reqwest::header::HeaderName) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// GETs `url`, conditionally when a validator is known; reads at most `max_bytes` of body.
/// Errors are transport errors (connection, timeout): worth retrying. Counted in
/// [`crate::metrics::FETCHES`] by status code.
pub async fn get(
    client: &reqwest::Client,
    url: &Url,
    etag: Option<&str>,
    last_modified: Option<&str>,
    max_bytes: usize,
) -> std::result::Result<Response, String> {
    let r = request(client, url, etag, last_modified, max_bytes).await;
    crate::metrics::fetched(r.as_ref().ok().map(|r| r.status));
    r
}

async fn request(
    client: &reqwest::Client,
    url: &Url,
    etag: Option<&str>,
    last_modified: Option<&str>,
    max_bytes: usize,
) -> std::result::Result<Response, String> {
    let mut req = client.get(url.clone());
    if let Some(e) = etag {
        req = req.header(IF_NONE_MATCH, e);
    }
    if let Some(m) = last_modified {
        req = req.header(IF_MODIFIED_SINCE, m);
    }
    let mut resp = req.send().await.map_err(|e| describe(&e))?;
    let mut out = Response {
        status: resp.status().as_u16(),
        etag: header(&resp, ETAG),
        last_modified: header(&resp, LAST_MODIFIED),
        content_type: header(&resp, CONTENT_TYPE),
        location: header(&resp, LOCATION),
        body: Vec::new(),
        truncated: false,
    };
    while let Some(chunk) = resp.chunk().await.map_err(|e| describe(&e))? {
        let room = max_bytes - out.body.len();
        if chunk.len() > room {
            out.body.extend_from_slice(&chunk[..room]);
            out.truncated = true;
            break;
        }
        out.body.extend_from_slice(&chunk);
    }
    Ok(out)
}

fn describe(e: &reqwest::Error) -> String {
    let mut msg = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "connection failed".to_string()
    } else {
        "request failed".to_string()
    };
    let mut src: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

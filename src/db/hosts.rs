//! Multi-host database URLs, as libpq takes them:
//! `postgres://u@h1:5441,h2:5442/db?target_session_attrs=read-write`.
//!
//! The driver (sqlx 0.9) takes one host, so the URL is split here: the driver gets the first
//! host, and the whole list is remembered (process-wide, like the URL's passwords in
//! `crate::redact`) so that every pool built from it can be pointed at the host that fits —
//! at start-up, and again after each outage (a failover: the old primary is down or has come
//! back as a standby). Hosts are tried in the order given, as libpq does; with
//! `read-write` or `primary` a host counts only when its session can write.
//! See docs/operations.md, "Several hosts in one URL".

use std::sync::{Arc, RwLock};
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;
use tokio_util::sync::CancellationToken;

use super::outage::{Availability, Backoff};

use crate::error::{Error, Result};

/// Which sessions a URL accepts (`target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The first host that accepts a connection (`any`).
    Any,
    /// The first host whose session can write (`read-write` or `primary`: both are checked
    /// with `pg_is_in_recovery()` and `default_transaction_read_only` together).
    Writable,
}

/// The hosts of one URL and the sessions it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts {
    /// `(host, port)` in the URL's order.
    pub hosts: Vec<(String, u16)>,
    /// What `target_session_attrs` asked for.
    pub target: Target,
    /// The URL's user and database (set by [`register`]): with a host, what identifies the
    /// URL a pool was built from, so two URLs that share a host never borrow each other's list.
    pub login: (String, Option<String>),
}

impl Hosts {
    fn serves(&self, opts: &PgConnectOptions) -> bool {
        let (host, port) = (opts.get_host(), opts.get_port());
        self.login.0 == opts.get_username()
            && self.login.1.as_deref() == opts.get_database()
            && self.hosts.iter().any(|(h, p)| h == host && *p == port)
    }
}

/// Splits `url` into a one-host URL the driver parses (the first host, without
/// `target_session_attrs`) and, when it names several hosts or a target, the [`Hosts`].
/// A value the driver would not understand is refused with the reason (never the password:
/// the caller reports it with the redacted URL).
pub fn split(url: &str) -> std::result::Result<(String, Option<Hosts>), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok((url.to_string(), None));
    };
    // The authority ends at the first `/` (libpq's userinfo too); in it the userinfo ends at
    // the last `@`, unless what comes before that `@`'s `:` holds a `?` or `#`: then the `@`
    // belongs to a query (`postgres://h?application_name=a@b`) and the host list ends there.
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let at = authority
        .rfind('@')
        .filter(|&i| !authority[..i].split(':').next().unwrap_or("").contains(['?', '#']));
    let (userinfo, after) = match at {
        Some(i) => (&rest[..=i], &rest[i + 1..]),
        None => ("", rest),
    };
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (hostlist, tail) = after.split_at(end);
    let (tail, target) = take_target(tail)?;
    let mut hosts = Vec::new();
    for item in hostlist.split(',') {
        match host_port(item) {
            Ok(h) => hosts.push(h),
            // A malformed password (a raw `/`, say) read as a host list: quoting the "host"
            // or "port" would print a piece of the password.
            Err(_) if crate::redact::split_userinfo(url).1.is_some_and(|u| !userinfo.starts_with(u)) => {
                return Err("its host list cannot be read: a `/`, `?`, `#` or `@` in the user name or password must be percent-encoded (%2F, %3F, %23, %40)".into());
            }
            Err(e) => return Err(e),
        }
    }
    if hosts.len() == 1 && target.is_none() {
        return Ok((url.to_string(), None));
    }
    let first = hostlist.split(',').next().unwrap_or("");
    let single = format!("{scheme}://{userinfo}{first}{tail}");
    Ok((
        single,
        Some(Hosts {
            hosts,
            // Several hosts and no target: read-write, not libpq's `any`; every skiplock
            // session writes, so a standby first in the list would only refuse it.
            target: target.unwrap_or(Target::Writable),
            login: Default::default(),
        }),
    ))
}

/// `tail` (path, query, fragment) without its `target_session_attrs`, and what that asked.
fn take_target(tail: &str) -> std::result::Result<(String, Option<Target>), String> {
    let Some((path, query)) = tail.split_once('?') else {
        return Ok((tail.to_string(), None));
    };
    let (query, fragment) = match query.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (query, None),
    };
    let mut target = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("target_session_attrs", v)) => {
                target = Some(match v {
                    "any" => Target::Any,
                    "read-write" | "primary" => Target::Writable,
                    other => {
                        return Err(format!(
                            "target_session_attrs={other} is not supported: skiplock's sessions \
                             write, so only any, read-write and primary apply"
                        ));
                    }
                })
            }
            _ => kept.push(pair),
        }
    }
    let mut out = path.to_string();
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    Ok((out, target))
}

/// One `host[:port]` of the list (`[v6]:port` too); port 5432 when none is given.
fn host_port(item: &str) -> std::result::Result<(String, u16), String> {
    let (host, port) = if let Some(v6) = item.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("host `{item}` has no closing `]`"))?;
        (h, after.strip_prefix(':'))
    } else {
        match item.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (item, None),
        }
    };
    if host.is_empty() {
        return Err("an empty host in the host list".into());
    }
    let port = match port {
        None => 5432,
        Some(p) => p
            .parse()
            .map_err(|_| format!("host `{host}` has an invalid port `{p}`"))?,
    };
    Ok((host.to_string(), port))
}

static REGISTERED: RwLock<Vec<Hosts>> = RwLock::new(Vec::new());

/// Remembers `hosts` of the URL `opts` was parsed from, so pools built from it can be
/// re-pointed to any of its hosts.
pub fn register(mut hosts: Hosts, opts: &PgConnectOptions) {
    hosts.login = (
        opts.get_username().to_string(),
        opts.get_database().map(str::to_string),
    );
    let mut g = REGISTERED.write().unwrap_or_else(|p| p.into_inner());
    if !g.contains(&hosts) {
        g.push(hosts);
    }
}

/// The registered [`Hosts`] of the URL `opts` came from (same user and database, one of its
/// hosts), if any.
pub fn of(opts: &PgConnectOptions) -> Option<Hosts> {
    let g = REGISTERED.read().unwrap_or_else(|p| p.into_inner());
    g.iter().find(|h| h.serves(opts)).cloned()
}

/// `opts` pointed at `host:port`.
fn at(opts: &PgConnectOptions, (host, port): &(String, u16)) -> PgConnectOptions {
    opts.clone().host(host).port(*port)
}

/// The first of `opts`' hosts that accepts a session (one that can write, where `writable`
/// or the URL's target asks it), tried in order: `opts` pointed at it. A URL with one host
/// is only probed. Errors: the first permanent refusal when no host is unavailable, else
/// [`Error::Unavailable`] naming every host's reason.
pub async fn choose(opts: &PgConnectOptions, writable: bool) -> Result<PgConnectOptions> {
    let Some(set) = of(opts) else {
        super::session::probe(opts, writable).await?;
        return Ok(opts.clone());
    };
    let writable = writable || set.target == Target::Writable;
    let mut reasons = Vec::new();
    let mut permanent = None;
    let mut waiting_may_help = false;
    for h in &set.hosts {
        let candidate = at(opts, h);
        match super::session::probe(&candidate, writable).await {
            Ok(()) => return Ok(candidate),
            Err(e) => {
                reasons.push(format!("{}:{}: {}", h.0, h.1, super::session::reason(&e)));
                if super::outage::is_unavailable(&e) {
                    waiting_may_help = true;
                } else if permanent.is_none() {
                    permanent = Some(e);
                }
            }
        }
    }
    match permanent {
        // Every host refused for good (wrong password, no such database): say so at once.
        Some(e) if !waiting_may_help => Err(e),
        _ => Err(Error::Unavailable(format!(
            "no host accepts a {}session: {}",
            if writable { "writable " } else { "" },
            reasons.join("; ")
        ))),
    }
}

/// Points every pool in `pools` at the first host of their URL that accepts a writable
/// session (the first pool's URL decides; each pool keeps its own other options). With a
/// one-host URL it only checks that host. Logs when the host changes.
pub async fn point(pools: &[&PgPool]) -> Result<()> {
    let Some(first) = pools.first() else {
        return Ok(());
    };
    let current = first.connect_options();
    let chosen = choose(&current, true).await?;
    let target = (chosen.get_host().to_string(), chosen.get_port());
    if (current.get_host(), current.get_port()) != (target.0.as_str(), target.1) {
        tracing::info!(
            "the database at {} is the one that accepts writes now; connecting there",
            super::session::describe(&chosen)
        );
        for pool in pools {
            pool.set_connect_options(at(&pool.connect_options(), &target));
        }
        // Connections to the old host (a standby now, perhaps) are not handed out again.
        super::session::RECYCLE.recycle_all();
    }
    Ok(())
}

/// First and longest wait between two probes of [`follow`] during an outage: short, as a
/// failover's gap is seconds (docs/operations.md, "Patroni"), and one probe per process.
pub const FOLLOW_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_millis(500));

/// A worker's one prober, until `stop`: after a failure the `availability` clock sees, it
/// [`point`]s `pools` at the host that accepts writes (one host: checks it). If that
/// fails — an outage, not one failed statement — it probes again ([`FOLLOW_BACKOFF`]) until
/// a host answers, and then announces [`Availability::recovered`], which ends every task's
/// backoff at once: the claims, acks and listener come back within a probe's interval of
/// the database rather than each at the end of its own doubling wait.
pub async fn follow(pools: Vec<PgPool>, availability: Arc<Availability>, stop: CancellationToken) {
    let refs: Vec<&PgPool> = pools.iter().collect();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = availability.next_failure() => {}
        }
        let outage = tokio::select! {
            _ = stop.cancelled() => return,
            outage = point_once_answered(&refs) => outage,
        };
        if outage {
            availability.recovered();
        }
        // At most two probes a second, whatever fails meanwhile (a storm of lock timeouts
        // counts as failures too, and each would cost a connection).
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(FOLLOW_BACKOFF.1) => {}
        }
    }
}

/// [`point`]s `pools`, probing again ([`FOLLOW_BACKOFF`]) while no host answers; returns
/// whether it had to (the database was really away). A permanent refusal (the password
/// changed, say) ends it at once: the pools' own statements report that.
async fn point_once_answered(pools: &[&PgPool]) -> bool {
    let mut backoff = Backoff::new(FOLLOW_BACKOFF.0, FOLLOW_BACKOFF.1);
    let mut outage = false;
    loop {
        match point(pools).await {
            Err(e) if super::outage::is_unavailable(&e) => {
                outage = true;
                tracing::debug!("the database does not answer yet: {}", super::session::reason(&e));
                tokio::time::sleep(backoff.next_delay()).await;
            }
            _ => return outage,
        }
    }
}

/// Failures seen by the console's pages (a process has one console).
static CONSOLE_FAILED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// A console page met an unavailable database: its pool looks for the writable host again
/// (when its URL names several; see [`follow_console`]).
pub fn console_failed() {
    CONSOLE_FAILED.notify_one();
}

/// Keeps the console's `pool` on the writable host of its URL: after every failure a page
/// reports ([`console_failed`]) it [`point`]s the pool again, probing until a host answers.
/// Spawned only for a URL with several hosts; ends with the process.
pub async fn follow_console(pool: PgPool) {
    loop {
        CONSOLE_FAILED.notified().await;
        point_once_answered(&[&pool]).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_host_urls_pass_through() {
        let u = "postgres://u:p@h:5433/db?sslmode=disable";
        assert_eq!(split(u).unwrap(), (u.to_string(), None));
    }

    #[test]
    fn several_hosts_give_the_first_to_the_driver_and_keep_the_list() {
        let (single, hosts) =
            split("postgres://u:p@h1:5441,h2,[::1]:5443/db?target_session_attrs=primary&sslmode=disable")
                .unwrap();
        assert_eq!(single, "postgres://u:p@h1:5441/db?sslmode=disable");
        let hosts = hosts.unwrap();
        assert_eq!(
            hosts.hosts,
            vec![
                ("h1".to_string(), 5441),
                ("h2".to_string(), 5432),
                ("::1".to_string(), 5443)
            ]
        );
        assert_eq!(hosts.target, Target::Writable);
    }

    #[test]
    fn several_hosts_without_a_target_ask_for_a_writable_session() {
        let (_, hosts) = split("postgres://h1,h2/db").unwrap();
        assert_eq!(hosts.unwrap().target, Target::Writable);
        let (single, hosts) = split("postgres://h1,h2/db?target_session_attrs=any").unwrap();
        assert_eq!(single, "postgres://h1/db");
        assert_eq!(hosts.unwrap().target, Target::Any);
    }

    #[test]
    fn a_host_list_serves_only_the_url_it_came_from() {
        let (single, h) = split("postgres://u@a.test:1,b.test:2/db1").unwrap();
        let opts: PgConnectOptions = single.parse().unwrap();
        register(h.unwrap(), &opts);
        assert!(of(&opts).is_some());
        assert!(of(&opts.clone().host("b.test").port(2)).is_some());
        assert!(of(&opts.clone().database("db2")).is_none());
        assert!(of(&opts.clone().username("v")).is_none());
        assert!(of(&opts.clone().port(3)).is_none());
    }

    #[test]
    fn targets_that_cannot_write_and_bad_ports_are_refused_by_name() {
        let e = split("postgres://h1,h2/db?target_session_attrs=standby").unwrap_err();
        assert!(e.contains("target_session_attrs=standby"), "{e}");
        let e = split("postgres://h1:x,h2/db").unwrap_err();
        assert!(e.contains("invalid port `x`"), "{e}");
        let e = split("postgres://h1,,h2/db").unwrap_err();
        assert!(e.contains("empty host"), "{e}");
    }

    #[test]
    fn a_password_with_a_raw_separator_is_never_read_as_a_host_or_a_port() {
        // `?` and `#` end no userinfo (libpq reads them as the password's too).
        for (url, single) in [
            ("postgres://app:Hunter2?Secret@127.0.0.1/db", None),
            ("postgres://app:Hun#ter@h1:5441,h2/db", Some("postgres://app:Hun#ter@h1:5441/db")),
        ] {
            let (s, hosts) = split(url).unwrap();
            match single {
                None => assert_eq!((s.as_str(), hosts), (url, None)),
                Some(one) => assert_eq!(s, one),
            }
        }
        // A raw `/` ends the authority: the error names the cause, not the pieces.
        for url in [
            "postgres://app:Hun/ter@127.0.0.1/db",
            "postgres://app:Hun/ter@h1,h2/db",
            "postgres://app:a/b?c#d@h/db",
        ] {
            let e = split(url).unwrap_err();
            assert!(e.contains("percent-encoded") && !e.contains("Hun") && !e.contains("a/b"), "{url}: {e}");
        }
        // An `@` in a database name or a query is no userinfo's.
        let (s, _) = split("postgres://h/d@b").unwrap();
        assert_eq!(s, "postgres://h/d@b");
        let (s, h) = split("postgres://h1,h2?application_name=a@b").unwrap();
        assert_eq!(s, "postgres://h1?application_name=a@b");
        assert_eq!(h.unwrap().hosts.len(), 2);
    }
}

//! `TCP_NODELAY` on every pooled database connection skiplock opens (a one-off probe
//! connection, closed at once, is left as it is).
//!
//! sqlx 0.9.0 opens its TCP sockets with Nagle's algorithm on (transact-rs/sqlx#4335,
//! a regression of 0.9.0; fixed upstream by pull request 4336, not released as of this
//! writing). A statement whose
//! message leaves in more than one write (a TLS connection writes a record per 16 KiB; a
//! batch of acks or of jobs is tens of KiB) then waits for the server's delayed ACK, 40 ms
//! on Linux, before its last bytes are sent. With TLS on a local server that halved the
//! drain (docs/performance.md). libpq sets `TCP_NODELAY` on every connection;
//! this does the same from the pools' `after_connect`, by finding the connection's socket
//! among this process's descriptors: its local port is the port the server reports for
//! the client, its peer port the server's. Best effort: nothing is set over a Unix
//! socket (no Nagle there), behind a proxy that rewrites ports, or off Linux.
//! Remove once the sqlx release in use sets it itself.

use sqlx::PgConnection;

/// Sets `TCP_NODELAY` on the socket of `conn` (see the module doc). Returns whether it
/// found the socket. Never fails the connection: if the server cannot say the ports (the
/// function revoked, a server that lacks it), the connection is used as it is, only slower.
pub async fn set(conn: &mut PgConnection) -> sqlx::Result<bool> {
    let (client, server) = match crate::store::session::client_port(conn).await {
        Ok(ports) => ports,
        Err(e) => {
            tracing::debug!(error = %e, "could not read the connection's ports; TCP_NODELAY not set");
            return Ok(false);
        }
    };
    Ok(
        match (client.map(u16::try_from), server.map(u16::try_from)) {
            (Some(Ok(c)), Some(Ok(s))) => on_sockets(c, s, true) > 0,
            _ => false,
        },
    )
}

/// Whether `TCP_NODELAY` is on for this process's TCP sockets from local port `local` to
/// peer port `peer`: None when there is none, `Some(true)` when it is on for all of them. For
/// tests and diagnostics.
pub fn is_set(local: u16, peer: u16) -> Option<bool> {
    let all = each(local, peer, |s| s.tcp_nodelay().ok());
    (!all.is_empty()).then(|| all.iter().all(|on| *on == Some(true)))
}

/// Sets the option on every socket with these ports (two connections to different servers
/// may share a local port; setting it on both does no harm). Returns on how many it was set.
fn on_sockets(local: u16, peer: u16, nodelay: bool) -> usize {
    each(local, peer, |s| s.set_tcp_nodelay(nodelay).ok())
        .into_iter()
        .flatten()
        .count()
}

/// `f` on every TCP socket of this process whose local port is `local` and peer port `peer`.
#[cfg(target_os = "linux")]
fn each<T>(local: u16, peer: u16, f: impl Fn(&socket2::SockRef<'_>) -> T) -> Vec<T> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // Only sockets: a descriptor of another kind is not asked anything.
        if !std::fs::read_link(entry.path())
            .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
        {
            continue;
        }
        // A duplicate of our own, so the socket stays open while it is asked, whatever
        // another thread does with the number meanwhile (a number closed and reused in
        // between names another socket, which the ports below then tell apart).
        // SAFETY: fcntl only duplicates a descriptor; it fails on one that was closed.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            continue;
        }
        // SAFETY: `dup` is a descriptor fcntl just opened for us, owned by nothing else.
        let owned = unsafe { OwnedFd::from_raw_fd(dup) };
        let sock = socket2::SockRef::from(&owned);
        let port = |a: std::io::Result<socket2::SockAddr>| {
            a.ok().and_then(|a| a.as_socket()).map(|a| a.port())
        };
        if port(sock.local_addr()) == Some(local) && port(sock.peer_addr()) == Some(peer) {
            out.push(f(&sock));
        }
    }
    out
}

#[cfg(not(target_os = "linux"))]
fn each<T>(_local: u16, _peer: u16, _f: impl Fn(&socket2::SockRef<'_>) -> T) -> Vec<T> {
    Vec::new()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_option_lands_on_the_socket_with_both_ports_and_no_other() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server_port = listener.local_addr().unwrap().port();
        let a = std::net::TcpStream::connect(("127.0.0.1", server_port)).unwrap();
        let b = std::net::TcpStream::connect(("127.0.0.1", server_port)).unwrap();
        let (pa, pb) = (
            a.local_addr().unwrap().port(),
            b.local_addr().unwrap().port(),
        );
        assert_eq!(is_set(pa, server_port), Some(false));
        assert_eq!(on_sockets(pa, server_port, true), 1);
        assert_eq!(is_set(pa, server_port), Some(true));
        assert!(a.nodelay().unwrap());
        // The other connection to the same server is left as it was.
        assert!(!b.nodelay().unwrap());
        assert_eq!(is_set(pb, server_port), Some(false));
        // No socket with these ports: nothing set, nothing found.
        assert_eq!(on_sockets(pa, server_port.wrapping_add(1), true), 0);
        assert_eq!(is_set(pa, server_port.wrapping_add(1)), None);
    }
}

//! `TCP_NODELAY` on every database connection skiplock opens.
//!
//! sqlx 0.9.0 opens its TCP sockets with Nagle's algorithm on (transact-rs/sqlx issue 4335,
//! a regression of 0.9.0; fixed upstream by pull request 4336, not released as of this writing). A statement whose
//! message leaves in more than one write (a TLS connection writes a record per 16 KiB; a
//! batch of acks or of jobs is tens of KiB) then waits for the server's delayed ACK, 40 ms
//! on Linux, before its last bytes are sent. With TLS on a local server that halved the
//! drain (README, Performance, lever 16). libpq sets `TCP_NODELAY` on every connection;
//! this does the same from the pools' `after_connect`, by finding the connection's socket
//! among this process's descriptors: its local port is the port the server reports for
//! the client, its peer port the server's. Best effort: nothing is set over a Unix
//! socket (no Nagle there), behind a proxy that rewrites ports, or off Linux.
//! Remove once the sqlx release in use sets it itself.

use sqlx::PgConnection;
use sqlx::postgres::PgPoolOptions;

/// Pool options whose new connections get `TCP_NODELAY` ([`set`]); a pool that needs its own
/// `after_connect` calls [`set`] in it instead.
pub fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new()
        .after_connect(|conn, _meta| Box::pin(async move { set(conn).await.map(|_| ()) }))
}

/// Sets `TCP_NODELAY` on the socket of `conn` (see the module doc). Returns whether it
/// found the socket; a failure to look is not an error (the connection works, only slower).
pub async fn set(conn: &mut PgConnection) -> sqlx::Result<bool> {
    let (client, server) = crate::store::session::client_port(conn).await?;
    Ok(match (client, server) {
        (Some(c), Some(s)) => match (u16::try_from(c), u16::try_from(s)) {
            (Ok(c), Ok(s)) => on_socket(c, s, true),
            _ => false,
        },
        _ => false,
    })
}

/// Whether `TCP_NODELAY` is on for this process's TCP socket from local port `local` to
/// peer port `peer` (None: no such socket found). For tests and diagnostics.
pub fn is_set(local: u16, peer: u16) -> Option<bool> {
    find(local, peer, |s| s.tcp_nodelay().ok())
}

fn on_socket(local: u16, peer: u16, nodelay: bool) -> bool {
    find(local, peer, |s| s.set_tcp_nodelay(nodelay).ok()).is_some()
}

#[cfg(target_os = "linux")]
fn find<T>(local: u16, peer: u16, f: impl Fn(&socket2::SockRef<'_>) -> Option<T>) -> Option<T> {
    use std::os::fd::BorrowedFd;
    for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
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
        // SAFETY: the descriptor is open (listed just now) and only borrowed for the
        // socket queries below. Should another thread close it and open another socket
        // under the same number in between, the ports below no longer match it, or the
        // option lands on a TCP socket of this process that matches both ports, which is
        // the one sought.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let sock = socket2::SockRef::from(&fd);
        let port = |a: std::io::Result<socket2::SockAddr>| {
            a.ok().and_then(|a| a.as_socket()).map(|a| a.port())
        };
        if port(sock.local_addr()) == Some(local) && port(sock.peer_addr()) == Some(peer) {
            return f(&sock);
        }
    }
    None
}

#[cfg(not(target_os = "linux"))]
fn find<T>(_local: u16, _peer: u16, _f: impl Fn(&socket2::SockRef<'_>) -> Option<T>) -> Option<T> {
    None
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
        assert!(on_socket(pa, server_port, true));
        assert_eq!(is_set(pa, server_port), Some(true));
        assert!(a.nodelay().unwrap());
        // The other connection to the same server is left as it was.
        assert!(!b.nodelay().unwrap());
        assert_eq!(is_set(pb, server_port), Some(false));
        // No socket with these ports: nothing set, nothing found.
        assert!(!on_socket(pa, server_port.wrapping_add(1), true));
        assert_eq!(is_set(pa, server_port.wrapping_add(1)), None);
    }
}

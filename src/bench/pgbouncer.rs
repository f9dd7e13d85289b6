//! A PgBouncer in transaction mode in front of the bench's server, for the drain through it
//! (docs/operations.md, "Behind PgBouncer"): started by the bench on a free port with a config
//! of its own, stopped when dropped. Debian's `pgbouncer` package; the drain is skipped
//! without it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use skiplock::error::{Error, Result};

/// Server connections PgBouncer keeps per database and user: fewer than a `skiplock worker`
/// opens (4 for the runtime, 10 for handlers, and the direct listener), as a pooler is run.
pub(crate) const SERVER_CONNECTIONS: u32 = 8;

/// The installed `pgbouncer`, if any.
pub(crate) fn find() -> Option<PathBuf> {
    ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// A running PgBouncer, killed when dropped.
pub(crate) struct Bouncer {
    _child: tokio::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Bouncer {
    /// Starts `bin` in transaction mode in front of the server of `url` and waits (up to 30 s)
    /// until it accepts connections.
    pub(crate) async fn start(bin: &Path, url: &str) -> Result<Bouncer> {
        let server = url::Url::parse(url)
            .map_err(|e| Error::Other(format!("bench: bad database URL: {e}")))?;
        let host = server.host_str().unwrap_or("127.0.0.1");
        let server_port = server.port().unwrap_or(5432);
        let dir = tempfile::Builder::new()
            .prefix("skiplock-bench-pgbouncer-")
            .tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let users = dir.path().join("users.txt");
        std::fs::write(&users, format!("\"{}\" \"\"\n", server.username()))?;
        let ini = format!(
            "[databases]\n* = host={host} port={server_port}\n\n[pgbouncer]\n\
             listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = trust\nauth_file = {users}\npool_mode = transaction\n\
             max_client_conn = 200\ndefault_pool_size = {SERVER_CONNECTIONS}\n\
             logfile = {log}\n",
            users = users.display(),
            log = dir.path().join("pgbouncer.log").display(),
        );
        let conf = dir.path().join("pgbouncer.ini");
        std::fs::write(&conf, ini)?;
        let mut cmd = tokio::process::Command::new(bin);
        if let Some((uid, gid)) = postgres_ids_if_root()? {
            // PgBouncer refuses to run as root.
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
            for f in ["users.txt", "pgbouncer.ini"] {
                std::os::unix::fs::chown(dir.path().join(f), Some(uid), Some(gid))?;
            }
            cmd.uid(uid).gid(gid);
        }
        let child = cmd
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::Other(format!("bench: cannot start {}: {e}", bin.display())))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(Error::Other(
                    "bench: pgbouncer did not listen within 30 s".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Bouncer {
            _child: child,
            port,
            _dir: dir,
        })
    }

    /// `url` pointed at this PgBouncer.
    pub(crate) fn url(&self, url: &str) -> Result<String> {
        let mut u = url::Url::parse(url)
            .map_err(|e| Error::Other(format!("bench: bad database URL: {e}")))?;
        let _ = u.set_host(Some("127.0.0.1"));
        let _ = u.set_port(Some(self.port));
        Ok(u.to_string())
    }
}

/// The `postgres` user's ids when this process runs as root, else None.
fn postgres_ids_if_root() -> Result<Option<(u32, u32)>> {
    // SAFETY: geteuid has no preconditions; getpwnam is given a NUL-terminated name and its
    // result is read at once, before any other call could overwrite it.
    unsafe {
        if libc::geteuid() != 0 {
            return Ok(None);
        }
        let pw = libc::getpwnam(c"postgres".as_ptr());
        if pw.is_null() {
            return Err(Error::Other(
                "bench: running as root and there is no `postgres` user to run pgbouncer as".into(),
            ));
        }
        Ok(Some(((*pw).pw_uid, (*pw).pw_gid)))
    }
}

//! A PgBouncer of its own, on a free port with a config of its own, stopped when dropped: the
//! bench's drain through it in transaction mode (docs/operations.md, "Behind PgBouncer"), and
//! tests/pgbouncer.rs, which includes this file. Debian's `pgbouncer` package; the bench's drain
//! is skipped without it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use skiplock::error::{Error, Result};

/// Server connections the bench's PgBouncer keeps per database and user: fewer than a
/// `skiplock worker` opens (4 for the runtime, 10 for handlers), as a pooler is run.
pub const SERVER_CONNECTIONS: u32 = 8;

/// The installed `pgbouncer`, if any.
pub fn find() -> Option<PathBuf> {
    ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// A running PgBouncer, killed when dropped.
pub struct Bouncer {
    _child: tokio::process::Child,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    dir: tempfile::TempDir,
}

/// What a [`Bouncer`] serves and how.
pub struct Config<'a> {
    /// `session` or `transaction`.
    pub pool_mode: &'a str,
    /// The `[databases]` section's lines (e.g. `* = host=127.0.0.1 port=5432`).
    pub databases: &'a str,
    /// The users it lets in (trust auth).
    pub users: &'a [&'a str],
    /// Server connections per database and user.
    pub server_connections: u32,
}

impl Bouncer {
    /// The bench's: transaction mode in front of the server of `url`, for its user.
    pub async fn in_front_of(bin: &Path, url: &str) -> Result<Bouncer> {
        let server = parse(url)?;
        let databases = format!(
            "* = host={} port={}",
            server.host_str().unwrap_or("127.0.0.1"),
            server.port().unwrap_or(5432)
        );
        let config = Config {
            pool_mode: "transaction",
            databases: &databases,
            users: &[server.username()],
            server_connections: SERVER_CONNECTIONS,
        };
        Bouncer::start(bin, &config).await
    }

    /// Starts `bin` with `config` and waits (up to 30 s) until it accepts connections.
    pub async fn start(bin: &Path, config: &Config<'_>) -> Result<Bouncer> {
        let dir = tempfile::Builder::new()
            .prefix("skiplock-pgbouncer-")
            .tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let users = dir.path().join("users.txt");
        let lines: String = config
            .users
            .iter()
            .map(|u| format!("\"{u}\" \"\"\n"))
            .collect();
        std::fs::write(&users, lines)?;
        // No `ignore_startup_parameters`: skiplock must send nothing PgBouncer refuses.
        let ini = format!(
            "[databases]\n{databases}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
             listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {users}\n\
             pool_mode = {mode}\nmax_client_conn = 200\ndefault_pool_size = {n}\nlogfile = {log}\n",
            databases = config.databases,
            users = users.display(),
            mode = config.pool_mode,
            n = config.server_connections,
            log = dir.path().join("pgbouncer.log").display(),
        );
        let conf = dir.path().join("pgbouncer.ini");
        std::fs::write(&conf, ini)?;
        let mut cmd = tokio::process::Command::new(bin);
        if let Some((uid, gid)) = postgres_ids_if_root()? {
            // PgBouncer refuses to run as root: it runs as `postgres`, as the child itself
            // (not under `runuser`, whose death would leave it running).
            for p in [dir.path(), &users, &conf] {
                std::os::unix::fs::chown(p, Some(uid), Some(gid))?;
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
            .map_err(|e| Error::Other(format!("cannot start {}: {e}", bin.display())))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(Error::Other("pgbouncer did not listen within 30 s".into()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Bouncer {
            _child: child,
            port,
            dir,
        })
    }

    /// `url` pointed at this PgBouncer.
    pub fn url(&self, url: &str) -> Result<String> {
        let mut u = parse(url)?;
        let _ = u.set_host(Some("127.0.0.1"));
        let _ = u.set_port(Some(self.port));
        Ok(u.to_string())
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        // A failing test or bench step shows what PgBouncer saw.
        if std::thread::panicking() {
            eprintln!("--- pgbouncer log ---\n{}", self.log());
        }
    }
}

fn parse(url: &str) -> Result<url::Url> {
    url::Url::parse(url).map_err(|e| Error::Other(format!("bad database URL: {e}")))
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
                "running as root and there is no `postgres` user to run pgbouncer as".into(),
            ));
        }
        Ok(Some(((*pw).pw_uid, (*pw).pw_gid)))
    }
}

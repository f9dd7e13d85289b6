//! A private, throw-away Postgres cluster for fault tests that restart the server: the
//! machine's shared cluster must never be restarted (other tests run against it). `initdb`
//! into a temporary directory (as the `postgres` user when running as root, since Postgres
//! refuses to run as root), `pg_ctl start` on a free port, `restart`, `stop` and `start` on
//! demand (outage tests), and `stop -m immediate` plus removal on drop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use skiplock::error::{Error, Result};

/// A running private cluster; stopped and deleted when dropped.
pub struct PrivateCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
    server_opts: String,
}

/// The directory holding `initdb` and `pg_ctl`: `SKIPLOCK_PG_BIN`, else the newest
/// `/usr/lib/postgresql/*/bin`.
pub fn pg_bin_dir() -> Result<PathBuf> {
    if let Some(d) = skiplock::config::env_opt("SKIPLOCK_PG_BIN") {
        return Ok(PathBuf::from(d));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| {
            Error::Other(format!(
                "no Postgres server binaries in /usr/lib/postgresql ({e}); set SKIPLOCK_PG_BIN"
            ))
        })?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, b)| b).ok_or_else(|| {
        Error::Other("no initdb under /usr/lib/postgresql/*/bin; set SKIPLOCK_PG_BIN".into())
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl PrivateCluster {
    /// Creates and starts a cluster (trust authentication, user `postgres`, fsync off).
    pub fn start() -> Result<PrivateCluster> {
        Self::start_with(free_port()?, "")
    }

    // Used by tests/doctor.rs, which compiles this file too.
    #[allow(dead_code)]
    /// [`PrivateCluster::start`] on `port` with extra server options (`-c name=value …`):
    /// tests/doctor.rs needs `wal_level=logical` and `max_prepared_transactions`.
    pub fn start_with(port: u16, extra_opts: &str) -> Result<PrivateCluster> {
        let bin = pg_bin_dir()?;
        let dir = tempfile::Builder::new().prefix("skiplock-pg-").tempdir()?;
        let as_postgres = is_root();
        if as_postgres {
            run(Command::new("chown")
                .arg("postgres:postgres")
                .arg(dir.path()))?;
        }
        let server_opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60 {extra_opts}",
            port,
            dir.path().display()
        );
        let c = PrivateCluster {
            dir,
            bin,
            port,
            as_postgres,
            server_opts,
        };
        let data = c.data();
        run(c
            .pg("initdb")
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
                "-D",
            ])
            .arg(&data))?;
        c.start_server()?;
        Ok(c)
    }

    /// Starts the (stopped) server again on the same port and waits until it accepts
    /// connections.
    pub fn start_server(&self) -> Result<()> {
        run(self
            .pg("pg_ctl")
            .args(["-w", "-t", "60", "-l"])
            .arg(self.dir.path().join("server.log"))
            .arg("-D")
            .arg(self.data())
            .args(["-o", &self.server_opts, "start"]))
    }

    /// Stops the server (fast mode: open sessions are disconnected, new ones refused) until
    /// [`PrivateCluster::start_server`].
    pub fn stop_server(&self) -> Result<()> {
        run(self
            .pg("pg_ctl")
            .args(["-w", "-t", "60", "-m", "fast", "-D"])
            .arg(self.data())
            .arg("stop"))
    }

    // Used by tests/outage.rs and tests/secrets.rs, which compile this file too.
    #[allow(dead_code)]
    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` on this cluster.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Restarts the server (fast mode: open sessions are disconnected) and waits for it.
    pub fn restart(&self) -> Result<()> {
        run(self
            .pg("pg_ctl")
            .args(["-w", "-t", "60", "-m", "fast", "-l"])
            .arg(self.dir.path().join("server.log"))
            .arg("-D")
            .arg(self.data())
            .arg("restart"))
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        let mut c = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        c.current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    // Used by tests/outage.rs and tests/secrets.rs, which compile this file too.
    #[allow(dead_code)]
    /// Makes TCP logins need a password (SCRAM-SHA-256) while the cluster's Unix socket
    /// stays trusted for administration ([`PrivateCluster::socket_url`]), then reloads.
    /// For tests of real password authentication: the shared server trusts 127.0.0.1, so a
    /// wrong password is accepted there.
    pub fn require_passwords(&self) -> Result<()> {
        std::fs::write(
            self.data().join("pg_hba.conf"),
            "local all all trust\n\
             host all all 127.0.0.1/32 scram-sha-256\n\
             host all all ::1/128 scram-sha-256\n",
        )?;
        run(self.pg("pg_ctl").arg("-D").arg(self.data()).arg("reload"))
    }

    // Used by tests/outage.rs and tests/secrets.rs, which compile this file too.
    #[allow(dead_code)]
    /// The URL of database `db` over the cluster's Unix socket (trusted; see
    /// [`PrivateCluster::require_passwords`]).
    pub fn socket_url(&self, db: &str) -> String {
        format!(
            "postgres://postgres@localhost/{db}?host={}&port={}",
            self.dir.path().display(),
            self.port
        )
    }

    /// The cluster's directory (data and server log).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = self
            .pg("pg_ctl")
            .args(["-w", "-t", "30", "-m", "immediate", "-D"])
            .arg(self.data())
            .arg("stop")
            .output();
    }
}

fn run(c: &mut Command) -> Result<()> {
    let out = c.output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Other(format!(
            "{:?} failed ({}): {}",
            c.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

//! The partition run's own Postgres cluster: `initdb` as the `postgres` user into a folder of
//! the run's tag, listening on 127.0.0.1 (the driver) and on the host's end of every worker's
//! link (pg_hba trusts 10.231.0.0/16), on a fixed port of the run's range; and a tablespace on
//! a size-limited tmpfs that the jobs live in, which [`Server::fill_disk`] fills to the last
//! byte and [`Server::free_disk`] empties again. Stopped, unmounted and removed on drop; a
//! run first removes what a crashed run of the same tag left.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use skiplock::error::{Error, Result};

use super::net::sh;

/// The tablespace on the small filesystem.
pub const SMALL: &str = "slf_small";

/// A running cluster of a partition run.
pub struct Server {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    opts: String,
}

fn dir_of(tag: char) -> PathBuf {
    std::env::temp_dir().join(format!("slf-pg-{tag}"))
}

fn as_postgres(bin: &Path, tool: &str) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--"]).arg(bin.join(tool));
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn run(c: &mut Command) -> Result<()> {
    let out = c.output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Other(format!(
            "{:?} failed ({}): {}",
            c.get_args().collect::<Vec<_>>(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl Server {
    /// Creates and starts the cluster of run tag `tag` on `port`, listening on `addrs` too, with
    /// a `small_mb` MiB tablespace [`SMALL`].
    pub fn start(tag: char, port: u16, addrs: &[String], small_mb: u32) -> Result<Server> {
        Server::clean(tag);
        let bin = crate::chaos::cluster::pg_bin_dir()?;
        let dir = dir_of(tag);
        std::fs::create_dir_all(dir.join("small"))?;
        sh(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={small_mb}m,mode=0755"),
                "slf-small",
                &dir.join("small").to_string_lossy(),
            ],
        )?;
        std::fs::create_dir_all(dir.join("small/ts"))?;
        sh(
            "chown",
            &["-R", "postgres:postgres", &dir.to_string_lossy()],
        )?;
        let listen = std::iter::once("127.0.0.1".to_string())
            .chain(addrs.iter().cloned())
            .collect::<Vec<_>>()
            .join(",");
        let opts = format!(
            "-p {port} -k {} -c listen_addresses={listen} -c fsync=off -c max_connections=100",
            dir.display()
        );
        let s = Server {
            dir,
            bin,
            port,
            opts,
        };
        run(as_postgres(&s.bin, "initdb")
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
            .arg(s.dir.join("data")))?;
        std::fs::write(
            s.dir.join("data/pg_hba.conf"),
            "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all 10.231.0.0/16 trust\n",
        )?;
        run(as_postgres(&s.bin, "pg_ctl")
            .args(["-w", "-t", "60", "-l"])
            .arg(s.dir.join("server.log"))
            .arg("-D")
            .arg(s.dir.join("data"))
            .args(["-o", &s.opts, "start"]))?;
        Ok(s)
    }

    /// Stops and removes what a run of tag `tag` left (a crashed run's cluster and tmpfs).
    pub fn clean(tag: char) {
        let dir = dir_of(tag);
        if !dir.exists() {
            return;
        }
        if let Ok(bin) = crate::chaos::cluster::pg_bin_dir()
            && dir.join("data/postmaster.pid").exists()
        {
            let _ = as_postgres(&bin, "pg_ctl")
                .args(["-w", "-t", "30", "-m", "immediate", "-D"])
                .arg(dir.join("data"))
                .arg("stop")
                .output();
        }
        let _ = sh("umount", &[&dir.join("small").to_string_lossy()]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The URL of database `db` from `host` (127.0.0.1 for the driver, a link's host address
    /// for a worker).
    pub fn url(&self, host: &str, db: &str) -> String {
        format!("postgres://postgres@{host}:{}/{db}", self.port)
    }

    /// Where the small tablespace lives.
    pub fn small_location(&self) -> PathBuf {
        self.dir.join("small/ts")
    }

    fn filler(&self) -> PathBuf {
        self.dir.join("small/filler")
    }

    /// Fills the small filesystem to the last byte.
    pub fn fill_disk(&self) -> Result<()> {
        let mut f = std::fs::File::create(self.filler())?;
        let chunk = vec![0u8; 1 << 20];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => return Err(e.into()),
            }
        }
        // The last partial block.
        let small = [0u8; 512];
        while let Ok(n) = f.write(&small) {
            if n == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Gives the small filesystem its space back.
    pub fn free_disk(&self) -> Result<()> {
        match std::fs::remove_file(self.filler()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// The server's log.
    pub fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin, "pg_ctl")
            .args(["-w", "-t", "30", "-m", "immediate", "-D"])
            .arg(self.dir.join("data"))
            .arg("stop")
            .output();
        let _ = sh("umount", &[&self.dir.join("small").to_string_lossy()]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

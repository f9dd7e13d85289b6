//! `scripts/dev-db` on machines this one can pretend to be (PATH tricks): a fresh machine
//! with no PostgreSQL gets it installed only on Debian/Ubuntu, as root, for a local server;
//! everywhere else the script stops with one line saying what to do. The installing branch
//! runs as a dry run (`SKIPLOCK_DEV_DB_DRY_RUN=1`): it prints every command it would run, and
//! the fake `apt-get` on the PATH records any real call (there must be none).

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dev-db")
}

/// A PATH holding only the ordinary tools the script uses, none of PostgreSQL's, plus fakes.
struct FakeMachine {
    dir: tempfile::TempDir,
}

impl FakeMachine {
    fn new(uid: u32, os_id: &str) -> FakeMachine {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        for tool in [
            "bash", "python3", "dirname", "basename", "cat", "sed", "grep", "ls", "sort", "tail",
            "head", "seq", "sleep", "env", "awk", "mktemp", "rm", "cp",
        ] {
            let real = ["/usr/bin", "/bin"]
                .iter()
                .map(|d| Path::new(d).join(tool))
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("{tool} not found"));
            symlink(real, bin.join(tool)).unwrap();
        }
        let marker = dir.path().join("apt-get-ran");
        Self::exe(&bin.join("id"), &format!("#!/bin/bash\necho {uid}\n"));
        Self::exe(
            &bin.join("apt-get"),
            &format!("#!/bin/bash\necho \"$@\" >> {}\nexit 1\n", marker.display()),
        );
        std::fs::write(
            dir.path().join("os-release"),
            format!("ID={os_id}\nID_LIKE=\nPRETTY_NAME=\"{os_id}\"\n"),
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("pglib")).unwrap();
        FakeMachine { dir }
    }

    fn exe(path: &Path, body: &str) {
        std::fs::write(path, body).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Puts fake client tools and a server version `v` under the fake PostgreSQL library.
    fn with_server(self, v: &str) -> FakeMachine {
        let bin = self.dir.path().join("pglib").join(v).join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        Self::exe(&bin.join("pg_ctl"), "#!/bin/bash\nexit 0\n");
        Self::exe(&bin.join("pg_isready"), "#!/bin/bash\nexit 0\n");
        // "SELECT 1 FROM pg_database …": the database exists.
        Self::exe(&bin.join("psql"), "#!/bin/bash\necho 1\n");
        self
    }

    /// Runs the script with `url`: (exit code, stderr).
    fn run(&self, url: &str, extra: &[(&str, &str)]) -> (i32, String) {
        let mut c = Command::new(self.dir.path().join("bin/bash"));
        c.arg(script())
            .env_clear()
            .env("PATH", self.dir.path().join("bin"))
            .env("DATABASE_URL", url)
            .env("SKIPLOCK_DEV_DB_PG_LIB", self.dir.path().join("pglib"))
            .env(
                "SKIPLOCK_DEV_DB_OS_RELEASE",
                self.dir.path().join("os-release"),
            )
            .env("SKIPLOCK_DEV_DB_DRY_RUN", "1");
        for (k, v) in extra {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn apt_get_ran(&self) -> bool {
        self.dir.path().join("apt-get-ran").exists()
    }
}

const LOCAL: &str = "postgres://root@127.0.0.1:5432/skiplock";

#[test]
fn a_fresh_debian_machine_run_as_root_gets_postgres_installed() {
    for os in ["debian", "ubuntu"] {
        let m = FakeMachine::new(0, os);
        let (code, err) = m.run(LOCAL, &[]);
        assert_eq!(code, 0, "{os}: {err}");
        assert!(err.contains("installing it with apt-get"), "{err}");
        assert!(err.contains("would run: apt-get update"), "{err}");
        assert!(
            err.contains(
                "would run: env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql"
            ),
            "{err}"
        );
        assert!(
            err.contains("cluster 'main' on port 5432, trusting only 127.0.0.1 and ::1, with superuser 'root'"),
            "{err}"
        );
        assert!(!m.apt_get_ran(), "a dry run runs nothing");
    }
}

/// (uid, os-release ID, DATABASE_URL, extra environment, the expected message).
type Case<'a> = (u32, &'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);

#[test]
fn without_root_another_os_a_remote_server_or_the_opt_out_nothing_is_installed() {
    let cases: [Case; 4] = [
        (1000, "debian", LOCAL, &[], "installing it needs root"),
        (0, "fedora", LOCAL, &[], "only on Debian or Ubuntu"),
        (
            0,
            "debian",
            "postgres://app@db.example.com:5432/shop",
            &[],
            "points at db.example.com (not this machine)",
        ),
        (
            0,
            "debian",
            LOCAL,
            &[("SKIPLOCK_DEV_DB_INSTALL", "no")],
            "SKIPLOCK_DEV_DB_INSTALL=no",
        ),
    ];
    for (uid, os, url, extra, want) in cases {
        let m = FakeMachine::new(uid, os);
        let (code, err) = m.run(url, extra);
        assert_eq!(code, 1, "{want}: {err}");
        assert!(err.contains(want), "{want}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!err.contains("would run"), "{err}");
        assert!(!m.apt_get_ran());
    }
}

#[test]
fn tools_of_an_installed_server_are_found_and_nothing_is_installed() {
    // Not on PATH, only under the server's own bin directory (the newest version wins).
    let m = FakeMachine::new(0, "debian")
        .with_server("13")
        .with_server("15");
    let (code, err) = m.run(LOCAL, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("install"), "{err}");
    assert!(!m.apt_get_ran());
}

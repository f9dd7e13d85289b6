//! Packets are read only inside `SKIPLOCK_PACKET_ROOTS`, written as the attacks: a login
//! with the enqueuer role submits `/etc`, a path with `..`, a folder that is a link out of the
//! root, a folder holding a link to a secret file, or a "path" that is an option; the worker
//! (often root) must record nothing of anything outside the roots, and an external processor
//! must never take the source for an option. The CLI refuses such paths at once.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use skiplock_workflows::packets::processor::Processor;
use skiplock_workflows::packets::roots::PacketRoots;
use skiplock_workflows::packets::transitions::PacketState;
use skiplock_workflows::packets::{self, PacketSettings};
use sqlx::PgPool;
use support::*;

const LIMIT: Duration = Duration::from_secs(60);

/// A root of the test's own (real path) and an "outside" folder next to it with a secret.
struct Layout {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

const SECRET: &str = "root:$6$s3cr3t-hash:19000:0:99999:7:::";

fn layout() -> Layout {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let root = base.join("packets");
    let outside = base.join("private-area");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(outside.join("deeper")).unwrap();
    std::fs::write(outside.join("shadow-copy"), SECRET).unwrap();
    std::fs::write(outside.join("deeper/id_rsa"), SECRET).unwrap();
    Layout {
        _tmp: tmp,
        root,
        outside,
    }
}

fn settings(processor: Processor, root: &Path) -> PacketSettings {
    PacketSettings {
        concurrency: 1,
        processor,
        timeout: Duration::from_secs(30),
        recovery: true,
        roots: PacketRoots::new(&[root]),
    }
}

fn start(pool: &skiplock::Pool, s: PacketSettings) -> RunningWorker {
    start_worker(pool, fast_settings(), |b| packets::register_with(b, s))
}

/// Submits through plain SQL, as any enqueuer could.
async fn submit(pool: &PgPool, source: &str) -> i64 {
    sqlx::query_scalar("SELECT skiplock.submit_packet($1)")
        .bind(source)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Waits until the packet left `queued`/`processing`; returns (state, error, result as text).
async fn settled(pool: &skiplock::Pool, id: i64) -> (PacketState, String, String) {
    wait_for(&format!("packet {id} to settle"), LIMIT, || async {
        let p = packets::get(pool, id).await.unwrap();
        (!matches!(p.state, PacketState::Queued | PacketState::Processing)).then(|| {
            (
                p.state,
                p.error.unwrap_or_default(),
                p.result.map(|r| r.to_string()).unwrap_or_default(),
            )
        })
    })
    .await
}

/// Nothing about the outside area reached the packet: no names, sizes, hashes or content.
fn assert_nothing_from_outside(what: &str, error: &str, result: &str) {
    for leak in [
        "shadow-copy",
        "id_rsa",
        "private-area",
        "s3cr3t",
        "\"size\"",
        "sha256",
        "passwd",
    ] {
        assert!(
            !error.contains(leak) && !result.contains(leak),
            "{what}: {leak:?} leaked: error {error:?}, result {result:?}"
        );
    }
}

#[tokio::test]
async fn sources_outside_the_roots_go_to_error_and_nothing_of_them_is_recorded() {
    let db = TestDb::new().await;
    let l = layout();
    let root = l.root.to_str().unwrap();
    // Inside the root: a link to the outside folder, a link to a secret file next to a
    // real frame, and a good packet.
    std::os::unix::fs::symlink(&l.outside, l.root.join("escape")).unwrap();
    std::fs::create_dir(l.root.join("sneaky")).unwrap();
    std::fs::write(l.root.join("sneaky/frame1.tif"), b"frame").unwrap();
    std::os::unix::fs::symlink(
        l.outside.join("shadow-copy"),
        l.root.join("sneaky/frame2.tif"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&l.outside, l.root.join("sneaky/more")).unwrap();
    std::fs::create_dir(l.root.join("good")).unwrap();
    std::fs::write(l.root.join("good/frame1.tif"), b"frame").unwrap();

    let attacks = [
        ("/etc", "is outside every root"),
        (l.outside.to_str().unwrap(), "is outside every root"),
        (&format!("{root}/../private-area"), "canonical form"),
        (&format!("{root}/./../private-area"), "canonical form"),
        (&format!("{root}//escape"), "canonical form"),
        (&format!("{root}/escape"), "symbolic link"),
        (&format!("{root}/escape/deeper"), "symbolic link"),
        ("etc", "not an absolute path"),
        ("-rf", "not an absolute path"),
    ];
    let mut ids = Vec::new();
    for (src, _) in &attacks {
        ids.push(submit(&db.pool, src).await);
    }
    let sneaky = submit(&db.pool, &format!("{root}/sneaky")).await;
    let good = submit(&db.pool, &format!("{root}/good")).await;

    let w = start(&db.pool, settings(Processor::Manifest, &l.root));
    for (id, (src, why)) in ids.iter().zip(attacks) {
        let (state, error, result) = settled(&db.pool, *id).await;
        assert_eq!(state, PacketState::Error, "{src}: {result}");
        assert!(
            error.contains(why) && error.contains("SKIPLOCK_PACKET_ROOTS"),
            "{src}: {error}"
        );
        assert_eq!(result, "", "{src}");
        // The message may repeat the submitted path itself, nothing more.
        let quoted = format!("{src:?}");
        assert_nothing_from_outside(src, &error.replace(&quoted, "SRC"), &result);
    }
    let (state, error, result) = settled(&db.pool, sneaky).await;
    assert_eq!(state, PacketState::Error, "{result}");
    // Whichever of its two links out is met first is named (never where it leads).
    assert!(
        (error.contains("\"frame2.tif\"") || error.contains("\"more\""))
            && error.contains("SKIPLOCK_PACKET_ROOTS"),
        "{error}"
    );
    assert_nothing_from_outside("sneaky", &error, &result);
    let (state, error, result) = settled(&db.pool, good).await;
    assert_eq!(state, PacketState::ReadyForReview, "{error}");
    assert!(result.contains("frame1.tif"), "{result}");
    w.stop().await.unwrap();
}

#[tokio::test]
async fn an_external_processor_gets_double_dash_and_never_a_source_outside_the_roots() {
    let db = TestDb::new().await;
    let l = layout();
    let log = l.outside.join("argv.log");
    let proc_ = l.outside.join("proc.sh");
    std::fs::write(
        &proc_,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do printf '%s|' \"$a\" >> {log}; done\necho >> {log}\necho ok\n",
            log = log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&proc_, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(l.root.join("reel")).unwrap();
    let good_src = l.root.join("reel");
    let p = Processor::from_setting(Some(&format!("{} --fast", proc_.display()))).unwrap();
    let w = start(&db.pool, settings(p, &l.root));

    let bad: Vec<i64> = {
        let mut v = Vec::new();
        for src in ["--help", "-rf", "/etc"] {
            v.push(submit(&db.pool, src).await);
        }
        v
    };
    let good = submit(&db.pool, good_src.to_str().unwrap()).await;
    for id in bad {
        let (state, error, _) = settled(&db.pool, id).await;
        assert_eq!(state, PacketState::Error);
        assert!(error.contains("SKIPLOCK_PACKET_ROOTS"), "{error}");
    }
    let (state, error, _) = settled(&db.pool, good).await;
    assert_eq!(state, PacketState::ReadyForReview, "{error}");
    w.stop().await.unwrap();
    // The processor ran once, for the good packet, with `--` right before its folder.
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(calls, format!("--fast|--|{}|\n", good_src.display()));
}

#[tokio::test]
async fn the_cli_refuses_paths_outside_the_roots_at_once() {
    let db = TestDb::new().await;
    let l = layout();
    std::os::unix::fs::symlink(&l.outside, l.root.join("escape")).unwrap();
    std::fs::create_dir(l.root.join("reel")).unwrap();
    std::os::unix::fs::symlink(l.root.join("reel"), l.root.join("alias")).unwrap();
    let root_env = l.root.to_str().unwrap();
    let submit_cli = |path: &str| {
        let out = cmd(&db.url)
            .args(["packet", "submit", path])
            .env("SKIPLOCK_PACKET_ROOTS", root_env)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let escape = l.root.join("escape");
    let dotdot = format!("{}/../private-area", l.root.display());
    for path in [
        "/etc",
        l.outside.to_str().unwrap(),
        escape.to_str().unwrap(),
        dotdot.as_str(),
    ] {
        let (code, out, err) = submit_cli(path);
        assert_eq!(code, Some(1), "{path}: {out}{err}");
        assert_eq!(err.trim().lines().count(), 1, "{path}: {err}");
        assert!(
            err.starts_with("error: packet folder") && err.contains("SKIPLOCK_PACKET_ROOTS"),
            "{path}: {err}"
        );
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM skiplock.packets")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 0, "nothing was submitted");
    // A link inside the root to a folder inside it is stored as the real path.
    let (code, out, err) = submit_cli(l.root.join("alias").to_str().unwrap());
    assert_eq!(code, Some(0), "{err}");
    let id: i64 = out.trim().parse().unwrap();
    assert_eq!(
        packets::get(&db.pool, id).await.unwrap().source,
        l.root.join("reel").to_str().unwrap()
    );
}

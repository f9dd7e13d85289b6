//! Processing one packet: an external command (`SKIPLOCK_PACKET_PROCESSOR`) or the built-in
//! manifest processor. Either returns the packet's result, or a [`ProcessorFailure`] whose
//! message is stored on the packet (`error`). A failure here is the packet's fault (bad
//! frames, empty folder, processor said no): the packet goes to `error` at once, and an
//! operator decides whether to retry. Database trouble is handled by the caller.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::roots::{self, PacketRoots, fd_path, open_inside};

/// Most of the processor's stdout kept as the result (the rest is read and dropped).
pub const MAX_STDOUT: usize = 1 << 20;
/// How much of the end of the processor's stderr is kept as the packet's error.
pub const STDERR_TAIL: usize = 4000;

/// Why processing a packet failed; the message is what operators see.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProcessorFailure(pub String);

/// What processes a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processor {
    /// An external command: `program args… -- SOURCE`, with `SKIPLOCK_PACKET_ID` set.
    Command {
        /// The program.
        program: String,
        /// Its leading arguments (`--` and the source path are appended; the `--` only when
        /// the last of these is not already `--`).
        args: Vec<String>,
    },
    /// The built-in manifest: each file's name, size and SHA-256.
    Manifest,
}

impl Processor {
    /// Parses `SKIPLOCK_PACKET_PROCESSOR` (shell-like quoting); `None` or blank → manifest.
    pub fn from_setting(line: Option<&str>) -> Result<Processor, String> {
        let Some(line) = line.filter(|l| !l.trim().is_empty()) else {
            return Ok(Processor::Manifest);
        };
        let mut words = split_command_line(line)?;
        if words.is_empty() {
            return Ok(Processor::Manifest);
        }
        let program = words.remove(0);
        Ok(Processor::Command {
            program,
            args: words,
        })
    }

    /// Processes packet `id` at `source` within `timeout`, if `source` passes the
    /// [`PacketRoots::check`] (else a failure naming `SKIPLOCK_PACKET_ROOTS`, and nothing
    /// is read or started).
    pub async fn run(
        &self,
        id: i64,
        source: &str,
        timeout: Duration,
        roots: &PacketRoots,
    ) -> Result<Value, ProcessorFailure> {
        let checked = {
            let (roots, source) = (roots.clone(), source.to_string());
            tokio::task::spawn_blocking(move || roots.check(&source))
                .await
                .map_err(|e| ProcessorFailure(format!("checking the packet source failed: {e}")))?
                .map_err(ProcessorFailure)?
        };
        match self {
            Processor::Command { program, args } => {
                run_command(program, args, id, source, timeout).await
            }
            Processor::Manifest => {
                let roots = roots.clone();
                let work = tokio::task::spawn_blocking(move || manifest(&checked, &roots));
                match tokio::time::timeout(timeout, work).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => Err(ProcessorFailure(format!("manifest processor crashed: {e}"))),
                    Err(_) => Err(ProcessorFailure(format!(
                        "manifest processor timed out after {}",
                        humantime::format_duration(timeout)
                    ))),
                }
            }
        }
    }
}

/// Splits a command line into words: whitespace separates, '…' and "…" quote, \ escapes
/// (outside single quotes). No variables, globs or pipes: it is not a shell.
pub fn split_command_line(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => cur.push(ch),
                        None => return Err(format!("unclosed ' in {s:?}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch @ ('"' | '\\' | '$' | '`')) => cur.push(ch),
                            Some(ch) => {
                                cur.push('\\');
                                cur.push(ch);
                            }
                            None => return Err(format!("unclosed \" in {s:?}")),
                        },
                        Some(ch) => cur.push(ch),
                        None => return Err(format!("unclosed \" in {s:?}")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(ch) => cur.push(ch),
                    None => return Err(format!("trailing \\ in {s:?}")),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Kills the processor's whole process group when dropped (timeout, worker stopping, or the
/// job taken away), so a shell's children do not outlive it and hold its pipes open.
struct GroupKill(Option<u32>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            // SAFETY: kill(2) has no memory effects; a negative pid names the process group
            // the child leads (it was started with process_group(0)).
            unsafe {
                libc::kill(-(pid as i32), libc::SIGKILL);
            }
        }
    }
}

async fn run_command(
    program: &str,
    args: &[String],
    id: i64,
    source: &str,
    timeout: Duration,
) -> Result<Value, ProcessorFailure> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args);
    // The source can never be taken for an option: `--` ends them (the checked source is
    // absolute anyway). A setting ending in `--` (`sh -c '…' --`) already has it.
    if args.last().map(String::as_str) != Some("--") {
        cmd.arg("--");
    }
    cmd.arg(source)
        .env("SKIPLOCK_PACKET_ID", id.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2),
    // which is async-signal-safe. If the worker dies (even by SIGKILL), the processor is
    // killed too instead of running on unsupervised.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| ProcessorFailure(format!("could not start the processor {program:?}: {e}")))?;
    let _group = GroupKill(child.id());
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let work = async {
        let (out, err, status) = tokio::join!(
            read_head(stdout, MAX_STDOUT),
            read_tail(stderr, STDERR_TAIL),
            child.wait()
        );
        (out, err, status)
    };
    let (out, err, status) = tokio::time::timeout(timeout, work).await.map_err(|_| {
        ProcessorFailure(format!(
            "processor {program:?} timed out after {} and was killed",
            humantime::format_duration(timeout)
        ))
    })?;
    let status =
        status.map_err(|e| ProcessorFailure(format!("waiting for the processor failed: {e}")))?;
    let err = String::from_utf8_lossy(&err).trim().to_string();
    if !status.success() {
        let how = match status.code() {
            Some(c) => format!("exited with status {c}"),
            None => format!("was stopped ({status})"),
        };
        let tail = if err.is_empty() {
            "(no stderr)".to_string()
        } else {
            err
        };
        return Err(ProcessorFailure(format!("processor {how}: {tail}")));
    }
    Ok(parse_output(&String::from_utf8_lossy(&out)))
}

/// The processor's stdout as a result: JSON if it parses, else the text.
pub fn parse_output(stdout: &str) -> Value {
    let t = stdout.trim();
    serde_json::from_str(t).unwrap_or_else(|_| Value::String(t.to_string()))
}

async fn read_head(mut r: impl AsyncRead + Unpin, cap: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let room = cap.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
    kept
}

async fn read_tail(mut r: impl AsyncRead + Unpin, keep: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > 2 * keep {
            kept.drain(..kept.len() - keep);
        }
    }
    if kept.len() > keep {
        kept.drain(..kept.len() - keep);
    }
    kept
}

/// The built-in processor: every file under `dir` (recursively, sorted by path) with its
/// size and SHA-256. Symbolic links to files are followed when they stay inside the roots;
/// one leading outside fails the packet (naming the link, never its target) and nothing is
/// recorded; links to folders are not followed. Every folder and file is opened first and
/// then checked to be inside the roots by the kernel's record of the open descriptor
/// ([`open_inside`]), so nothing outside them is listed, sized or hashed, even if the
/// folder changes while it is read. A missing or empty folder fails.
pub fn manifest(dir: &Path, roots: &PacketRoots) -> Result<Value, ProcessorFailure> {
    let shown = dir.display();
    let top = match open_inside(dir, roots) {
        Ok(Some((f, real))) if real == dir => f,
        Ok(_) => {
            return Err(ProcessorFailure(format!(
                "packet folder {shown} leads outside {} or is not its real path",
                roots::SETTING
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ProcessorFailure(format!(
                "packet folder {shown} does not exist"
            )));
        }
        Err(e) => {
            return Err(ProcessorFailure(format!(
                "cannot read packet folder {shown}: {e}"
            )));
        }
    };
    let meta = top
        .metadata()
        .map_err(|e| ProcessorFailure(format!("cannot read packet folder {shown}: {e}")))?;
    if !meta.is_dir() {
        return Err(ProcessorFailure(format!(
            "packet source {shown} is not a folder"
        )));
    }
    let mut files = Vec::new();
    collect(&top, "", roots, &mut files)?;
    if files.is_empty() {
        return Err(ProcessorFailure(format!(
            "packet folder {shown} is empty: no files to process"
        )));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let total: u64 = files.iter().map(|f| f.1).sum();
    let entries: Vec<Value> = files
        .into_iter()
        .map(|(name, size, sha)| json!({"name": name, "size": size, "sha256": sha}))
        .collect();
    Ok(json!({
        "processor": "manifest",
        "file_count": entries.len(),
        "total_bytes": total,
        "files": entries,
    }))
}

fn outside(rel: &str) -> ProcessorFailure {
    ProcessorFailure(format!(
        "packet folder contains {rel:?}, which leads outside {}; nothing was recorded",
        roots::SETTING
    ))
}

/// Lists the folder open as `dir` (its path relative to the packet is `prefix`), hashing
/// each file: (relative name, size, SHA-256).
fn collect(
    dir: &File,
    prefix: &str,
    roots: &PacketRoots,
    out: &mut Vec<(String, u64, String)>,
) -> Result<(), ProcessorFailure> {
    let shown = if prefix.is_empty() { "." } else { prefix };
    let rd = std::fs::read_dir(fd_path(dir))
        .map_err(|e| ProcessorFailure(format!("cannot list {shown}: {e}")))?;
    for entry in rd {
        let entry = entry.map_err(|e| ProcessorFailure(format!("cannot list {shown}: {e}")))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let ft = entry
            .file_type()
            .map_err(|e| ProcessorFailure(format!("cannot stat {rel}: {e}")))?;
        if !(ft.is_dir() || ft.is_file() || ft.is_symlink()) {
            continue; // sockets, FIFOs, devices: not frames
        }
        let opened = match open_inside(&fd_path(dir).join(entry.file_name()), roots) {
            Ok(Some((f, _))) => f,
            Ok(None) => return Err(outside(&rel)),
            // A link to nothing, or an entry gone meanwhile: nothing to record.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ProcessorFailure(format!("cannot open {rel}: {e}"))),
        };
        let meta = opened
            .metadata()
            .map_err(|e| ProcessorFailure(format!("cannot stat {rel}: {e}")))?;
        if meta.is_dir() {
            if ft.is_dir() {
                collect(&opened, &rel, roots, out)?;
            }
        } else if meta.is_file() {
            let (size, sha) = hash_file(&opened)
                .map_err(|e| ProcessorFailure(format!("cannot read {rel}: {e}")))?;
            out.push((rel, size, sha));
        }
    }
    Ok(())
}

fn hash_file(opened: &File) -> std::io::Result<(u64, String)> {
    let mut f = File::open(fd_path(opened))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        h.update(&buf[..n]);
    }
    Ok((size, hex::encode(h.finalize())))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn command_lines_split_like_a_shell_would() {
        assert_eq!(split_command_line("a b  c").unwrap(), ["a", "b", "c"]);
        assert_eq!(
            split_command_line("sh -c 'sleep 0.3; echo {}' --").unwrap(),
            ["sh", "-c", "sleep 0.3; echo {}", "--"]
        );
        assert_eq!(
            split_command_line(r#"x "a \"b\" c" d\ e ''"#).unwrap(),
            ["x", "a \"b\" c", "d e", ""]
        );
        assert!(
            split_command_line("sh -c 'oops")
                .unwrap_err()
                .contains("unclosed '")
        );
        assert!(split_command_line("a \"b").is_err());
        assert!(split_command_line("").unwrap().is_empty());
    }

    #[test]
    fn setting_picks_the_processor() {
        assert_eq!(Processor::from_setting(None).unwrap(), Processor::Manifest);
        assert_eq!(
            Processor::from_setting(Some("  ")).unwrap(),
            Processor::Manifest
        );
        assert_eq!(
            Processor::from_setting(Some("/bin/proc --fast")).unwrap(),
            Processor::Command {
                program: "/bin/proc".into(),
                args: vec!["--fast".into()]
            }
        );
        assert!(Processor::from_setting(Some("'x")).is_err());
    }

    #[test]
    fn stdout_is_json_if_it_parses_else_text() {
        assert_eq!(parse_output("{\"frames\": 3}\n"), json!({"frames": 3}));
        assert_eq!(parse_output("all good\n"), json!("all good"));
        assert_eq!(parse_output(""), json!(""));
    }

    /// A temporary root (canonical) and the roots made of it.
    fn root() -> (tempfile::TempDir, PathBuf, PacketRoots) {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        let roots = PacketRoots::new(&[&real]);
        (dir, real, roots)
    }

    #[test]
    fn manifest_lists_files_with_size_and_sha256() {
        let (_d, dir, roots) = root();
        std::fs::write(dir.join("b.tif"), b"abc").unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a.tif"), b"").unwrap();
        // A link to a file inside the roots is followed; one to a folder is not.
        std::os::unix::fs::symlink(dir.join("b.tif"), dir.join("c.tif")).unwrap();
        std::os::unix::fs::symlink(dir.join("sub"), dir.join("dirlink")).unwrap();
        let m = manifest(&dir, &roots).unwrap();
        assert_eq!(m["file_count"], 3);
        assert_eq!(m["total_bytes"], 6);
        assert_eq!(m["files"][0]["name"], "b.tif");
        assert_eq!(
            m["files"][0]["sha256"],
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(m["files"][1]["name"], "c.tif");
        assert_eq!(m["files"][2]["name"], "sub/a.tif");
        assert_eq!(m["files"][2]["size"], 0);
    }

    #[test]
    fn manifest_fails_a_missing_or_empty_folder_clearly() {
        let (_d, dir, roots) = root();
        let e = manifest(&dir, &roots).unwrap_err();
        assert!(e.0.contains("is empty"), "{e}");
        let e = manifest(&dir.join("nope"), &roots).unwrap_err();
        assert!(e.0.contains("does not exist"), "{e}");
        std::fs::write(dir.join("f"), b"x").unwrap();
        let e = manifest(&dir.join("f"), &roots).unwrap_err();
        assert!(e.0.contains("not a folder"), "{e}");
    }

    #[test]
    fn manifest_refuses_links_out_of_the_roots_and_records_nothing_of_them() {
        let (_d, dir, roots) = root();
        let (_o, outside, _) = root();
        std::fs::write(outside.join("shadow"), b"root:secret").unwrap();
        std::fs::create_dir(dir.join("p")).unwrap();
        std::fs::write(dir.join("p/frame.tif"), b"x").unwrap();
        std::os::unix::fs::symlink(outside.join("shadow"), dir.join("p/evil")).unwrap();
        let e = manifest(&dir.join("p"), &roots).unwrap_err();
        assert!(
            e.0.contains("\"evil\"") && e.0.contains("SKIPLOCK_PACKET_ROOTS"),
            "{e}"
        );
        assert!(
            !e.0.contains("shadow") && !e.0.contains(&*outside.to_string_lossy()),
            "{e}"
        );
        // A source outside the roots is not even opened.
        let e = manifest(&outside, &roots).unwrap_err();
        assert!(e.0.contains("SKIPLOCK_PACKET_ROOTS"), "{e}");
    }

    #[tokio::test]
    async fn command_gets_source_and_id_and_its_failures_carry_stderr() {
        let (_d, dir, roots) = root();
        let src = dir.to_str().unwrap();
        let p = Processor::from_setting(Some(
            r#"sh -c 'echo "{\"id\": $SKIPLOCK_PACKET_ID, \"src\": \"$1\"}"' --"#,
        ))
        .unwrap();
        let v = p
            .run(9, src, Duration::from_secs(30), &roots)
            .await
            .unwrap();
        assert_eq!(v, json!({"id": 9, "src": src}));
        // Without a trailing `--` in the setting, one is added before the source.
        let p = Processor::from_setting(Some(r#"sh -c 'echo "$1|$2"' sh"#)).unwrap();
        let v = p
            .run(9, src, Duration::from_secs(30), &roots)
            .await
            .unwrap();
        assert_eq!(v, json!(format!("--|{src}")));
        let p = Processor::from_setting(Some(
            "sh -c 'echo partial; echo bad frame 3 >&2; exit 3' --",
        ))
        .unwrap();
        let e = p
            .run(1, src, Duration::from_secs(30), &roots)
            .await
            .unwrap_err();
        assert_eq!(e.0, "processor exited with status 3: bad frame 3");
        let p = Processor::from_setting(Some("/definitely/not/here")).unwrap();
        assert!(
            p.run(1, src, Duration::from_secs(30), &roots)
                .await
                .unwrap_err()
                .0
                .contains("could not start")
        );
        // A source outside the roots never reaches the processor.
        let mark = dir.join("ran");
        let line = format!("sh -c 'touch {}' --", mark.display());
        let p = Processor::from_setting(Some(&line)).unwrap();
        for bad in ["/etc", "-rf", "relative/dir"] {
            let e = p
                .run(1, bad, Duration::from_secs(30), &roots)
                .await
                .unwrap_err();
            assert!(e.0.contains("SKIPLOCK_PACKET_ROOTS"), "{bad}: {e}");
        }
        assert!(!mark.exists());
    }

    #[tokio::test]
    async fn a_processor_past_its_timeout_is_killed_with_its_children() {
        let (_d, dir, roots) = root();
        let pidfile = dir.join("pid");
        let line = format!(
            "sh -c 'sleep 60 & echo $! > {}; wait' --",
            pidfile.display()
        );
        let p = Processor::from_setting(Some(&line)).unwrap();
        let e = p
            .run(1, dir.to_str().unwrap(), Duration::from_secs(1), &roots)
            .await
            .unwrap_err();
        assert!(e.0.contains("timed out after 1s"), "{e}");
        // The backgrounded grandchild went with the group (kill -0 fails once it is gone).
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let alive = |pid: i32| {
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| {
                    s.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
                .unwrap_or(false);
            let exists = unsafe { libc::kill(pid, 0) } == 0;
            exists && !zombie
        };
        while alive(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "grandchild {pid} still alive"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

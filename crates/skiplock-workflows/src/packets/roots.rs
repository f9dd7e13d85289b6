//! Where packets may be read from: only folders inside `SKIPLOCK_PACKET_ROOTS`.
//!
//! Anyone who may call `skiplock.submit_packet` (the enqueuer role) chooses the source path,
//! and the worker (often root) reads it. So a source must be an absolute, canonical path (no
//! `.`, `..`, `//`, trailing `/` or symbolic link anywhere below its root) inside one of the
//! roots; otherwise the packet goes to `error` with a message naming the setting, and nothing
//! outside the roots is read, listed or hashed.
//!
//! The setting is a comma-separated list of folders (a path containing a comma cannot be a
//! root), resolved once when the worker (or the CLI) starts: relative roots against the
//! working directory, then to their real path (symbolic links in a root itself are resolved
//! there, by the operator's choice). A root that does not exist yet is kept as written (made
//! absolute) and checked again at every use.
//!
//! The checks here name the problem; the reads in the manifest processor verify every file
//! and folder again *after* opening it ([`open_inside`]), by the kernel's own record of what
//! was opened, so swapping a folder for a link between the check and the read gains nothing.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// The setting.
pub const SETTING: &str = "SKIPLOCK_PACKET_ROOTS";
/// Its default, relative to the working directory of the process that reads it.
pub const DEFAULT: &str = "./data/packets";

/// The folders packets must be inside, resolved (absolute, canonical where they exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketRoots(Vec<PathBuf>);

/// Lexically normalised absolute form of `p` (against `cwd`): `.` dropped, `..` applied.
fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

impl PacketRoots {
    /// Parses the setting's value (comma-separated) and resolves each root against `cwd`.
    pub fn resolve(setting: &str, cwd: &Path) -> std::result::Result<PacketRoots, String> {
        let mut roots = Vec::new();
        for part in setting.split(',').map(str::trim) {
            if part.is_empty() {
                continue;
            }
            let abs = absolute(Path::new(part), cwd);
            let root = match std::fs::canonicalize(&abs) {
                Ok(real) => real,
                Err(_) => abs,
            };
            if !roots.contains(&root) {
                roots.push(root);
            }
        }
        if roots.is_empty() {
            return Err("no folder given (write e.g. /srv/packets or /a,/b)".into());
        }
        Ok(PacketRoots(roots))
    }

    /// Roots given as paths (tests, embedding), resolved like the setting.
    pub fn new<P: AsRef<Path>>(roots: &[P]) -> PacketRoots {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let list: Vec<String> = roots
            .iter()
            .map(|p| p.as_ref().to_string_lossy().into_owned())
            .collect();
        PacketRoots::resolve(&list.join(","), &cwd).unwrap_or(PacketRoots(Vec::new()))
    }

    /// The roots from `SKIPLOCK_PACKET_ROOTS` (default `./data/packets`), resolved now.
    pub fn from_env() -> Result<PacketRoots> {
        let value = crate::config::env_opt(SETTING).unwrap_or_else(|| DEFAULT.to_string());
        let cwd = std::env::current_dir().map_err(|e| {
            Error::config(SETTING, format!("cannot read the working directory: {e}"))
        })?;
        let roots = PacketRoots::resolve(&value, &cwd).map_err(|m| Error::config(SETTING, m))?;
        for r in &roots.0 {
            if !r.is_dir() {
                tracing::warn!(root = %r.display(), "a packet root is not a folder (yet); packets under it are refused until it is");
            }
        }
        Ok(roots)
    }

    /// The resolved roots.
    pub fn paths(&self) -> &[PathBuf] {
        &self.0
    }

    /// The root `p` is inside (component-wise), if any.
    pub fn root_of(&self, p: &Path) -> Option<&Path> {
        self.0
            .iter()
            .filter(|r| p.starts_with(r))
            .max_by_key(|r| r.components().count())
            .map(PathBuf::as_path)
    }

    fn listed(&self) -> String {
        self.0
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A refusal message for `source`: what is wrong and the setting that decides.
    fn refuse(&self, source: &str, what: &str) -> String {
        format!(
            "packet source {:?} {what}; packets are read only from absolute, canonical folders inside {SETTING} ({})",
            source,
            self.listed()
        )
    }

    /// The lexical part of [`PacketRoots::check`], pure: `source` must be absolute, in
    /// canonical form and inside a root. Returns the root it is in.
    pub fn check_form(&self, source: &str) -> std::result::Result<&Path, String> {
        let p = Path::new(source);
        if !p.is_absolute() {
            return Err(self.refuse(source, "is not an absolute path"));
        }
        // Checked on the text: `Path::components` would quietly drop `.` and `//`.
        let canonical_form = source == "/"
            || source
                .split('/')
                .skip(1)
                .all(|seg| !seg.is_empty() && seg != "." && seg != "..");
        if !canonical_form {
            return Err(self.refuse(
                source,
                "is not in canonical form (no '.', '..', '//' or trailing '/')",
            ));
        }
        self.root_of(p)
            .ok_or_else(|| self.refuse(source, "is outside every root"))
    }

    /// Checks a packet's source before anything reads it: [`PacketRoots::check_form`], then
    /// every component below the root must be a real folder, not a symbolic link (nothing is
    /// followed, so nothing outside the roots is looked at). A missing folder is reported as
    /// such only once the path is known to stay inside the root.
    pub fn check(&self, source: &str) -> std::result::Result<PathBuf, String> {
        let root = self.check_form(source)?.to_path_buf();
        let p = Path::new(source);
        if !root.is_dir() {
            return Err(self.refuse(source, "is in a root that is not a folder"));
        }
        let mut cur = root.clone();
        for c in p.strip_prefix(&root).unwrap_or(Path::new("")).components() {
            cur.push(c);
            match std::fs::symlink_metadata(&cur) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(self.refuse(
                        source,
                        "passes through a symbolic link (submit the folder's real path)",
                    ));
                }
                Ok(m) if cur.as_path() == p && !m.is_dir() => {
                    return Err(format!("packet source {source:?} is not a folder"));
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(format!("packet folder {source:?} does not exist"));
                }
                Err(e) => return Err(format!("cannot read packet folder {source:?}: {e}")),
            }
        }
        Ok(p.to_path_buf())
    }
}

/// Where an open file really is, from the kernel's record of the descriptor.
fn real_path_of(f: &File) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// Opens `path` (following links) without any side effect on what it names (`O_PATH`: a
/// device or FIFO is not really opened), then checks by the kernel's record of the descriptor
/// that what was opened is inside one of `roots`. Returns the descriptor (reopen it through
/// [`fd_path`] to read) and its real path; `Ok(None)` when it leads outside every root.
pub fn open_inside(path: &Path, roots: &PacketRoots) -> std::io::Result<Option<(File, PathBuf)>> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)?;
    let real = real_path_of(&f)?;
    if roots.root_of(&real).is_none() {
        return Ok(None);
    }
    Ok(Some((f, real)))
}

/// A path that names exactly what `f` is open on (`/proc/self/fd/N`): opening or listing it
/// reaches that same file or folder, whatever has been renamed or replaced since.
pub fn fd_path(f: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(list: &str) -> PacketRoots {
        PacketRoots::resolve(list, Path::new("/nonexistent-cwd")).unwrap()
    }

    #[test]
    fn the_setting_is_comma_separated_and_relative_roots_use_the_working_directory() {
        let r = roots("./data/packets, /srv/a/../b ,,/srv/b");
        assert_eq!(
            r.paths(),
            [
                PathBuf::from("/nonexistent-cwd/data/packets"),
                PathBuf::from("/srv/b")
            ]
        );
        assert!(PacketRoots::resolve(" , ", Path::new("/")).is_err());
    }

    #[test]
    fn sources_must_be_absolute_canonical_and_inside_a_root() {
        let r = roots("/srv/packets,/mnt/scans");
        let ok = |s: &str| r.check_form(s).map(Path::to_path_buf);
        assert_eq!(
            ok("/srv/packets/reel1").unwrap(),
            PathBuf::from("/srv/packets")
        );
        assert_eq!(ok("/mnt/scans/a/b").unwrap(), PathBuf::from("/mnt/scans"));
        assert_eq!(ok("/srv/packets").unwrap(), PathBuf::from("/srv/packets"));
        for (bad, why) in [
            ("/etc", "is outside every root"),
            ("/srv/packetsX/reel", "is outside every root"),
            ("srv/packets/reel", "is not an absolute path"),
            ("", "is not an absolute path"),
            ("-rf", "is not an absolute path"),
            ("/srv/packets/../../etc", "is not in canonical form"),
            ("/srv/packets/./reel", "is not in canonical form"),
            ("/srv//packets/reel", "is not in canonical form"),
            ("/srv/packets/reel/", "is not in canonical form"),
        ] {
            let e = ok(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
            assert!(
                e.ends_with("inside SKIPLOCK_PACKET_ROOTS (/srv/packets, /mnt/scans)"),
                "{e}"
            );
        }
    }

    #[test]
    fn links_out_of_a_root_are_refused_and_their_targets_never_named() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("root");
        let outside = base.path().join("secret-place");
        std::fs::create_dir_all(root.join("real/sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("inside")).unwrap();
        std::fs::write(root.join("file"), b"x").unwrap();
        let r = PacketRoots::new(&[&root]);
        let root = &r.paths()[0];
        let s = |p: &str| format!("{}/{p}", root.display());
        assert_eq!(
            r.check(&s("real/sub")).unwrap(),
            PathBuf::from(s("real/sub"))
        );
        for (src, why) in [
            (s("out"), "symbolic link"),
            (s("out/x"), "symbolic link"),
            (s("inside/sub"), "symbolic link"),
            (s("file"), "is not a folder"),
            (s("gone/deeper"), "does not exist"),
        ] {
            let e = r.check(&src).unwrap_err();
            assert!(e.contains(why), "{src}: {e}");
            assert!(!e.contains("secret-place"), "{e}");
        }
        // Opened through a link: the real place decides.
        assert!(open_inside(&root.join("out"), &r).unwrap().is_none());
        let (f, real) = open_inside(&root.join("inside"), &r).unwrap().unwrap();
        assert_eq!(real, root.join("real"));
        assert!(std::fs::read_dir(fd_path(&f)).unwrap().count() == 1);
    }
}
